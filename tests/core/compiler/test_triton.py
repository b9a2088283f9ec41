"""Triton codegen, run on CPU by Triton's interpreter: compiler v1's op- and model-level suites
(every case of ``test_compiler_ops.py`` and ``test_compiler_models.py``) with
``options={"codegen": "triton", "strict": True}``, plus Triton-only paths (int64 indexing,
looped reductions, autotuning, the disk cache).

``TRITON_INTERPRET`` must be set before triton is imported, so unless this process was started
with it, the tests run in a child pytest process that is.
"""

import importlib.util
import inspect
import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from ember.core.compiler import compile as ember_compile
from ember.core.compiler import ir
from ember.core.compiler.pipeline import compile_graph
from ember.core.compiler.runtime import autotune

pytest.importorskip("triton")

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
interpreted = pytest.mark.skipif(not INTERPRETED, reason="runs in the interpreter subprocess")
HERE = Path(__file__).parent


def _in_interpreter(marks: str) -> None:
    env = dict(os.environ, TRITON_INTERPRET="1")
    args = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", __file__]
    done = subprocess.run(args + ["-m", marks], env=env, capture_output=True, text=True,
                          timeout=1200, cwd=HERE.parents[2])
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert " passed" in done.stdout


@pytest.mark.skipif(INTERPRETED, reason="this process already interprets Triton")
def test_triton_suite_in_an_interpreter_subprocess():
    _in_interpreter("not slow")


@pytest.mark.slow
@pytest.mark.skipif(INTERPRETED, reason="this process already interprets Triton")
def test_slow_triton_cases_in_an_interpreter_subprocess():
    _in_interpreter("slow")


@pytest.mark.skipif(INTERPRETED, reason="checks the path without the interpreter")
def test_cpu_tensors_without_interpreter_fall_back_or_raise_in_strict_mode():
    gm = torch.fx.symbolic_trace(lambda x: x * 2)
    x = torch.randn(4)
    with pytest.raises(ir.Unsupported, match="TRITON_INTERPRET"):
        compile_graph(gm, [x], options={"codegen": "triton", "strict": True})
    call = compile_graph(gm, [x], options={"codegen": "triton"})
    torch.testing.assert_close(call([x]), x * 2)


# ------------------------------------------------------------ compiler v1's suites, in Triton

def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"ember_v1_{name}", HERE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


V1 = {name: _module(name) for name in ("test_compiler_ops", "test_compiler_models")}


def _cases():
    """(id, test function, parameter values, is slow) for every v1 test, expanded."""
    out = []
    for mod_name, mod in V1.items():
        for name, fn in sorted(vars(mod).items()):
            if not name.startswith("test_") or not callable(fn):
                continue
            marks = getattr(fn, "pytestmark", [])
            slow = any(m.name == "slow" for m in marks)
            grids = [m for m in marks if m.name == "parametrize"]
            names, values = [], [[]]
            for m in grids:
                argnames = m.args[0]
                argnames = [a.strip() for a in argnames.split(",")] if isinstance(
                    argnames, str) else list(argnames)
                names += argnames
                values = [v + ([p] if len(argnames) == 1 else list(p))
                          for v in values for p in m.args[1]]
            for vals in values:
                label = "-".join(str(v).replace("torch.", "") for v in vals)
                case_id = f"{mod_name[len('test_compiler_'):]}::{name}" + (f"[{label}]"
                                                                         if label else "")
                out.append((case_id, fn, dict(zip(names, vals)), slow))
    return out


