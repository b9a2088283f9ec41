"""DataLoader2 with in-process and multiprocess reading services: streams, seeds, resume,
errors and clean exit. Every blocking wait is bounded (the loader's ``timeout``)."""

import functools
import math
import os
import pickle
import signal
import time

import numpy as np
import psutil
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ember.data import (
    DataLoader2,
    InProcessReadingService,
    MultiProcessingReadingService,
    get_worker_info,
)
from ember.data.datapipes.iter import IterableWrapper

T = 30.0  # seconds: bound on any single wait for a worker


def mp(n, **kw):
    kw.setdefault("timeout", T)
    return MultiProcessingReadingService(n, **kw) if n else InProcessReadingService(
        worker_shards=kw.get("worker_shards"))


def double(x):
    return 2 * x


def to_tensor(x):
    return torch.full((3,), float(x))


def elementwise():
    return IterableWrapper(range(40)).shuffle().sharding_filter().map(double)


def with_post_shard_randomness():
    return (IterableWrapper(range(50)).shuffle().sharding_filter().shuffle(buffer_size=4)
            .batch(3).map(len_and_sum))


def len_and_sum(b):
    return (len(b), sum(b), tuple(b))


def run(dp, rs, seed=0):
    dl = DataLoader2(dp, reading_service=rs)
    dl.seed(seed)
    try:
        return list(dl)
    finally:
        dl.shutdown()


def children():
    """Our worker processes (not multiprocessing's own forkserver / resource tracker)."""
    out = []
    for p in psutil.Process().children():
        try:
            cmd = " ".join(p.cmdline())
        except psutil.Error:
            continue
        if "resource_tracker" not in cmd and "forkserver" not in cmd:
            out.append(p)
    return out


def no_children():
    deadline = time.monotonic() + 5
    while children() and time.monotonic() < deadline:
        time.sleep(0.05)
    return children()


def test_in_process_matches_plain_iteration_order():
    out = run(IterableWrapper(range(10)).map(double), InProcessReadingService())
    assert out == [2 * i for i in range(10)]


def test_same_seed_same_stream_for_any_num_workers():
    ref = run(elementwise(), mp(0))
    assert sorted(ref) == [2 * i for i in range(40)] and ref != sorted(ref)
    for n in (1, 2):
        assert run(elementwise(), mp(n)) == ref
    # Randomness after sharding_filter is per shard: fix the shard count and any worker
    # count (including none) gives the same stream.
    ref = run(with_post_shard_randomness(), mp(0, worker_shards=2))
    assert sorted(x for b in ref for x in b[2]) == list(range(50))
    for n in (1, 2, 3):
        assert run(with_post_shard_randomness(), mp(n, worker_shards=2)) == ref


def test_seeds_differ_by_seed_and_epoch_but_repeat():
    dl = DataLoader2(elementwise(), reading_service=mp(2))
    dl.seed(1)
    e1, e2 = list(dl), list(dl)
    dl.seed(1)
    assert list(dl) == e1 and e1 != e2 and sorted(e1) == sorted(e2)
    dl.seed(2)
    assert list(dl) != e1
    dl.shutdown()
    torch.manual_seed(0)
    a = run_unseeded()
    torch.manual_seed(0)
    assert run_unseeded() == a


def run_unseeded():
    dl = DataLoader2(elementwise(), reading_service=mp(0))
    try:
        return list(dl)
    finally:
        dl.shutdown()


def checkpoint_roundtrip(dp_fn, before, after, stop, in_order=True, shards=2):
    """Stop after ``stop`` items with ``before`` workers, resume with ``after``."""
    dl = DataLoader2(dp_fn(), reading_service=mp(before, worker_shards=shards,
                                                 in_order=in_order))
    dl.seed(7)
    it = iter(dl)
    head = [next(it) for _ in range(stop)]
    state = pickle.loads(pickle.dumps(dl.state_dict()))
    rest = list(it)
    dl.shutdown()
    dl2 = DataLoader2(dp_fn(), reading_service=mp(after, worker_shards=shards,
                                                  in_order=in_order))
    dl2.load_state_dict(state)
    restored = list(dl2)
    dl2.shutdown()
    return head, rest, restored


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(stop=st.integers(0, 17), before=st.sampled_from([0, 1, 2]),
       after=st.sampled_from([0, 1, 2]))
def test_resume_at_random_points_with_any_worker_count(stop, before, after):
    head, rest, restored = checkpoint_roundtrip(with_post_shard_randomness, before, after, stop)
    assert restored == rest


