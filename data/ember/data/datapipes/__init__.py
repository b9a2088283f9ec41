"""DataPipes: torchdata's iterable and map-style pipes with explicit, checkpointable iterators."""

from ember.data.datapipes import iter as iter
from ember.data.datapipes import map as map
from ember.data.datapipes.base import (
    IterDataPipe,
    MapDataPipe,
    PipeIterator,
    ReplayIterator,
    functional_datapipe,
)

__all__ = ["IterDataPipe", "MapDataPipe", "PipeIterator", "ReplayIterator",
           "functional_datapipe", "iter", "map"]
