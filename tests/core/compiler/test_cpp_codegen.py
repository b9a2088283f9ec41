"""C++ codegen details that change speed, checked for correctness against eager."""


import re

import pytest
import sympy
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.usefixtures("isa_level")  # native and AVX2


def _rows():
    x = torch.randn(6, 300) * 4
    x[1, 3] = float("nan")
    x[2, :] = float("-inf")
    x[3, 7] = float("inf")
    x[4, 5] = 1e30
    return x


def _assert_outputs_close(out, ref, tol: float) -> None:
    """Every output close to eager's (bfloat16 outputs within 1e-2), NaNs where eager's are."""
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    for o, r in zip(outs, refs):
        t = 1e-2 if r.dtype == torch.bfloat16 else tol
        torch.testing.assert_close(o, r, equal_nan=True, atol=t, rtol=t)


def test_softmax_scratch_lives_in_the_output_row(ecompile, output_code):
    fn = lambda x: torch.softmax(x, -1)
    x = _rows()
    torch.testing.assert_close(ecompile(fn)(x), fn(x), equal_nan=True)
    code = "\n".join(output_code).split("wrapper:")[0]
    assert "float buf" not in code  # no stack scratch: exp(x - max) goes to the output


@pytest.mark.parametrize("fn", [
    lambda x: (torch.softmax(x, -1), torch.softmax(x, -1) * 2),
    lambda x: torch.softmax(x, -1) * torch.exp(x - x.amax(-1, keepdim=True)),
    lambda x: torch.softmax(x * 0.5, -1).to(torch.float64),
    lambda x: torch.softmax(x.to(torch.bfloat16), -1),
    lambda x: torch.log_softmax(x, -1) + torch.softmax(x, -1),
])
def test_scratch_reuse_keeps_fused_variants_exact(ecompile, fn):
    x = _rows()
    out, ref = ecompile(fn)(x), fn(x)
    _assert_outputs_close(out, ref, 1e-5)


def test_log_softmax_final_pass_updates_its_output_in_place(ecompile, output_code):
    fn = lambda x: torch.log_softmax(x, -1)
    x = _rows()
    torch.testing.assert_close(ecompile(fn)(x), fn(x), equal_nan=True)
    code = "\n".join(output_code).split("wrapper:")[0]
    out = code.split("float* __restrict__ ")[-1].split(")")[0]
    assert code.count(f"{out}[") >= 3  # stored in the exp pass, then read and rewritten


@pytest.mark.parametrize("fn", [
    lambda x: torch.nn.functional.layer_norm(x, (300,)),
    lambda x: torch.nn.functional.layer_norm(x, (300,), torch.linspace(-1, 2, 300),
                                             torch.linspace(0, 1, 300)),
    lambda x: torch.log_softmax(x * 2, -1) * 3,
    lambda x: (torch.log_softmax(x, -1), x - x.amax(-1, keepdim=True)),
    lambda x: torch.nn.functional.layer_norm(x.double(), (300,)),
    lambda x: torch.nn.functional.layer_norm(x, (300,)).to(torch.bfloat16),
    lambda x: torch.nn.functional.cross_entropy(x, torch.arange(6) * 7, reduction="none"),
    lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6),
])
def test_values_shared_with_the_final_pass_stay_exact(ecompile, fn):
    x = _rows()
    x[2] = torch.randn(300)  # layer_norm of an all -inf row is NaN in both; keep most finite
    out, ref = ecompile(fn)(x), fn(x)
    _assert_outputs_close(out, ref, 1e-4)


def _loops(code: str) -> list[str]:
    """The bodies of the innermost ``omp simd`` loops of generated C++, in order."""
    return [part.split("\n    }")[0] for part in code.split("#pragma omp simd")[1:]]