def test_resume_out_of_order_loses_and_repeats_nothing():
    head, rest, restored = checkpoint_roundtrip(elementwise, 2, 2, 11, in_order=False)
    assert sorted(head + restored) == [2 * i for i in range(40)]


def test_state_between_epochs_starts_the_next_epoch():
    dl = DataLoader2(elementwise(), reading_service=mp(0))
    dl.seed(3)
    list(dl)
    state = dl.state_dict()
    nxt = list(dl)
    dl2 = DataLoader2(elementwise(), reading_service=mp(0))
    dl2.load_state_dict(state)
    assert list(dl2) == nxt


def test_tensors_and_arrays_cross_through_shared_memory():
    dp = IterableWrapper(range(12)).sharding_filter().map(to_tensor).batch(4).collate()
    out = run(dp, mp(2))
    ref = run(dp, mp(0, worker_shards=2))
    assert len(out) == len(ref) and all(torch.equal(a, b) for a, b in zip(out, ref))
    big = IterableWrapper(range(4)).sharding_filter().map(big_item)
    got = run(big, mp(2, prefetch_factor=1))
    assert [int(g["t"][0, 0]) for g in got] == [0, 1, 2, 3]
    assert all(np.array_equal(g["a"], np.arange(10_000) + i) for i, g in enumerate(got))


def big_item(i):
    return {"t": torch.full((300, 300), i, dtype=torch.int32), "a": np.arange(10_000) + i,
            "s": f"item {i}"}


def test_torch_datasets_are_wrapped():
    class Squares(torch.utils.data.Dataset):
        def __len__(self):
            return 9

        def __getitem__(self, i):
            return i * i

    assert sorted(run(Squares(), mp(2))) == [i * i for i in range(9)]
    assert run(Squares(), mp(0)) == [i * i for i in range(9)]

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(4))

    assert run(Stream(), mp(0)) == [0, 1, 2, 3]
    with pytest.raises(TypeError, match="datapipe must be"):
        DataLoader2([1, 2, 3])


def fail_on_seven(x):
    if x == 7:
        raise ValueError(f"bad item {x}")
    return x


def test_worker_exception_is_reraised_with_worker_traceback():
    dp = IterableWrapper(range(20)).sharding_filter().map(fail_on_seven)
    with pytest.raises(ValueError, match="Caught ValueError in DataLoader worker") as info:
        run(dp, mp(2))
    assert "bad item 7" in str(info.value) and "fail_on_seven" in str(info.value)
    assert no_children() == []


def die_on_three(x):
    if x == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return x


def test_dead_worker_is_reported_not_hung():
    dp = IterableWrapper(range(10)).sharding_filter().map(die_on_three)
    with pytest.raises(RuntimeError, match="exited unexpectedly.*SIGKILL"):
        run(dp, mp(2))
    assert no_children() == []


def slow(x):
    time.sleep(10)
    return x


def test_timeout_raises():
    with pytest.raises(RuntimeError, match="timed out after 0.5s"):
        run(IterableWrapper(range(2)).sharding_filter().map(slow), mp(1, timeout=0.5))
    assert no_children() == []


def sleep_in_a_named_function(x):
    time.sleep(10)
    return x


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="stack dumps need SIGUSR1")
@pytest.mark.parametrize("in_order", [True, False])
def test_hung_worker_is_reported_with_its_stack(in_order):
    """DataLoader2(timeout=) overrides the service's bound; the error carries the worker's
    Python stack, so the hang can be found without a debugger."""
    dp = IterableWrapper(range(2)).sharding_filter().map(sleep_in_a_named_function)
    dl = DataLoader2(dp, reading_service=mp(1, in_order=in_order), timeout=0.5)
    try:
        with pytest.raises(RuntimeError, match="timed out after 0.5s") as err:
            list(dl)
    finally:
        dl.shutdown()
    assert "DataLoader2(timeout=...)" in str(err.value)
    assert "Python stacks at the timeout" in str(err.value)
    assert "sleep_in_a_named_function" in str(err.value)
    assert no_children() == []


def test_default_timeout_is_generous_and_bad_ones_are_refused():
    from ember.data.reading_service import DEFAULT_TIMEOUT

    assert DEFAULT_TIMEOUT == 600.0
    dl = DataLoader2(IterableWrapper(range(3)), reading_service=MultiProcessingReadingService(1))
    assert dl._plan().timeout == DEFAULT_TIMEOUT
    dl = DataLoader2(IterableWrapper(range(3)), reading_service=mp(1, timeout=7.0))
    assert dl._plan().timeout == 7.0
    assert DataLoader2(IterableWrapper(range(3)), timeout=math.inf)._plan().timeout == math.inf
    for bad in (0, -1, "10", True):
        with pytest.raises(ValueError, match="timeout"):
            DataLoader2(IterableWrapper(range(3)), timeout=bad)


