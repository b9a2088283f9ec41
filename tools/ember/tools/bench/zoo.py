"""`ember bench zoo`: our packages' models under eager, Inductor and Ember.

Every model runs inference and one training step (forward, backward, SGD update) in float32
and in AMP (bfloat16 autocast on CPU, float16 on CUDA), each compiled backend checked
against eager in the same precision. Headline metrics per backend: the share of runs that
compile and match eager, and 0.75 x AMP + 0.25 x float32 of the geometric-mean speed-ups.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ember.tools.bench import zoo_detections
from ember.tools.bench.compile import _fresh_caches
from ember.tools.bench.harness import BenchResult, _report, compare_timings

BACKENDS = ("inductor", "ember")
PRECISIONS = ("float32", "amp")
MODES = ("inference", "training")
# Largest |compiled - eager| allowed, relative to the largest |eager| value of each tensor.
TOLERANCE = {("float32", "inference"): 1e-3, ("float32", "training"): 5e-3,
             ("amp", "inference"): 5e-2, ("amp", "training"): 1e-1}
# A float32 training step that fails the rule above is judged in float64 (`_arbitrated`):
# the backend's float64 step within FLOAT64_TOL of eager's, and the float32 tensors the rule
# rejects at cosine similarity MIN_COSINE or more with eager's.
FLOAT64_TOL = 1e-7
MIN_COSINE = 0.998
# An AMP tensor this small (a loss) is judged with a wider RMS multiplier (`_multiplier`).
FEW_ELEMENTS = 10


@dataclass
class Workload:
    """A model with inputs; ``loss`` maps the model's output to a scalar for the training step."""

    model: torch.nn.Module
    args: tuple
    loss: Callable[[object], torch.Tensor]
    train_args: tuple | None = None  # inputs for training when they differ (targets)


def _mean_square(out) -> torch.Tensor:
    return sum(t.float().pow(2).mean() for t in _tensors(out))


def _classifier(name: str, quick: bool) -> Workload:
    from ember.vision import models

    n, size = (2, 32) if quick else (4, 96)
    model = models.get_model(name, num_classes=10)
    x = torch.randn(n, 3, size, size)
    y = torch.arange(n) % 10
    return Workload(model, (x,), lambda out: F.cross_entropy(out.float(), y.to(out.device)))


def _retinanet(quick: bool) -> Workload:
    from ember.vision.models import retinanet_resnet50_fpn

    size = 64 if quick else 128
    # score_thresh=0 keeps detections from an untrained head, so the comparison has content
    model = retinanet_resnet50_fpn(num_classes=5, min_size=size, max_size=size,
                                   score_thresh=0.0, detections_per_img=20)
    images = [torch.rand(3, size, size) for _ in range(2)]
    zoo_detections.unit_layers(model, (images,))
    targets = [{"boxes": torch.tensor([[4.0, 6.0, size / 2, size / 2 + 3]]),
                "labels": torch.tensor([1])} for _ in images]
    return Workload(model, (images,), lambda out: sum(out.values()), train_args=(images, targets))


def _wav2letter(quick: bool) -> Workload:
    from ember.audio.models import Wav2Letter

    n, frames = (2, 50) if quick else (4, 400)
    model = Wav2Letter(num_classes=29, input_type="power_spectrum", num_features=40)
    return Workload(model, (torch.randn(n, 40, frames),), _mean_square)


def _conformer(quick: bool) -> Workload:
    from ember.audio.models import Conformer

    n, frames, dim = (2, 32, 32) if quick else (4, 200, 144)
    model = Conformer(input_dim=dim, num_heads=4, ffn_dim=dim * 2, num_layers=2,
                      depthwise_conv_kernel_size=15)
    lengths = torch.full((n,), frames, dtype=torch.long)
    return Workload(model, (torch.randn(n, frames, dim), lengths), lambda out: _mean_square(out[0]))


