"""The worker process: runs its logical shards of the pipe graph and streams their items.

Protocol (main -> worker on ``cmd``): ``("state", token)`` asks for the shard states as of
the last item sent; ``("stop",)`` ends the worker. Worker -> main on ``data`` (pickled
tuples): ``("item", shard, pickle, metas, slot, handle)``, ``("end", shard, slot)``,
``("state", token, {shard: state})``, ``("error", shard, type name, traceback, exception)``.
Every "item"/"end" holds one slot of the semaphore until the main process releases it.
"""

from __future__ import annotations

import gc
import os
import pickle
import random
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


def worker_loop(datapipe, worker_id: int, num_workers: int, epoch_seed: int, shards: list,
                start_shard: int, num_slots: int, worker_init_fn, data_conn, cmd_conn, sem,
                parent_pid: int) -> None:
    """Entry point of a worker process."""
    global _current
    # Objects inherited from the parent are never collected here: freezing them keeps the
    # cyclic GC from walking (and, after fork, copying) the whole inherited heap.
    gc.freeze()
    torch.set_num_threads(1)
    seed = derive_seed(epoch_seed, "worker", shards[0].global_id if shards else worker_id)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    _current = WorkerInfo(worker_id, num_workers, seed, [s.local_id for s in shards])
    writer = SlotWriter(num_slots)
    send = lambda msg: data_conn.send_bytes(pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))
    iters: dict = {}
    order = [s.local_id for s in shards]
    done: set = set()
    try:
        if worker_init_fn is not None:
            out = worker_init_fn(datapipe, _current)
            datapipe = datapipe if out is None else out
        for s in shards:
            if s.state == "exhausted":
                done.add(s.local_id)
            else:
                iters[s.local_id] = build_shard_iterator(datapipe, epoch_seed, s)
        later = [s for s in order if s >= start_shard]
        pos = order.index(later[0]) if later else 0
        next_slot = 0
        while True:
            while cmd_conn.poll():
                cmd = cmd_conn.recv()
                if cmd[0] == "stop":
                    return
                if cmd[0] == "state":
                    send(("state", cmd[1], {s: ("exhausted" if s in done else
                                                iters[s].state_dict()) for s in order}))
            live = [s for s in order if s not in done]
            if not live:
                cmd_conn.poll(_POLL)
            elif sem.acquire(timeout=_POLL):
                while order[pos] in done:
                    pos = (pos + 1) % len(order)
                s = order[pos]
                pos = (pos + 1) % len(order)
                try:
                    item = next(iters[s])
                except StopIteration:
                    done.add(s)
                    iters.pop(s).close()
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
        for it in iters.values():
            try:
                it.close()
            except Exception:
                pass