def test_softmax_sums_exp_in_a_loop_of_its_own(ecompile, output_code):
    fn = lambda x: torch.softmax(x, -1)
    x = _rows()
    torch.testing.assert_close(ecompile(fn)(x), fn(x), equal_nan=True)
    code = "\n".join(output_code).split("wrapper:")[0]
    loops = _loops(code)
    exp_loop = next(b for b in loops if "e_exp" in b)
    assert "reduction" not in exp_loop.split("\n")[0]  # no accumulator lives across the call
    assert any("reduction(+" in b.split("\n")[0] and "e_exp" not in b for b in loops)


@pytest.mark.parametrize("fn, shape", [
    (lambda x: torch.softmax(x, 0), (5000,)),  # one row: the fused parallel loop stays
    (lambda x: torch.softmax(x * 3, -1), (7, 33)),
    (lambda x: torch.softmax(x.double(), -1), (6, 300)),
    (lambda x: (lambda e: e / e.sum((-2, -1), keepdim=True))(
        torch.exp(x - x.amax((-2, -1), keepdim=True))), (3, 40, 50)),
    (lambda x: torch.sigmoid(x).sum(-1, keepdim=True) * torch.sigmoid(x), (6, 300)),
    (lambda x: (torch.exp(x).to(torch.bfloat16), torch.exp(x).sum(-1)), (6, 300)),
    (lambda x: (torch.exp(x), torch.exp(x).sum(-1)), (6, 300)),
    (lambda x: (torch.exp(x.double()), torch.exp(x.double()).sum(-1)), (5, 64)),
    (lambda x: torch.softmax(x, -1) + torch.softmax(x * 2, -1), (6, 300)),  # two in one row
])
def test_reductions_reread_from_the_stored_row_match_eager(ecompile, fn, shape):
    x = torch.randn(shape)
    if x.dim() == 2 and x.shape[1] > 10:
        x[1, 3], x[3, 7] = float("nan"), float("inf")
        x[2, :] = float("-inf")
    out, ref = ecompile(fn)(x), fn(x)
    _assert_outputs_close(out, ref, 1e-5)


def test_reread_row_sum_with_symbolic_row_length(ecompile):
    fn = ecompile(lambda x: torch.softmax(x, -1), dynamic=True)
    for shape in [(3, 100), (4, 64), (2, 1), (5, 1000), (0, 7)]:
        x = torch.randn(shape)
        torch.testing.assert_close(fn(x), torch.softmax(x, -1))


def test_inline_float_erf_is_accurate_and_keeps_special_values(ecompile):
    x = torch.cat([torch.linspace(-6, 6, 100_001),
                   torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-30])])
    out = ecompile(torch.erf)(x)
    ref = torch.erf(x.double())
    finite = ~torch.isnan(ref)
    assert (out.double() - ref)[finite].abs().max() < 5e-7
    assert torch.isnan(out[-6]) and out[-5] == 1 and out[-4] == -1
    assert out[-2].item() == 0.0 and torch.signbit(out[-2]) and out[-1] > 0


def test_float_exp_keeps_glibc_accuracy_overflow_and_denormals(ecompile):
    x = torch.cat([torch.linspace(-110, 95, 400_001),
                   torch.tensor([float("nan"), float("inf"), -float("inf"), 1e30, -1e30,
                                 3e38, -3e38, 0.0, -0.0, 88.72, 88.73, -103.9, -104.5])])
    out, ref = ecompile(torch.exp)(x), torch.exp(x)
    exact = torch.exp(x.double())
    normal = (exact > 1.2e-38) & (exact < 3.4e38)
    assert ((out.double() - exact).abs() / exact)[normal].max() < 1.5e-7  # ~1 ulp
    assert (out.double() - exact).abs()[exact <= 1.2e-38].max() < 3e-45  # denormals
    for test in (torch.isnan, torch.isinf, lambda t: t == 0):
        assert torch.equal(test(out), test(ref))