def init_fn(datapipe, info):
    assert get_worker_info() is info
    return datapipe.map(lambda x: (x, info.worker_id, info.num_workers))


def test_worker_init_fn_and_worker_info():
    out = run(IterableWrapper(range(6)).sharding_filter(), mp(2, worker_init_fn=init_fn))
    assert [x for x, _, _ in out] == list(range(6))
    assert {(x % 2, w, n) for x, w, n in out} == {(0, 0, 2), (1, 1, 2)}
    assert get_worker_info() is None


def test_shutdown_mid_epoch_leaves_no_process():
    dl = DataLoader2(elementwise(), reading_service=mp(2))
    it = iter(dl)
    next(it)
    assert len(children()) == 2
    dl.shutdown()
    dl.shutdown()
    assert no_children() == []
    with pytest.raises(RuntimeError, match="shut down"):
        iter(dl)


def test_spawn_start_method():
    out = run(with_post_shard_randomness(),
              mp(1, worker_shards=2, multiprocessing_context="spawn"))
    assert out == run(with_post_shard_randomness(), mp(0, worker_shards=2))
    with pytest.raises(TypeError, match="picklable"):
        run(IterableWrapper(range(3)).map(lambda x: x), mp(1, multiprocessing_context="spawn"))
    assert no_children() == []


@pytest.mark.slow
@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_other_start_methods_resume(method):
    out = run(with_post_shard_randomness(),
              mp(2, worker_shards=2, multiprocessing_context=method))
    assert out == run(with_post_shard_randomness(), mp(0, worker_shards=2))


def test_reading_service_arguments_are_checked():
    with pytest.raises(ValueError, match="num_workers"):
        MultiProcessingReadingService(-1)
    with pytest.raises(ValueError, match="multiprocessing_context"):
        MultiProcessingReadingService(1, multiprocessing_context="threads")
    with pytest.raises(ValueError, match="prefetch_factor"):
        MultiProcessingReadingService(1, prefetch_factor=0)
    with pytest.raises(ValueError, match="version"):
        DataLoader2(elementwise()).load_state_dict({"nope": 1})


CALLS = [0]


def count_calls(x):
    CALLS[0] += 1
    return x, CALLS[0]


def test_workers_persist_across_epochs_and_keep_caches():
    dp = IterableWrapper(range(8)).sharding_filter().map(count_calls).in_memory_cache()
    dl = DataLoader2(dp, reading_service=mp(2))
    first = list(dl)
    pids = sorted(p.pid for p in children())
    second = list(dl)
    assert len(pids) == 2 and sorted(p.pid for p in children()) == pids
    assert second == first  # served from each worker's cache: fn was not called again
    dl.shutdown()
    assert no_children() == []


def test_epoch_cut_short_is_drained_before_the_next():
    dp = IterableWrapper(range(6)).sharding_filter().map(big_item)
    dl = DataLoader2(dp, reading_service=mp(2, prefetch_factor=2))
    it = iter(dl)
    next(it)
    time.sleep(0.3)  # let workers fill their slots
    full = list(dl)  # a new epoch abandons the old one
    assert [int(g["t"][0, 0]) for g in full] == list(range(6))
    assert all(np.array_equal(g["a"], np.arange(10_000) + i) for i, g in enumerate(full))
    dl.shutdown()


def fail_if_flag(x, flag):
    if x == 4 and os.path.exists(flag):
        raise ValueError("only in the first epoch")
    return x


def test_error_in_an_abandoned_epoch_does_not_hang_or_leak(tmp_path):
    flag = tmp_path / "flag"
    flag.write_text("1")
    dp = IterableWrapper(range(8)).sharding_filter().map(
        functools.partial(fail_if_flag, flag=str(flag)))
    dl = DataLoader2(dp, reading_service=mp(2))
    it = iter(dl)
    assert next(it) == 0
    time.sleep(0.5)  # worker 0 reaches item 4 and fails while the epoch is still open
    flag.unlink()
    assert list(dl) == list(range(8))  # new epoch: fresh workers, no stale error, no hang
    dl.shutdown()
    assert no_children() == []
