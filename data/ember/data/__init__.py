"""ember.data: torchdata-style DataPipes and DataLoader2 with checkpointable iteration."""

from ember.data import datapipes
from ember.data.datapipes import IterDataPipe, MapDataPipe, functional_datapipe
from ember.data.graph import apply_sharding, find_dps, list_dps, remove_dp, replace_dp, traverse_dps

__all__ = ["IterDataPipe", "MapDataPipe", "apply_sharding", "datapipes", "find_dps",
           "functional_datapipe", "list_dps", "remove_dp", "replace_dp", "traverse_dps"]