class _TinyLM(torch.nn.Module):
    """Embedding -> ember.core.nn.TransformerEncoderLayer x layers -> vocabulary logits."""

    def __init__(self, vocab: int, dim: int, heads: int, layers: int) -> None:
        super().__init__()
        from ember.core.nn import TransformerEncoderLayer

        self.embed = torch.nn.Embedding(vocab, dim)
        self.layers = torch.nn.ModuleList(
            TransformerEncoderLayer(dim, heads, dim_feedforward=dim * 4, dropout=0.0,
                                    batch_first=True, norm_first=True) for _ in range(layers))
        self.out = torch.nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.out(x)


def _transformer(quick: bool) -> Workload:
    vocab, n, length, dim, heads, layers = ((64, 2, 16, 32, 2, 1) if quick else
                                            (1000, 8, 128, 256, 4, 2))
    tokens = torch.randint(0, vocab, (n, length), generator=torch.Generator().manual_seed(0))
    model = _TinyLM(vocab, dim, heads, layers)
    return Workload(model, (tokens,),
                    lambda out: F.cross_entropy(out.float().flatten(0, 1),
                                                tokens.flatten().to(out.device)))


# name -> (family, builder(quick) -> Workload)
MODELS: dict[str, tuple[str, Callable[[bool], Workload]]] = {
    "transformer (ember.core.nn)": ("text", _transformer),
    "resnet18": ("vision classification", lambda q: _classifier("resnet18", q)),
    "mobilenet_v3_small": ("vision classification",
                           lambda q: _classifier("mobilenet_v3_small", q)),
    "retinanet_resnet50_fpn": ("vision detection", _retinanet),
    "wav2letter": ("audio", _wav2letter),
    "conformer": ("audio", _conformer),
}
QUICK_MODELS = ("transformer (ember.core.nn)",)


def _tensors(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        return [t for k in sorted(out) for t in _tensors(out[k])]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _tensors(o)]
    return []


def _tensor_rel_error(x: torch.Tensor, y: torch.Tensor) -> float:
    """max|x - y| / max|y| for two float tensors of one shape (the denominator at least 1e-6);
    inf for NaN."""
    if not x.numel():
        return 0.0
    x, y = x.detach().double(), y.detach().double()
    err = float((x - y).abs().max()) / max(float(y.abs().max()), 1e-6)
    return math.inf if math.isnan(err) else err


