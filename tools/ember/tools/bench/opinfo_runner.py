"""OpInfo conformance: compile PyTorch's OpInfo catalogue through a backend, compare with
eager.

``check_op(op, variant, backend)`` runs one OpInfo (from
``torch.testing._internal.common_methods_invocations.op_db``) with its CPU sample inputs
through ``torch.compile`` with ``backend`` ("ember": our default, non-strict behaviour, or
any backend torch.compile takes, e.g. "inductor") and returns an ``OpResult``: ``pass``,
``wrong`` (compiled output differs from eager), ``error`` (compiled raises where eager does
not) or ``skip`` (the variant does not apply: dtype unsupported, no samples). A graph our
backend leaves to eager ATen is an ``error`` too: an op we cannot lower runs in eager inside
the compiled graph, so a whole graph in eager is a failure of ours (an exception while
lowering). The test (``tests/core/compiler/test_opinfo.py``) and ``ember bench opinfo``
share it.

Variants: ``float32`` (forward), ``float32_grad`` (forward + gradients of the inputs),
``float32_noncontig`` (forward on non-contiguous views of the same values, NaN in the gaps
between the elements, as PyTorch's own non-contiguous sample test builds them), three
layouts of float32 inputs (forward on the samples with a tensor the layout applies to:
``float32_channels_last``, 4-d and 5-d tensors channels-last; ``float32_transposed``,
tensors of two or more dimensions column-major; ``float32_expanded``, the last dimension a
stride-0 broadcast of its first element), ``bfloat16`` (forward) and ``int64`` (forward). A
floating forward result off eager's by more than the tolerance passes when each element off
eager's is no further from the float64 result than eager's furthest element of that output
(bfloat16: or is the op computed in float32 and rounded once). Inputs keep their layout
(strides, storage offset) and their sharing (one tensor in two samples, views of one
storage), and the memory around a view input must come back as eager leaves it. All the
samples of one op go through one compiled function (Dynamo traces them into one graph: one
compile per op); when that fails, each sample is compiled on its own to name the failing
one. Ops with randomness are compared with equal seeds and, where the random stream is
consumed differently, by dtype and shape.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import warnings
from collections.abc import Callable, Sequence

import torch
from torch.utils import _pytree as pytree

VARIANTS = ("float32", "float32_grad", "float32_noncontig", "float32_channels_last",
            "float32_transposed", "float32_expanded", "bfloat16", "int64")
DTYPES = {"float32": torch.float32, "float32_grad": torch.float32,
          "float32_noncontig": torch.float32, "float32_channels_last": torch.float32,
          "float32_transposed": torch.float32, "float32_expanded": torch.float32,
          "bfloat16": torch.bfloat16, "int64": torch.int64}
# (atol, rtol) per output dtype; bfloat16 kernels compute in float32 and round once, eager
# rounds every intermediate (Inductor's OpInfo test is as loose for low precision).
TOLERANCES = {torch.float32: (1e-4, 1e-4), torch.float64: (1e-7, 1e-7),
              torch.bfloat16: (3e-2, 3e-2), torch.float16: (2e-3, 2e-3),
              torch.complex64: (1e-4, 1e-4)}
GRAD_TOLERANCES = {torch.float32: (5e-4, 5e-4)}


@dataclasses.dataclass
class OpResult:
    op: str          # OpInfo name + "." + variant_test_name when there is one
    variant: str
    status: str      # pass | wrong | error | skip
    detail: str = ""
    samples: int = 0
    graphs: int = 0  # graphs the backend compiled (0: Dynamo ran the op in eager)

    @property
    def key(self) -> str:
        return f"{self.op}:{self.variant}"


def op_db() -> list:
    from torch.testing._internal.common_methods_invocations import op_db as db
    return list(db)


def op_name(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def find_ops(names: Sequence[str] | None = None) -> list:
    """OpInfos by full name (``op_name``); all of them when ``names`` is None."""
    ops = op_db()
    if names is None:
        return ops
    by = {op_name(o): o for o in ops}
    missing = [n for n in names if n not in by]
    if missing:
        raise ValueError(f"unknown OpInfo name(s): {', '.join(missing)}")
    return [by[n] for n in names]


# ----------------------------------------------------------------------------- samples

@dataclasses.dataclass
class _Sample:
    leaves: list        # flattened (input, args, kwargs); tensors are replaced by inputs
    spec: object
    tensor_at: list     # positions of tensor leaves

    def build(self, tensors):
        leaves = list(self.leaves)
        for pos, t in zip(self.tensor_at, tensors):
            leaves[pos] = t
        return pytree.tree_unflatten(leaves, self.spec)

    def tensors(self):
        return [self.leaves[p] for p in self.tensor_at]


def _channels_last(t: torch.Tensor) -> torch.Tensor | None:
    if t.dim() == 4:
        return t.contiguous(memory_format=torch.channels_last)
    if t.dim() == 5:
        return t.contiguous(memory_format=torch.channels_last_3d)
    return None


def _transposed(t: torch.Tensor) -> torch.Tensor | None:
    """Column-major: the same values with the last two dimensions swapped in memory."""
    return t.mT.contiguous().mT if t.dim() >= 2 else None


def _expanded(t: torch.Tensor) -> torch.Tensor | None:
    """The last dimension a stride-0 broadcast of its first element (values change)."""
    if t.dim() == 0 or t.shape[-1] < 2:
        return None
    return t.narrow(-1, 0, 1).clone().expand(t.shape)


# layout variants: each strided sample tensor the transform applies to takes that layout;
# a sample none of whose tensors it applies to is left out (the float32 variant has it)
LAYOUTS: dict[str, Callable] = {"float32_channels_last": _channels_last,
                                "float32_transposed": _transposed,
                                "float32_expanded": _expanded}


def _relaid(sample, layout: Callable):
    """``sample`` with ``layout`` applied to its tensors, or None where it applies to none."""
    changed = []

    def one(t):
        new = (layout(t) if isinstance(t, torch.Tensor) and t.layout == torch.strided
               else None)
        changed.append(new is not None)
        return t if new is None else new

    out = sample.transform(one)
    return out if any(changed) else None


def _samples(op, variant: str, max_samples: int | None) -> list[_Sample]:
    dtype = DTYPES[variant]
    grad = variant == "float32_grad"
    torch.manual_seed(0)
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for s in op.sample_inputs("cpu", dtype, requires_grad=grad):
            if variant == "float32_noncontig":
                s = s.noncontiguous()
            elif variant in LAYOUTS:
                s = _relaid(s, LAYOUTS[variant])
                if s is None:
                    continue
            leaves, spec = pytree.tree_flatten((s.input, tuple(s.args), dict(s.kwargs)))
            at = [i for i, v in enumerate(leaves) if isinstance(v, torch.Tensor)]
            out.append(_Sample(leaves, spec, at))
            if max_samples is not None and len(out) >= max_samples:
                break
    return out


def applies(op, variant: str) -> str | None:
    """None when ``variant`` applies to ``op``, else why not."""
    dtype = DTYPES[variant]
    if dtype not in op.supported_dtypes("cpu"):
        return f"{dtype} not in the op's CPU dtypes"
    if variant == "float32_grad":
        if not op.supports_autograd:
            return "no autograd"
        if dtype not in op.supported_backward_dtypes("cpu"):
            return f"no {dtype} backward"
    return None


def _clone(tensors, grad: bool):
    """Copies that keep each tensor's layout (strides, storage offset, the storage around a
    view) and the sharing between them (one tensor passed twice, two views of one storage):
    kernels meet the views and aliases the samples hold, and writes outside a view show."""
    copies: dict[int, torch.Tensor] = {}
    storages: dict[int, torch.UntypedStorage] = {}
    shared = _shared_storages(tensors)
    out = []
    for t in tensors:
        if id(t) in copies:
            out.append(copies[id(t)])
            continue
        d = t.detach()
        key = _storage_key(d)
        if key is not None and (_is_view_like(d) or key in shared):
            if key not in storages:
                storages[key] = d.untyped_storage().clone()
            c = d.new_empty(0).set_(storages[key], d.storage_offset(), d.shape, d.stride())
        else:
            c = d.clone()
        if grad and t.requires_grad:
            c.requires_grad_(True)
        copies[id(t)] = c
        out.append(c)
    return out


def _storage_key(t: torch.Tensor) -> int | None:
    """The address of a plain strided tensor's storage; None for other tensors and for empty
    storages (which share no memory)."""
    if not _plain(t) or t.untyped_storage().nbytes() == 0:
        return None
    return t.untyped_storage().data_ptr()


def _shared_storages(tensors) -> set[int]:
    """Storages that more than one distinct tensor in ``tensors`` views."""
    owners: dict[int, set[int]] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor):
            key = _storage_key(t.detach())
            if key is not None:
                owners.setdefault(key, set()).add(id(t))
    return {k for k, ids in owners.items() if len(ids) > 1}


def _plain(t: torch.Tensor) -> bool:
    return t.layout == torch.strided and not (t.is_quantized or t.is_conj() or t.is_neg())


def _is_view_like(t: torch.Tensor) -> bool:
    return _plain(t) and (t.storage_offset() != 0 or not t.is_contiguous()
                      or t.untyped_storage().nbytes() != t.numel() * t.element_size())


def _whole_storage(t: torch.Tensor) -> torch.Tensor:
    """All of ``t``'s storage as a 1-d tensor of its dtype (shares the memory)."""
    n = t.untyped_storage().nbytes() // t.element_size()
    return t.new_empty(0).set_(t.untyped_storage(), 0, (n,), (1,))


