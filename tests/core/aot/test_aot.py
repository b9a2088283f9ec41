"""Ahead-of-time packages: aot_compile -> aot_load (Python) and ember::aot::Model (C++),
compared with the eager model; bad inputs and damaged packages fail with our errors."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import zipfile

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from ember.core import __version__ as ember_version
from ember.core import aot
from ember.core.aot import package
from ember.core.compiler.runtime import isa

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
BATCH = torch.export.Dim("batch", min=1, max=64)


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.GELU(),
                         nn.Linear(32, 4)).eval()


def cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Conv2d(8, 8, 3), nn.BatchNorm2d(8),
                         nn.Hardswish(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(8, 10)).eval()


def encoder() -> nn.Module:
    from ember.core.nn.transformer import TransformerEncoderLayer

    torch.manual_seed(0)
    return nn.Sequential(*[TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
                           for _ in range(2)]).eval()


def _close(got, want, dtype):
    tol = dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else dict(atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got, want, **tol)


def _compile(model, example, tmp_path, name, **kw):
    return aot.aot_compile(model, (example,), dynamic_shapes=({0: BATCH},),
                           path=str(tmp_path / f"{name}.pt2"), **kw)


@pytest.fixture(scope="module")
def mlp_package(tmp_path_factory):
    path = _compile(mlp(), torch.randn(8, 16), tmp_path_factory.mktemp("mlp"), "mlp")
    return path


def test_mlp_matches_eager_at_every_batch_size(mlp_package):
    model, loaded = mlp(), aot.aot_load(mlp_package)
    with torch.no_grad():
        for n in (1, 5, 64):
            x = torch.randn(n, 16)
            _close(loaded(x), model(x), torch.float32)


def test_bad_inputs_name_the_input_and_what_was_expected(mlp_package):
    loaded = aot.aot_load(mlp_package)
    cases = [(torch.randn(65, 16), r"dimension 0 .* is 65, outside the package's range \[1, 64\]"),
             (torch.randn(4, 15), "dimension 1 must be 16, got 15"),
             (torch.randn(4, 16, dtype=torch.float64), "expected dtype Float, got Double"),
             (torch.randn(16), "expected 2 dimensions, got 1"),
             (torch.empty(4, 16, device="meta"), "expected a CPU tensor")]
    for x, message in cases:
        with pytest.raises(aot.AOTInputError, match=message):
            loaded(x)
    with pytest.raises(aot.AOTInputError, match=r"takes 1 tensor input\(s\) \(input\)"):
        loaded(torch.randn(4, 16), torch.randn(4, 16))
    with pytest.raises(aot.AOTInputError, match="'input' must be a tensor, got str"):
        loaded("x")


def test_package_holds_sources_metadata_and_weights(mlp_package):
    with zipfile.ZipFile(mlp_package) as z:
        names = set(z.namelist())
        meta = json.loads(z.read("metadata.json"))
        wrapper = z.read("source/wrapper.cpp").decode()
    assert {"manifest.txt", "metadata.json", "model.so", "weights.bin",
            "source/kernels.cpp", "source/wrapper.cpp"} <= names
    assert meta["ember_version"] == ember_version
    assert meta["isa"].startswith("x86-64") or meta["isa"] == "native"
    assert meta["ranges"] and list(meta["ranges"].values())[0] == [1, 64]
    assert "ember_aot_run" in wrapper and ".run();" in wrapper  # ATen externs, boxed
    weights = [a for a in meta["args"] if a["kind"] == "weight"]
    assert {a["name"] for a in weights} == set(mlp().state_dict())


def _rewrite(src: str, dst: str, edit) -> None:
    """Copy a package, passing each member through ``edit(name, bytes) -> bytes``."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, edit(info.filename, zin.read(info.filename)))


def _edit_meta(key: str, value, manifest_line: tuple[str, str]):
    def edit(name, data):
        if name == "metadata.json":
            meta = json.loads(data)
            meta[key] = value
            return json.dumps(meta).encode()
        if name == "manifest.txt":
            old, new = manifest_line
            return data.decode().replace(old, new).encode()
        return data
    return edit