CASES = _cases()
# v1 cases that do not run in Triton, with the reason (empty: every case runs in Triton).
NOT_IN_TRITON: dict[str, str] = {
    "ops::test_as_strided_of_a_view_of_an_intermediate_reads_eagers_storage": "its graphs run "
        "in eager by design (ember's default compile, no Triton code)",
    "ops::test_index_put_is_a_scatter_kernel": "checks the C++ generator's scatter kernel; "
                                               "Triton leaves index_put to ATen",
    "ops::test_16bit_matmuls_run_as_float32_gemms": "checks the C++ generator's code for the "
                                                    "float32 GEMM calls",
    "ops::test_bfloat16_store_rounds_like_eager_bitwise": "checks the C++ prelude's bfloat16 "
                                                          "store bit for bit; the Triton "
                                                          "interpreter converts toward zero",
    "ops::test_bfloat16_round_trip_in_a_kernel_is_bitwise_eager": "checks the C++ "
        "prelude's bfloat16 round trip bit for bit; the Triton interpreter converts toward "
        "zero",
    "ops::test_bfloat16_values_stored_as_bfloat16_keep_their_bits": "checks the C++ "
        "generator's bfloat16 stores (their code and bits)",
    "ops::test_conversion_to_16bit_rounds_inside_fused_kernels[bfloat16]": "compares "
        "bfloat16 roundings bit for bit; the Triton interpreter converts toward zero",
    "ops::test_half_mean_rounds_once_like_eager[bfloat16]": "compares bfloat16 results bit "
                                                            "for bit; the Triton interpreter "
                                                            "converts float32 to bfloat16 "
                                                            "toward zero (half of all values "
                                                            "an ulp below eager's); float16 "
                                                            "runs",
    **{f"ops::test_multiply_adds_round_once_like_eager[{d}]": "compares fused multiply-adds "
       "bit for bit; the Triton interpreter computes tl.fma as a multiply and an add"
       for d in ("float32", "float64", "bfloat16")},
}
# Big shapes that the interpreter takes long over (they run with `-m slow`).
SLOW_IN_INTERPRETER = {"ops::test_large_parallel_reductions"}


@pytest.fixture
def tcompile():
    """ember.core.compile with Triton codegen, strict: any compiler failure raises."""
    def make(fn, **kwargs):
        torch._dynamo.reset()
        options = {"strict": True, "codegen": "triton", **kwargs.pop("options", {})}
        return ember_compile(fn, options=options, **kwargs)
    yield make
    torch._dynamo.reset()


def test_every_v1_case_is_listed():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 40  # the expansion found the suites' parametrised cases
    assert set(NOT_IN_TRITON) <= set(ids)
    print(f"{len(ids) - len(NOT_IN_TRITON)} of {len(ids)} v1 cases run in Triton")


def _param(case):
    case_id, fn, params, slow = case
    slow = slow or case_id.split("[")[0] in SLOW_IN_INTERPRETER
    marks = [pytest.mark.slow] if slow else []
    if case_id in NOT_IN_TRITON:
        marks.append(pytest.mark.skip(reason=NOT_IN_TRITON[case_id]))
    return pytest.param(fn, params, id=case_id, marks=marks)


@interpreted
@pytest.mark.parametrize("fn, params", [_param(c) for c in CASES])
def test_v1_case_in_triton(fn, params, tcompile, matches):
    from ember.core.compiler.runtime import triton_kernels

    torch.manual_seed(0)
    before = triton_kernels.stats["graphs"]
    fixtures = {"ecompile": tcompile, "matches": matches}
    wanted = inspect.signature(fn).parameters
    fn(**{k: v for k, v in {**fixtures, **params}.items() if k in wanted})
    assert triton_kernels.stats["graphs"] > before  # the graphs went through Triton codegen


ON_CUDA = not INTERPRETED and torch.cuda.is_available()
on_cuda = [pytest.mark.cuda, pytest.mark.skipif(not ON_CUDA, reason="needs a CUDA device "
                                                "(the interpreter runs the CPU variant)")]
# Triton-only paths run in the interpreter on CPU tensors and, where there is one, on the GPU.
interpreted_or_cuda = pytest.mark.skipif(not (INTERPRETED or ON_CUDA),
                                         reason="runs in the interpreter subprocess or on CUDA")
DEVICE = "cuda" if ON_CUDA else "cpu"


# v1 cases that also index out of range in eager on purpose: eager's CUDA indexing answers with a
# device-side assert, which ends the process's CUDA context (our own check: the test below).
BAD_INDEX_CASES = {
    "ops::test_single_index_gather_matches_eager_and_checks_its_index",
    "ops::test_single_index_scatter_matches_eager_and_checks_its_index",
    "ops::test_cross_entropy_through_the_fused_gather_keeps_ignore_index",
    "ops::test_gather_index_out_of_range_raises_index_error",
    "ops::test_every_index_check_of_a_graph_is_kept",
    "ops::test_index_put_out_of_range_raises_index_error",
}