# ----------------------------------------------------------------------------- running

def _runner(op, samples: list[_Sample]) -> Callable:
    fn = op.op

    def run(*flat):
        outs, k = [], 0
        for s in samples:
            n = len(s.tensor_at)
            inp, args, kwargs = s.build(flat[k:k + n])
            k += n
            outs.append(fn(inp, *args, **kwargs))
        return outs
    return run


def _with_grads(run: Callable, grad: bool, seed: int) -> Callable:
    """The outputs, plus (when ``grad``) the gradients of the inputs for fixed cotangents."""
    def go(*flat):
        torch.manual_seed(seed)
        outs = run(*flat)
        if not grad:
            return outs, None
        leaves = [o for o in pytree.tree_leaves(outs)
                  if isinstance(o, torch.Tensor) and o.requires_grad and o.is_floating_point()]
        wrt = [t for t in flat if isinstance(t, torch.Tensor) and t.requires_grad]
        if not leaves or not wrt:
            return outs, None
        gen = torch.Generator().manual_seed(1234)
        cot = [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in leaves]
        grads = torch.autograd.grad(leaves, wrt, cot, allow_unused=True)
        return outs, list(grads)
    return go


class _Counter:
    """A Dynamo backend that counts the graphs it is handed and passes them on."""

    def __init__(self, backend: str, options: dict | None):
        self.graphs = 0
        self.backend = backend
        self.options = options or {}

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        if self.backend == "ember":
            from ember.core.compiler.backend import ember_backend
            return ember_backend(gm, example_inputs, mode="default", options=dict(self.options))
        if self.backend == "inductor":
            from torch._inductor.compile_fx import compile_fx
            return compile_fx(gm, example_inputs)
        if self.backend == "eager":
            return gm.forward
        raise ValueError(f"unknown backend {self.backend!r}")


