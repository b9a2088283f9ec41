"""PyTorch's OpInfo catalogue (``op_db``, CPU samples) through ``torch.compile(backend=ember)``
in its default (non-strict) mode, compared with eager (``ember.tools.bench.opinfo_runner``).

Fast: every op's first float32 sample, 24 ops to one compiled function. Slow: every sample,
one compiled function per op, in eight variants (float32, float32 forward + backward, float32
on non-contiguous views, channels-last, column-major and expanded (stride-0) float32 inputs,
bfloat16, int64). Known failures live in ``opinfo_expected.py``
only; a wrong result is never one of them.
"""

import pytest
import torch

from ember.tools.bench import opinfo_runner as opinfo

from .opinfo_expected import EXPECTED_FAILURES

OPS = opinfo.op_db()
NAMES = [opinfo.op_name(op) for op in OPS]
GROUP = 24


def _judge(results, *, all_samples: bool) -> None:
    problems = []
    for r in results:
        expected = EXPECTED_FAILURES.get(r.key)
        if r.status in ("wrong", "error"):
            if expected is None or expected[0] != r.status:
                problems.append(f"{r.key}: {r.status}: {r.detail}")
        elif expected is not None and all_samples and r.status == "pass":
            problems.append(f"{r.key}: passes now; drop it from opinfo_expected.py")
    assert not problems, "\n".join(problems)


def test_known_failure_table_is_well_formed():
    names = set(NAMES)
    for key, (status, reason) in EXPECTED_FAILURES.items():
        name, _, variant = key.rpartition(":")
        assert name in names, f"{key}: no such OpInfo"
        assert variant in opinfo.VARIANTS, f"{key}: unknown variant"
        assert status == "error", f"{key}: a wrong result is never a known failure"
        assert reason.strip(), f"{key}: say why"


def test_op_names_are_unique():
    assert len(NAMES) == len(set(NAMES))


@pytest.mark.parametrize("start", range(0, len(OPS), GROUP))
def test_opinfo_float32_first_sample(start):
    _judge(opinfo.check_group(OPS[start:start + GROUP], "float32"), all_samples=False)


@pytest.mark.slow
@pytest.mark.parametrize("variant", opinfo.VARIANTS)
@pytest.mark.parametrize("name", NAMES)
def test_opinfo(name, variant):
    r = opinfo.check_op(OPS[NAMES.index(name)], variant)
    if r.status == "skip":
        pytest.skip(r.detail)
    _judge([r], all_samples=True)


def test_a_graph_left_to_eager_is_an_error(monkeypatch):
    """A graph our backend runs in eager (an exception while compiling it) fails the check,
    though eager's values match."""
    from ember.core.compiler import pipeline

    def broken(*args, **kwargs):
        raise KeyError("a lowering bug")

    monkeypatch.setattr(pipeline, "_compile", broken)
    sin = OPS[NAMES.index("sin")]
    r = opinfo.check_op(sin, "float32", max_samples=1)
    assert r.status == "error" and "KeyError" in r.detail and "a lowering bug" in r.detail
    [g] = opinfo.check_group([sin], "float32")
    assert g.status == "error"


def test_inputs_keep_their_layout():
    """The non-contiguous variant hands the compiled function views (a storage offset, gaps
    of NaN between the elements); the runner's copies keep that layout and the gaps."""
    sin = OPS[NAMES.index("sin")]
    [s] = opinfo._samples(sin, "float32_noncontig", 1)
    [t] = s.tensors()
    assert not t.is_contiguous() and t.storage_offset() == 1
    [c] = opinfo._clone([t], grad=False)
    assert (c.shape, c.stride(), c.storage_offset()) == (t.shape, t.stride(), t.storage_offset())
    assert c.untyped_storage().data_ptr() != t.untyped_storage().data_ptr()
    whole = opinfo._whole_storage(c)
    assert whole.numel() == 2 * t.numel() and whole[::2].isnan().all()
    assert torch.equal(c, t)


def test_inputs_keep_their_sharing():
    """One tensor passed twice stays one tensor, and views of one storage stay views of one
    (new) storage: a write through one shows in the others, as it does in eager."""
    base = torch.arange(6.0)
    x = torch.ones(3)
    ca, cb, cx, cx2, cbase = opinfo._clone([base[:4], base[2:], x, x, base], grad=False)
    assert cx is cx2 and cx.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    ptrs = {c.untyped_storage().data_ptr() for c in (ca, cb, cbase)}
    assert len(ptrs) == 1 and base.untyped_storage().data_ptr() not in ptrs
    ca[2] = -1.0
    assert cb[0] == -1.0 and cbase[2] == -1.0 and base[2] == 2.0


def test_a_write_outside_a_view_input_is_wrong(monkeypatch):
    """A compiled function that changes the memory around a view input (here: the NaN gaps
    to zero) gives a wrong result, though every element of the view is right."""
    def clobbering(self, gm, example_inputs):
        def run(*args):
            out = gm.forward(*args)
            for a in args:
                if isinstance(a, torch.Tensor) and not a.is_contiguous():
                    opinfo._whole_storage(a).nan_to_num_(0.0)
            return out
        return run

    monkeypatch.setattr(opinfo._Counter, "__call__", clobbering)
    r = opinfo.check_op(OPS[NAMES.index("sin")], "float32_noncontig", max_samples=1)
    assert r.status == "wrong" and "not close" in r.detail, r


def test_layout_variants_relay_the_samples_they_apply_to():
    """Each layout variant keeps a sample's values (expanded: broadcast from the first element
    of the last dimension) in its layout, and leaves out samples it does not apply to."""
    conv = OPS[NAMES.index("nn.functional.conv2d")]
    plain = opinfo._samples(conv, "float32", 1)[0].tensors()[0]
    x = opinfo._samples(conv, "float32_channels_last", 1)[0].tensors()[0]
    assert x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    assert torch.equal(x, plain)
    assert opinfo._samples(OPS[NAMES.index("sin")], "float32_channels_last", None) == []
    assert opinfo.check_op(OPS[NAMES.index("sin")], "float32_channels_last").status == "skip"
    mm = OPS[NAMES.index("mm")]
    a, b = opinfo._samples(mm, "float32_transposed", 1)[0].tensors()
    a0, _ = opinfo._samples(mm, "float32", 1)[0].tensors()
    assert a.stride() == (1, a.shape[0]) and torch.equal(a, a0)
    e, _ = opinfo._samples(mm, "float32_expanded", 1)[0].tensors()
    assert e.stride()[-1] == 0 and torch.equal(e, a0[:, :1].expand(a0.shape))
    r = opinfo.check_op(conv, "float32_channels_last", max_samples=2)
    assert r.status == "pass" and r.samples == 2, r