def _same_structure(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    """Same count and shapes, and integer (and bool) tensors equal."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.shape != y.shape or x.is_floating_point() != y.is_floating_point():
            return False
        if not x.is_floating_point() and not torch.equal(x, y):
            return False
    return True


def _rel_error(got, ref) -> float:
    """Largest max|got - ref| / max|ref| over the tensors; inf when structure or integers differ."""
    a, b = _tensors(got), _tensors(ref)
    if not _same_structure(a, b):
        return math.inf
    return max((_tensor_rel_error(x, y) for x, y in zip(a, b) if x.is_floating_point()),
               default=0.0)


def _matches(got, ref, tol: float) -> bool:
    return _rel_error(got, ref) <= tol


def _map_tensors(obj, fn: Callable[[torch.Tensor], torch.Tensor]):
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, dict):
        return {k: _map_tensors(v, fn) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_map_tensors(v, fn) for v in obj)
    return obj


def _to_double(obj):
    return _map_tensors(obj, lambda t: t.double() if t.is_floating_point() else t)


def _float64_step(work: Workload, initial: dict, mode: str, device: str,
                  backend: str = "eager"):
    """The same step in float64 (no autocast) under ``backend``, or None when it cannot run so."""
    try:
        model = copy.deepcopy(work.model).double()
        model.load_state_dict(initial)
        work64 = dataclasses.replace(work, model=model, args=_to_double(work.args),
                                     train_args=_to_double(work.train_args))
        return _step(work64, _compile(backend, model), mode, "float32", device)()
    except Exception:  # optional for the reference; a failed arbitration for a backend
        return None


def _float64_reference(work: Workload, initial: dict, mode: str, device: str):
    """The same step in float64 eager (no autocast), or None when the model cannot run so."""
    return _float64_step(work, initial, mode, device)


def _rms(t: torch.Tensor) -> float:
    return float(t.detach().double().pow(2).mean().sqrt()) if t.numel() else 0.0


def _rmse(x: torch.Tensor, y: torch.Tensor) -> float:
    return _rms(x.detach().double() - y.detach().double())


def _multiplier(t: torch.Tensor, tol: float) -> float:
    """How much further from float64 than eager a backend may be, per tensor: 2, or 3 for a
    tensor under 1000 elements (where a few rounding flips dominate the RMS) and for AMP
    (tolerances of 2e-2 and up, or a half-precision result); 10 for an AMP tensor of at most
    ``FEW_ELEMENTS`` (a loss: one draw of the model's amplified rounding noise, so two equally
    accurate runs differ by over 3x about a fifth of the time; torch's benchmark runner allows
    its noisiest models the same)."""
    amp = tol >= 2e-2 or t.dtype in (torch.float16, torch.bfloat16)
    if amp and t.numel() <= FEW_ELEMENTS:
        return 10.0
    if t.numel() < 1000 or amp:
        return 3.0
    return 2.0


def _accuracy_failures(result, eager, ref64, tol: float) -> list[str]:
    """Why ``result`` does not match eager, per tensor (empty: it matches); see
    :func:`_accurate` for the rule. Detections not within tol of eager's are compared as sets
    with float64's instead (:mod:`ember.tools.bench.zoo_detections`): where eager itself kept
    other boxes than float64, the RMS test would measure against one swapped box's error."""
    if zoo_detections.is_detections(eager):
        if _rel_error(result, eager) <= tol:
            return []
        return zoo_detections.failures(result, eager, ref64, tol, 3.0 if tol >= 2e-2 else 2.0)
    return [why for _, why in _tensor_failures(result, eager, ref64, tol)]


def _tensor_failures(result, eager, ref64, tol: float) -> list[tuple[int | None, str]]:
    """(tensor index, why) for each tensor of ``result`` that fails :func:`_accurate`'s rule;
    index None when the structure differs."""
    a, b = _tensors(result), _tensors(eager)
    if not _same_structure(a, b):
        return [(None, "structure, shapes or integer values differ from eager's")]
    r = _tensors(ref64) if ref64 is not None else None
    if r is not None and (len(r) != len(b) or any(x.shape != y.shape for x, y in zip(r, b))):
        r = None   # a float64 run that returned something else cannot arbitrate
    floats = [i for i, t in enumerate(b) if t.is_floating_point() and t.numel()]
    # the run's typical magnitude: the floor below for tensors whose true value is ~0
    typical = statistics.median(_rms(r[i]) for i in floats) if r is not None and floats else 0.0
    failures = []
    for i in floats:
        rel = _tensor_rel_error(a[i], b[i])
        if rel <= tol:
            continue
        if r is None:
            failures.append((i, f"tensor {i}: {rel:.3g} from eager (max |diff| / max |eager|), "
                                "no float64 reference"))
            continue
        got_err, eager_err = _rmse(a[i], r[i]), _rmse(b[i], r[i])
        m = _multiplier(b[i], tol)
        floor = tol / 10 * max(_rms(r[i]), typical)
        if not got_err <= m * eager_err + floor:   # NaN fails too
            failures.append((i, f"tensor {i} {tuple(b[i].shape)}: {rel:.3g} from eager; RMS "
                                f"error vs float64 {got_err:.3g} > {m:g} x eager's "
                                f"{eager_err:.3g} + {floor:.3g}"))
    return failures


def _accurate(result, eager, ref64, tol: float) -> bool:
    """Whether every tensor of ``result`` (training: the loss and every gradient) matches eager.

    Per floating tensor: max|result - eager| <= tol * max|eager| (eager decides where the
    two agree), or else, against the same step run in float64 eager (``ref64``; without it
    the first test decides), ``rmse(result, ref64) <= m * rmse(eager, ref64) + floor``:
    ``m`` = 2 (3 for tensors under 1000 elements and AMP, 10 for an AMP loss), ``floor`` =
    tol / 10 times the larger of the tensor's float64 RMS and the median float64 RMS of the
    run's tensors. The RMS test, after the fp64 check of torch's benchmark runners, accepts
    rounding that the model amplifies (batch norm on tiny batches) where eager is as far from
    float64; the median floor accepts noise on tensors whose true value is ~0 (the bias
    gradient of a batch norm that feeds another), where any two float32 runs disagree
    completely. A miscompile moves a tensor by much more than eager's rounding. Structure and
    integers stay exact.
    """
    return not _accuracy_failures(result, eager, ref64, tol)


def _peak(t: torch.Tensor) -> float:
    return float(t.abs().max())


def _cosine(x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = x.detach().double().flatten(), y.detach().double().flatten()
    norms = float(x.norm() * y.norm())
    return float(x @ y) / norms if norms else float(torch.equal(x, y))


def _arbitrated(result, eager, result64, ref64, tol: float) -> bool:
    """A float32 training step that :func:`_accurate` rejected, judged in float64 instead.

    At the zoo's batch of two, one ReLU whose input lies within rounding of zero passes or
    stops its element's gradient depending on the last bit, which moves every gradient before
    it by percents: eager itself does so under half an ulp of noise on one activation. So the
    backend's step compiled in float64 (``result64``), where such a coincidence needs 1e-16,
    must agree with float64 eager (``ref64``): per tensor, max |diff| within
    :data:`FLOAT64_TOL` x the larger of its largest |value| and the run's median largest
    |value| (a gradient whose true value is ~0 is rounding noise in float64 too). And each
    float32 tensor the rule rejected must still point the way eager's does (cosine similarity
    at least :data:`MIN_COSINE`).
    """
    a64, r64 = _tensors(result64), _tensors(ref64)
    if result64 is None or not _same_structure(a64, r64):
        return False
    floats = [(x.detach(), y.detach()) for x, y in zip(a64, r64)
              if x.is_floating_point() and x.numel()]
    typical = statistics.median(_peak(y) for _, y in floats) if floats else 0.0
    if not all(_peak(x - y) <= FLOAT64_TOL * max(_peak(y), typical) for x, y in floats):
        return False  # NaN fails too
    a, b = _tensors(result), _tensors(eager)
    failing = _tensor_failures(result, eager, ref64, tol)
    return all(i is not None and _cosine(a[i], b[i]) >= MIN_COSINE for i, _ in failing)


def accuracy_rule(tolerance: dict) -> str:
    """The accuracy rule for a report's notes, with ``tolerance[(precision, mode)]``."""
    return ("accuracy vs eager in the same precision, per tensor (training: the loss and every "
            "gradient): max |diff| within tol x the tensor's largest |value| ("
            + ", ".join(f"{p} {m} {t:g}" for (p, m), t in tolerance.items())
            + "), or else RMS error against a float64 eager run <= m x eager's own + tol/10 x "
            "max(the tensor's float64 RMS, the run's median tensor RMS), m = 2 (3 under 1000 "
            f"elements or AMP, 10 for an AMP tensor of at most {FEW_ELEMENTS} elements: a "
            "loss); integers and shapes exact. A float32 training step that fails "
            "this is judged in float64 ('yes (float64)': at batch 2 a ReLU input within "
            "rounding of zero flips and moves the gradients before it by percents, eager's "
            f"too): the backend's float64 step within {FLOAT64_TOL:g} x max(the tensor's largest "
            "|value|, the run's median one) of float64 eager's, and each float32 tensor the "
            f"rule rejects at cosine similarity >= {MIN_COSINE:g} with eager's. Detections "
            "not within tol of eager's (no RMS test) count the float64 ones they reproduce "
            "(same label, IoU >= "
            + " / ".join(f"{v:g} {k}" for k, v in zoo_detections.MIN_IOU.items())
            + f"): at most {zoo_detections.MISS_MULTIPLIER:g} x eager's misses "
            "+ 1 per image, scores, masks and keypoints by the RMS rule over the matched ones; no "
            f"verdict where eager reproduces under {zoo_detections.MIN_AGREEMENT:.0%}")


def _autocast(precision: str, device: str):
    if precision == "float32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if device == "cpu" else torch.float16
    return torch.autocast(device, dtype=dtype)


def _compile(backend: str, model: torch.nn.Module):
    if backend == "eager":
        return model
    if backend == "ember":
        import ember.core

        return ember.core.compile(model)
    return torch.compile(model, backend=backend)


def _step(work: Workload, model: torch.nn.Module, mode: str, precision: str, device: str):
    """One call of the benchmarked thing; returns what the accuracy check compares."""
    if mode == "inference":
        def call():
            with torch.no_grad(), _autocast(precision, device):
                return model(*work.args)
        return call
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=1e-3)

    def train():
        opt.zero_grad(set_to_none=True)
        with _autocast(precision, device):
            loss = work.loss(model(*(work.train_args or work.args)))
        loss.backward()
        # a parameter the loss does not reach: None in eager, zeros from a compiled graph
        # (AOTAutograd returns every input's gradient; googlenet's auxiliary heads)
        grads = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
                 for p in params]
        opt.step()
        return [loss.detach()] + grads
    return train