@pytest.fixture(scope="module")
def damaged(mlp_package, tmp_path_factory):
    """Damaged copies of the MLP package: name -> (path, expected message)."""
    d = tmp_path_factory.mktemp("damaged")
    data = open(mlp_package, "rb").read()
    out = {}
    (d / "truncated.pt2").write_bytes(data[:len(data) // 2])
    out["truncated"] = (str(d / "truncated.pt2"), "damaged or not an Ember package")
    with zipfile.ZipFile(mlp_package) as z:
        info = z.getinfo("model.so")
        start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    flipped = bytearray(data)
    for i in range(10):
        flipped[start + 1000 + 997 * i] ^= 0x5A
    (d / "flipped.pt2").write_bytes(bytes(flipped))
    out["flipped"] = (str(d / "flipped.pt2"), "CRC")
    version = ember_version
    _rewrite(mlp_package, str(d / "version.pt2"),
             _edit_meta("ember_version", "0.0.1", (f"ember {version}", "ember 0.0.1")))
    out["version"] = (str(d / "version.pt2"), "built by Ember 0.0.1")
    meta = package.read(mlp_package).meta
    isa_line = " ".join(["isa", meta.isa, *meta.isa_needs])
    _rewrite(mlp_package, str(d / "isa.pt2"),
             _edit_meta("isa_needs", [*meta.isa_needs, "avx1024_imaginary"],
                        (isa_line, isa_line + " avx1024_imaginary")))
    if meta.isa != "native":
        out["isa"] = (str(d / "isa.pt2"), "this CPU lacks avx1024_imaginary")
    (d / "empty.pt2").write_bytes(b"")
    out["empty"] = (str(d / "empty.pt2"), "damaged or not an Ember package")
    return out


def test_damaged_or_foreign_packages_are_refused_in_python(damaged):
    for path, message in damaged.values():
        with pytest.raises(aot.PackageError, match=message):
            aot.aot_load(path)
    with pytest.raises(aot.PackageError, match="no package at"):
        aot.aot_load(str(damaged["truncated"][0]) + ".missing")


def test_weights_left_out_and_supplied_at_load(tmp_path):
    model = mlp()
    path = _compile(model, torch.randn(8, 16), tmp_path, "bare",
                    options={"package_weights": False})
    with pytest.raises(aot.AOTInputError, match="built without its weights"):
        aot.aot_load(path)
    with torch.no_grad():  # a retrained model: new values, same layout, no recompiling
        for p in model.parameters():
            p.add_(torch.randn_like(p))
        model[1].running_var.mul_(3)
    loaded = aot.aot_load(path, weights=model.state_dict())
    x = torch.randn(6, 16)
    with torch.no_grad():
        _close(loaded(x), model(x), torch.float32)
    bad = dict(model.state_dict())
    bad["0.weight"] = torch.zeros(3, 3)
    with pytest.raises(aot.AOTInputError, match=r"weights\['0.weight'\] must be"):
        aot.aot_load(path, weights=bad)
    with pytest.raises(aot.AOTInputError, match="does not use"):
        aot.aot_load(path, weights={**model.state_dict(), "extra": torch.zeros(1)})


def test_output_code_log_shows_the_cpp_wrapper(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="ember.output_code")
    _compile(nn.Sequential(nn.Linear(4, 4), nn.Tanh()).eval(), torch.randn(2, 4), tmp_path, "log")
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "C++ wrapper" in text and "ember_aot_run" in text


def test_loading_needs_no_compiler(mlp_package, tmp_path):
    code = ("import torch, ember.core.aot as aot\n"
            "from ember.core.compiler.runtime import build\n"
            f"f = aot.aot_load({mlp_package!r})\n"
            "y = f(torch.randn(3, 16))\n"
            "assert y.shape == (3, 4) and build.builds == 0\n"
            "print('ok')\n")
    env = {**os.environ, "PATH": str(tmp_path), "CXX": "/nonexistent/g++"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok"


@pytest.mark.parametrize("make,shape", [(cnn, (2, 3, 16, 16)), (encoder, (2, 10, 32))],
                         ids=["cnn", "encoder"])
def test_models_match_eager(make, shape, tmp_path):
    model = make()
    path = _compile(model, torch.randn(*shape), tmp_path, make.__name__)
    loaded = aot.aot_load(path)
    with torch.no_grad():
        for n in (1, 3):
            x = torch.randn(n, *shape[1:])
            _close(loaded(x), model(x), torch.float32)


class _Attention(nn.Module):
    """Attention on views of one projection, with a bool mask; returns the attention output
    itself (ATen's layout: (B, L, H, D) in memory) and a reshape of it."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.proj = nn.Linear(32, 96)

    def forward(self, x, mask):
        from ember.core.nn.functional import scaled_dot_product_attention

        b, n, _ = x.shape
        q, k, v = (t.view(b, n, 4, 8).transpose(1, 2) for t in self.proj(x).split(32, -1))
        o = scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return o.transpose(1, 2).reshape(b, n, 32) * 2, o


def test_attention_outputs_in_atens_layout_match_eager(tmp_path):
    model = _Attention().eval()
    mask = torch.rand(10, 10) > 0.3
    mask[:, 0] = True
    path = aot.aot_compile(model, (torch.randn(2, 10, 32), mask),
                           dynamic_shapes=({0: BATCH}, None), path=str(tmp_path / "a.pt2"))
    loaded = aot.aot_load(path)
    with torch.no_grad():
        for n in (1, 3):
            x = torch.randn(n, 10, 32)
            for got, want in zip(loaded(x, mask), model(x, mask)):
                _close(got, want, torch.float32)


def test_attention_heads_and_output_stay_views_of_their_buffers(tmp_path):
    """Heads split out of one projection reach attention as views of it, and the output's
    transpose back is a view too: the encoder's wrapper copies nothing around attention."""
    model = encoder()
    path = _compile(model, torch.randn(2, 10, 32), tmp_path, "enc")
    with zipfile.ZipFile(path) as z:
        kernels = z.read("source/kernels.cpp").decode()
        wrapper = z.read("source/wrapper.cpp").decode()
    # per layer: layer norm with the residual add (2), relu; no head or output copies
    assert kernels.count('extern "C" void kernel') == 6, wrapper
    assert wrapper.count("}, 32)).tensor(ember_aot::view(buf") == 2, wrapper  # k's offset
    loaded = aot.aot_load(path)
    with torch.no_grad():
        for n in (1, 3):
            x = torch.randn(n, 10, 32)
            _close(loaded(x), model(x), torch.float32)


class _ConvHead(nn.Module):
    """Two convolutions and a 4-D output: the output must keep eager's (NCHW) layout."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 4, 1)

    def forward(self, x):
        return self.b(torch.relu(self.a(x))) + 1


@pytest.mark.parametrize("on", [True, False], ids=["channels_last", "plain"])
def test_convolutions_run_channels_last_and_outputs_keep_eager_layout(on, tmp_path):
    model = _ConvHead().eval()
    path = _compile(model, torch.randn(2, 3, 12, 12), tmp_path, f"conv{on}",
                    options={"channels_last": on})
    with zipfile.ZipFile(path) as z:
        wrapper = z.read("source/wrapper.cpp").decode()
    # the input is copied into NHWC once, as a (s, 12, 12, 3) buffer, only when asked
    assert ("12, 12, 3}" in wrapper) == on
    loaded = aot.aot_load(path)
    with torch.no_grad():
        for n in (1, 3):
            x = torch.randn(n, 3, 12, 12)
            got, want = loaded(x), model(x)
            _close(got, want, torch.float32)
            assert got.is_contiguous()


@pytest.mark.parametrize("on", [True, False], ids=["arena", "per_call"])
def test_static_buffers_live_in_an_arena_that_concurrent_calls_do_not_share(on, tmp_path):
    model = cnn()
    path = aot.aot_compile(model, (torch.randn(2, 3, 16, 16),), options={"arena": on},
                           path=str(tmp_path / f"arena{on}.pt2"))
    with zipfile.ZipFile(path) as z:
        wrapper = z.read("source/wrapper.cpp").decode()
    assert ("ember_arena.slot(" in wrapper) == on
    loaded = aot.aot_load(path)
    torch.manual_seed(1)
    xs = [torch.randn(2, 3, 16, 16) for _ in range(8)]
    with torch.no_grad():
        wants = [model(x) for x in xs]
    with torch.inference_mode():  # the first arena is made under inference mode
        _close(loaded(xs[0]), wants[0], torch.float32)
    for x, want in zip(xs, wants):  # an arena reused call after call holds no stale values
        _close(loaded(x), want, torch.float32)
    failures = []

    def worker(k):  # the loader releases the GIL: calls overlap and each takes its own arena
        for r in range(30):
            i = (k + r) % len(xs)
            if not torch.allclose(loaded(xs[i]), wants[i], atol=1e-4, rtol=1e-4):
                failures.append((k, r))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


class _WeightAsInput(nn.Module):
    def forward(self, x, w):
        return F.linear(x, w)


def test_large_static_linear_runs_onednn_in_the_package(tmp_path):
    # past ONEDNN_MIN_MACS the lowering picks mkldnn::_linear_pointwise (a C++ op of libtorch,
    # with a Scalar?[] argument): a static package of it was refused as "registered from Python"
    torch.manual_seed(0)
    x, w = torch.randn(256, 512), torch.randn(1024, 512)
    path = aot.aot_compile(_WeightAsInput(), (x, w), path=str(tmp_path / "linear.pt2"))
    with zipfile.ZipFile(path) as z:
        wrapper = z.read("source/wrapper.cpp").decode()
    # a caller's tensor is no weight to pack once: the op is called boxed
    assert "mkldnn::_linear_pointwise" in wrapper and "PackedLinear" not in wrapper
    _close(aot.aot_load(path)(x, w), F.linear(x, w), torch.float32)


def test_linears_on_packaged_weights_pack_once_and_follow_in_place_changes(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 256),
                          nn.Linear(256, 8)).eval()
    path = _compile(model, torch.randn(4, 512), tmp_path, "packed",
                    options={"package_weights": False})
    with zipfile.ZipFile(path) as z:
        wrapper = z.read("source/wrapper.cpp").decode()
    assert wrapper.count("PackedLinear packed") == 2  # not the 256 x 8 one: too small
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    loaded = aot.aot_load(path, weights=weights)
    xs = [torch.randn(64, 512) for _ in range(4)]
    with torch.no_grad():
        wants = [model(x) for x in xs]
    outs = [None] * 4

    def first_call(k):  # four threads race to pack the weights on their first calls
        outs[k] = loaded(xs[k])

    threads = [threading.Thread(target=first_call, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got, want in zip(outs, wants):
        _close(got, want, torch.float32)
    with torch.no_grad():
        # at batch 1 both products stay under oneDNN's threshold (ATen's addmm), at 2 the
        # first runs packed, at 64 both
        for n in (1, 2, 64):
            x = torch.randn(n, 512)
            _close(loaded(x), model(x), torch.float32)
        # a weight changed in place after load is packed again at the next call
        weights["0.weight"].mul_(-0.5)
        model[0].weight.mul_(-0.5)
        x = torch.randn(64, 512)
        _close(loaded(x), model(x), torch.float32)


def test_channels_last_weights_supplied_at_load(tmp_path):
    model = _ConvHead().eval()
    path = _compile(model, torch.randn(2, 3, 12, 12), tmp_path, "bareconv",
                    options={"package_weights": False})
    meta = json.loads(zipfile.ZipFile(path).read("metadata.json"))
    nhwc = {a["name"] for a in meta["args"] if a.get("channels_last")}
    assert nhwc == {"a.weight"}  # stored and handed over NHWC; a 1x1 weight is both already
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    loaded = aot.aot_load(path, weights=model.state_dict())  # plain NCHW tensors
    x = torch.randn(3, 3, 12, 12)
    with torch.no_grad():
        _close(loaded(x), model(x), torch.float32)


class _ChebyshevDistance(nn.Module):
    """``cdist(p=inf)``: an ATen call whose float argument is infinite."""

    def forward(self, x, y):
        return torch.cdist(x, y, p=float("inf"))


def test_extern_with_an_infinite_float_argument(tmp_path):
    x, y = torch.randn(3, 4), torch.randn(5, 4)
    path = aot.aot_compile(_ChebyshevDistance(), (x, y), path=str(tmp_path / "cdist.pt2"))
    torch.testing.assert_close(aot.aot_load(path)(x, y), _ChebyshevDistance()(x, y))


class _LengthMask(nn.Module):
    """``mask.to(x.dtype)``: torch.export adds an ``_assert_tensor_metadata`` whose dtype
    argument a TorchScript schema spells as int."""

    def forward(self, x, n):
        keep = torch.arange(x.shape[1], device=x.device)[None, :] < n[:, None]
        return x * keep.to(x.dtype)


def test_ops_taking_a_dtype_package(tmp_path):
    x, n = torch.randn(3, 7), torch.tensor([3, 7, 0])
    path = aot.aot_compile(_LengthMask(), (x, n), path=str(tmp_path / "mask.pt2"))
    torch.testing.assert_close(aot.aot_load(path)(x, n), _LengthMask()(x, n))


class _OneHot(nn.Module):
    """``one_hot``'s range checks: ``_assert_async`` calls, which return nothing."""

    def forward(self, i):
        return F.one_hot(i, 4).float() * 2


def test_assert_in_a_package_raises_atens_message(tmp_path):
    i = torch.tensor([0, 3, 1])
    run = aot.aot_load(aot.aot_compile(_OneHot(), (i,), path=str(tmp_path / "onehot.pt2")))
    torch.testing.assert_close(run(i), _OneHot()(i))
    with pytest.raises(RuntimeError, match=r"smaller than num_classes\.$"):  # no backtrace
        run(torch.tensor([0, 4, 1]))


class _RowSoftmax(nn.Module):
    def forward(self, x):
        return x.softmax(-1) * x.shape[1]


def test_a_batch_of_one_with_any_row_stride(tmp_path):
    """A (batch, seq) input of batch 1 may have any stride along its batch dimension (a row
    of a wider tensor, kept by ``clone``): the sequence length is read from its size (it was
    read from that stride, and the package ran past the row)."""
    dims = ({0: BATCH, 1: torch.export.Dim("seq", min=2, max=40)},)
    path = aot.aot_compile(_RowSoftmax(), (torch.randn(2, 8),), dynamic_shapes=dims,
                           path=str(tmp_path / "rows.pt2"))
    run = aot.aot_load(path)
    for x in (torch.randn(8, 32)[:1, :8].clone(), torch.randn(1, 5).expand(1, 5),
              torch.randn(3, 40)[:, :7]):
        torch.testing.assert_close(run(x), _RowSoftmax()(x))


class _SwapsAndScales(nn.Module):
    """Mutates its inputs: scales ``x`` after keeping a copy, swaps ``a`` and ``b``."""

    def forward(self, x, a, b):
        before = x.clone()
        x.mul_(2)
        t = a.clone()
        a.copy_(b)
        b.copy_(t)
        return before + 1, x, before


def test_a_package_writes_back_the_inputs_its_model_mutates(tmp_path):
    """As in eager: the caller's tensors hold the new values, and no output reads memory a
    write-back overwrote (the package returned the mutated values as its first outputs)."""
    g = torch.Generator().manual_seed(0)
    x, a, b = (torch.randn(3, 4, generator=g) for _ in range(3))
    path = aot.aot_compile(_SwapsAndScales(), (x.clone(), a.clone(), b.clone()),
                           path=str(tmp_path / "swap.pt2"))
    ours, eager = [t.clone() for t in (x, a, b)], [t.clone() for t in (x, a, b)]
    got, want = aot.aot_load(path)(*ours), _SwapsAndScales()(*eager)
    assert len(got) == 3
    for u, v in zip(got + tuple(ours), want + tuple(eager)):
        assert torch.equal(u, v)


class _Counted(nn.Module):
    """A batch-norm in training mode and a call counter the output depends on."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.bn = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls += 1
        return self.bn(self.conv(x)).relu() * self.calls


def test_a_package_updates_the_buffers_its_model_updates(tmp_path):
    """Running statistics and counters advance call by call as the module's do: in the
    package's own copy of its weights, or in the tensors supplied at load."""
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(2, 3, 8, 8, generator=g) for _ in range(3)]
    path = aot.aot_compile(_Counted().train(), (xs[0],), path=str(tmp_path / "counted.pt2"))
    eager, supplied = _Counted().train(), _Counted().state_dict()
    packaged, loaded = aot.aot_load(path), aot.aot_load(path, weights=supplied)
    for x in xs:
        want = eager(x)
        torch.testing.assert_close(packaged(x), want)
        torch.testing.assert_close(loaded(x), want)
    for name, t in eager.state_dict().items():
        torch.testing.assert_close(supplied[name], t)
    assert supplied["calls"].item() == 3 and supplied["bn.num_batches_tracked"].item() == 3
    # the package file itself is unchanged: a fresh load starts from the exported state
    torch.testing.assert_close(aot.aot_load(path)(xs[0]), _Counted().train()(xs[0]))


class _BatchNormUpdate(nn.Module):
    def forward(self, x, w, b, mean, var):
        return torch.ops.aten._batch_norm_with_update(x, w, b, mean, var, 0.5, 1e-5)[0]


def test_an_extern_output_of_another_dtype_than_its_fake_kernel_says(tmp_path):
    """_batch_norm_with_update's CPU kernel returns bfloat16 running statistics where its
    fake kernel says float32: the package converts them as the JIT wrapper does."""
    g = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(s, generator=g).bfloat16() for s in ((4, 5, 6), (5,), (5,)))
    mean, var = torch.randn(5, generator=g).bfloat16(), torch.rand(5, generator=g).bfloat16()
    path = aot.aot_compile(_BatchNormUpdate(), (x, w, b, mean.clone(), var.clone()),
                           path=str(tmp_path / "bn_update.pt2"))
    ours, eager = (mean.clone(), var.clone()), (mean.clone(), var.clone())
    torch.testing.assert_close(aot.aot_load(path)(x, w, b, *ours),
                               _BatchNormUpdate()(x, w, b, *eager))
    assert torch.equal(ours[0], eager[0]) and torch.equal(ours[1], eager[1])


class _ComplexSolve(nn.Module):
    """Complex inputs and weights, linalg.solve (its error check is a with_effects op in the
    exported graph) and Python numbers where ATen's add and mul take tensors."""

    def __init__(self):
        super().__init__()
        self.register_buffer("eye", torch.eye(3, dtype=torch.cdouble))

    def forward(self, a, b):
        a = a.cdouble() + self.eye * 1e-3
        return torch.linalg.solve(a, b.cdouble()).to(b.dtype) * 2.0 + 1e-8


def test_complex_linalg_package_with_aligned_weights(tmp_path):
    torch.manual_seed(0)
    a = torch.randn(4, 3, 3, dtype=torch.cfloat) + 3 * torch.eye(3)
    b = torch.randn(4, 3, dtype=torch.cfloat)
    path = aot.aot_compile(_ComplexSolve(), (a, b), path=str(tmp_path / "solve.pt2"))
    loaded = aot.aot_load(path)
    torch.testing.assert_close(loaded(a, b), _ComplexSolve()(a, b))
    # mapped in place, at the alignment the package writes them at (complex128 included)
    assert all(t.data_ptr() % package.ALIGN == 0 for t in loaded._tensors if t is not None)


def test_each_package_runs_its_own_library(mlp_package, tmp_path):
    """Several packages in one process, loaded after others were dropped (descriptor numbers
    reused): each runs its own code (the loader once ran the first package's for all)."""
    import gc

    tiny = nn.Sequential(nn.Linear(16, 3)).eval()
    other = _compile(tiny, torch.randn(2, 16), tmp_path, "other")
    for _ in range(2):
        first = aot.aot_load(mlp_package)
        del first
        gc.collect()
        a, b = aot.aot_load(mlp_package), aot.aot_load(other)
        x = torch.randn(4, 16)
        with torch.no_grad():
            _close(a(x), mlp()(x), torch.float32)
            _close(b(x), tiny(x), torch.float32)


def _vision(name):
    from ember.vision import models

    torch.manual_seed(0)
    return getattr(models, name)().eval()


def _wav2letter():
    from ember.audio.models import Wav2Letter

    torch.manual_seed(0)
    return Wav2Letter(num_classes=10).eval()


SLOW_MODELS = {
    "mlp": (mlp, (4, 16)),
    "cnn": (cnn, (2, 3, 16, 16)),
    "encoder": (encoder, (2, 10, 32)),
    "resnet18": (lambda: _vision("resnet18"), (2, 3, 64, 64)),
    "mobilenet_v3_small": (lambda: _vision("mobilenet_v3_small"), (2, 3, 64, 64)),
    "wav2letter": (_wav2letter, (2, 1, 2000)),
}


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("name", sorted(SLOW_MODELS))
def test_issue_models_match_eager(name, dtype, tmp_path):
    make, shape = SLOW_MODELS[name]
    model = make().to(dtype)
    path = _compile(model, torch.randn(*shape, dtype=dtype), tmp_path, name)
    loaded = aot.aot_load(path)
    with torch.no_grad():
        for n in (1, 3):
            x = torch.randn(n, *shape[1:], dtype=dtype)
            _close(loaded(x), model(x), dtype)


# ---------------------------------------------------------------- C++, no Python


@pytest.fixture(scope="module")
def cpp_example(tmp_path_factory):
    """examples/aot built with g++ exactly as its docs say, and its package."""
    d = tmp_path_factory.mktemp("cpp")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples/aot/make_package.py"),
                          str(d)], capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    flags = subprocess.run([sys.executable, "-m", "ember.core.aot", "--cflags", "--libs"],
                           capture_output=True, text=True, check=True).stdout.split()
    exe = str(d / "run_model")
    build = subprocess.run(["g++", os.path.join(ROOT, "examples/aot/run_model.cpp"), "-o", exe,
                            *flags], capture_output=True, text=True, timeout=900)
    assert build.returncode == 0, build.stderr[-3000:]
    return d, exe


