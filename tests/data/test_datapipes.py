"""Behaviour of each DataPipe against plain-Python references, plus per-pipe resume."""

import csv
import io
import json
import os
import random

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ember.data import IterDataPipe, functional_datapipe
from ember.data.datapipes.iter import (
    FileLister,
    FileOpener,
    IterableWrapper,
    Mapper,
    Shuffler,
)
from ember.data.datapipes.map import SequenceWrapper

R = IterableWrapper(range(10))


def test_functional_chaining_and_registration():
    @functional_datapipe("times_three_for_test")
    class Times3(IterDataPipe):
        def __init__(self, dp):
            self.dp = dp

        def __iter__(self):
            for x in self.dp:
                yield 3 * x

    assert list(R.times_three_for_test().header(3)) == [0, 3, 6]
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        R.nope  # noqa: B018
    with pytest.raises(ValueError, match="already registered"):
        functional_datapipe("map")(Times3)


def test_map_columns_follow_torchdata():
    data = IterableWrapper([(1, 2, 3), (4, 5, 6)])
    assert list(data.map(sum)) == [6, 15]
    assert list(data.map(lambda x: -x, input_col=1)) == [(1, -2, 3), (4, -5, 6)]
    assert list(data.map(lambda a, b: a + b, input_col=[0, 2])) == [(4, 2), (10, 5)]
    assert list(data.map(lambda x: -x, input_col=0, output_col=-1)) == [(1, 2, 3, -1),
                                                                       (4, 5, 6, -4)]
    dicts = IterableWrapper([{"a": 1}])
    assert list(dicts.map(str, input_col="a", output_col="b")) == [{"a": 1, "b": "1"}]
    with pytest.raises(ValueError, match="output_col must be None"):
        data.map(sum, output_col=1)
    with pytest.raises(TypeError, match="fn must be callable"):
        data.map(3)


def test_filter_flatmap_batch_unbatch():
    assert list(R.filter(lambda x: x % 3 == 0)) == [0, 3, 6, 9]
    with pytest.raises(ValueError, match="bool"):
        list(R.filter(lambda x: x))
    assert list(IterableWrapper(["ab", "c"]).flatmap(list)) == ["a", "b", "c"]
    assert list(R.batch(4)) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert list(R.batch(4, drop_last=True)) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert len(R.batch(4)) == 3
    assert list(R.batch(2).batch(2).unbatch(2)) == list(range(10))
    assert list(IterableWrapper([[1, [2, 3]], [[4]]]).unbatch(-1)) == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="batch_size"):
        R.batch(0)


def test_combining_pipes():
    a, b = IterableWrapper(range(3)), IterableWrapper(range(10, 15))
    assert list(a.concat(b)) == [0, 1, 2, 10, 11, 12, 13, 14]
    assert list(a.zip(b)) == [(0, 10), (1, 11), (2, 12)]
    assert list(a.mux(b)) == [0, 10, 1, 11, 2, 12]
    assert list(a.mux_longest(b)) == [0, 10, 1, 11, 2, 12, 13, 14]
    assert list(R.header(3)) == [0, 1, 2]
    assert list(a.cycle(2)) == [0, 1, 2, 0, 1, 2]
    assert list(a.cycle().header(7)) == [0, 1, 2, 0, 1, 2, 0]
    assert list(a.enumerate(5)) == [(5, 0), (6, 1), (7, 2)]


def test_fork_and_demux():
    x, y = R.fork(2)
    assert list(x.zip(y)) == [(i, i) for i in range(10)]
    x, y = IterableWrapper([[1]]).fork(2, copy="deep")
    (a, b), = x.zip(y)
    assert a == b and a is not b
    x, y = R.fork(2, buffer_size=3)
    assert list(x.header(2)) == [0, 1]
    with pytest.raises(BufferError, match="buffer_size=3"):
        list(x)
    even, odd, rest = R.demux(3, lambda v: v % 3)
    assert (list(even), list(odd), list(rest)) == ([0, 3, 6, 9], [1, 4, 7], [2, 5, 8])
    a, b = R.demux(2, lambda v: None if v > 5 else v % 2, drop_none=True)
    assert list(a.zip(b)) == [(0, 1), (2, 3), (4, 5)]
    with pytest.raises(ValueError, match="classifier_fn must return"):
        list(R.demux(2, lambda v: 7)[0])


