"""Reading services: how DataLoader2 runs a pipe graph (in process, workers, ranks).

A reading service only describes the plan; :mod:`ember.data.dataloader2` executes it. The
unit of parallelism is the *logical shard*: each rank runs ``worker_shards`` independent
instances of the graph (shard ``rank * worker_shards + i`` of ``world_size * worker_shards``)
and merges them round-robin. Workers host shards (shard ``i`` on worker ``i % num_workers``),
so the stream depends on the shard count, not on the worker count: with ``worker_shards``
fixed, any ``num_workers`` gives the same stream, and a checkpoint resumes with any count.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = ["DistributedReadingService", "InProcessReadingService",
           "MultiProcessingReadingService", "ReadingServiceInterface",
           "SequentialReadingService"]

_CONTEXTS = (None, "fork", "spawn", "forkserver")


# How long the loader waits for a worker's next item before it reports the worker as hung.
DEFAULT_TIMEOUT = 600.0


@dataclass
class Plan:
    """Everything DataLoader2 needs to run one epoch."""

    num_workers: int = 0
    worker_shards: int | None = None
    prefetch_factor: int = 2
    multiprocessing_context: str | None = None
    worker_init_fn: Callable | None = None
    in_order: bool = True
    pin_memory: bool = False
    timeout: float | None = None
    rank: int = 0
    world_size: int = 1
    sync_seed: Callable[[int], int] | None = None
    sync_has_next: Callable[[bool], bool] | None = None

    def shards(self) -> int:
        return self.worker_shards if self.worker_shards is not None else max(1, self.num_workers)


class ReadingServiceInterface:
    """Base of the reading services; ``initialize`` may adapt the graph once."""

    def initialize(self, datapipe):
        return datapipe

    def finalize(self) -> None:
        pass

    def plan(self, plan: Plan) -> Plan:
        raise NotImplementedError


class InProcessReadingService(ReadingServiceInterface):
    """Runs the graph in the calling process (``worker_shards`` instances, default 1);
    ``prefetch_cnt > 0`` reads that many items ahead in a thread."""

    def __init__(self, prefetch_cnt: int = 0, worker_shards: int | None = None) -> None:
        _check_shards(worker_shards)
        if not isinstance(prefetch_cnt, int) or prefetch_cnt < 0:
            raise ValueError(f"prefetch_cnt must be a non-negative int, got {prefetch_cnt!r}")
        self.prefetch_cnt, self.worker_shards = prefetch_cnt, worker_shards

    def initialize(self, datapipe):
        return datapipe.prefetch(self.prefetch_cnt) if self.prefetch_cnt else datapipe

    def plan(self, plan: Plan) -> Plan:
        plan.num_workers = 0
        if self.worker_shards is not None:
            plan.worker_shards = self.worker_shards
        return plan


def _check_shards(worker_shards) -> None:
    if worker_shards is not None and (not isinstance(worker_shards, int) or worker_shards < 1):
        raise ValueError(f"worker_shards must be a positive int or None, got {worker_shards!r}")


class MultiProcessingReadingService(ReadingServiceInterface):
    """Runs the graph in ``num_workers`` processes; batches come back through shared memory.

    ``prefetch_factor`` items per worker are produced ahead; ``in_order=False`` yields
    whichever worker is ready first; ``timeout`` (seconds) bounds the wait for one item (None:
    the loader's, by default ``DEFAULT_TIMEOUT``).
    ``worker_init_fn(datapipe, worker_info)`` may return a replacement graph.
    """

    def __init__(self, num_workers: int = 0, multiprocessing_context: str | None = None,
                 worker_init_fn: Callable | None = None, prefetch_factor: int = 2,
                 in_order: bool = True, pin_memory: bool = False, timeout: float | None = None,
                 worker_shards: int | None = None) -> None:
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"num_workers must be a non-negative int, got {num_workers!r}")
        if multiprocessing_context not in _CONTEXTS:
            raise ValueError(f"multiprocessing_context must be one of {_CONTEXTS}, "
                             f"got {multiprocessing_context!r}")
        if not isinstance(prefetch_factor, int) or prefetch_factor < 1:
            raise ValueError(f"prefetch_factor must be a positive int, got {prefetch_factor!r}")
        if worker_init_fn is not None and not callable(worker_init_fn):
            raise TypeError("worker_init_fn must be callable")
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be positive or None, got {timeout!r}")
        _check_shards(worker_shards)
        if pin_memory and not torch.cuda.is_available():
            warnings.warn("pin_memory=True but no CUDA device is available; not pinning",
                          stacklevel=2)
            pin_memory = False
        self.num_workers, self.multiprocessing_context = num_workers, multiprocessing_context
        self.worker_init_fn, self.prefetch_factor = worker_init_fn, prefetch_factor
        self.in_order, self.pin_memory, self.timeout = in_order, pin_memory, timeout
        self.worker_shards = worker_shards

    def plan(self, plan: Plan) -> Plan:
        plan.num_workers = self.num_workers
        plan.worker_shards = self.worker_shards
        plan.prefetch_factor, plan.multiprocessing_context = (self.prefetch_factor,
                                                              self.multiprocessing_context)
        plan.worker_init_fn, plan.in_order = self.worker_init_fn, self.in_order
        plan.pin_memory, plan.timeout = self.pin_memory, self.timeout
        return plan


class DistributedReadingService(ReadingServiceInterface):
    """Shards the graph across the ranks of the default torch.distributed group; rank 0's
    seed is broadcast (over a gloo group) so pipes before ``sharding_filter`` agree.

    With ``fullsync`` (default) every rank ends the epoch when the first one runs out, so
    uneven shards never leave a rank waiting in a collective: one small all-reduce per item.
    """

    def __init__(self, timeout: int = 1800, fullsync: bool = True) -> None:
        self.timeout, self.fullsync = timeout, fullsync
        self._group = None

    def _gloo(self):
        import datetime

        import torch.distributed as dist

        if self._group is None:
            self._group = dist.new_group(backend="gloo",
                                         timeout=datetime.timedelta(seconds=self.timeout))
        return self._group

    def _sync_seed(self, seed: int) -> int:
        import torch.distributed as dist

        t = torch.tensor([seed], dtype=torch.int64)
        dist.broadcast(t, src=0, group=self._gloo())
        return int(t.item())

    def _sync_has_next(self, has_next: bool) -> bool:
        import torch.distributed as dist

        t = torch.tensor([int(has_next)], dtype=torch.int32)
        dist.all_reduce(t, op=dist.ReduceOp.MIN, group=self._gloo())
        return bool(t.item())

    def plan(self, plan: Plan) -> Plan:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("DistributedReadingService needs torch.distributed to be "
                               "initialized (torch.distributed.init_process_group)")
        plan.rank, plan.world_size = dist.get_rank(), dist.get_world_size()
        plan.sync_seed = self._sync_seed
        if self.fullsync and plan.world_size > 1:
            plan.sync_has_next = self._sync_has_next
        return plan

    def finalize(self) -> None:
        import torch.distributed as dist

        if self._group is not None and dist.is_initialized():
            dist.destroy_process_group(self._group)
        self._group = None


class SequentialReadingService(ReadingServiceInterface):
    """Combines services, e.g. ``SequentialReadingService(DistributedReadingService(),
    MultiProcessingReadingService(2))``: ranks first, then workers within each rank."""

    def __init__(self, *reading_services: ReadingServiceInterface) -> None:
        for i, rs in enumerate(reading_services):
            if not isinstance(rs, ReadingServiceInterface):
                raise TypeError(f"reading_services[{i}] must be a reading service, "
                                f"got {type(rs).__name__}")
        self.reading_services = reading_services

    def initialize(self, datapipe):
        for rs in self.reading_services:
            datapipe = rs.initialize(datapipe)
        return datapipe

    def plan(self, plan: Plan) -> Plan:
        for rs in self.reading_services:
            plan = rs.plan(plan)
        return plan

    def finalize(self) -> None:
        for rs in reversed(self.reading_services):
            rs.finalize()