def test_skinny_matmul_is_a_loop_kernel_and_big_ones_stay_in_blas(ecompile, output_code):
    """10 output features: a loop kernel; 40, and 16 (MKL's one-vector fast path): BLAS."""
    F = torch.nn.functional
    fn = lambda a, w, v, w16: (F.linear(a, w), a @ v, F.linear(a, w16))
    a, w, v, w16 = torch.randn(64, 48), torch.randn(10, 48), torch.randn(48, 40), \
        torch.randn(16, 48)
    torch.testing.assert_close(ecompile(fn)(a, w, v, w16), fn(a, w, v, w16), atol=1e-4,
                               rtol=1e-4)
    wrapper = "\n".join(output_code).split("wrapper:")[1]
    externs = [ln for ln in wrapper.splitlines() if "  # aten." in ln]
    assert len(externs) == 2 and all("mm" in ln for ln in externs)


def _without_native_16bit(monkeypatch):
    """The CPU's flags less its native 16-bit dot products (an AVX2 machine's view)."""
    from ember.core.compiler.lowering import externs
    from ember.core.compiler.runtime import isa

    native = {f for fs in externs._NATIVE_16BIT.values() for f in fs}
    flags = isa.cpu_flags() - native
    monkeypatch.setattr(isa, "cpu_flags", lambda: flags)


def _ten_row_mlp():
    """A 64 -> 200 -> 48 GELU MLP (eval) and 10 rows for it."""
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 200), torch.nn.GELU(),
                              torch.nn.Linear(200, 48)).eval()
    return mlp, torch.randn(10, 64)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_few_row_linears_read_each_weight_row_once_and_store_the_gelu(ecompile, output_code,
                                                                        dtype, monkeypatch):
    """10 rows through a 64 -> 200 -> 48 MLP: each loop matmul runs over the weight's rows
    outside and the 10 rows inside (one pass over the weight, not ten), and the gelu between
    the linears is stored once, not recomputed for each of the 48 outputs that read it.
    bfloat16 runs as loops only without native 16-bit dot products."""
    _without_native_16bit(monkeypatch)
    mlp, x = _ten_row_mlp()
    with torch.no_grad(), torch.autocast("cpu", enabled=dtype == torch.bfloat16):
        out, ref = ecompile(mlp)(x), mlp(x)
    tol = 1e-2 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(out, ref, atol=tol, rtol=tol)
    kernels = "\n".join(output_code).split("wrapper:")[0]
    assert kernels.count("e_erf(t") == 1, kernels
    outer = re.findall(r"collapse\(2\)\n\s*for \(int64_t x0 = 0; x0 < (\d+)", kernels)
    assert outer == ["200", "48"], kernels


def test_skinny_16bit_matmuls_are_aten_calls_with_native_16bit_dot_products(
        ecompile, output_code, monkeypatch):
    """The same MLP in bfloat16 on a CPU with avx512_bf16: both linears are ATen calls
    (oneDNN's, 1.3-3x faster than the loop there), the result eager's."""
    from ember.core.compiler.runtime import isa

    flags = isa.cpu_flags()
    if not flags:
        pytest.skip("the CPU's flags are unknown here")
    monkeypatch.setattr(isa, "cpu_flags", lambda: flags | {"avx512_bf16"})
    mlp, x = _ten_row_mlp()
    with torch.no_grad(), torch.autocast("cpu"):
        out, ref = ecompile(mlp)(x), mlp(x)
    torch.testing.assert_close(out, ref, atol=1e-2, rtol=1e-2)
    wrapper = "\n".join(output_code).split("wrapper:")[1]
    assert len([ln for ln in wrapper.splitlines() if "  # aten.addmm" in ln]) == 2, wrapper


