"""A CPU graph's internal buffers come from one arena kept between calls (``codegen/arena.py``):
packed by lifetime, never handed out to the caller, and a call overlapping another takes its
own arena."""

import threading
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from ember.core.compiler import pipeline
from ember.core.compiler.codegen import arena, wrapper
from ember.core.compiler.ir import Buffer, StridedView
from ember.core.compiler.runtime import cpp_kernels

aten = torch.ops.aten


def _chain(x, w1, w2, w3):
    """bfloat16 weight copies (our kernels write them into planned buffers) that die at their
    convolution, so later ones can take earlier ones' bytes."""
    h = x
    for w in (w1, w2, w3):
        h = F.conv2d(h.tanh().to(torch.bfloat16), (w * 0.5).to(torch.bfloat16),
                     padding=1).float()
    return h.sum(0), h * 2


def _args(n: int = 2, side: int = 8) -> tuple:
    return (torch.randn(n, 4, side, side), torch.randn(8, 4, 3, 3), torch.randn(8, 8, 3, 3),
            torch.randn(4, 8, 3, 3))


def _steps(fn, *args) -> list:
    gm = make_fx(fn)(*args)
    lowered = pipeline.lower(gm, "cpu", True)
    g = lowered.graph
    libs, _ = cpp_kernels.load(lowered.steps, lowered.buffers, {})
    return wrapper.plan(g.inputs, g.outputs, g.checks, lowered.steps, wrapper.specs_of(libs),
                        lowered.buffers, segments=wrapper.segments_of(libs), extern_out=True)


def _lifetimes(steps: list) -> dict:
    """Per arena slot: (first step, last step naming it or an alias of it, byte range)."""
    take = steps[0]
    assert isinstance(take, wrapper.TakeArena)
    root, out = {}, {}
    for i, s in enumerate(steps):
        if isinstance(s, wrapper.ArenaBuffer):
            root[s.buf.name] = s.slot
            b, offset = take.slots[s.slot]
            out[s.slot] = [i, i, (offset, offset + arena._static_nbytes(b))]
        elif isinstance(s, wrapper.Alias) and s.src in root:
            root[s.name] = root[s.src]
        for n in wrapper._NAMES.get(type(s), lambda _: ())(s):
            if n in root:
                out[root[n]][1] = i
    return out


def test_buffers_alive_together_never_share_bytes_and_dead_ones_do():
    steps = arena.place(_steps(_chain, *_args()))
    spans = list(_lifetimes(steps).values())
    assert len(spans) >= 3
    shared = False
    for i, (f1, l1, (lo1, hi1)) in enumerate(spans):
        assert lo1 % arena.ALIGN == 0 and hi1 <= steps[0].nbytes
        for f2, l2, (lo2, hi2) in spans[i + 1:]:
            overlap_bytes = lo1 < hi2 and lo2 < hi1
            if f1 <= l2 and f2 <= l1:
                assert not overlap_bytes
            shared |= overlap_bytes
    assert shared  # the arena is smaller than the buffers laid end to end
    assert steps[0].nbytes < sum(hi - lo for _, _, (lo, hi) in spans)


def test_outputs_and_checks_keep_their_own_allocation():
    steps = arena.place(_steps(_chain, *_args()))
    carved = {s.buf.name for s in steps if isinstance(s, wrapper.ArenaBuffer)}
    ret = next(s for s in steps if isinstance(s, wrapper.Return))
    assert carved and not carved & wrapper._names_in(ret.outputs)
    assert isinstance(steps[-2], wrapper.GiveArena)


def _buf(name: str, n: int = 256) -> Buffer:
    return Buffer(name, torch.float32, [n], [1])