def test_cpp_example_runs_without_python_and_matches_aot_load(cpp_example):
    d, exe = cpp_example
    linked = subprocess.run(["ldd", exe], capture_output=True, text=True).stdout
    assert "libpython" not in linked and "libtorch_python" not in linked
    out = subprocess.run([exe, str(d / "model.pt2"), str(d / "input.pt"), str(d / "out.pt")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    x = torch.load(d / "input.pt")
    got = torch.load(d / "out.pt")
    torch.testing.assert_close(got, aot.aot_load(str(d / "model.pt2"))(x), atol=0, rtol=0)
    sys.path.insert(0, os.path.join(ROOT, "examples/aot"))
    try:
        import make_package
    finally:
        sys.path.pop(0)
    with torch.no_grad():
        _close(got, make_package.model()(x), torch.float32)


@pytest.mark.parametrize("on", [True, False], ids=["channels_last", "plain"])
def test_convolutions_on_packaged_weights_pack_once_for_any_batch(on, tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(64, 128, 3, stride=2, padding=1), nn.ReLU(),
                          nn.Conv2d(128, 128, 1, groups=2)).eval()
    path = _compile(model, torch.randn(2, 3, 16, 16), tmp_path, f"conv{on}",
                    options={"package_weights": False, "channels_last": on})
    with zipfile.ZipFile(path) as z:
        wrapper = z.read("source/wrapper.cpp").decode()
    # not the first (1,728 elements): small weights stay ATen's convolution
    assert wrapper.count("PackedConv packed") == 1 and "aten::convolution" in wrapper
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    loaded = aot.aot_load(path, weights=weights)
    with torch.no_grad():
        for n in (3, 1, 5):  # packed for the first call's batch, then run at others
            x = torch.randn(n, 3, 16, 16)
            _close(loaded(x), model(x), torch.float32)
        if on:
            return  # the package holds an NHWC copy of each weight, made at load
        weights["2.weight"].mul_(-0.5)  # packed again at the next call
        model[2].weight.mul_(-0.5)
        x = torch.randn(2, 3, 16, 16)
        _close(loaded(x), model(x), torch.float32)


@pytest.mark.parametrize("level", ["x86-64-v4", "x86-64-v3"])
def test_bfloat16_linears_pack_only_for_avx512_levels(level, tmp_path):
    if isa.cannot_run(isa.LEVELS[level].needs):
        pytest.skip(f"this CPU cannot run {level}")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 256)).eval()
    model = model.to(torch.bfloat16)
    path = _compile(model, torch.randn(4, 512, dtype=torch.bfloat16), tmp_path, "bf16",
                    options={"cpu_isa": level})
    with zipfile.ZipFile(path) as z:
        wrapper = z.read("source/wrapper.cpp").decode()
    assert wrapper.count("PackedLinear packed") == (2 if level == "x86-64-v4" else 0)
    loaded = aot.aot_load(path)
    with torch.no_grad():
        for n in (1, 64):
            x = torch.randn(n, 512, dtype=torch.bfloat16)
            _close(loaded(x), model(x), torch.bfloat16)