def test_few_row_matmul_walking_b_across_rows_keeps_rows_outside(ecompile, output_code):
    """``a @ w`` with ``w`` stored K-major across N (the backward's grad @ W): each output
    column would walk a column of ``w``, so the rows of ``a`` stay the outer loop."""
    a, w = torch.randn(10, 64), torch.randn(64, 200)
    torch.testing.assert_close(ecompile(lambda a, w: a @ w)(a, w), a @ w, atol=1e-4,
                               rtol=1e-4)
    kernels = "\n".join(output_code).split("wrapper:")[0]
    outer = re.findall(r"collapse\(2\)\n\s*for \(int64_t x0 = 0; x0 < (\d+)", kernels)
    assert outer == ["10"], kernels


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_loop_matmul_shares_each_row_load_across_a_tile_of_outputs(ecompile, output_code,
                                                                  monkeypatch, dtype):
    """10 rows against a [96, 128] weight: the dot-product loop is unrolled and jammed, 4
    weight rows by 2 input rows per row loop (each load shared by the outputs that read it),
    and each output is the same sum in the same order: bitwise the plain loop's."""
    import ember.core.compiler.codegen.cpp as cpp

    _without_native_16bit(monkeypatch)  # else bfloat16's matmul is ATen's
    torch.manual_seed(0)
    lin = torch.nn.Linear(128, 96).eval()
    x = torch.randn(10, 128)
    with torch.no_grad(), torch.autocast("cpu", enabled=dtype == torch.bfloat16):
        out, ref = ecompile(lin)(x), lin(x)
        code = "\n".join(output_code).split("wrapper:")[0]
        monkeypatch.setattr(cpp, "_jam_factors", lambda k: None)
        output_code.clear()
        plain = ecompile(lin)(x)
    tol = 1e-2 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(out, ref, atol=tol, rtol=tol)
    assert torch.equal(out, plain)
    assert "x0 += 4" in code and "x1 += 2" in code, code
    assert "_7 = 0.0f" in code and "_8 = " not in code, code  # 8 accumulators
    assert "x0 += 4" not in "\n".join(output_code)


def test_few_row_matmul_outputs_keep_eager_strides(ecompile):
    """Loop matmul results as graph outputs, views of them included, come out in eager's
    layout (AOTAutograd replays output views on them)."""
    a, b = torch.randn(5, 80), torch.randn(70, 80).t()
    fn = lambda a, b: (a @ b, (a @ b).view(5, 7, 10), (a @ b).t() * 2, torch.addmm(b[0], a, b))
    for out, ref in zip(ecompile(fn)(a, b), fn(a, b)):
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
        assert out.stride() == ref.stride()


def test_cross_entropy_reads_the_logits_once_and_writes_no_log_softmax(ecompile, output_code):
    fn = lambda x, y: torch.nn.functional.cross_entropy(x, y)
    x, y = torch.randn(64, 30), torch.randint(0, 30, (64,))
    torch.testing.assert_close(ecompile(fn)(x, y), fn(x, y))
    wrapper = "\n".join(output_code).split("wrapper:")[1]
    assert "_empty_cpu((64, 30, )" not in wrapper  # no [64, 30] buffer
    assert "= c" not in wrapper  # the gather is fused, no ATen call


def test_inference_linears_use_onednn_and_training_keeps_mkl(ecompile, output_code):
    if not torch.backends.mkldnn.is_available():
        pytest.skip("torch built without oneDNN")
    m = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.GELU(), torch.nn.Linear(512, 24))
    x = torch.randn(256, 512)
    with torch.no_grad():
        torch.testing.assert_close(ecompile(m)(x), m(x), atol=1e-4, rtol=1e-4)
    linears = [ln for ln in "\n".join(output_code).splitlines() if "# aten.addmm" in ln or
               "_linear_pointwise" in ln]
    # oneDNN for the big one; below 2^26 multiply-adds its fixed cost loses to MKL
    assert ["_linear_pointwise" in ln for ln in linears] == [True, False], linears
    output_code.clear()
    ecompile(m)(x).sum().backward()
    assert "_linear_pointwise" not in "\n".join(output_code)