def _cuda_param(case):
    param = _param(case)
    if case[0].split("[")[0] in BAD_INDEX_CASES:
        return pytest.param(*param.values, id=param.id, marks=[*param.marks, pytest.mark.skip(
            reason="indexes out of range on purpose: a device-side assert on CUDA")])
    return param


@pytest.mark.parametrize("fn, params", [_cuda_param(c) for c in CASES])
@on_cuda[0]
@on_cuda[1]
def test_v1_case_on_cuda(fn, params, tcompile, matches):
    """The same v1 cases on a GPU: every tensor and module is made on the CUDA device."""
    from ember.core.compiler.runtime import triton_kernels

    torch.manual_seed(0)
    before = triton_kernels.stats["graphs"]
    fixtures = {"ecompile": tcompile, "matches": matches}
    wanted = inspect.signature(fn).parameters
    with torch.device("cuda"):
        fn(**{k: v for k, v in {**fixtures, **params}.items() if k in wanted})
    assert triton_kernels.stats["graphs"] > before


@on_cuda[0]
@on_cuda[1]
def test_bad_index_on_cuda_raises_index_error():
    """An out-of-range gather index raises our IndexError from the wrapper's check (eager's CUDA
    indexing would end in a device-side assert); run in a child so that a regression to a
    device-side assert cannot end this process's CUDA context."""
    code = ("import torch, ember.core\n"
            "f = ember.core.compile(lambda x, i: x[i] * 2, options={'strict': True})\n"
            "x = torch.randn(5, 3, device='cuda')\n"
            "print(f(x, torch.tensor([1, 4], device='cuda')).sum().item(), flush=True)\n"
            "f(x, torch.tensor([1, 7], device='cuda'))\n"
            "torch.cuda.synchronize()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode != 0 and done.stdout.strip(), done.stdout + done.stderr[-2000:]
    assert "IndexError: index: an index along dim 0 is outside [-5, 5)" in done.stderr, \
        done.stderr[-2000:]


@on_cuda[0]
@on_cuda[1]
@pytest.mark.parametrize("dtype, tol", [(torch.float16, 5e-3), (torch.bfloat16, 3e-2)])
def test_amp_transformer_on_cuda_matches_eager(dtype, tol):
    """Two pre-norm encoder layers under autocast, as in ``ember bench zoo``: their fused
    residual + layer_norm kernels once reloaded a stored row without a barrier (0.2 off)."""
    from ember.core.nn import TransformerEncoderLayer

    torch.manual_seed(0)
    model = torch.nn.Sequential(*(TransformerEncoderLayer(256, 4, 1024, dropout=0.0,
                                                          batch_first=True, norm_first=True)
                                  for _ in range(2))).cuda().eval()
    compiled = ember_compile(model, options={"strict": True})
    with torch.no_grad(), torch.autocast("cuda", dtype=dtype):
        for _ in range(3):
            x = torch.randn(8, 128, 256, device="cuda")
            ref, out = model(x).float(), compiled(x).float()
            assert (out - ref).abs().max() <= tol * ref.abs().max()


@on_cuda[0]
@on_cuda[1]
def test_torch_sdpa_in_float16_on_cuda_compiles(tcompile, matches):
    """torch's flash attention on CUDA returns no debug mask where its fake kernel makes an
    empty one: the wrapper passes the undefined output through (it failed and fell back)."""
    q = torch.randn(2, 4, 32, 64, device="cuda", dtype=torch.float16)
    f = lambda q: F.scaled_dot_product_attention(q, q * 0.5, q) * 2
    matches(tcompile(f)(q), f(q), atol=2e-3, rtol=2e-3)


# ------------------------------------------------------------ Triton-only paths

@interpreted_or_cuda
def test_int64_indexing_variant_matches(tcompile, matches, monkeypatch):
    from ember.core.compiler.runtime import triton_kernels

    monkeypatch.setattr(triton_kernels, "INT32_LIMIT", 16)  # every launch takes int64 indices
    x, w = torch.randn(6, 40, device=DEVICE), torch.randn(40, device=DEVICE)
    f = lambda x, w: (x * w + 1, torch.softmax(x, -1), x.sum(0), x.amax())
    matches(tcompile(f)(x, w), f(x, w), atol=1e-5, rtol=1e-5)


@interpreted_or_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_looped_reductions_match_persistent_ones(tcompile, matches, monkeypatch, dtype):
    from ember.core.compiler.runtime import triton_kernels

    x = (torch.randn(5, 37, device=DEVICE) * 10).to(dtype)
    f = lambda x: (x.sum(-1), x.amax(-1), x.amin(0), x.sum(), (x - x.amax(-1, keepdim=True)) * 2)
    if dtype.is_floating_point:
        f = lambda x: (x.sum(-1), x.amax(-1), x.amin(0), torch.softmax(x, -1), x.var(0),
                       x.sum(), x.prod(-1), (x > 0).any(-1))
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    persistent = tcompile(f)(x)
    monkeypatch.setattr(triton_kernels, "PERSISTENT_MAX", 4)  # rows of 37 now loop
    looped = tcompile(f)(x)
    ref = f(x)
    if dtype == torch.bfloat16:
        # a product of 37 terms, seed-dependent: ours may be several percent off eager's; it
        # must be no further from the float64 product than eager's plus one bfloat16 ulp
        # (Triton's interpreter truncates float32 -> bfloat16 where a GPU rounds to nearest)
        exact = x.double().prod(-1)
        err = lambda t: (t.double() - exact).abs()
        for out in (persistent, looped):
            assert (err(out[6]) <= err(ref[6]) + exact.abs() * 2**-7).all()
        persistent, looped, ref = (t[:6] + t[7:] for t in (persistent, looped, ref))
    matches(persistent, ref, atol=tol, rtol=tol)
    matches(looped, ref, atol=tol, rtol=tol)


@interpreted_or_cuda
def test_a_stage_reading_an_earlier_stores_is_fenced(tcompile, matches, monkeypatch):
    """tanh(x) + y is an output and layer_norm's input: the looped variant stores it in one
    stage and reloads it in the next, so a barrier must separate them (without one, other
    threads' stores were not yet visible on a GPU and the AMP transformer went wrong); the
    persistent variant reuses the stored values from registers and needs none."""
    from ember.core.compiler.runtime import triton_cache

    sources = []
    load = triton_cache.load
    monkeypatch.setattr(triton_cache, "load", lambda src: sources.append(src) or load(src))
    f = lambda x, y: (torch.tanh(x) + y, F.layer_norm(torch.tanh(x) + y, (300,)))
    for rows in (4, 33):
        x, y = torch.randn(rows, 300, device=DEVICE), torch.randn(rows, 300, device=DEVICE)
        for _ in range(3):
            matches(tcompile(f)(x, y), f(x, y), atol=1e-5, rtol=1e-5)
    variants = {}
    for fn in "\n".join(sources).split("@triton.jit\n")[1:]:
        variants[fn.split("(")[0].removeprefix("def ")] = fn
    looped = [src for name, src in variants.items() if name.endswith("_l32")]
    persistent = [src for name, src in variants.items() if name.endswith("_p32")
                  and name.replace("_p32", "_l32") in variants]
    assert looped and all(src.count("tl.debug_barrier()") == 1 for src in looped)
    stage1 = looped[0].index("# stage 1")
    assert looped[0].rindex("tl.debug_barrier()", 0, stage1) > looped[0].index("# stage 0")
    assert persistent and all("tl.debug_barrier()" not in src for src in persistent)


@interpreted_or_cuda
@pytest.mark.parametrize("mode", ["default", "max-autotune"])
def test_independent_stages_without_outer_loops_spread_over_programs(tcompile, matches,
                                                                     monkeypatch, mode):
    """A full reduction and unrelated pointwise loops in one kernel (as the AMP weight casts
    beside an embedding's index check): the ``h`` form gives each RBLOCK chunk of a
    pointwise stage its own program (the ``2d`` form ran the whole kernel as one)."""
    from ember.core.compiler.runtime import triton_kernels

    grids = []
    launch = triton_kernels.Launcher._launch

    def spy(self, cfg, index64, args, xnumel, rnumels, tiles=()):
        if self.spec.form == "h":
            grids.append((self.spec.chunked, rnumels, cfg["RBLOCK"]))
        return launch(self, cfg, index64, args, xnumel, rnumels, tiles)

    monkeypatch.setattr(triton_kernels.Launcher, "_launch", spy)
    f = lambda x, a, b: (x.sum(), a * 2 - 1, b.t() + 1, x.amax(), b.exp())
    x = torch.randn(5000, device=DEVICE)
    a, b = torch.randn(300, 41, device=DEVICE), torch.randn(77, 5, device=DEVICE)
    matches(tcompile(f, mode=mode)(x, a, b), f(x, a, b), atol=1e-4, rtol=1e-5)
    assert grids, "no kernel took the h form"
    chunked, rnumels, rblock = grids[-1]
    assert False in chunked and chunked.count(True) >= 2  # the reductions: one program
    assert rnumels[chunked.index(False)] == 5000


@interpreted_or_cuda
@pytest.mark.parametrize("mode", ["default", "max-autotune"])
def test_transposing_copies_use_2d_tiles(tcompile, matches, monkeypatch, mode):
    from ember.core.compiler.runtime import triton_kernels

    tiled = []
    pick = triton_kernels.Launcher._fn

    def spy(self, cfg, index64):
        tiled.append(bool(cfg.get("tiled")))
        return pick(self, cfg, index64)

    monkeypatch.setattr(triton_kernels.Launcher, "_fn", spy)
    # y.t() + 1 alone is stored in y's memory order (eager's strides): no transposition
    f = lambda x, y: (x.transpose(1, 2).contiguous() * 2, y.t().contiguous() + 1, x + 1)
    x = torch.randn(3, 37, 21, device=DEVICE)
    y = torch.randn(19, 45, dtype=torch.float64, device=DEVICE)
    matches(tcompile(f, mode=mode)(x, y), f(x, y))
    assert tiled.count(True) >= 2 and False in tiled  # the plain add is not tiled


@interpreted
def test_reduce_overhead_on_cpu_tensors_runs_without_cuda_graphs(tcompile, matches):
    from ember.core.compiler.runtime import cudagraphs

    recorded = cudagraphs.stats["recorded"]
    f = lambda x: torch.softmax(x * 2, -1).sum(0)
    compiled = tcompile(f, mode="reduce-overhead", dynamic=True)
    for shape in [(4, 9), (6, 3)]:
        x = torch.randn(shape)
        matches(compiled(x), f(x))
    assert cudagraphs.stats["recorded"] == recorded


@interpreted
def test_source_is_cached_on_disk_and_reused(tcompile, matches):
    from ember.core.compiler.runtime import cache, triton_cache

    f = lambda x: torch.tanh(x) * 3 - x.mean(-1, keepdim=True)
    x = torch.randn(3, 9)
    matches(tcompile(f)(x), f(x))
    files = sorted((cache.cache_dir() / "triton").rglob("*.py"))
    assert files
    mtimes = {p: p.stat().st_mtime_ns for p in files}
    triton_cache._loaded.clear()  # as in a second process: import from the disk cache
    matches(tcompile(f)(x), f(x))
    assert {p: p.stat().st_mtime_ns for p in files} == mtimes
    assert "@triton.jit" in files[-1].read_text()


@interpreted
def test_max_autotune_times_candidates_then_hits_the_disk_cache(tcompile, matches):
    from ember.core.compiler.runtime import triton_kernels

    x = torch.randn(12, 50)
    f = lambda x: (torch.softmax(x, -1), x * 2 + 1)
    assert len(triton_kernels.autotune_candidates("2d", 12, 50, False)) == 2  # interpreter
    searches, hits = autotune.stats["searches"], autotune.stats["cache_hits"]
    kernels = triton_kernels.stats["kernels"]
    matches(tcompile(f, mode="max-autotune")(x), f(x))
    n = triton_kernels.stats["kernels"] - kernels
    assert n >= 1 and autotune.stats["searches"] - searches == n  # one search per kernel
    matches(tcompile(f, mode="max-autotune")(x), f(x))  # recompiled: winners from disk
    assert autotune.stats["searches"] - searches == n
    assert autotune.stats["cache_hits"] - hits == n
    matches(tcompile(f)(x), f(x))  # default mode does not tune
    assert autotune.stats["searches"] - searches == n


@interpreted
def test_prim_without_a_template_falls_back_to_eager(monkeypatch):
    from ember.core.compiler.codegen import triton as triton_codegen

    templates = dict(triton_codegen.TEMPLATES)
    del templates["erf"]
    monkeypatch.setattr(triton_codegen, "TEMPLATES", templates)
    x = torch.randn(4, 5)
    f = lambda x: torch.erf(x) * 2
    torch._dynamo.reset()
    torch.testing.assert_close(ember_compile(f, options={"codegen": "triton"})(x), f(x))
    torch._dynamo.reset()
    with pytest.raises(Exception, match="no template for prim 'erf'"):
        ember_compile(f, options={"codegen": "triton", "strict": True})(x)
    torch._dynamo.reset()


@interpreted
def test_kernel_that_fails_to_build_falls_back_to_eager(monkeypatch):
    from ember.core.compiler.runtime import triton_kernels

    def broken(self, *args):
        raise RuntimeError("simulated Triton compile error")

    monkeypatch.setattr(triton_kernels.Launcher, "__call__", broken)
    x = torch.randn(4, 5)
    f = lambda x: torch.relu(x) + 1
    torch._dynamo.reset()
    out = ember_compile(f, options={"codegen": "triton"})(x)
    torch.testing.assert_close(out, f(x))
    torch._dynamo.reset()
    with pytest.raises(Exception, match="simulated"):
        ember_compile(f, options={"codegen": "triton", "strict": True})(x)
    torch._dynamo.reset()


def test_autotune_candidates_cover_blocks_warps_and_stages():
    from ember.core.compiler.runtime import triton_kernels

    if INTERPRETED:
        pytest.skip("the GPU search space is checked without the interpreter")
    for form, r in (("1d", 1), ("2d", 300), ("2d", 5000)):
        cands = triton_kernels.autotune_candidates(form, 4096, r, False)
        assert len(cands) > 4
        keys = set(itertools.chain.from_iterable(c.items() for c in cands))
        assert {k for k, _ in keys} >= {"XBLOCK", "num_warps", "num_stages"}
        assert len({c["XBLOCK"] for c in cands}) > 1 and len({c["num_warps"] for c in cands}) > 1
    looped = triton_kernels.autotune_candidates("2d", 4096, 5000, False)
    assert len({c["RBLOCK"] for c in looped}) > 1 and len({c["num_stages"] for c in looped}) > 1
    assert all(not c["persistent"] for c in looped)
    tiled = triton_kernels.autotune_candidates("1d", 4096, 1, False, (256, 256))
    assert tiled[0]["tiled"] and len({(c.get("YBLOCK"), c["XBLOCK"]) for c in tiled}) > 4
    assert any(not c.get("tiled") for c in tiled)  # the untiled kernel competes too


def test_autotune_search_space_stays_small_and_fits_the_sizes():
    """Each candidate is a ptxas build: at most MAX_CANDIDATES per kernel, none with a block
    wider than the sizes (a 64 x 300 graph's max-autotune ran past 5 minutes with 37 each)."""
    from ember.core.compiler.runtime import triton_kernels

    if INTERPRETED:
        pytest.skip("the GPU search space is checked without the interpreter")
    cases = [("1d", 4096, 1, False, ()), ("1d", 100, 1, False, ()), ("2d", 64, 300, False, ()),
             ("2d", 4096, 5000, False, ()), ("2d", 4096, 5000, True, ()), ("h", 1, 9000, False, ()),
             ("1d", 4096, 1, False, (300, 20))]
    for form, xnumel, r, column, tiles in cases:
        cands = triton_kernels.autotune_candidates(form, xnumel, r, column, tiles)
        assert 1 <= len(cands) <= triton_kernels.MAX_CANDIDATES
        assert cands[0] == triton_kernels.heuristic_config(form, xnumel, r, column, tiles)
        for c in cands[1:]:
            if c.get("tiled"):
                assert c["YBLOCK"] <= 512 and c["XBLOCK"] <= 32
            elif form != "h":
                assert c["XBLOCK"] <= triton_kernels._pow2(xnumel)