def test_a_buffer_an_aliasing_extern_reads_stays_out_of_the_arena():
    a, b, v, c = _buf("buf0"), _buf("buf1"), _buf("buf2"), _buf("buf3")
    view_op = SimpleNamespace(op=aten.view.default, args=[StridedView.of(b), [256]],
                              kwargs={}, outs=[v])
    copy_op = SimpleNamespace(op=aten.abs.default, args=[StridedView.of(a)], kwargs={},
                              outs=[c])
    steps = [wrapper.Alloc(a), wrapper.Alloc(b), wrapper.CallExtern(view_op),
             wrapper.CallExtern(copy_op), wrapper.Return([StridedView.of(v),
                                                          StridedView.of(c)])]
    placed = arena.place(steps)
    carved = {s.buf.name for s in placed if isinstance(s, wrapper.ArenaBuffer)}
    assert carved == {"buf0"}  # buf1 may live on inside the returned view


def _scatter_at_offset(x, src):
    # x * 2 is a buffer of ours; ATen places the view by its storage offset
    return torch.as_strided_scatter(x * 2, src, (2, 2), (1, 2), 1)


def test_a_buffer_an_op_placing_views_by_storage_offset_reads_stays_out(ecompile, matches):
    """``as_strided_scatter`` counts its offset from the storage's start: given an arena slot
    (a view starting further in), it wrote nothing where eager writes (OpInfo's
    ``as_strided_copy`` backward, max error 1.0)."""
    x, src = torch.randn(9), torch.randn(2, 2)
    steps = arena.place(_steps(lambda x, src: (_scatter_at_offset(x, src) + 1,), x, src))
    extern = next(s for s in steps if isinstance(s, wrapper.CallExtern))
    carved = {s.buf.name for s in steps if isinstance(s, wrapper.ArenaBuffer)}
    assert not carved & wrapper._names_in(extern.step.args)
    fn = lambda x, src, y: (_scatter_at_offset(x, src) + 1, _scatter_at_offset(y, src) + 1)
    y = torch.randn(9)
    matches(ecompile(fn)(x, src, y), fn(x, src, y))


def test_symbolic_sizes_stay_out_of_the_arena():
    import sympy

    s0 = sympy.Symbol("s0", integer=True, positive=True)
    steps = [wrapper.Alloc(Buffer("buf0", torch.float32, [s0], [1])), wrapper.Return([])]
    assert arena.place(steps) == steps


def test_offsets_pack_by_lifetime():
    groups = [arena._Group(_buf("a"), 1000, 0, 2), arena._Group(_buf("b"), 1000, 1, 3),
              arena._Group(_buf("c"), 1000, 3, 5)]
    assert arena._offsets(groups) == [0, 1024, 0]


def test_an_output_survives_the_next_call(ecompile):
    f = ecompile(_chain)
    first = f(*_args())
    kept = [t.clone() for t in first]
    f(*_args())
    for got, ref in zip(first, kept):
        assert torch.equal(got, ref)


def test_overlapping_calls_from_threads_each_take_their_own_arena(ecompile):
    """Our kernels and ATen release the GIL, so two threads run one graph at once: with a
    shared arena they would overwrite each other's buffers."""
    f = ecompile(_chain)
    _, *ws = _args()
    xs = [torch.randn(4, 4, 32, 32) for _ in range(6)]
    refs = [f(x, *ws) for x in xs]  # one call at a time
    errors = []

    def work(k):
        for _ in range(10):
            for i in range(k, len(xs), 2):
                if not all(torch.equal(a, b) for a, b in zip(f(xs[i], *ws), refs[i])):
                    errors.append(i)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_a_graph_first_run_in_inference_mode_runs_outside_it(ecompile, matches):
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    x = torch.randn(8, 16)
    f = ecompile(model)
    with torch.no_grad():
        ref = model(x)
    with torch.inference_mode():
        matches(f(x), ref)
    with torch.no_grad():  # the arena made in inference mode is written outside it
        matches(f(x), ref)


def test_the_arena_option_turns_it_off(ecompile, output_code):
    ecompile(_chain)(*_args())
    ecompile(_chain, options={"arena": False})(*_args())
    on, off = [m for m in output_code if "wrapper:" in m]
    assert "_arenas.pop()" in on and "_a[" in on
    assert "_arenas" not in off
