"""DataLoader2: iterate a pipe graph under a reading service, with exact mid-epoch resume.

One epoch runs ``L`` logical shards of the graph (see :mod:`ember.data.reading_service`),
merged round-robin (or first-ready with ``in_order=False``). ``state_dict()`` mid-epoch holds
each shard's iterator state plus the items workers had produced but the caller had not yet
received, so ``load_state_dict()`` continues with exactly the next item - never replaying.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import shutil
import signal
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from multiprocessing.connection import wait as wait_connections

import torch
import torch.utils.data

from ember.core.logs import get_logger
from ember.data.datapipes.base import IterDataPipe, MapDataPipe
from ember.data.datapipes.context import derive_seed
from ember.data.datapipes.iter_basic import IterableWrapper, ShardingFilter
from ember.data.graph import find_dps, traverse_dps
from ember.data.reading_service import (
    DEFAULT_TIMEOUT,
    InProcessReadingService,
    Plan,
    ReadingServiceInterface,
)
from ember.data.reshard import global_ids, reshard
from ember.data.transport import SlotReader
from ember.data.worker import STACK_SIGNAL, ShardSpec, build_shard_iterator, worker_loop

__all__ = ["DataLoader2", "DataLoader2Iterator"]

log = get_logger("data")
_POLL = 0.05
_STATE_VERSION = 1


class _Getter:
    """``dataset[i]`` as a picklable callable."""

    def __init__(self, dataset) -> None:
        self.dataset = dataset

    def __call__(self, index):
        return self.dataset[index]


def _as_datapipe(data) -> IterDataPipe:
    if isinstance(data, IterDataPipe):
        return data
    if isinstance(data, MapDataPipe) or (isinstance(data, torch.utils.data.Dataset)
                                         and not isinstance(data,
                                                            torch.utils.data.IterableDataset)):
        # Index -> shard -> fetch, so each worker loads only its own samples.
        return IterableWrapper(range(len(data)), deepcopy=False).sharding_filter().map(
            _Getter(data))
    if isinstance(data, torch.utils.data.IterableDataset):
        return IterableWrapper(data, deepcopy=False)
    raise TypeError(f"datapipe must be an IterDataPipe, MapDataPipe or torch Dataset, "
                    f"got {type(data).__name__}")


class _InProcess:
    """Backend running every shard's iterator in this process."""

    def __init__(self, datapipe, seed: int, specs: list[ShardSpec], epoch) -> None:
        self.epoch = epoch
        self.iters = {s.local_id: build_shard_iterator(datapipe, seed, s) for s in specs
                      if s.state != "exhausted"}

    def fetch(self, shard: int):
        try:
            return "item", next(self.iters[shard])
        except StopIteration:
            self.iters.pop(shard).close()
            return "end", None

    def fetch_any(self):
        for s in sorted(self.iters):
            if s not in self.epoch.exhausted:
                return s, *self.fetch(s)
        return None

    def states(self) -> dict:
        return {s: it.state_dict() for s, it in self.iters.items()}

    def close(self) -> None:
        for it in self.iters.values():
            it.close()
        self.iters.clear()