class GraphFellBack(Exception):
    """Our backend left a graph to eager ATen (an error: every op lowers, or refuses per op)."""


@contextlib.contextmanager
def _graph_fallbacks(backend: str):
    """Collects why graphs handed to our backend ran in eager while the block runs."""
    found: list[str] = []
    if backend != "ember":
        yield found
        return
    from ember.core.compiler import capture
    record = capture.start_recording()
    try:
        yield found
    finally:
        capture.stop_recording()
        found += [f for f in record["fallback_ops"] if f.startswith("<graph:")]


def _compare(actual, expected, *, grads: bool = False) -> None:
    table = GRAD_TOLERANCES if grads else {}
    a_leaves, a_spec = pytree.tree_flatten(actual)
    e_leaves, e_spec = pytree.tree_flatten(expected)
    if len(a_leaves) != len(e_leaves):
        raise AssertionError(f"{len(a_leaves)} outputs, eager has {len(e_leaves)}")
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                raise AssertionError(f"output {i}: {type(a).__name__}, eager has a tensor")
            atol, rtol = table.get(e.dtype) or TOLERANCES.get(e.dtype, (0, 0))
            if e.is_sparse or e.layout != torch.strided:
                a, e = a.to_dense(), e.to_dense()
            torch.testing.assert_close(a, e, atol=atol, rtol=rtol, equal_nan=True,
                                       msg=lambda m, i=i: f"output {i}: {m}")
        elif e is None:
            if a is not None and not (grads and isinstance(a, torch.Tensor)
                                      and not a.any()):
                raise AssertionError(f"output {i}: {a!r}, eager has None")
        elif isinstance(e, float) and e != e:
            if not (isinstance(a, float) and a != a):
                raise AssertionError(f"output {i}: {a!r} != {e!r}")
        elif a != e:
            raise AssertionError(f"output {i}: {a!r} != {e!r}")


