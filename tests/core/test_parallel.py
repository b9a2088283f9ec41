"""ember.core.parallel: units on single-intra-op-thread workers give a serial run's results,
survive fork, honour the thread count, and keep scratch buffers per thread."""

import multiprocessing
import threading

import pytest
import torch

from ember.core import parallel


@pytest.fixture
def threads():
    """Set torch's thread count for the test (restored after); the machine looks idle."""
    prev = torch.get_num_threads()
    patch = pytest.MonkeyPatch()
    patch.setattr(parallel, "spare_cores", lambda: 64)

    def set_threads(n: int) -> None:
        torch.set_num_threads(n)

    yield set_threads
    patch.undo()
    torch.set_num_threads(prev)


def _work(x: torch.Tensor, out: torch.Tensor, i: int) -> None:
    """A unit of torch ops on one row (a reduction: thread counts could change its bits)."""
    row = x[i]
    out[i] = (row.softmax(-1) @ x.t()).sum() + row.square().mean()


def test_results_equal_a_serial_run(threads):
    x = torch.randn(64, 300, generator=torch.Generator().manual_seed(0))
    threads(1)
    serial = torch.empty(64)
    for i in range(64):
        _work(x, serial, i)
    threads(4)
    got = torch.full((64,), float("nan"))
    parallel.run(lambda i: _work(x, got, i), 64)
    torch.testing.assert_close(got, serial, atol=0, rtol=0)


def test_every_unit_runs_once_on_single_threaded_workers(threads):
    threads(2)
    seen, idents, counts = [], set(), set()
    lock = threading.Lock()
    meet = threading.Barrier(2, timeout=30)  # units 0 and 1 can only finish side by side

    def unit(i):
        if i < 2:
            meet.wait()
        with lock:
            seen.append(i)
            idents.add(threading.get_ident())
            counts.add(torch.get_num_threads())

    parallel.run(unit, 50)
    assert sorted(seen) == list(range(50))
    assert counts == {1} and len(idents) == 2 and threading.get_ident() not in idents
    assert torch.get_num_threads() == 2  # the caller's setting is untouched


@pytest.mark.parametrize("workers", [1, 3])
def test_thread_count_is_honoured(threads, workers):
    threads(4)
    idents = set()
    lock = threading.Lock()
    meet = threading.Barrier(workers, timeout=30)  # every worker takes part

    def unit(i):
        if i < workers:
            meet.wait()
        with lock:
            idents.add(threading.get_ident())

    parallel.run(unit, 40, workers=workers)
    assert len(idents) == workers and threading.get_ident() not in idents


def test_default_workers_follow_torch_threads_units_and_spare_cores(threads, monkeypatch):
    threads(3)
    assert parallel.default_workers(100) == 3
    assert parallel.default_workers(2) == 2
    monkeypatch.setattr(parallel, "spare_cores", lambda: 1)
    assert parallel.default_workers(100) == 1
    threads(1)
    assert parallel.default_workers(100) == 1


def test_slots_name_distinct_concurrent_workers(threads):
    threads(3)
    busy = [0, 0, 0]
    overlaps = []

    def unit(slot, i):
        busy[slot] += 1
        overlaps.append(busy[slot])
        busy[slot] -= 1

    parallel.run_slots(unit, 200, workers=3)
    assert len(overlaps) == 200 and set(overlaps) == {1}  # no slot ran two units at once


def test_inline_with_one_thread_nested_and_under_the_callers_grad_mode(threads):
    threads(1)
    seen = set()
    parallel.run(lambda i: seen.add(threading.get_ident()), 5)
    assert seen == {threading.get_ident()}

    threads(2)
    nested = []
    parallel.run(lambda i: parallel.run(nested.append, 3), 4)  # no deadlock: inner runs inline
    assert sorted(nested) == sorted(list(range(3)) * 4)

    modes = set()
    with torch.no_grad():
        parallel.run(lambda i: modes.add(torch.is_grad_enabled()), 8)
    parallel.run(lambda i: modes.add(not torch.is_grad_enabled()), 8)
    assert modes == {False}


def test_a_units_error_is_reraised(threads):
    threads(2)

    def unit(i):
        if i == 3:
            raise KeyError("unit 3")

    with pytest.raises(KeyError, match="unit 3"):
        parallel.run(unit, 8)
    assert torch.get_num_threads() == 2
    done = []
    parallel.run(done.append, 4)  # the pool still works
    assert sorted(done) == [0, 1, 2, 3]


def _child_run(n: int) -> tuple[list[int], bool]:
    torch.set_num_threads(2)
    out = torch.zeros(n, dtype=torch.int64)
    parallel.run(lambda i: out.__setitem__(i, i * i), n, workers=2)
    return out.tolist(), parallel.forked()


def test_a_forked_child_can_use_the_pool(threads):
    threads(2)
    parallel.run(lambda i: None, 4, workers=2)  # the parent's workers exist before the fork
    called = []
    parallel.after_fork_in_child(lambda: called.append(1))
    try:
        with multiprocessing.get_context("fork").Pool(1) as pool:
            values, forked = pool.apply_async(_child_run, (9,)).get(timeout=120)
    finally:
        parallel._fork_callbacks.pop()
    assert values == [i * i for i in range(9)] and forked
    assert not parallel.forked() and not called  # the hook runs in the child only


def test_scratch_buffers_are_reused_per_thread_and_slot():
    a = parallel.scratch("t", (4, 5), torch.float32)
    b = parallel.scratch("t", (2, 3), torch.float32)
    assert a.shape == (4, 5) and b.shape == (2, 3) and a.data_ptr() == b.data_ptr()
    assert parallel.scratch("u", (2, 3), torch.float32).data_ptr() != a.data_ptr()
    assert parallel.scratch("t", (2, 3), torch.float64).dtype == torch.float64
    other = []
    thread = threading.Thread(target=lambda: other.append(
        parallel.scratch("t", (4, 5), torch.float32).data_ptr()))
    thread.start()
    thread.join()
    assert other[0] != a.data_ptr()


def test_spare_cores_counts_other_processes_runnable_threads(monkeypatch):
    monkeypatch.setattr(parallel, "_CORES", 4)
    for busy, spare in ((0, 4), (1, 3), (3, 1), (39, 1)):
        monkeypatch.setattr(parallel, "_spare", (-1.0, 0))  # no cached reading
        monkeypatch.setattr(parallel, "_busy_elsewhere", lambda b=busy: b)
        assert parallel.spare_cores() == spare
    monkeypatch.undo()
    assert 1 <= parallel.spare_cores() <= parallel.cores()


def test_own_spinning_threads_are_not_busy_elsewhere():
    stop = threading.Event()
    spinner = threading.Thread(target=lambda: [None for _ in iter(stop.is_set, True)])
    spinner.start()  # a thread of ours in state R, like an OpenMP worker spinning
    try:
        here = max(parallel._runnable_here() for _ in range(50))
        assert here >= 1
        assert 0 <= parallel._busy_elsewhere() <= parallel.cores() * 64
    finally:
        stop.set()
        spinner.join()