def test_collate_matches_torch_default_collate():
    samples = [{"x": torch.full((2,), float(i)), "y": i} for i in range(4)]
    out = list(IterableWrapper(samples).batch(2).collate())
    ref = torch.utils.data.default_collate(samples[:2])
    assert torch.equal(out[0]["x"], ref["x"]) and torch.equal(out[0]["y"], ref["y"])


def test_shuffle_is_a_permutation_and_seeded():
    got = list(R.shuffle(buffer_size=4).set_seed(0))
    assert sorted(got) == list(range(10)) and got != list(range(10))
    assert got == list(R.shuffle(buffer_size=4).set_seed(0))
    assert list(R.shuffle().set_shuffle(False)) == list(range(10))
    torch.manual_seed(3)
    a = list(R.shuffle())
    torch.manual_seed(3)
    assert list(R.shuffle()) == a


def test_bucketbatch_groups_sorted_buckets():
    data = IterableWrapper(list(range(30))[::-1])
    batches = list(data.bucketbatch(batch_size=5, batch_num=2, sort_key=sorted))
    assert sorted(x for b in batches for x in b) == list(range(30))
    assert all(b == sorted(b) and max(b) - min(b) == 4 for b in batches)


def test_random_split_exact_sizes_and_stable():
    splits = IterableWrapper(range(100)).random_split(weights={"a": 0.7, "b": 0.3}, seed=1)
    a, b = list(splits["a"]), list(splits["b"])
    assert len(a) == 70 and len(b) == 30 and sorted(a + b) == list(range(100))
    assert a == list(splits["a"])  # same split every epoch
    again = IterableWrapper(range(100)).random_split(weights={"a": 7, "b": 3}, seed=1,
                                                     target="a")
    assert list(again) == a


def test_groupby():
    groups = list(IterableWrapper(range(10)).groupby(lambda x: x % 3, group_size=2,
                                                     keep_key=True))
    assert [k for k, _ in groups[:3]] == [0, 1, 2]
    assert sorted(x for _, g in groups for x in g) == list(range(10))
    assert all(len(g) <= 2 and len({x % 3 for x in g}) == 1 for _, g in groups)
    with pytest.raises(RuntimeError, match="guaranteed_group_size"):
        list(R.groupby(lambda x: x % 3, group_size=3, guaranteed_group_size=3))
    kept = list(R.groupby(lambda x: x % 3, group_size=3, guaranteed_group_size=3,
                          drop_remaining=True))
    assert all(len(g) == 3 for g in kept)


def test_sharding_filter_partitions():
    dp = R.sharding_filter()
    parts = []
    for k in range(3):
        dp.apply_sharding(3, k)
        parts.append(list(dp))
    assert parts == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]


def test_prefetch_threadpool_map_and_caches(tmp_path):
    assert list(R.prefetch(3)) == list(range(10))
    assert list(R.threadpool_map(lambda x: x * x, scheduled_tasks=3)) == [x * x for x in range(10)]
    calls = []
    cached = R.map(lambda x: calls.append(x) or x).in_memory_cache()
    assert list(cached) == list(cached) == list(range(10))
    assert len(calls) == 10

    def fetch(name):
        calls.append(name)
        return name, f"content of {name}".encode()

    paths = lambda name: str(tmp_path / name)
    dp = IterableWrapper(["a", "b"]).on_disk_cache(filepath_fn=paths).map(fetch).end_caching(
        mode="wb", same_filepath_fn=True)
    calls.clear()
    assert list(dp) == [paths("a"), paths("b")]
    assert list(dp) == [paths("a"), paths("b")] and calls == ["a", "b"]
    assert open(paths("a"), "rb").read() == b"content of a"


