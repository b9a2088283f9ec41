"""Two local ranks over gloo on 127.0.0.1: sharding, seed agreement, resume per rank and
resume of both ranks' checkpoints on one process."""

import multiprocessing
import pickle
import socket

import pytest
import torch

from ember.data import (
    DataLoader2,
    DistributedReadingService,
    MultiProcessingReadingService,
    SequentialReadingService,
)
from ember.data.datapipes.iter import IterableWrapper


def graph(n=48):
    return IterableWrapper(range(n)).shuffle().sharding_filter().shuffle(buffer_size=3).batch(2)


def rank_main(rank, port, workers, out_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    try:
        torch.manual_seed(100 + rank)  # different on purpose: rank 0's seed must win
        rs = SequentialReadingService(
            DistributedReadingService(timeout=60),
            MultiProcessingReadingService(workers, worker_shards=2, timeout=30))
        dl = DataLoader2(graph(), reading_service=rs)
        it = iter(dl)
        head = [next(it) for _ in range(5)]
        state = pickle.loads(pickle.dumps(dl.state_dict()))
        rest = list(it)
        dl.shutdown()
        dl2 = DataLoader2(graph(), reading_service=SequentialReadingService(
            DistributedReadingService(timeout=60),
            MultiProcessingReadingService(1, worker_shards=2, timeout=30)))
        dl2.load_state_dict(state)
        restored = list(dl2)
        dl2.shutdown()
        # 57 items: rank 0's shards hold more batches; fullsync stops both ranks together.
        uneven = list(DataLoader2(graph(57), reading_service=SequentialReadingService(
            DistributedReadingService(timeout=60), MultiProcessingReadingService(workers))))
        with open(out_path, "wb") as f:
            pickle.dump({"head": head, "rest": rest, "restored": restored,
                         "uneven": len(uneven), "state": state}, f)
    finally:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("workers", [0, 2])
def test_two_ranks_over_gloo(tmp_path, workers):
    ctx = multiprocessing.get_context("fork")
    port = free_port()
    outs = [tmp_path / f"rank{r}.pkl" for r in range(2)]
    procs = [ctx.Process(target=rank_main, args=(r, port, workers, str(outs[r])))
             for r in range(2)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(120)
        assert [p.exitcode for p in procs] == [0, 0]
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
    res = [pickle.loads(o.read_bytes()) for o in outs]
    for r in res:
        assert r["restored"] == r["rest"]  # exact resume on each rank, 2 workers -> 1
    assert res[0]["uneven"] == res[1]["uneven"] == 14  # rank 0 alone would give 15
    seen = [x for r in res for b in r["head"] + r["rest"] for x in b]
    # The pre-sharding shuffle agreed across ranks: together they cover every item once.
    assert sorted(seen) == list(range(48))
    assert torch.tensor(seen).tolist() != list(range(48))
    # Both ranks' checkpoints resumed on one process (world size 1): the rest of both ranks.
    dl = DataLoader2(graph(), reading_service=MultiProcessingReadingService(workers))
    dl.load_state_dict([r["state"] for r in res])
    merged = list(dl)
    dl.shutdown()
    assert sorted(merged) == sorted(b for r in res for b in r["rest"])