def test_a_dropped_model_frees_its_packed_weights(tmp_path):
    import gc

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 256)).eval()
    path = _compile(model, torch.randn(4, 512), tmp_path, "drop",
                    options={"package_weights": False})
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    storage = weights["0.weight"].untyped_storage()

    def users():
        return torch._C._storage_Use_Count(storage._cdata)

    alone = users()
    loaded = aot.aot_load(path, weights=weights)
    loaded(torch.randn(64, 512))  # packs both weights, holding the tensors it packed
    assert users() > alone
    del loaded
    gc.collect()
    # the library stays mapped (ctypes never unmaps one), but what it held went with the model
    assert users() == alone


def test_cpp_example_runs_linears_on_packed_weights(cpp_example, tmp_path):
    d, exe = cpp_example
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 256)).eval()
    path = _compile(model, torch.randn(4, 512), tmp_path, "linears")
    x = torch.randn(64, 512)
    torch.save(x, tmp_path / "x.pt")
    out = subprocess.run([exe, path, str(tmp_path / "x.pt"), str(tmp_path / "y.pt")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    got = torch.load(tmp_path / "y.pt")
    torch.testing.assert_close(got, aot.aot_load(path)(x), atol=0, rtol=0)
    with torch.no_grad():
        _close(got, model(x), torch.float32)


def test_cpp_loader_reports_bad_inputs_and_damaged_packages(cpp_example, damaged, tmp_path):
    d, exe = cpp_example
    torch.save(torch.randn(65, 3, 32, 32), tmp_path / "big.pt")
    torch.save(torch.randn(2, 3, 32, 32, dtype=torch.float64), tmp_path / "f64.pt")
    cases = [(str(d / "model.pt2"), tmp_path / "big.pt", "outside the package's range"),
             (str(d / "model.pt2"), tmp_path / "f64.pt", "expected dtype Float, got Double")]
    cases += [(path, d / "input.pt", message.split(" (")[0])
              for path, message in damaged.values()]
    for path, inp, message in cases:
        out = subprocess.run([exe, path, str(inp), str(tmp_path / "o.pt")],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 1, (path, out.returncode, out.stderr)  # no signal, no crash
        assert message.replace("\\", "") in out.stderr, (path, out.stderr)
