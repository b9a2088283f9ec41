"""ember.data: torchdata-style DataPipes and DataLoader2 with checkpointable iteration.

DataPipes keep their iteration state in explicit iterator objects (``state_dict`` /
``load_state_dict``); DataLoader2 runs a graph in process, in worker processes (batches
through shared memory) or across torch.distributed ranks, with one seed and exact resume.
"""

from ember.data import datapipes
from ember.data.buffers import BufferList
from ember.data.dataloader2 import DataLoader2, DataLoader2Iterator
from ember.data.datapipes import IterDataPipe, MapDataPipe, functional_datapipe
from ember.data.graph import apply_sharding, find_dps, list_dps, remove_dp, replace_dp, traverse_dps
from ember.data.reading_service import (
    DistributedReadingService,
    InProcessReadingService,
    MultiProcessingReadingService,
    ReadingServiceInterface,
    SequentialReadingService,
)
from ember.data.worker import WorkerInfo, get_worker_info

__all__ = [
    "BufferList", "DataLoader2", "DataLoader2Iterator", "DistributedReadingService",
    "InProcessReadingService", "IterDataPipe", "MapDataPipe", "MultiProcessingReadingService",
    "ReadingServiceInterface", "SequentialReadingService", "WorkerInfo", "apply_sharding",
    "datapipes", "find_dps", "functional_datapipe", "get_worker_info", "list_dps", "remove_dp",
    "replace_dp", "traverse_dps",
]