class _FallbackCounter(logging.Handler):
    """Counts the Ember compiler's 'graph runs in eager ATen' warnings."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "eager" in record.getMessage():
            self.count += 1


@contextlib.contextmanager
def _count_fallbacks():
    from ember.core.logs import get_logger

    counter = _FallbackCounter()
    logger = get_logger("fallback")
    logger.addHandler(counter)
    try:
        yield counter
    finally:
        logger.removeHandler(counter)


@contextlib.contextmanager
def _record_ember(entry: dict, backend: str):
    """For Ember: the Dynamo graph breaks and the ops left to eager ATen during the block."""
    if backend != "ember":
        yield
        return
    from torch._dynamo.utils import counters

    from ember.core.compiler import capture

    before = sum(counters["graph_break"].values())
    rec = capture.start_recording()
    try:
        yield
    finally:
        capture.stop_recording()
        entry["graph_breaks"] = sum(counters["graph_break"].values()) - before
        entry["eager_ops"] = sorted({str(o).removeprefix("aten.") for o in rec["fallback_ops"]})


def _case(build: Callable[[bool], Workload], quick: bool, mode: str, precision: str,
          device: str, rounds: int, tol: float | None = None) -> dict:
    """Eager reference and each backend for one (model, mode, precision)."""
    torch.manual_seed(0)
    work = build(quick)
    work.model.to(device).train(mode == "training")
    work.args = _map_tensors(work.args, lambda t: t.to(device))
    work.train_args = _map_tensors(work.train_args, lambda t: t.to(device))
    initial = copy.deepcopy(work.model.state_dict())
    tol = TOLERANCE[(precision, mode)] if tol is None else tol
    _report("float64 reference")
    ref64 = _float64_reference(work, initial, mode, device)
    calls, out = {}, {}
    for backend in ("eager",) + BACKENDS:
        model = work.model if backend == "eager" else copy.deepcopy(work.model)
        model.load_state_dict(initial)
        torch._dynamo.reset()
        entry = {"ok": False, "compile_s": 0.0, "fallbacks": 0, "error": ""}
        try:
            with _count_fallbacks() as fallbacks, _record_ember(entry, backend):
                call = _step(work, _compile(backend, model), mode, precision, device)
                t0 = time.perf_counter()
                result = call()
                entry["compile_s"] = time.perf_counter() - t0 if backend != "eager" else 0.0
                entry["fallbacks"] = fallbacks.count
            entry["ok"] = backend == "eager" or _accurate(result, out["eager"]["result"],
                                                          ref64, tol)
            entry["result"] = result
            calls[backend] = _synchronized(call) if device == "cuda" else call
        except Exception as exc:  # a backend that cannot run this model is a result
            entry["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        out[backend] = entry
    _report(f"timing {len(calls)} backends")
    # none when eager itself failed (a model that cannot run at this input): the row says so
    times = compare_timings(calls, rounds=rounds, min_seconds=0.0 if quick else 0.2) \
        if calls else {}
    for backend, t in times.items():
        out[backend]["time"] = t
    if mode == "training" and precision == "float32" and ref64 is not None:
        # after the timing: the float64 graph must not sit beside the timed one
        for backend in BACKENDS:
            entry = out[backend]
            if "result" in entry and not entry["ok"]:
                _report(f"{backend}: float64 step")
                result64 = _float64_step(work, initial, mode, device, backend)
                entry["ok"] = entry["float64"] = _arbitrated(
                    entry["result"], out["eager"]["result"], result64, ref64, tol)
    return out


def _synchronized(call: Callable[[], object]) -> Callable[[], object]:
    """``call`` then a CUDA synchronize: timings count the GPU's work, not its queueing."""
    def run():
        out = call()
        torch.cuda.synchronize()
        return out
    return run


