"""Graph utilities, seeding of random pipes, BufferList, and loader odds and ends."""

import pickle
import warnings

import pytest
import torch

from ember.data import (
    BufferList,
    DataLoader2,
    InProcessReadingService,
    MultiProcessingReadingService,
    find_dps,
    list_dps,
    remove_dp,
    replace_dp,
    traverse_dps,
)
from ember.data.datapipes.iter import IterableWrapper, Mapper, Shuffler
from ember.data.datapipes.map import SequenceWrapper
from ember.data.graph import seed_graph


def negate(x):
    return -x


def test_traverse_and_find():
    src = IterableWrapper(range(4))
    a, b = src.fork(2)
    out = a.map(negate).zip(b.shuffle())
    graph = traverse_dps(out)
    nodes = list_dps(graph)
    assert nodes[0] is out and src in nodes
    assert sum(n is src for n in nodes) == 1  # shared input listed once
    assert len(find_dps(graph, Mapper)) == 1 and len(find_dps(graph, Shuffler)) == 1
    with pytest.raises(TypeError, match="DataPipe"):
        traverse_dps([1])


def test_replace_and_remove():
    src = IterableWrapper(range(4))
    mapped = src.map(negate)
    out = mapped.batch(2)
    graph = replace_dp(traverse_dps(out), src, IterableWrapper(range(10, 14)))
    assert list(out) == [[-10, -11], [-12, -13]]
    remove_dp(graph, mapped)
    assert list(out) == [[10, 11], [12, 13]]
    with pytest.raises(ValueError, match="exactly one input"):
        remove_dp(traverse_dps(out), IterableWrapper([1]))
    root_swapped = replace_dp(traverse_dps(out), out, src)
    assert next(iter(root_swapped.values()))[0] is src


def test_seeds_shared_before_sharding_and_per_shard_after():
    pre = IterableWrapper(range(8)).shuffle()
    post = pre.sharding_filter().shuffle()
    s0, s1 = seed_graph(post, 123, 0), seed_graph(post, 123, 1)
    assert s0[id(pre)] == s1[id(pre)]
    assert s0[id(post)] != s1[id(post)]
    assert seed_graph(post, 124, 0)[id(pre)] != s0[id(pre)]


def test_buffer_list():
    items = ["a", "", "ünïcode", "x" * 1000]
    b = BufferList(items)
    assert list(b) == items and b[-1] == items[-1] and b[1:3] == items[1:3]
    assert BufferList([b"\x00", b"yz"])[1] == b"yz"
    objs = BufferList([{"k": 1}, (2, 3)])
    assert objs.kind == "pickle" and objs[0] == {"k": 1}
    assert pickle.loads(pickle.dumps(b))[2] == "ünïcode"
    with pytest.raises(IndexError, match="out of range"):
        b[4]
    with pytest.raises(ValueError, match="kind"):
        BufferList(items, kind="arrow")


def test_loader_accepts_map_pipes_and_prefetches_in_process():
    assert list(DataLoader2(SequenceWrapper("abc"))) == ["a", "b", "c"]
    dl = DataLoader2(IterableWrapper(range(5)),
                     reading_service=InProcessReadingService(prefetch_cnt=2))
    it = iter(dl)
    assert next(it) == 0
    state = dl.state_dict()
    rest = list(it)
    dl2 = DataLoader2(IterableWrapper(range(5)),
                      reading_service=InProcessReadingService(prefetch_cnt=2))
    dl2.load_state_dict(state)
    assert rest == list(dl2) == [1, 2, 3, 4]


def test_restore_checks_shard_count_and_pin_memory_warns():
    dp = IterableWrapper(range(6)).sharding_filter()
    dl = DataLoader2(dp, reading_service=InProcessReadingService(worker_shards=2))
    it = iter(dl)
    next(it)
    state = dl.state_dict()
    other = DataLoader2(dp, reading_service=InProcessReadingService(worker_shards=3))
    other.load_state_dict(state)
    with pytest.raises(ValueError, match="worker_shards=3"):
        iter(other)
    if not torch.cuda.is_available():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            MultiProcessingReadingService(1, pin_memory=True)
        assert any("pin_memory" in str(w.message) for w in caught)