def _describe_exit(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class _BrokenPool(Exception):
    """A worker failed while its epoch was being abandoned: restart the pool."""


class _Workers:
    """Persistent worker processes (kept across epochs); items arrive through each worker's
    shared-memory slots."""

    def __init__(self, datapipe, plan: Plan, n: int, first_seed: int) -> None:
        self.plan, self.n = plan, n
        self.epoch = None
        self.owner: dict[int, int] = {}
        ctx = multiprocessing.get_context(plan.multiprocessing_context)
        self.procs, self.data, self.cmds, self.sems, self.readers = [], [], [], [], []
        self.alive: set[int] = set()
        self._token = 0
        self._stacks = tempfile.mkdtemp(prefix="ember-data-stacks-")
        try:
            for w in range(n):
                data_r, data_w = ctx.Pipe(duplex=False)
                cmd_r, cmd_w = ctx.Pipe(duplex=False)
                sem = ctx.Semaphore(plan.prefetch_factor)
                proc = ctx.Process(
                    target=worker_loop, name=f"ember-data-worker-{w}", daemon=True,
                    args=(datapipe, w, n, first_seed, plan.prefetch_factor,
                          plan.worker_init_fn, data_w, cmd_r, sem, os.getpid(),
                          os.path.join(self._stacks, f"{w}.txt")))
                try:
                    proc.start()
                except (pickle.PicklingError, AttributeError, TypeError) as e:
                    raise TypeError(
                        f"cannot start workers with multiprocessing_context="
                        f"{plan.multiprocessing_context!r}: the datapipe and worker_init_fn "
                        f"must be picklable (no lambdas or local functions): {e}") from e
                data_w.close()
                cmd_r.close()
                self.procs.append(proc)
                self.data.append(data_r)
                self.cmds.append(cmd_w)
                self.sems.append(sem)
                self.readers.append(SlotReader(plan.prefetch_factor, plan.pin_memory))
        except BaseException:
            self.close()
            raise

    def start_epoch(self, epoch, seed: int, specs: list[ShardSpec]) -> None:
        self.epoch = epoch
        self.owner = {s.local_id: s.local_id % self.n for s in specs}
        self.alive = set(range(self.n))
        for w in range(self.n):
            mine = [s for s in specs if s.local_id % self.n == w]
            self.cmds[w].send(("epoch", seed, mine, epoch.cursor))

    def abandon(self) -> None:
        """Drop the current epoch in every worker and drain what they had already sent."""
        self._token += 1
        for w in range(self.n):
            self.cmds[w].send(("reset", self._token))
        for w in range(self.n):
            while True:
                try:
                    msg = self._recv(w)
                except RuntimeError as e:  # died or timed out: replace the pool
                    raise _BrokenPool(str(e)) from e
                if msg[0] == "item":
                    if msg[5] is not None:  # a new slot buffer: the reader must still map it
                        self.readers[w].slots[msg[4]] = pickle.loads(msg[5])
                    self.sems[w].release()
                elif msg[0] == "end":
                    self.sems[w].release()
                elif msg[0] == "error":
                    # The failure belongs to the abandoned epoch; the worker now only
                    # accepts "stop", so the pool is replaced rather than reset.
                    raise _BrokenPool(msg[2])
                elif msg[0] == "reset" and msg[1] == self._token:
                    break
        self.epoch = None

    def _recv(self, w: int) -> tuple:
        conn, proc = self.data[w], self.procs[w]
        start = time.monotonic()
        eof = False
        while True:
            if not eof and conn.poll(_POLL):
                try:
                    return pickle.loads(conn.recv_bytes())
                except EOFError:
                    eof = True  # the worker closed its end: it is exiting or dead
            if eof or not proc.is_alive():
                if not eof and conn.poll(0):
                    continue
                proc.join(1.0)
                raise RuntimeError(f"DataLoader worker {w} (pid {proc.pid}) exited "
                                   f"unexpectedly ({_describe_exit(proc.exitcode)})")
            if time.monotonic() - start > self.plan.timeout:
                raise self._timed_out([w])

    def _stack_of(self, w: int) -> str:
        """Worker ``w``'s Python stacks, asked for by signal (empty where that cannot work)."""
        proc, path = self.procs[w], os.path.join(self._stacks, f"{w}.txt")
        if STACK_SIGNAL is None or not proc.is_alive():
            return ""
        try:
            os.kill(proc.pid, STACK_SIGNAL)
        except OSError:
            return ""
        deadline, size = time.monotonic() + 2.0, -1
        while time.monotonic() < deadline:  # until the dump stops growing
            time.sleep(0.1)
            now = os.path.getsize(path) if os.path.exists(path) else 0
            if now and now == size:
                break
            size = now
        try:
            with open(path, errors="replace") as f:
                return f.read()[-6000:]
        except OSError:
            return ""

    def _timed_out(self, workers: list[int]) -> RuntimeError:
        lines = [f"DataLoader timed out after {self.plan.timeout:g}s waiting for worker(s) "
                 + ", ".join(f"{w} (pid {self.procs[w].pid})" for w in workers)
                 + " (DataLoader2(timeout=...) sets the bound)"]
        for w in workers:
            stack = self._stack_of(w)
            if stack:
                lines.append(f"worker {w}'s Python stacks at the timeout:\n{stack.rstrip()}")
        return RuntimeError("\n".join(lines))

    def _handle(self, w: int, msg: tuple):
        kind = msg[0]
        if kind == "item":
            _, s, data, metas, slot, handle = msg
            value = self.readers[w].decode(data, metas, handle, slot)
            self.sems[w].release()
            self.epoch.pending[s].append(("item", value))
        elif kind == "end":
            self.sems[w].release()
            self.epoch.pending[msg[1]].append(("end", None))
        elif kind == "error":
            _, _, name, tb, exc = msg
            text = f"Caught {name} in DataLoader worker {w} (pid {self.procs[w].pid}).\n" \
                   f"Original {tb}"
            err: BaseException = RuntimeError(text)
            if exc is not None:
                try:
                    err = type(pickle.loads(exc))(text)
                except Exception:
                    pass
            raise err
        return msg

    def fetch(self, shard: int):
        w = self.owner[shard]
        while not self.epoch.pending[shard]:
            self._handle(w, self._recv(w))
        return self.epoch.pending[shard].popleft()

    def fetch_any(self):
        pending = self.epoch.pending
        start = time.monotonic()
        while True:
            for s in sorted(pending):
                if pending[s]:
                    return s, *pending[s].popleft()
            live = [self.data[w] for w in sorted(self.alive)]
            if not live:
                return None
            ready = wait_connections(live, timeout=_POLL)
            if not ready:
                for w in sorted(self.alive):
                    if not self.procs[w].is_alive() and not self.data[w].poll(0):
                        self._recv(w)  # raises with the exit reason
                if time.monotonic() - start > self.plan.timeout:
                    raise self._timed_out(sorted(self.alive))
                continue
            start = time.monotonic()
            for conn in ready:
                w = self.data.index(conn)
                self._handle(w, self._recv(w))

    def states(self) -> dict:
        self._token += 1
        for w in sorted(self.alive):
            self.cmds[w].send(("state", self._token))
        out: dict = {}
        for w in sorted(self.alive):
            while True:
                msg = self._handle(w, self._recv(w))
                if msg[0] == "state" and msg[1] == self._token:
                    out.update(msg[2])
                    break
        return out

    def mark_done(self, shard: int) -> None:
        w = self.owner[shard]
        if all(self.owner[s] != w or s in self.epoch.exhausted for s in self.owner):
            self.alive.discard(w)

    def close(self) -> None:
        for c in self.cmds:
            try:
                c.send(("stop",))
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + 2.0
        for p in self.procs:
            p.join(max(0.0, deadline - time.monotonic()))
        for p in self.procs:
            if p.is_alive():
                p.terminate()
                p.join(1.0)
            if p.is_alive():
                p.kill()
                p.join(1.0)
        for c in self.cmds + self.data:
            c.close()
        self.procs, self.cmds, self.data = [], [], []
        shutil.rmtree(self._stacks, ignore_errors=True)


class _Epoch:
    """One pass: L shard streams merged; the checkpointable unit of DataLoader2."""

    def __init__(self, datapipe, plan: Plan, seed: int, num_shards: int,
                 restore: dict | None = None, pool: _Workers | None = None) -> None:
        self.plan, self.seed, self.L = plan, seed, num_shards
        self.cursor = 0
        self.exhausted: set[int] = set()
        self.pending: dict[int, deque] = {s: deque() for s in range(num_shards)}
        shard_states: dict = {}
        if restore is not None:
            self.cursor = restore["cursor"]
            self.exhausted = set(restore["exhausted"])
            shard_states = restore["shards"]
            for s, items in restore["pending"].items():
                self.pending[int(s)].extend(tuple(x) for x in items)
        if restore is not None:
            ids, num_global = global_ids(restore), restore.get("num_global",
                                                            plan.world_size * num_shards)
        else:
            ids = [plan.rank * num_shards + s for s in range(num_shards)]
            num_global = plan.world_size * num_shards
        self.global_ids, self.num_global = ids, num_global
        specs = [ShardSpec(s, ids[s], num_global, shard_states.get(s, shard_states.get(str(s))))
                 for s in range(num_shards)]
        self.finished = False
        if pool is not None:
            self.backend = pool
            pool.start_epoch(self, seed, specs)
        else:
            self.backend = _InProcess(datapipe, seed, specs, self)

    def _take(self, shard: int):
        if self.pending[shard]:
            return self.pending[shard].popleft()
        return self.backend.fetch(shard)

    def next(self):
        if self.plan.in_order or isinstance(self.backend, _InProcess):
            while len(self.exhausted) < self.L:
                s = self.cursor
                self.cursor = (s + 1) % self.L
                if s in self.exhausted:
                    continue
                kind, value = self._take(s)
                if kind == "item":
                    return value
                self._exhaust(s)
        else:
            while len(self.exhausted) < self.L:
                got = self.backend.fetch_any()
                if got is None:
                    break
                s, kind, value = got
                if kind == "item":
                    return value
                self._exhaust(s)
        self.finished = True
        raise StopIteration

    def _exhaust(self, shard: int) -> None:
        self.exhausted.add(shard)
        if isinstance(self.backend, _Workers):
            self.backend.mark_done(shard)

    def state_dict(self) -> dict:
        states = self.backend.states()
        shards = {s: ("exhausted" if s in self.exhausted else states.get(s, "exhausted"))
                  for s in range(self.L)}
        return {"seed": self.seed, "num_shards": self.L, "rank": self.plan.rank,
                "world_size": self.plan.world_size, "global_ids": self.global_ids,
                "num_global": self.num_global, "cursor": self.cursor,
                "exhausted": sorted(self.exhausted), "shards": shards,
                "pending": {s: list(q) for s, q in self.pending.items() if q}}

    def close(self) -> None:
        """End the epoch; persistent workers are kept (drained if the epoch was cut short)."""
        if isinstance(self.backend, _Workers):
            if not self.finished:
                self.backend.abandon()
        else:
            self.backend.close()


class DataLoader2Iterator(Iterator):
    """The iterator ``iter(DataLoader2)`` returns; checkpoint through its loader."""

    def __init__(self, loader: DataLoader2) -> None:
        self.loader = loader

    def __next__(self):
        return self.loader._next()

    def state_dict(self) -> dict:
        return self.loader.state_dict()


class DataLoader2:
    """Runs ``datapipe`` under ``reading_service`` (in process by default).

    ``timeout`` (seconds) bounds the wait for a worker's next item: a worker silent that long
    is reported as hung, with its Python stacks where the platform can dump them. None takes
    the reading service's ``timeout``, else ``DEFAULT_TIMEOUT`` (10 minutes); ``math.inf``
    waits forever.

    A torch map-style ``Dataset`` is wrapped as index -> ``sharding_filter`` -> ``dataset[i]``;
    an ``IterableDataset`` as an ``IterableWrapper`` (resumed by replay).
    """

    def __init__(self, datapipe, datapipe_adapter_fn: Callable | list | None = None,
                 reading_service: ReadingServiceInterface | None = None,
                 timeout: float | None = None) -> None:
        if timeout is not None and not (isinstance(timeout, (int, float))
                                        and not isinstance(timeout, bool) and timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds (math.inf: wait "
                             f"forever) or None for the default, got {timeout!r}")
        self.timeout = timeout
        dp = _as_datapipe(datapipe)
        fns = datapipe_adapter_fn if isinstance(datapipe_adapter_fn, (list, tuple)) else (
            [datapipe_adapter_fn] if datapipe_adapter_fn is not None else [])
        for fn in fns:
            dp = fn(dp)
        if reading_service is None:
            reading_service = InProcessReadingService()
        if not isinstance(reading_service, ReadingServiceInterface):
            raise TypeError(f"reading_service must be a reading service, "
                            f"got {type(reading_service).__name__}")
        self.reading_service = reading_service
        self.datapipe = reading_service.initialize(dp)
        self._seed_base: int | None = None
        self._seed_synced = False
        self._epoch_index = 0
        self._epoch: _Epoch | None = None
        self._resume: dict | None = None
        self._closed = False
        self._warned_no_shard = False
        self._pool: _Workers | None = None
        self._pool_key: tuple | None = None

    def _plan(self) -> Plan:
        plan = self.reading_service.plan(Plan())
        if self.timeout is not None:
            plan.timeout = self.timeout
        elif plan.timeout is None:
            plan.timeout = DEFAULT_TIMEOUT
        if plan.num_workers > 0 or plan.world_size > 1 or plan.shards() > 1:
            if not find_dps(traverse_dps(self.datapipe), ShardingFilter) \
                    and not self._warned_no_shard:
                self._warned_no_shard = True
                log.warning("the graph has no sharding_filter: every worker/rank yields "
                            "the whole dataset")
        return plan

    def seed(self, seed: int) -> None:
        """Use ``seed`` for the next epoch (later epochs derive from it)."""
        if not isinstance(seed, int):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        self._seed_base, self._epoch_index, self._seed_synced = seed, 0, False

    def __iter__(self) -> DataLoader2Iterator:
        if self._closed:
            raise RuntimeError("DataLoader2 was shut down")
        self._end_epoch()
        plan = self._plan()
        it = self._resume
        self._resume = None
        if isinstance(it, list):  # every rank's state: re-shard onto this world size
            it = self._from_all_ranks(it, plan)
        if it is not None:
            if (it["rank"], it["world_size"]) != (plan.rank, plan.world_size):
                raise ValueError(
                    f"state was saved on rank {it['rank']} of {it['world_size']} ranks, "
                    f"loading on rank {plan.rank} of {plan.world_size}; to resume on another "
                    "number of ranks pass every rank's state_dict(), in rank order, as a "
                    "list to load_state_dict")
            regular = it.get("num_global", plan.world_size * it["num_shards"]) \
                == plan.world_size * it["num_shards"]  # not a re-sharded epoch
            if regular and plan.worker_shards is not None \
                    and plan.worker_shards != it["num_shards"]:
                raise ValueError(f"state has {it['num_shards']} shards but the reading "
                                 f"service asks for worker_shards={plan.worker_shards}")
            self._epoch = _Epoch(self.datapipe, plan, it["seed"], it["num_shards"], it,
                                 self._workers(plan, it["num_shards"], it["seed"]))
        else:
            if self._seed_base is None:
                self._seed_base = int(torch.empty((), dtype=torch.int64).random_().item())
            if plan.sync_seed is not None and not self._seed_synced:
                self._seed_base = plan.sync_seed(self._seed_base)
                self._seed_synced = True
            seed = derive_seed(self._seed_base, self._epoch_index)
            self._epoch_index += 1
            self._epoch = _Epoch(self.datapipe, plan, seed, plan.shards(), None,
                                 self._workers(plan, plan.shards(), seed))
        return DataLoader2Iterator(self)

    @staticmethod
    def _from_all_ranks(iterations: list, plan: Plan) -> dict | None:
        """This rank's epoch state from every saved rank's: its own when the world size is
        unchanged (exact resume), else its share of the re-sharded shards."""
        if len(iterations) == plan.world_size:
            return iterations[plan.rank]
        mine = reshard(iterations, plan.rank, plan.world_size)
        if mine is not None:
            log.info("resuming an epoch saved on %d ranks on %d ranks: rank %d continues "
                     "shards %s", len(iterations), plan.world_size, plan.rank,
                     mine["global_ids"])
            if plan.sync_has_next is not None:
                log.warning("re-sharded epoch under fullsync: every rank stops when the first "
                            "runs out, so uneven shares drop the rest of this epoch")
        return mine

    def _workers(self, plan: Plan, num_shards: int, seed: int) -> _Workers | None:
        """The persistent worker pool for this plan (restarted when the plan changes)."""
        if plan.num_workers == 0:
            self._close_pool()
            return None
        if num_shards == 0:  # a re-sharded epoch left this rank nothing to read
            return None
        n = min(plan.num_workers, num_shards)
        if plan.num_workers > num_shards:
            log.warning("num_workers=%d > %d shards: %d workers stay idle",
                        plan.num_workers, num_shards, plan.num_workers - num_shards)
        key = (n, plan.prefetch_factor, plan.multiprocessing_context, plan.worker_init_fn,
               plan.pin_memory, plan.timeout)
        if self._pool is not None and (self._pool_key != key
                                       or not all(p.is_alive() for p in self._pool.procs)):
            self._close_pool()
        if self._pool is None:
            self._pool = _Workers(self.datapipe, plan, n, seed)
            self._pool_key = key
        return self._pool

    def _close_pool(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            pool.close()

    def _next(self):
        if self._epoch is None:
            raise StopIteration
        sync = self._epoch.plan.sync_has_next
        try:
            if sync is None:
                return self._epoch.next()
            try:
                item, has = self._epoch.next(), True
            except StopIteration:
                item, has = None, False
            if sync(has):
                return item
            # Another rank ran out: every rank ends this epoch at the same step.
            raise StopIteration
        except StopIteration:
            self._end_epoch()
            raise
        except BaseException:
            self._end_epoch(failed=True)
            raise

    def _end_epoch(self, failed: bool = False) -> None:
        if self._epoch is not None:
            epoch, self._epoch = self._epoch, None
            try:
                if failed and isinstance(epoch.backend, _Workers):
                    self._close_pool()
                else:
                    epoch.close()
            except _BrokenPool as e:
                log.info("a worker failed in an abandoned epoch (%s); restarting workers", e)
                self._close_pool()
            except BaseException:
                self._close_pool()
                raise

    def state_dict(self) -> dict:
        """The loader's position: seeds, epoch count and (mid-epoch) every shard's state."""
        iteration = self._resume
        if isinstance(iteration, list):
            raise RuntimeError("state_dict() after loading every rank's state: start "
                               "iterating first, so this rank's share is known")
        if self._epoch is not None and not self._epoch.finished:
            iteration = self._epoch.state_dict()
        return {"version": _STATE_VERSION, "seed_base": self._seed_base,
                "seed_synced": self._seed_synced, "epoch_index": self._epoch_index,
                "iteration": iteration}

    def load_state_dict(self, state: dict | list[dict]) -> None:
        """Restore a position; the next ``iter()`` continues the saved epoch exactly.

        ``state`` may also be the list of every rank's ``state_dict()`` (in rank order): on
        the same number of ranks each rank takes its own; on a different number the
        unfinished shards are re-sharded (see :mod:`ember.data.reshard`), so the ranks
        together yield each remaining item once (with ``fullsync``, an epoch still ends on
        every rank when the first rank runs out).
        """
        states = list(state) if isinstance(state, (list, tuple)) else [state]
        for k, st in enumerate(states):
            if not isinstance(st, dict) or st.get("version") != _STATE_VERSION \
                    or isinstance(st.get("iteration"), list):
                where = f"state[{k}]" if isinstance(state, (list, tuple)) else "state"
                raise ValueError(f"{where} must be a dict from DataLoader2.state_dict() "
                                 f"(version {_STATE_VERSION})")
        if not states:
            raise ValueError("state must be a state_dict() or a non-empty list of them")
        if len({st["epoch_index"] for st in states}) != 1:
            raise ValueError("the ranks' states are from different epochs: "
                             f"{[st['epoch_index'] for st in states]}")
        self._end_epoch()
        first = states[0]
        self._seed_base, self._seed_synced = first["seed_base"], first["seed_synced"]
        self._epoch_index = first["epoch_index"]
        self._resume = (first["iteration"] if isinstance(state, dict)
                        else [st["iteration"] for st in states])

    def shutdown(self) -> None:
        """Stop workers and release the reading service; safe to call twice."""
        if not self._closed:
            self._closed = True
            try:
                self._end_epoch()
            finally:
                self._close_pool()
                self.reading_service.finalize()

    def __enter__(self) -> DataLoader2:
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def __del__(self) -> None:
        try:
            self._end_epoch(failed=True)
            self._close_pool()
        except Exception:
            pass