def test_gathers_fuse_into_their_readers_without_aten_calls(ecompile, output_code):
    """Upsampling (four gathers and a lerp) and embedding + position + layer_norm run as our
    kernels, with no ATen index/embedding call."""
    emb, pos = torch.nn.Embedding(50, 32), torch.randn(7, 32)
    fn = lambda img, ids: (torch.nn.functional.interpolate(img, size=(32, 32), mode="bilinear")
                           .relu(), torch.nn.functional.layer_norm(emb(ids) + pos, (32,)))
    img, ids = torch.randn(1, 4, 16, 16), torch.randint(0, 50, (3, 7))
    with torch.no_grad():
        torch.testing.assert_close(ecompile(fn)(img, ids), fn(img, ids), atol=1e-5, rtol=1e-5)
    wrapper = "\n".join(output_code).split("wrapper:")[1]
    assert "aten." not in wrapper
    # upsampling's indices (aten._unsafe_index, clamped by construction) carry no bounds
    # check; the embedding's ids do (one flag, read after the kernels)
    assert wrapper.count(".item()") == 1, wrapper
    sizes = [ln.split("_empty_cpu(")[1].split(")")[0] for ln in wrapper.splitlines()
             if "_empty_cpu(" in ln]
    # the gathered rows are read inside layer_norm's row passes: only the output is written
    assert sizes.count("(3, 7, 32, ") == 1, sizes
    # the image: only the output; the row blend's two readers share its loop point (the
    # batch dim of size 1 aside), so it stays in registers
    assert sizes.count("(1, 4, 32, 32, ") == 1, sizes


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_small_integer_powers_multiply_like_eager(ecompile, output_code, dtype):
    """x ** 3 (gelu_new), ** 2, ** -1, ** -2 are eager's multiplications, to the bit, with
    no call of the vector pow."""
    x = torch.cat([torch.randn(500) * 5, torch.tensor([0.0, -0.0, 1e-20, 1e20, float("inf"),
                                                       float("nan")])]).to(dtype)
    fn = lambda x: (x ** 3, x ** 2, x ** -1, x ** -2)
    for out, ref in zip(ecompile(fn)(x), fn(x)):
        assert torch.equal(out.nan_to_num(7.0), ref.nan_to_num(7.0))
    assert "std::pow" not in "\n".join(output_code)


