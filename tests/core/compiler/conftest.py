
import pytest
import torch

from ember.core.compiler import compile as ember_compile
from ember.core.compiler.runtime import isa

# The codegen suites run at the CPU's own level and at AVX2 (x86-64-v3), so a machine with
# AVX-512 proves the AVX2 path too (CI may land on either kind).
ISA_LEVELS = ["native"] + (["x86-64-v3"] if isa.LEVELS["x86-64-v3"].needs <= isa.cpu_flags()
                           else [])


@pytest.fixture(scope="session", autouse=True)
def _kernel_cache(tmp_path_factory):
    """One fresh on-disk kernel cache for the whole session (tests share built kernels)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("EMBER_CACHE_DIR", str(tmp_path_factory.mktemp("ember_cache")))
    yield
    mp.undo()


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """A kernel cache of this test's own, and no library loaded from another."""
    from ember.core.compiler.runtime import build

    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    build._loaded.clear()
    yield tmp_path
    build._loaded.clear()


@pytest.fixture(params=ISA_LEVELS)
def isa_level(request, monkeypatch):
    """Builds kernels for each level in ``ISA_LEVELS`` in turn (``EMBER_CPU_ISA``)."""
    monkeypatch.setenv(isa.ENV, request.param)
    return request.param


@pytest.fixture
def ecompile():
    """ember.core.compile in strict mode: any compiler failure raises instead of falling back."""
    def make(fn, **kwargs):
        torch._dynamo.reset()
        options = {"strict": True, **kwargs.pop("options", {})}
        return ember_compile(fn, options=options, **kwargs)
    yield make
    torch._dynamo.reset()


@pytest.fixture
def matches():
    """``matches(out, ref)``: every output has eager's dtype, shape and values."""
    return _assert_matches


def _assert_matches(out, ref, atol=1e-5, rtol=1e-5):
    outs = out if isinstance(out, (tuple, list)) else [out]
    refs = ref if isinstance(ref, (tuple, list)) else [ref]
    assert len(outs) == len(refs)
    for i, (o, r) in enumerate(zip(outs, refs)):
        assert o.dtype == r.dtype, f"output {i}: dtype {o.dtype} != {r.dtype}"
        assert o.shape == r.shape, f"output {i}: shape {o.shape} != {r.shape}"
        torch.testing.assert_close(o, r, atol=atol, rtol=rtol, equal_nan=True,
                                   msg=lambda m, i=i: f"output {i}: {m}")


