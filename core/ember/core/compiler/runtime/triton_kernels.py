"""Triton kernels at run time: load a graph's generated module, launch its kernels, and wrap
the graph's callable (eager fallback when a kernel fails to build, CUDA graphs).

``Launcher`` picks a kernel's variant (persistent or looped, int32 or int64 indexing, tiled)
and block configuration for each set of sizes; under ``mode="max-autotune"`` it times the
candidates of ``autotune_candidates`` on the real inputs through ``runtime.autotune``.
"""

from __future__ import annotations

from collections import Counter

import torch

from ember.core.compiler import capture, ir
from ember.core.compiler.codegen.common import py_index
from ember.core.compiler.codegen.triton import PRELUDE, LaunchSpec, kernel_source
from ember.core.compiler.runtime import autotune, cudagraphs, triton_cache
from ember.core.compiler.runtime.triton_libdevice import interpreted
from ember.core.logs import get_logger

log = get_logger("codegen")
fallback_log = get_logger("fallback")

# Process-wide counters (tests read them): graphs and kernels generated.
stats: Counter = Counter()

INT32_LIMIT = 2 ** 31  # buffers or iteration spaces this large take the int64 variant
PERSISTENT_MAX = 1024  # longest row a persistent reduction holds in one tile
MAX_CANDIDATES = 10  # configs max-autotune builds and times per kernel


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def heuristic_config(form: str, xnumel: int, rmax: int, column: bool,
                     tiles: tuple = ()) -> dict:
    """Block sizes and warps for one launch, before (or without) autotuning."""
    interp = interpreted()
    if form == "h":  # a program per chunk of a pointwise stage
        rb = min(1 << 15 if interp else 1024, max(16, _pow2(rmax)))
        return {"XBLOCK": 1, "RBLOCK": rb, "num_warps": 4 if rb >= 512 else 2, "num_stages": 1}
    if tiles and min(tiles) >= 8:
        cap = 128 if interp else 64
        yb, xb = min(cap, _pow2(tiles[0])), min(cap, _pow2(tiles[1]))
        return {"YBLOCK": yb, "XBLOCK": xb, "num_warps": 4, "num_stages": 1, "tiled": True}
    if form == "1d":
        cap = 1 << 15 if interp else 1024
        xb = min(cap, max(16, _pow2(xnumel)))
        return {"XBLOCK": xb, "num_warps": 4 if xb >= 512 else 2, "num_stages": 1}
    if rmax <= PERSISTENT_MAX:
        rb = max(2, _pow2(rmax))
        budget = (1 << 15) if interp else (4096 if column else 2048)
        xb = max(1, min(_pow2(xnumel), budget // rb, 1 << 12 if interp else 64))
        warps = max(1, min(8, xb * rb // 256))
        return {"XBLOCK": xb, "RBLOCK": rb, "num_warps": _pow2(warps), "num_stages": 1,
                "persistent": True}
    if column:
        xb, rb = (min(_pow2(xnumel), 64), 64)
    else:
        xb, rb = 1, 2048
    if interp:
        xb, rb = min(_pow2(xnumel), 1 << 4 if not column else 1 << 8), 1 << 11
    rb = min(rb, _pow2(rmax))
    return {"XBLOCK": xb, "RBLOCK": rb, "num_warps": 8 if xb * rb >= 2048 else 4,
            "num_stages": 1, "persistent": False}


def autotune_candidates(form: str, xnumel: int, rmax: int, column: bool,
                        tiles: tuple = ()) -> list[dict]:
    """max-autotune's search space: the heuristic's pick and at most ``MAX_CANDIDATES - 1``
    others (two in all under the interpreter, to keep CI fast). Every candidate is a separate
    ptxas build on first launch, so the space stays near Inductor's few configs per kernel."""
    base = heuristic_config(form, xnumel, rmax, column, tiles)
    if interpreted():
        other = dict(base)
        other["XBLOCK"] = max(1, base["XBLOCK"] // 2)
        return [base, other] if other != base else [base]
    out = [base]
    if base.get("tiled"):
        for yb, xb in ((32, 32), (64, 64), (32, 128), (128, 32)):
            for w in (4, 8):
                out.append({**base, "YBLOCK": yb, "XBLOCK": xb, "num_warps": w})
        out.append(heuristic_config(form, xnumel, rmax, column))  # untiled
    elif form == "h":
        for rb in (512, 1024, 2048, 4096):
            for w in (4, 8):
                out.append({**base, "RBLOCK": rb, "num_warps": w})
    elif form == "1d":
        for xb in (256, 512, 1024, 2048):
            for w in (4, 8):
                out.append({"XBLOCK": xb, "num_warps": w, "num_stages": 1})
    elif base["persistent"]:
        rb = base["RBLOCK"]
        for xb in (1, 4, 16, 64):
            if xb * rb <= 16384:
                for w in (4, 8) if xb * rb >= 1024 else (1, 4):
                    out.append({**base, "XBLOCK": xb, "num_warps": w})
    else:
        for xb, rb, w, stages in ((1, 1024, 4, 1), (1, 2048, 8, 1), (1, 4096, 8, 1),
                                  (1, 2048, 8, 2), (4, 512, 8, 1), (8, 256, 4, 2),
                                  (32, 64, 4, 1), (64, 64, 8, 1), (64, 32, 4, 2)):
            out.append({**base, "XBLOCK": xb, "RBLOCK": rb, "num_warps": w, "num_stages": stages})
    def fits(c):  # no block wider than the sizes it covers (those time as the smaller one)
        if c.get("tiled"):
            return c["YBLOCK"] <= _pow2(tiles[0]) and c["XBLOCK"] <= _pow2(tiles[1])
        return form == "h" or c["XBLOCK"] <= _pow2(xnumel)

    unique = [base]
    for c in out[1:]:
        if c not in unique and fits(c):
            unique.append(c)
    return unique[:MAX_CANDIDATES]


class Launcher:
    """Calls one generated kernel: picks the variant and config for the sizes, computes the grid.

    Arguments are the kernel's tensors then its size symbols (``spec.args``).
    """

    def __init__(self, module, spec: LaunchSpec, source: str, tune: bool):
        self.module, self.spec, self.tune = module, spec, tune
        self.name = spec.name
        self.n_tensors = spec.n_tensors
        self.source = source
        syms = ", ".join(spec.syms)
        rn = "".join(f"{py_index(r)}, " for r in spec.rnumels)
        tn = "".join(f"{py_index(t)}, " for t in spec.tiles)
        self._numels = eval(f"lambda {syms}: ({py_index(spec.xnumel)}, ({rn}), "
                            f"({tn}))")
        self.configs: dict = {}

    def _fn(self, cfg: dict, index64: bool):
        tag = "p" if self.spec.form == "1d" or cfg.get("persistent") else "l"
        tag = "t" if cfg.get("tiled") else "h" if self.spec.form == "h" else tag
        return getattr(self.module, f"{self.name}_{tag}{64 if index64 else 32}")

    def _launch(self, cfg: dict, index64: bool, args, xnumel, rnumels, tiles=()) -> None:
        fn = self._fn(cfg, index64)
        if cfg.get("tiled"):
            grid = (-(-tiles[0] // cfg["YBLOCK"]) * -(-tiles[1] // cfg["XBLOCK"]),)
            fn[grid](*args, *tiles, YBLOCK=cfg["YBLOCK"], XBLOCK=cfg["XBLOCK"],
                     num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
            return
        grid = (-(-xnumel // cfg["XBLOCK"]),)
        if self.spec.form == "h":
            grid = (sum(-(-r // cfg["RBLOCK"]) if c else 1
                        for r, c in zip(rnumels, self.spec.chunked)),)
        kw = {"XBLOCK": cfg["XBLOCK"], "num_warps": cfg["num_warps"],
              "num_stages": cfg["num_stages"]}
        if self.spec.form != "1d":
            kw["RBLOCK"] = cfg["RBLOCK"]
        fn[grid](*args, xnumel, *rnumels, **kw)

    def _choose(self, args, xnumel, rnumels, tiles, index64) -> dict:
        rmax = max(rnumels) if rnumels else 1
        form, column = self.spec.form, self.spec.column
        if not self.tune:
            return heuristic_config(form, xnumel, rmax, column, tiles)
        tensors = args[:self.n_tensors]
        device = tensors[0].device if tensors else torch.device("cpu")
        sync = torch.cuda.synchronize if device.type == "cuda" else None
        work = [t.clone() if isinstance(t, torch.Tensor) else t for t in args]

        def measure(cfg):
            return autotune.timeit(lambda: self._launch(cfg, index64, work, xnumel, rnumels,
                                                        tiles),
                                   sync=sync, warmup=1, reps=3 if interpreted() else 10)

        where = "interpreter" if interpreted() else (
            torch.cuda.get_device_name(device) if device.type == "cuda" else str(device))
        key = [self.source, self.name, str((xnumel, rnumels, index64)),
               str([t.dtype for t in tensors]), where]
        return autotune.tune(key, autotune_candidates(form, xnumel, rmax, column, tiles), measure,
                             desc=f"autotune {self.name}")

    def __call__(self, *args) -> None:
        xnumel, rnumels, tiles = self._numels(*args[self.n_tensors:])
        if xnumel == 0:
            return
        index64 = xnumel * max(rnumels, default=1) >= INT32_LIMIT or any(
            t.untyped_storage().nbytes() // t.element_size() >= INT32_LIMIT
            for t in args[:self.n_tensors])
        key = (xnumel, rnumels, tiles, index64)
        cfg = self.configs.get(key)
        if cfg is None:
            cfg = self.configs[key] = self._choose(args, xnumel, rnumels, tiles, index64)
        self._launch(cfg, index64, args, xnumel, rnumels, tiles)


def load_kernels(kernels: list, buffers: dict, options: dict) -> tuple[dict, str]:
    """Generate, cache and import one graph's kernels: ({name: (launcher, arg spec)}, source)."""
    stats["graphs"] += 1
    if not kernels:
        return {}, ""
    parts, specs = [], []
    for k in kernels:
        src, spec = kernel_source(k, buffers)
        parts.append(src)
        specs.append(spec)
    source = PRELUDE + "\n\n" + "\n\n".join(parts)
    module = triton_cache.load(source)
    stats["kernels"] += len(kernels)
    tune = options.get("mode") in ("max-autotune", "max-autotune-no-cudagraphs")
    libs = {}
    for spec, src in zip(specs, parts):
        libs[spec.name] = (Launcher(module, spec, src, tune), spec.args)
    log.debug("triton: %d kernels in %s", len(kernels), getattr(module, "__file__", "?"))
    return libs, source


def check_device(device: str) -> str:
    """The device type Triton kernels run on for a graph on ``device``, or Unsupported."""
    try:
        import triton  # noqa: F401
    except ImportError as e:
        raise ir.Unsupported(f"Triton codegen needs triton: {e}") from e
    if device == "cuda":
        return device
    if device == "cpu" and interpreted():
        return device
    if device == "cpu":
        raise ir.Unsupported("Triton codegen for CPU tensors runs only in Triton's interpreter "
                             "(TRITON_INTERPRET=1, set before triton is imported)")
    raise ir.Unsupported(f"Triton codegen has no target for {device!r} tensors")


def finish(call, gm, options: dict, device: str):
    """Wrap a graph's compiled callable: fall back to eager if a kernel fails to build on the
    first call (Triton compiles lazily; strict mode raises), CUDA graphs for reduce-overhead."""
    strict = bool(options.get("strict", False))
    state: dict = {}

    def run(args):
        fn = state.get("fn")
        if fn is not None:
            return fn(args)
        try:
            out = call(args)
        except Exception as e:
            if strict:
                raise
            fallback_log.warning("graph runs in eager ATen: a Triton kernel failed on its first "
                                 "launch: %s: %s", type(e).__name__, e)
            capture.record_fallback(f"<graph: {type(e).__name__}: {e}>")
            state["fn"] = lambda a: gm.forward(*a)
            return gm.forward(*args)
        state["fn"] = call
        return out

    run._boxed_call = True
    if device == "cuda" and options.get("mode") == "reduce-overhead":
        return cudagraphs.wrap(run, gm)
    return run