@pytest.mark.parametrize("n", [37, 64, 101])
def test_dynamic_sizes_with_torch_shape_functions_compile(ecompile, n):
    """Sizes Dynamo writes with its own Max and TruncToInt (a slice of max(1, n // 4), a
    scale-factor interpolation: trunc(0.25 * n)) are printed as integer C++/Python, not as a
    float index or a refused graph (strict mode raises on either)."""
    fn = lambda x: (x[..., : max(1, x.shape[-1] // 4)].relu() * 2,
                    torch.nn.functional.interpolate(x, scale_factor=0.25, mode="linear") * 2)
    f = ecompile(fn, dynamic=True)
    x = torch.randn(1, 2, n)
    torch.testing.assert_close(f(x), fn(x))


def test_channels_last_values_stay_channels_last(ecompile, output_code):
    """A pointwise value whose eager tensor is channels-last (BN + ReLU after a channels-last
    conv) is stored in that memory order: the next conv reads it without a reorder, the
    kernel's loads and stores walk memory contiguously, and outputs keep eager's strides."""
    m = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.BatchNorm2d(16),
                            torch.nn.ReLU(), torch.nn.Conv2d(16, 16, 1), torch.nn.GELU())
    m = m.eval().to(memory_format=torch.channels_last)
    x = torch.randn(2, 8, 10, 12).to(memory_format=torch.channels_last)
    with torch.no_grad():
        out, ref = ecompile(m)(x), m(x)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    assert out.stride() == ref.stride() == (1920, 1, 192, 16)
    wrapper = "\n".join(output_code).split("wrapper:")[1]
    # the BN + ReLU buffer is laid out N, H, W, C (written in place into the conv's
    # channels-last output, the same memory) and handed to the conv as an NCHW view
    assert "(2, 10, 12, 16, ), (1920, 192, 16, 1, ), 0)  # in place" in wrapper, wrapper
    assert "(2, 16, 10, 12, ), (1920, 1, 192, 16, )" in wrapper, wrapper


def test_dynamic_kernels_below_the_parallel_threshold_stay_vectorized(ecompile, output_code):
    """A dynamic kernel's ``if`` applies to its ``parallel`` only: a bare ``if`` on a combined
    ``parallel for simd`` also turns off the ``simd`` when false (g++ then runs every small
    call as a scalar loop)."""
    fn = lambda x: torch.nn.functional.gelu(x) * 2
    f = ecompile(fn, dynamic=True)
    for n in (3, 37, 300):
        x = torch.randn(n, 129)
        torch.testing.assert_close(f(x), fn(x))
    code = "\n".join(output_code).split("wrapper:")[0]
    assert "if(parallel: " in code and " if((" not in code


def test_inference_max_pool_is_a_loop_kernel_and_training_keeps_aten(ecompile, output_code):
    """Without its indices read, max pooling fuses into the kernel of the relu before it (no
    ATen call, whose NCHW kernel also computes every argmax); a training graph saving the
    indices for the backward keeps ATen's op."""
    x = torch.randn(2, 8, 12, 12)

    def f(x):
        return torch.nn.functional.max_pool2d(torch.relu(x), 3, 2, 1)
    with torch.no_grad():
        ecompile(f)(x)
    assert "max_pool2d_with_indices" not in "\n".join(output_code).split("wrapper:")[1]
    output_code.clear()
    ecompile(f)(x.requires_grad_())
    assert "max_pool2d_with_indices" in "\n".join(output_code)


def test_multiply_add_rounds_twice_like_eager_in_every_lane(ecompile):
    """a * b + c rounds the product and then the sum, as eager's two ops do, in the vector
    body and the scalar tail alike (built with FP contraction, g++ fused them into one FMA
    in the body only: an element's result hung on its position and on the ISA)."""
    fn = lambda a, b, c: (a * b + c, a * b - c)
    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(4099, generator=g, dtype=torch.float64) for _ in range(3))
    for out, ref in zip(ecompile(fn)(a, b, c), fn(a, b, c)):
        assert torch.equal(out, ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("nparts", [3, 11])
def test_cat_of_many_parts_read_pointwise_is_stored(ecompile, output_code, dtype, nparts):
    """A densenet layer's cat of earlier outputs feeding batch_norm and relu, NHWC: with
    three parts or more the parts are copied into the cat's buffer (one loop each) and the
    pointwise reads it once, instead of gathering every part in every element (a select
    chain) or calling ATen's cat (past eight parts)."""
    def fn(parts, mean, var, w, b):
        return torch.relu(F.batch_norm(torch.cat(parts, 1), mean, var, w, b))
    parts = [torch.randn(2, 4 + k % 3, 5, 6).to(dtype).contiguous(
        memory_format=torch.channels_last) for k in range(nparts)]
    c = sum(p.shape[1] for p in parts)
    stats = (torch.rand(c), torch.rand(c) + 0.5, torch.randn(c), torch.randn(c))
    with torch.no_grad():
        got, want = ecompile(fn)(parts, *stats), fn(parts, *stats)
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(got, want, atol=tol, rtol=tol)
    assert got.stride() == want.stride()
    wrapper = "\n".join(output_code).split("wrapper:")[1]
    kernels = _functions(output_code)   # a long run of part copies is split into functions
    assert not any("e_sel" in k for k in kernels) and "aten.cat" not in wrapper
    # one loop nest per part (parts of under 8 channels get no ``omp simd``: too short)
    assert sum(k.count("for (int64_t r0 = 0;") for k in kernels if "e_max" not in k) >= nparts


def _functions(output_code) -> list[str]:
    """The generated kernel functions (and their part functions), past the prelude."""
    kernels = "\n".join(output_code).split("wrapper:")[0]
    return re.split(r"\n(?=static __attribute__|extern \"C\" void)", kernels)[1:]


@pytest.mark.parametrize("rows", [2, 3000])  # plain loops; one parallel region of shared loops
def test_a_long_run_of_loops_is_built_as_functions_of_a_few(ecompile, output_code, monkeypatch,
                                                            rows):
    """g++'s time grows about quadratically with the SIMD loops of one function (a cat of 600
    parts took 150 s to build): the loops of a long cat run from functions of
    ``STAGES_PER_FUNCTION`` loops each, called in order."""
    from ember.core.compiler.codegen import cpp
    monkeypatch.setattr(cpp, "STAGES_PER_FUNCTION", 4)
    parts = [torch.randn(rows, 1 + k % 3) for k in range(11)]
    fn = lambda *xs: torch.cat([x * (k + 1) for k, x in enumerate(xs)], 1)
    torch.testing.assert_close(ecompile(fn)(*parts), fn(*parts))
    funcs = _functions(output_code)
    part = r"static __attribute__\(\(noinline\)\) void kernel\d+_part"
    split = [f for f in funcs if re.match(part, f)]
    loops = lambda f: f.count("for (int64_t r0 = 0;")  # one nest per stage
    assert len(split) == 3 and all(1 <= loops(f) <= 4 for f in split)
    assert all(loops(f) <= 4 for f in funcs)


def test_loops_split_into_functions_keep_their_barriers(ecompile, output_code, monkeypatch):
    """Loops sharing one parallel region wait at a barrier before a loop that reads what an
    earlier one stored; split one loop per function, the barrier is inside the function that
    runs the reading loop."""
    from ember.core.compiler.codegen import cpp
    monkeypatch.setattr(cpp, "STAGES_PER_FUNCTION", 1)

    def fn(a, b):
        u = a.exp()  # read twice and costly: stored, not recomputed by its readers
        return b * 3, u.sin() + u

    args = (torch.randn(70_000), torch.randn(5))
    out, ref = ecompile(fn)(*args), fn(*args)
    for o, r in zip(out, ref):
        torch.testing.assert_close(o, r)
    parts = [f for f in _functions(output_code) if f.startswith("static")]
    assert len(parts) == 3 and ["omp barrier" in f for f in parts] == [False, False, True]


def test_cat_a_convolution_reads_stores_each_part_into_its_slice(ecompile, output_code):
    """The ReLUs of two convolutions kept NCHW (costly weights), concatenated for a 1x1
    convolution fed NHWC: one kernel stores each ReLU straight into its slice of the cat, in
    the NHWC layout the third convolution takes (a loop per part), with no select per
    element, no buffer per ReLU and no layout copy of the cat."""
    def fn(x, w1, w2, w3):
        y = torch.cat([torch.relu(F.conv2d(x, w1, padding=1)),
                       torch.relu(F.conv2d(x, w2, padding=1))], 1)
        return F.conv2d(y, w3)
    args = (torch.randn(2, 4, 8, 8), torch.randn(512, 4, 3, 3), torch.randn(520, 4, 3, 3),
            torch.randn(3, 1032, 1, 1))
    with torch.no_grad():
        torch.testing.assert_close(ecompile(fn)(*args), fn(*args), rtol=1e-4, atol=1e-4)
    kernels, wrapper = "\n".join(output_code).split("wrapper:")
    kernels = kernels.split('extern "C" void ')[1:]  # past the prelude
    relu = [k for k in kernels if "e_max" in k]
    assert len(relu) == 1 and relu[0].count("omp simd") == 2
    assert not any("e_sel" in k for k in kernels) and "aten.cat" not in wrapper
    cat = re.search(r"float\* __restrict__ (\w+)\)", relu[0]).group(1)
    assert not any(f"float* __restrict__ {cat}," in k for k in kernels)  # no kernel copies it


@pytest.mark.parametrize("act, side", [(F.hardswish, 7), (F.silu, 40)])
def test_nhwc_batch_norm_computes_its_channel_constants_once_per_call(ecompile, output_code,
                                                                     monkeypatch, act, side):
    """An NHWC batch norm's ``1 / sqrt(var + eps)`` depends on the channel alone: it goes to a
    table computed before the pixel loop, by the same operations, so the output is bitwise
    that of the loop computing it per pixel. A parallel loop takes each thread's own copy
    (``firstprivate``): shared, the table is memory a vector math call (silu's exp) might
    write, and g++ left the loop scalar, 5x slower."""
    import ember.core.compiler.codegen.cpp as cpp

    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(48, eps=1e-3).eval()
    bn.running_var.uniform_(0.5, 2.0)
    bn.running_mean.uniform_(-1.0, 1.0)
    torch.nn.init.uniform_(bn.weight)
    fn = lambda x: act(bn(x)) * 2
    x = torch.randn(2, 48, side, side - 2).to(memory_format=torch.channels_last)
    with torch.no_grad():
        out, ref = ecompile(fn)(x), fn(x)
        code = "\n".join(output_code).split("wrapper:")[0]
        monkeypatch.setattr(cpp, "_precompute_inner", lambda *args: [])
        output_code.clear()
        per_pixel = ecompile(fn)(x)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    assert torch.equal(out, per_pixel)
    assert code.count("std::sqrt") == 1 and "e_pre0[48]" in code, code
    assert code.index("std::sqrt") < code.index("for (int64_t x0"), code
    parallel = [ln for ln in code.splitlines() if "omp parallel" in ln]
    assert bool(parallel) == (side > 7)
    assert all("firstprivate(e_pre0)" in ln for ln in parallel), parallel
    assert "e_pre0" not in "\n".join(output_code)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_16_bit_store_converts_each_value_once(ecompile, output_code, dtype):
    # eager rounds each op's result to 16 bits; the store of the last one converts anyway,
    # so the kernel stores its float value (same bits) instead of converting three times
    fn = lambda x: (F.hardswish(x), F.hardsigmoid(x))  # float arithmetic as eager's kernels
    x = (torch.randn(4, 3000) * 4).to(dtype)
    x[0, :4] = torch.tensor([float("nan"), float("inf"), -float("inf"), 1e-40])
    for got, want in zip(ecompile(fn)(x), fn(x)):
        torch.testing.assert_close(got, want, atol=0, rtol=0, equal_nan=True)
    code = "\n".join(output_code).split("wrapper:")[0]
    rounded = {m.group(1) for m in re.finditer(
        r"float (t\d+) = (?:e_bf16_to_f\(e_f_to_bf16|static_cast<float>\(static_cast<_Float16>)",
        code)}
    stored = re.findall(r"\] = (?:e_f_to_bf16|static_cast<_Float16>)\((t\d+)\);", code)
    assert stored and not rounded & set(stored)


def _strided_accesses(code: str) -> list[str]:
    """Array accesses of generated C++ whose index steps more than one element per step of
    the innermost (``omp simd``) loop around them."""
    found = []
    for body in _loops(code):
        var = sympy.Symbol(re.search(r"for \(int64_t (\w+) = ", body).group(1))
        for name, index in re.findall(r"(\w+)\[\((.*?)\)\]", body):
            step = sympy.diff(sympy.sympify(index), var)
            if step not in (0, 1):
                found.append(f"{name}[{index}] steps {step} along {var}")
    return found


def test_a_transposed_value_used_again_is_stored_in_its_readers_order(ecompile, output_code):
    # a layer norm over a transposed input (channels last), transposed back and read by
    # three users (wav2vec2's feature extractor): stored in the permuted view's own order,
    # so every loop walks memory by one element, as the input and the output do
    c, t = 32, 1599

    def fn(x, w, b):
        h = F.layer_norm(x.transpose(1, 2), (c,), w, b).transpose(1, 2)
        return (F.gelu(h) * h + h.exp()).contiguous()

    x = torch.randn(2, c, t)
    w, b = torch.linspace(0.5, 1.5, c), torch.linspace(-0.2, 0.2, c)
    torch.testing.assert_close(ecompile(fn)(x, w, b), fn(x, w, b), rtol=1e-5, atol=1e-5)
    code = "\n".join(output_code).split("wrapper:")[0]
    assert not _strided_accesses(code)