def _geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else float("nan")


def headline(amp_speedups: list[float], float32_speedups: list[float]) -> float:
    """The zoo's headline speed-up: 0.75 x geomean(AMP) + 0.25 x geomean(float32)."""
    return 0.75 * _geomean(amp_speedups) + 0.25 * _geomean(float32_speedups)


def suite_summary(backend: str, passed: int, total: int, speedups: dict,
                  training: tuple[str, ...] = ("float32",), label: str = "speed-up ") -> str:
    """A model suite's one-line result for ``backend``: runs that matched, the inference
    geomeans and headline, and the training-step geomean of each ``training`` precision;
    ``speedups[(backend, mode, precision)]`` holds the per-run speed-ups."""
    def g(mode, precision):
        return speedups.get((backend, mode, precision), [])

    def mean(mode, precision):  # "-" where no run of that kind matched (or none ran)
        values = g(mode, precision)
        return f"{_geomean(values):.2f}x" if values else "-"

    train = ", ".join(f"{'AMP' if p == 'amp' else p} {mean('training', p)}"
                      for p in training) \
        if len(training) > 1 else mean("training", training[0])
    amp, f32 = g("inference", "amp"), g("inference", "float32")
    head = f"{headline(amp, f32):.2f}x" if amp and f32 else "-"
    return (f"{backend}: {passed}/{total} runs compile and match eager; inference geomean "
            f"{label}AMP {mean('inference', 'amp')}, float32 {mean('inference', 'float32')}, "
            f"headline 0.75 x AMP + 0.25 x float32 = {head}; training step geomean {train}")


