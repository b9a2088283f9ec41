"""The worker process: runs its logical shards of the pipe graph and streams their items.

Protocol (main -> worker on ``cmd``): ``("state", token)`` asks for the shard states as of
the last item sent; ``("stop",)`` ends the worker. Worker -> main on ``data`` (pickled
tuples): ``("item", shard, pickle, metas, slot, handle)``, ``("end", shard, slot)``,
``("state", token, {shard: state})``, ``("error", shard, type name, traceback, exception)``.
Every "item"/"end" holds one slot of the semaphore until the main process releases it.
"""

from __future__ import annotations

import faulthandler
import gc
import os
import pickle
import random
import signal
import traceback
from dataclasses import dataclass, field

import numpy as np
import torch

from ember.data.datapipes.base import as_pipe_iterator
from ember.data.datapipes.context import IterContext, activate, derive_seed
from ember.data.graph import seed_graph
from ember.data.transport import SlotWriter

_POLL = 0.05


def _alive(pid: int) -> bool:
    """Whether the main process still exists (the parent may be a forkserver, not main)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class WorkerInfo:
    """What a worker knows about itself (passed to ``worker_init_fn``)."""

    worker_id: int
    num_workers: int
    seed: int
    shards: list = field(default_factory=list)


_current: WorkerInfo | None = None


def get_worker_info() -> WorkerInfo | None:
    """The current worker's info, or None in the main process."""
    return _current


@dataclass
class ShardSpec:
    """How to build the iterator of one logical shard."""

    local_id: int
    global_id: int
    num_global: int
    state: dict | None = None


def build_shard_iterator(datapipe, epoch_seed: int, spec: ShardSpec):
    """A fresh iterator over ``datapipe`` for one shard, restored to ``spec.state`` if given."""
    ctx = IterContext(num_shards=spec.num_global, shard_id=spec.global_id,
                      pipe_seeds=seed_graph(datapipe, epoch_seed, spec.global_id))
    with activate(ctx):
        it = as_pipe_iterator(iter(datapipe))
    if spec.state is not None:
        it.load_state_dict(spec.state)
    return it


class _Shards:
    """The shards a worker runs in the current epoch, produced round-robin."""

    def __init__(self, datapipe=None, epoch_seed: int = 0, shards: list | None = None,
                 start_shard: int = 0) -> None:
        shards = shards or []
        self.order = [s.local_id for s in shards]
        self.done = {s.local_id for s in shards if s.state == "exhausted"}
        self.iters = {s.local_id: build_shard_iterator(datapipe, epoch_seed, s)
                      for s in shards if s.state != "exhausted"}
        later = [s for s in self.order if s >= start_shard]
        self.pos = self.order.index(later[0]) if later else 0

    def live(self) -> bool:
        return len(self.done) < len(self.order)

    def next_shard(self) -> int:
        while self.order[self.pos] in self.done:
            self.pos = (self.pos + 1) % len(self.order)
        s = self.order[self.pos]
        self.pos = (self.pos + 1) % len(self.order)
        return s

    def states(self) -> dict:
        return {s: "exhausted" if s in self.done else self.iters[s].state_dict()
                for s in self.order}

    def close(self) -> None:
        for it in self.iters.values():
            try:
                it.close()
            except Exception:
                pass
        self.iters.clear()


def _seed_process(epoch_seed: int, key) -> int:
    seed = derive_seed(epoch_seed, "worker", key)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return seed


STACK_SIGNAL = getattr(signal, "SIGUSR1", None)
_stack_file = None


def _dump_stack_on_signal(path: str | None) -> None:
    """On ``STACK_SIGNAL`` write every thread's Python stack to ``path`` (read by the main
    process when this worker has not answered within the loader's timeout)."""
    global _stack_file
    if path is None or STACK_SIGNAL is None:
        return
    _stack_file = open(path, "w")  # stays open: faulthandler writes to its descriptor
    faulthandler.register(STACK_SIGNAL, file=_stack_file, all_threads=True)


def worker_loop(datapipe, worker_id: int, num_workers: int, first_seed: int, num_slots: int,
                worker_init_fn, data_conn, cmd_conn, sem, parent_pid: int,
                stack_path: str | None = None) -> None:
    """Entry point of a (persistent) worker process; epochs are started by commands:
    ``("epoch", seed, shard specs, start shard)``, ``("reset", token)`` drops the current
    epoch and answers ``("reset", token)``."""
    global _current
    _dump_stack_on_signal(stack_path)
    # Objects inherited from the parent are never collected here: freezing them keeps the
    # cyclic GC from walking (and, after fork, copying) the whole inherited heap.
    gc.freeze()
    torch.set_num_threads(1)
    _current = WorkerInfo(worker_id, num_workers, _seed_process(first_seed, worker_id))
    writer = SlotWriter(num_slots)
    send = lambda msg: data_conn.send_bytes(pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))
    work = _Shards()
    next_slot = 0
    try:
        if worker_init_fn is not None:
            out = worker_init_fn(datapipe, _current)
            datapipe = datapipe if out is None else out
        while True:
            while cmd_conn.poll():
                cmd = cmd_conn.recv()
                if cmd[0] == "stop":
                    return
                if cmd[0] == "epoch":
                    _, seed, shards, start_shard = cmd
                    work.close()
                    key = shards[0].global_id if shards else worker_id
                    _current.seed = _seed_process(seed, key)
                    _current.shards = [sp.local_id for sp in shards]
                    work = _Shards(datapipe, seed, shards, start_shard)
                elif cmd[0] == "reset":
                    work.close()
                    work = _Shards()
                    send(("reset", cmd[1]))
                elif cmd[0] == "state":
                    send(("state", cmd[1], work.states()))
            if not work.live():
                cmd_conn.poll(_POLL)
            elif sem.acquire(timeout=_POLL):
                s = work.next_shard()
                try:
                    item = next(work.iters[s])
                except StopIteration:
                    work.done.add(s)
                    work.iters.pop(s).close()
                    send(("end", s, -1))
                    continue
                slot = next_slot
                next_slot = (next_slot + 1) % num_slots
                data, metas, handle = writer.encode(item, slot)
                send(("item", s, data, metas, slot, handle))
            if not _alive(parent_pid):
                return
    except (KeyboardInterrupt, BrokenPipeError, EOFError):
        return
    except BaseException as e:  # reported to the main process, which re-raises it
        try:
            exc = pickle.dumps(e)
        except Exception:
            exc = None
        try:
            send(("error", -1, type(e).__name__, traceback.format_exc(), exc))
            while _alive(parent_pid):
                if cmd_conn.poll(_POLL) and cmd_conn.recv()[0] == "stop":
                    return
        except (BrokenPipeError, EOFError, OSError):
            return
    finally:
        work.close()
