"""Mid-epoch resume with a changed worker count, and onto a different number of ranks.

Ranks are played in one process by a reading service that sets rank and world size (no
collectives: fullsync is off), so the re-sharding rules are tested without torch.distributed;
test_distributed.py feeds real gloo checkpoints through the same path.
"""

import pickle
from collections import Counter

import pytest

from ember.data import (
    DataLoader2,
    InProcessReadingService,
    MultiProcessingReadingService,
    ReadingServiceInterface,
)
from ember.data.datapipes.iter import IterableWrapper

T = 30.0


def tag(b):
    return tuple(b)


def graph(n=60):
    """Random before and after sharding, batches per shard: any lost, repeated or
    re-ordered item changes the batches."""
    return (IterableWrapper(range(n)).shuffle().sharding_filter().shuffle(buffer_size=4)
            .batch(2).map(tag))


class Ranked(ReadingServiceInterface):
    """Rank ``rank`` of ``world_size`` with ``workers`` processes, without torch.distributed."""

    def __init__(self, rank, world_size, workers=0, worker_shards=None):
        self.rank, self.world_size = rank, world_size
        self.inner = (MultiProcessingReadingService(workers, worker_shards=worker_shards,
                                                    timeout=T) if workers
                      else InProcessReadingService(worker_shards=worker_shards))

    def plan(self, plan):
        plan = self.inner.plan(plan)
        plan.rank, plan.world_size = self.rank, self.world_size
        return plan


def service(workers, shards=None):
    if workers:
        return MultiProcessingReadingService(workers, worker_shards=shards, timeout=T)
    return InProcessReadingService(worker_shards=shards)


def stop_and_resume(before, after, stop, shards=None):
    dl = DataLoader2(graph(), reading_service=service(before, shards))
    dl.seed(11)
    it = iter(dl)
    head = [next(it) for _ in range(stop)]
    state = pickle.loads(pickle.dumps(dl.state_dict()))
    rest = list(it)
    dl.shutdown()
    dl2 = DataLoader2(graph(), reading_service=service(after, shards))
    dl2.load_state_dict(state)
    restored = list(dl2)
    dl2.shutdown()
    return head, rest, restored


@pytest.mark.parametrize("before,after", [(0, 2), (2, 1), (1, 3)])
@pytest.mark.parametrize("shards", [None, 3])
def test_changed_worker_count_continues_the_same_stream(before, after, shards):
    head, rest, restored = stop_and_resume(before, after, 7, shards)
    assert restored == rest and len(head) == 7 and len(head + rest) == 30


def run_ranks(world, stops, workers=0, shards=2):
    """Each rank reads ``stops[r]`` batches; returns heads, rests and the saved states."""
    heads, rests, states = [], [], []
    for r in range(world):
        dl = DataLoader2(graph(), reading_service=Ranked(r, world, workers, shards))
        dl.seed(5)
        it = iter(dl)
        heads.append([next(it) for _ in range(stops[r])])
        states.append(pickle.loads(pickle.dumps(dl.state_dict())))
        rests.append(list(it))
        dl.shutdown()
    return heads, rests, states


def resume_on(states, world, workers=0):
    out = []
    for r in range(world):
        dl = DataLoader2(graph(), reading_service=Ranked(r, world, workers))
        dl.load_state_dict(states)
        out.append(list(dl))
        dl.shutdown()
    return out


def flat(streams):
    return Counter(b for s in streams for b in s)


@pytest.mark.parametrize("old,new,saved_with,workers",
                         [(2, 3, 0, 0), (2, 1, 0, 2), (3, 2, 2, 1), (1, 2, 2, 0)])
def test_resume_on_another_world_size_yields_each_remaining_item_once(old, new, saved_with,
                                                                      workers):
    # Saved with workers: the states also hold batches produced but not yet delivered.
    heads, rests, states = run_ranks(old, [3, 5, 1][:old], workers=saved_with)
    assert sorted(x for b in flat(heads + rests) for x in b) == list(range(60))
    restored = resume_on(states, new, workers)
    assert flat(restored) == flat(rests)  # none lost, none repeated
    assert all(restored)  # every new rank got a share


def test_same_world_size_from_the_list_is_exact():
    heads, rests, states = run_ranks(2, [4, 2])
    assert resume_on(states, 2) == rests


def test_a_resharded_epoch_resumes_exactly_again():
    _, _, states = run_ranks(2, [3, 4])
    dl = DataLoader2(graph(), reading_service=Ranked(1, 3))
    dl.load_state_dict(states)
    it = iter(dl)
    next(it)
    state = pickle.loads(pickle.dumps(dl.state_dict()))
    rest = list(it)
    dl.shutdown()
    dl2 = DataLoader2(graph(), reading_service=Ranked(1, 3, workers=2))
    dl2.load_state_dict(state)
    assert list(dl2) == rest
    dl2.shutdown()


def test_more_ranks_than_running_shards_leaves_some_empty():
    _, rests, states = run_ranks(1, [2], shards=2)
    restored = resume_on(states, 3)
    assert flat(restored) == flat(rests) and restored[2] == []


def test_world_size_mismatch_and_bad_lists_are_clear_errors():
    _, _, states = run_ranks(2, [1, 1])
    dl = DataLoader2(graph(), reading_service=Ranked(0, 3))
    dl.load_state_dict(states[0])
    with pytest.raises(ValueError, match="rank 0 of 2 ranks.*rank 0 of 3.*as a list"):
        iter(dl)
    dl.load_state_dict(states[::-1])
    with pytest.raises(ValueError, match="rank order"):
        iter(dl)
    other = dict(states[1], epoch_index=states[1]["epoch_index"] + 1)
    with pytest.raises(ValueError, match="different epochs"):
        dl.load_state_dict([states[0], other])
    with pytest.raises(ValueError, match=r"state\[1\] must be a dict"):
        dl.load_state_dict([states[0], {"nope": 1}])
    dl.shutdown()