def backend_cells(res: dict, backends, eager_t, label: str, errors: list,
                  passed) -> tuple[list, dict]:
    """One case's row cells per backend (ok, speed-up, compile s); records errors and passes
    and returns the cells with each passing backend's time."""
    cells, times = [], {}
    for b in backends:
        r = res[b]
        if r["error"]:
            errors.append(f"{label} {b}: {r['error']}")
        ok = r["ok"] and "time" in r and eager_t is not None
        sp = eager_t / r["time"] if ok else None
        if ok:
            passed[b] += 1
            times[b] = r["time"]
        yes = "yes (float64)" if r.get("float64") else "yes"
        cells += [yes if ok else ("error" if r["error"] else "NO"),
                  sp if sp is not None else "-", r["compile_s"]]
    return cells, times


def _run_cases(names, quick, device, rounds, rows, errors, speedups, passed) -> int:
    """Every model x mode x precision: appends rows/errors/speed-ups, returns the case count."""
    total = 0
    for name in names:
        family, build = MODELS[name]
        for mode in MODES:
            for precision in PRECISIONS:
                _report(f"{name} {mode} {precision}")
                res = _case(build, quick, mode, precision, device, rounds)
                total += 1
                eager_t = res["eager"].get("time")
                row = [name, mode, precision, eager_t * 1e3 if eager_t else "error"]
                cells, times = backend_cells(res, BACKENDS, eager_t, f"{name} {mode} {precision}",
                                             errors, passed)
                for b, t in times.items():
                    speedups[(b, precision)].append(eager_t / t)
                row += cells
                row.append(res["ember"]["fallbacks"])
                rows.append(row)
    return total