def _compare_storages(actual: list, expected: list) -> None:
    """The memory around each view input is as eager left it (NaN gaps stay NaN)."""
    for a, e in zip(actual, expected):
        if isinstance(e, torch.Tensor) and _is_view_like(e.detach()):
            _compare([_whole_storage(a.detach())], [_whole_storage(e.detach())])


def _meta_only(actual, expected) -> None:
    """Dtype and shape of every tensor output (ops whose values eager itself does not fix)."""
    a_leaves = pytree.tree_leaves(actual)
    e_leaves = pytree.tree_leaves(expected)
    if len(a_leaves) != len(e_leaves):
        raise AssertionError(f"{len(a_leaves)} outputs, eager has {len(e_leaves)}")
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor) or a.dtype != e.dtype or a.shape != e.shape:
                raise AssertionError(f"output {i}: {getattr(a, 'dtype', a)} "
                                     f"{getattr(a, 'shape', '')} vs eager {e.dtype} {e.shape}")


@contextlib.contextmanager
def _quiet():
    """Silence warnings and our fallback log lines while an op runs (they are expected)."""
    loggers = [logging.getLogger(n) for n in ("ember", "torch._dynamo", "torch._inductor")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, lv in zip(loggers, levels):
            lg.setLevel(lv)


def _eager(op, samples: list[_Sample], variant: str, seed: int):
    grad = variant == "float32_grad"
    flat = _clone([t for s in samples for t in s.tensors()], grad)
    out = _with_grads(_runner(op, samples), grad, seed)(*flat)
    return out, flat


UNINITIALISED = {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty",
                 "new_empty_strided"}  # values undefined: compared by dtype and shape


def _one(op, samples, variant: str, backend: str, options: dict | None, counter: list):
    """Compile and run ``samples`` together; raises AssertionError on a wrong result."""
    grad = variant == "float32_grad"
    (ref, ref_grads), ref_in = _eager(op, samples, variant, seed=0)
    (ref2, _), _ = _eager(op, samples, variant, seed=0)
    # the empty family returns uninitialised memory: two eager runs can agree by reusing
    # the same block, so name them rather than only detect them
    deterministic = op.name not in UNINITIALISED
    try:
        _compare(ref2, ref)
    except AssertionError:
        deterministic = False  # other ops whose values are not defined
    torch._dynamo.reset()
    c = _Counter(backend, options)
    compiled = torch.compile(_with_grads(_runner(op, samples), grad, 0), backend=c)
    flat = _clone([t for s in samples for t in s.tensors()], grad)
    with _graph_fallbacks(backend) as fell:
        try:
            out, grads = compiled(*flat)
        finally:
            counter[0] += c.graphs
            torch._dynamo.reset()
    if fell:
        raise GraphFellBack(fell[0])
    if not deterministic:
        _meta_only(out, ref)
        return
    try:
        _compare(out, ref)
        _compare(flat, ref_in)  # in-place updates of the inputs
        _compare_storages(flat, ref_in)
        if grad:
            _compare(grads, ref_grads, grads=True)
    except AssertionError:
        if _no_less_accurate_than_eager(op, samples, variant, (out, flat), (ref, ref_in)):
            return
        if not _random(op, samples, variant):
            raise
        _meta_only(out, ref)


ARBITRATED = ("float32", "float32_noncontig", *LAYOUTS, "bfloat16")  # forward, floats


def _no_less_accurate_than_eager(op, samples, variant: str, actual, expected) -> bool:
    """A floating result off eager's by more than the tolerance still passes where each such
    element is no further from the float64 result than eager's furthest (eager rounds where we
    fuse) or, in bfloat16, is the op computed in float32 and rounded once (as our kernels
    compute 16-bit floats)."""
    if variant not in ARBITRATED:
        return False
    dtype = DTYPES[variant]

    def reference(to):
        with contextlib.suppress(Exception):
            return _upcast_reference(op, samples, dtype, to)
        return None

    once = reference(torch.float32) if dtype == torch.bfloat16 else None
    try:
        _compare_storages(actual[1], expected[1])
        _no_less_accurate(actual, expected, reference(torch.float64), once)
    except AssertionError:
        return False
    return True


def _random(op, samples, variant) -> bool:
    """Does the op draw random numbers (different seeds give different results)?"""
    (a, _), _ = _eager(op, samples, variant, seed=0)
    (b, _), _ = _eager(op, samples, variant, seed=1)
    try:
        _compare(a, b)
        return False
    except AssertionError:
        return True


def _upcast_reference(op, samples, dtype: torch.dtype, to: torch.dtype):
    """(outputs, inputs after the call) of the op on the samples with ``dtype`` tensors
    upcast to ``to``; float64 (the accuracy arbiter) is kept, other results of ``to`` are
    rounded back to ``dtype``."""
    flat = [t.detach().to(to) if t.dtype == dtype else t.detach().clone()
            for s in samples for t in s.tensors()]
    torch.manual_seed(0)
    out = _runner(op, samples)(*flat)
    if to == torch.float64:
        return out, flat
    return pytree.tree_map(lambda v: v.to(dtype) if isinstance(v, torch.Tensor)
                           and v.dtype == to else v, (out, flat))


def _no_less_accurate(actual, expected, exact, once=None) -> None:
    """Every element of a floating output of ``actual`` is within tolerance of eager's
    (``expected``) or of ``once`` (bfloat16: the op computed in float32, rounded once), or no
    further from ``exact`` (the op in float64) than eager's furthest element of that output,
    with NaNs where eager has them; where ``exact`` is not finite it is eager's or ``once``'s.
    Other outputs equal eager's. ``exact`` or ``once`` may be None (the op would not run)."""
    a_leaves, e_leaves = pytree.tree_leaves(actual), pytree.tree_leaves(expected)
    x_leaves = _leaves_like(exact, e_leaves)
    o_leaves = _leaves_like(once, e_leaves)
    if len(a_leaves) != len(e_leaves):
        raise AssertionError("output counts differ")
    for i, (a, e, x, o) in enumerate(zip(a_leaves, e_leaves, x_leaves, o_leaves)):
        if not (isinstance(e, torch.Tensor) and e.is_floating_point()):
            _compare([a], [e])
            continue
        if not isinstance(a, torch.Tensor) or a.dtype != e.dtype or a.shape != e.shape:
            raise AssertionError(f"output {i}: dtype or shape differs from eager")
        tol = TOLERANCES.get(e.dtype, (0, 0))
        a, e = a.detach().double(), e.detach().double()
        if not torch.equal(a.isnan(), e.isnan()):
            raise AssertionError(f"output {i}: NaNs differ from eager")
        ok = (a == e) | a.isnan() | _within(a, e, tol)
        if _like(o, e):
            ok |= _within(a, o.detach().double(), tol)
        if _like(x, e):
            x = x.detach().double()
            finite = x.isfinite()
            judged = finite & e.isfinite()  # eager's overflow or NaN sets no bound
            worst = (e - x)[judged].abs().max() if judged.any() else 0.0
            ok |= finite & ((a - x).abs() <= worst)
        bad = (~ok).nonzero()
        if len(bad):
            at = tuple(bad[0].tolist())
            far, worst = ("no", float("nan")) if not _like(x, e) else (
                f"{(a[at] - x[at]).abs().item():.3g} from", float(worst))
            raise AssertionError(f"output {i} at {at}: {a[at].item():.6g} ({far} float64), "
                                 f"eager {e[at].item():.6g} (at most {worst:.3g} from it)")


def _leaves_like(tree, leaves: list) -> list:
    found = pytree.tree_leaves(tree) if tree is not None else []
    return found if len(found) == len(leaves) else [None] * len(leaves)


def _like(r, e: torch.Tensor) -> bool:
    return isinstance(r, torch.Tensor) and r.is_floating_point() and r.shape == e.shape


def _within(a: torch.Tensor, r: torch.Tensor, tol: tuple) -> torch.Tensor:
    """Elements of ``a`` within ``tol`` (atol, rtol) of a finite ``r``."""
    atol, rtol = tol
    return r.isfinite() & ((a - r).abs() <= atol + rtol * r.abs())


def check_op(op, variant: str, backend: str = "ember", *, max_samples: int | None = None,
             options: dict | None = None) -> OpResult:
    """Compile ``op``'s CPU samples for ``variant`` with ``backend``; compare with eager."""
    name = op_name(op)
    why = applies(op, variant)
    if why:
        return OpResult(name, variant, "skip", why)
    with _quiet():
        try:
            samples = _samples(op, variant, max_samples)
        except Exception as e:  # the catalogue itself failing: not ours
            return OpResult(name, variant, "skip", f"sample inputs raise {type(e).__name__}")
        if not samples:
            return OpResult(name, variant, "skip", "no sample the variant's layout applies to")
        usable = []
        for s in samples:  # samples eager rejects (error inputs) are not compared
            try:
                _eager(op, [s], variant, seed=0)
                usable.append(s)
            except Exception:
                pass
        if not usable:
            return OpResult(name, variant, "skip", "no sample eager accepts")
        counter = [0]

        def attempt(batch: list, where: str) -> OpResult:
            try:
                _one(op, batch, variant, backend, options, counter)
                return OpResult(name, variant, "pass", samples=len(usable), graphs=counter[0])
            except AssertionError as e:
                return OpResult(name, variant, "wrong", f"{where}: {_short(e)}", len(usable),
                                counter[0])
            except Exception as e:
                return OpResult(name, variant, "error",
                                f"{where}: {type(e).__name__}: {_short(e)}", len(usable),
                                counter[0])

        together = attempt(usable, "all samples together")
        if together.status == "pass":
            return together
        for i, s in enumerate(usable):  # pinpoint the failing sample
            alone = attempt([s], f"sample {i}")
            if alone.status != "pass":
                return alone
        return together  # every sample passes on its own, only the combined graph fails


def _short(e: BaseException, n: int = 300) -> str:
    s = " ".join(str(e).split())
    return s if len(s) <= n else s[:n] + "..."


def check_group(ops: Sequence, variant: str = "float32", backend: str = "ember", *,
                options: dict | None = None) -> list[OpResult]:
    """The first sample of each op in ``ops``, all through one compiled function (one
    Dynamo trace, one build: the cheap smoke pass); the ops whose output differs, or all of
    them when the group raises, are then checked on their own with ``check_op``."""
    todo, results = [], {}
    with _quiet():
        for op in ops:
            why = applies(op, variant)
            if why:
                results[op_name(op)] = OpResult(op_name(op), variant, "skip", why)
                continue
            try:
                s = _samples(op, variant, 1)
                _eager(op, s, variant, seed=0)
            except Exception:  # check_op reports it
                s = []
            if s:
                todo.append((op, s))
            else:
                results[op_name(op)] = None
        if todo:
            grad = variant == "float32_grad"

            def run_all(*flat):
                outs, k = [], 0
                for op, s in todo:
                    n = len(s[0].tensor_at)
                    outs.append(_runner(op, s)(*flat[k:k + n]))
                    k += n
                return outs
            flat_ref = _clone([t for _, s in todo for t in s[0].tensors()], grad)
            flat = _clone(flat_ref, grad)
            torch.manual_seed(0)
            ref = run_all(*flat_ref)
            torch._dynamo.reset()
            c = _Counter(backend, options)
            with _graph_fallbacks(backend) as fell:
                try:
                    out = torch.compile(run_all, backend=c)(*flat)
                except Exception:  # each op on its own below
                    out = None
                finally:
                    torch._dynamo.reset()
            if fell:
                out = None  # each op on its own below names the one that fell back
            k = 0
            for i, (op, s) in enumerate(todo):
                n = len(s[0].tensor_at)
                ok = out is not None and not grad
                if ok:
                    try:
                        _compare(out[i], ref[i])
                        _compare(flat[k:k + n], flat_ref[k:k + n])
                        _compare_storages(flat[k:k + n], flat_ref[k:k + n])
                    except AssertionError:
                        ok = False
                k += n
                results[op_name(op)] = (OpResult(op_name(op), variant, "pass", samples=1,
                                                 graphs=c.graphs) if ok else None)
    for op in ops:
        if results[op_name(op)] is None:
            results[op_name(op)] = check_op(op, variant, backend, max_samples=1,
                                            options=options)
    return [results[op_name(op)] for op in ops]