def _write_files(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.txt").write_text("l1\nl2\n")
    (tmp_path / "b.csv").write_text("x,y\n1,2\n3,4\n")
    (tmp_path / "c.json").write_text(json.dumps({"k": [1, 2]}))
    (tmp_path / "sub" / "d.txt").write_text("deep\n")


def test_file_pipes(tmp_path):
    _write_files(tmp_path)
    root = str(tmp_path)
    assert list(FileLister(root, "*.txt")) == [os.path.join(root, "a.txt")]
    assert sorted(FileLister(root, recursive=True)) == sorted(
        os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)
    lines = list(FileOpener(FileLister(root, "*.txt", recursive=True)).readlines(
        return_path=False))
    assert lines == ["l1", "l2", "deep"]
    rows = list(FileOpener(FileLister(root, "*.csv")).parse_csv(skip_lines=1))
    assert rows == list(csv.reader(io.StringIO("1,2\n3,4\n")))
    (path, doc), = FileOpener(FileLister(root, "*.json")).parse_json_files()
    assert doc == {"k": [1, 2]}
    with pytest.raises(FileNotFoundError, match="does not exist"):
        list(FileLister(str(tmp_path / "missing")))
    (tmp_path / "bad.json").write_text("{oops")
    with pytest.raises(RuntimeError, match="invalid JSON"):
        list(FileOpener(FileLister(root, "bad.json")).parse_json_files())


def test_map_pipes_and_conversions():
    m = SequenceWrapper(list("abcde"))
    assert list(m.batch(2)) == [["a", "b"], ["c", "d"], ["e"]]
    assert m.concat(SequenceWrapper("xy"))[6] == "y"
    assert list(m.zip(SequenceWrapper(range(3)))) == [("a", 0), ("b", 1), ("c", 2)]
    assert m.map(str.upper)[1] == "B"
    shuffled = list(m.shuffle().set_seed(4))
    assert sorted(shuffled) == list("abcde")
    assert list(m.to_iter_datapipe()) == list("abcde")
    back = IterableWrapper([("k1", 1), ("k2", 2)]).to_map_datapipe()
    assert back["k2"] == 2 and len(back) == 2
    with pytest.raises(KeyError, match="k3"):
        back["k3"]


class GeneratorPipe(IterDataPipe):
    """A user pipe written as a generator: resumes by documented replay."""

    def __init__(self, n):
        self.n = n
        self.runs = 0

    def __iter__(self):
        self.runs += 1
        yield from range(self.n)


def test_generator_pipes_resume_by_replay(resume):
    pipe = GeneratorPipe(6)
    rest, restored = resume(lambda: pipe, 4)
    assert rest == restored == [4, 5]
    assert pipe.runs == 2  # the restore re-ran the generator (replay), as documented


PIPELINES = {
    "map_filter_batch": lambda: R.map(lambda x: x * 2).filter(lambda x: x % 3 != 0).batch(2),
    "shuffle_unbatch": lambda: R.batch(3).shuffle(buffer_size=2).set_seed(1).unbatch(),
    "fork_zip": lambda: (lambda ab: ab[0].zip(ab[1].map(str)))(R.fork(2)),
    "demux_mux": lambda: (lambda ab: ab[0].mux_longest(ab[1]))(R.demux(2, lambda v: v % 2)),
    "concat_cycle": lambda: R.header(4).concat(R.header(2)).cycle(3),
    "flatmap_enum": lambda: R.flatmap(lambda x: [x] * (x % 3)).enumerate(),
    "groupby": lambda: R.groupby(lambda x: x % 4, buffer_size=5),
    "bucketbatch": lambda: R.bucketbatch(2, batch_num=2, bucket_num=2).set_seed(2),
    "prefetch": lambda: R.prefetch(4).map(lambda x: -x),
    "threadpool": lambda: R.threadpool_map(lambda x: x + 1, scheduled_tasks=4),
    "map_shuffle": lambda: SequenceWrapper(range(8)).shuffle().set_seed(3),
    "random_split": lambda: R.random_split(weights={"a": 1, "b": 1}, seed=0, target="b"),
}


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_every_pipe_resumes_exactly(resume, name):
    n = len(list(PIPELINES[name]()))
    for stop in sorted({0, 1, n // 2, n - 1}):
        rest, restored = resume(PIPELINES[name], stop)
        assert rest == restored, (name, stop)


def test_explicit_pipes_do_not_replay(resume):
    pulled = []
    src = IterableWrapper(range(20)).map(lambda x: pulled.append(x) or x)
    make = lambda: Shuffler(src, buffer_size=3).set_seed(0)
    rest, restored = resume(make, 10)
    assert rest == restored
    # First pass pulls 20, second resumes: the restored iterator never re-reads items 0..12.
    assert pulled.count(0) == 1


def test_file_readers_resume_mid_file(tmp_path, resume):
    for i in range(3):
        (tmp_path / f"{i}.txt").write_text("".join(f"{i}-{j}\n" for j in range(4)))
    make = lambda: FileOpener(FileLister(str(tmp_path), "*.txt")).readlines()
    rest, restored = resume(make, 5)
    assert rest == restored and rest[0][1] == "1-1"


def test_bad_arguments_name_themselves():
    with pytest.raises(TypeError, match="datapipe must be an IterDataPipe"):
        Mapper([1, 2], str)
    with pytest.raises(ValueError, match="buffer_size"):
        R.shuffle(buffer_size=0)
    with pytest.raises(ValueError, match="mode"):
        FileOpener(R, mode="w")
    with pytest.raises(ValueError, match="num_instances"):
        R.fork(0)


def test_iterablewrapper_over_numpy_and_generators():
    arr = np.arange(5)
    assert list(IterableWrapper(arr, deepcopy=False)) == list(arr)
    gen_source = IterableWrapper((x for x in range(3)), deepcopy=False)
    assert list(gen_source) == [0, 1, 2]
    random.seed(0)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(PIPELINES)), stop=st.integers(0, 40))
def test_resume_property_random_stop(resume, name, stop):
    n = len(list(PIPELINES[name]()))
    rest, restored = resume(PIPELINES[name], min(stop, n))
    assert rest == restored


def test_no_built_in_pipe_falls_back_to_replay():
    built_in = {name: cls for name, cls in IterDataPipe.functions.items()
                if cls.__module__.startswith("ember.data") and issubclass(cls, IterDataPipe)}
    replaying = [name for name, cls in built_in.items()
                 if cls._iterator is IterDataPipe._user_iterator]
    assert len(built_in) > 30 and replaying == []


def read_member(item):
    path, stream = item
    return os.path.basename(path), stream.read()


def test_file_archive_cache_and_collate_pipes_resume_exactly(tmp_path, resume):
    import tarfile
    import zipfile

    for i in range(3):
        (tmp_path / f"{i}.csv").write_text("".join(f"{i},{j}\n" for j in range(3)))
        (tmp_path / f"{i}.json").write_text(json.dumps({"i": i}))
    with tarfile.open(tmp_path / "a.tar", "w") as tar, \
            zipfile.ZipFile(tmp_path / "a.zip", "w") as zf:
        for i in range(4):
            data = f"member {i}".encode()
            info = tarfile.TarInfo(f"m{i}.txt")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
            zf.writestr(f"z{i}.txt", data)
    opened = lambda pattern: FileOpener(FileLister(str(tmp_path), pattern), mode="b")
    cases = {
        "parse_csv": lambda: FileOpener(FileLister(str(tmp_path), "*.csv")).parse_csv(),
        "parse_json_files": lambda: FileOpener(FileLister(str(tmp_path), "*.json"))
        .parse_json_files(),
        "load_from_tar": lambda: opened("*.tar").load_from_tar().map(read_member),
        "load_from_zip": lambda: opened("*.zip").load_from_zip().map(read_member),
        "in_memory_cache": lambda: R.in_memory_cache().shuffle(buffer_size=3).set_seed(5),
        "collate_mux": lambda: R.map(torch.tensor).batch(3).collate().mux(R.header(3)),
    }
    for name, make in cases.items():
        n = len(list(make()))
        assert n >= 3, name
        for stop in (1, n // 2, n - 1):
            rest, restored = resume(make, stop)
            assert len(rest) == n - stop and repr(rest) == repr(restored), (name, stop)


def test_batches_of_a_sharded_sequence_are_taken_in_runs(resume):
    """range/list/array -> sharding_filter -> batch takes runs of indices at once: same
    items, batch sizes and resume points as item-by-item iteration."""
    from ember.data.datapipes.context import IterContext, activate

    for src in (range(23), list(range(23)), np.arange(23)):
        for n, k in [(1, 0), (2, 1), (3, 0), (5, 4)]:
            ctx = IterContext(num_shards=n, shard_id=k)
            make = lambda s=src: IterableWrapper(s, deepcopy=False).sharding_filter().batch(4)
            with activate(ctx):
                got = [[int(x) for x in b] for b in make()]
            want = list(range(k, 23, n))
            assert got == [want[i:i + 4] for i in range(0, len(want), 4)], (n, k)
            for stop in range(len(got) + 1):
                with activate(ctx):
                    rest, restored = resume(make, stop)
                assert [list(map(int, b)) for b in rest] == got[stop:]
                assert [list(map(int, b)) for b in restored] == got[stop:]