SUITES = ("default", "hf", "vision")


def run(quick: bool = False, models: str | None = None, suite: str = "default",
        store: str | None = None) -> BenchResult:
    """All models (quick: one tiny transformer) x inference/training x float32/AMP.

    ``suite="hf"``: the HuggingFace ``transformers`` models of :mod:`ember.tools.bench.zoo_hf`;
    ``suite="vision"``: ember.vision's registered builders (:mod:`ember.tools.bench.zoo_vision`).
    ``store`` (hf and vision): a folder keeping each model's rows, so a suite can run in parts.
    """
    if suite not in SUITES:
        raise ValueError(f"unknown zoo suite {suite!r}; known: {', '.join(SUITES)}")
    if store and suite == "default":
        raise ValueError("--store keeps the hf and vision suites' rows; the default suite has "
                         "no store")
    if suite == "hf":
        from ember.tools.bench import zoo_hf

        return zoo_hf.run(quick=quick, models=models, store=store)
    if suite == "vision":
        from ember.tools.bench import zoo_vision

        return zoo_vision.run(quick=quick, models=models, store=store)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    names = (models or os.environ.get("EMBER_ZOO_MODELS") or "").split(",")
    names = [n for n in names if n] or list(QUICK_MODELS if quick else MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        raise ValueError(f"unknown zoo model(s) {unknown}; known: {list(MODELS)}")
    rounds = 3 if quick else 5
    columns = ["model", "mode", "precision", "eager ms"]
    for b in BACKENDS:
        columns += [f"{b} ok", f"{b} speedup", f"{b} compile s"]
    columns.append("ember fallback graphs")
    rows, errors = [], []
    speedups = {(b, p): [] for b in BACKENDS for p in PRECISIONS}
    passed = {b: 0 for b in BACKENDS}
    # empty on-disk caches for the run: a stale Inductor entry (its key ignores custom ops'
    # fake kernels) once failed a stride assert here that current code does not
    with _fresh_caches():
        total = _run_cases(names, quick, device, rounds, rows, errors, speedups, passed)
    notes = []
    for b in BACKENDS:
        amp, fp32 = _geomean(speedups[(b, "amp")]), _geomean(speedups[(b, "float32")])
        notes.append(f"{b}: {passed[b]}/{total} runs compile and match eager "
                     f"({passed[b] / total:.0%}); geomean speed-up AMP {amp:.2f}x, float32 "
                     f"{fp32:.2f}x; headline 0.75 x AMP + 0.25 x float32 = "
                     f"{headline(speedups[(b, 'amp')], speedups[(b, 'float32')]):.2f}x")
    amp_dtype = "bfloat16" if device == "cpu" else "float16"
    notes.append(f"device {device}; AMP = torch.autocast({device!r}, {amp_dtype}); training = "
                 "forward + backward + SGD step; " + accuracy_rule(TOLERANCE))
    notes.append(f"models: {', '.join(names)}"
                 + ("" if quick or set(names) == set(MODELS) else " (a subset: EMBER_ZOO_MODELS)"))
    notes.append("speedup = eager median / backend median (round-robin, same process); geomeans "
                 "over the runs that matched; compile s = first call, dynamo reset, Ember's and "
                 "Inductor's on-disk caches empty at the start of the run; 'ember fallback "
                 "graphs' = graphs Ember ran in eager ATen during that first call")
    notes += [f"error: {e}" for e in errors]
    title = ("Model zoo: eager vs Inductor vs Ember, inference and one training step, float32 "
             f"and AMP ({'quick: tiny transformer' if quick else 'small inputs'})")
    return BenchResult("zoo", title, columns, rows, notes)
