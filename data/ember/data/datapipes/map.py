"""Map-style pipes by class name, as ``torchdata.datapipes.map`` exposes them."""

from ember.data.datapipes.base import MapDataPipe
from ember.data.datapipes.map_pipes import (
    IterToMapConverter,
    MapBatcher,
    MapConcater,
    MapMapper,
    MapZipper,
    SequenceWrapper,
)

Batcher, Concater, Mapper, Zipper = MapBatcher, MapConcater, MapMapper, MapZipper

__all__ = ["Batcher", "Concater", "IterToMapConverter", "MapDataPipe", "Mapper",
           "SequenceWrapper", "Zipper"]
