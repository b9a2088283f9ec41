"""Graph utilities over DataPipes: traverse, find, replace, remove, shard and seed.

A pipe's inputs are the DataPipes among its attributes (directly or in a list, tuple or
dict); graphs are read in place - never pickled or deep-copied.
"""

from __future__ import annotations

from ember.data.datapipes.base import IterDataPipe, MapDataPipe
from ember.data.datapipes.context import derive_seed
from ember.data.datapipes.iter_basic import ShardingFilter

__all__ = ["DataPipeGraph", "apply_sharding", "find_dps", "list_dps", "remove_dp",
           "replace_dp", "seed_graph", "traverse_dps"]

DataPipeGraph = dict  # {id(dp): (dp, DataPipeGraph of its inputs)}
_PIPES = (IterDataPipe, MapDataPipe)


def _inputs(dp) -> list:
    out = []
    for value in vars(dp).values():
        if isinstance(value, _PIPES):
            out.append(value)
        elif isinstance(value, dict):
            first = next(iter(value.values()), None)
            value = list(value.values()) if isinstance(first, _PIPES) else None
        # Only containers that start with a pipe are scanned: a pipe's data (a list of a
        # million samples) must not be walked, which would also copy its pages in workers.
        if isinstance(value, (list, tuple)) and value and isinstance(value[0], _PIPES):
            out += [v for v in value if isinstance(v, _PIPES)]
    return out


def traverse_dps(datapipe) -> DataPipeGraph:
    """The graph ending at ``datapipe`` as nested ``{id: (dp, inputs_graph)}``."""
    if not isinstance(datapipe, _PIPES):
        raise TypeError(f"datapipe must be a DataPipe, got {type(datapipe).__name__}")

    def walk(dp, path: frozenset) -> DataPipeGraph:
        if id(dp) in path:
            return {id(dp): (dp, {})}
        children: DataPipeGraph = {}
        for child in _inputs(dp):
            children.update(walk(child, path | {id(dp)}))
        return {id(dp): (dp, children)}

    return walk(datapipe, frozenset())


def list_dps(graph: DataPipeGraph, exclude_dps=None) -> list:
    """Every pipe of ``graph`` once, outputs before inputs (depth first)."""
    excluded = set()
    if exclude_dps is not None:
        for dp in exclude_dps if isinstance(exclude_dps, (list, tuple)) else [exclude_dps]:
            excluded |= {id(x) for x in list_dps(traverse_dps(dp))}
    seen: dict[int, object] = {}
    stack = list(graph.items())[::-1]
    while stack:
        key, (dp, sub) = stack.pop()
        if key in seen or key in excluded:
            continue
        seen[key] = dp
        stack += list(sub.items())[::-1]
    return list(seen.values())


def find_dps(graph: DataPipeGraph, dp_type: type) -> list:
    """Every pipe of ``graph`` that is an instance of ``dp_type``."""
    return [dp for dp in list_dps(graph) if isinstance(dp, dp_type)]


def _root(graph: DataPipeGraph):
    if len(graph) != 1:
        raise ValueError("graph must have exactly one output pipe")
    return next(iter(graph.values()))[0]


def _swap(value, old, new):
    if value is old:
        return new
    if isinstance(value, list):
        return [new if v is old else v for v in value]
    if isinstance(value, tuple):
        return tuple(new if v is old else v for v in value)
    if isinstance(value, dict):
        return {k: new if v is old else v for k, v in value.items()}
    return value


def replace_dp(graph: DataPipeGraph, old_datapipe, new_datapipe) -> DataPipeGraph:
    """Make every consumer of ``old_datapipe`` read ``new_datapipe`` instead (in place)."""
    if not isinstance(new_datapipe, _PIPES):
        raise TypeError(f"new_datapipe must be a DataPipe, got {type(new_datapipe).__name__}")
    root = _root(graph)
    if root is old_datapipe:
        return traverse_dps(new_datapipe)
    found = False
    for dp in list_dps(graph):
        for name, value in list(vars(dp).items()):
            swapped = _swap(value, old_datapipe, new_datapipe)
            if swapped is not value and swapped != value:
                setattr(dp, name, swapped)
                found = True
    if not found:
        raise ValueError(f"{old_datapipe!r} is not in the graph")
    return traverse_dps(root)


def remove_dp(graph: DataPipeGraph, datapipe) -> DataPipeGraph:
    """Take ``datapipe`` out of the graph, connecting its consumers to its single input."""
    inputs = _inputs(datapipe)
    if len(inputs) != 1:
        raise ValueError(f"remove_dp needs a pipe with exactly one input; "
                         f"{type(datapipe).__name__} has {len(inputs)}")
    return replace_dp(graph, datapipe, inputs[0])


def apply_sharding(datapipe, num_of_instances: int, instance_id: int) -> None:
    """Set the shard of every ``sharding_filter`` in the graph (for iteration without a
    reading service)."""
    for dp in find_dps(traverse_dps(datapipe), ShardingFilter):
        dp.apply_sharding(num_of_instances, instance_id)


def seed_graph(datapipe, seed: int, shard_id: int) -> dict[int, int]:
    """Seeds for every random pipe: shared by all shards for pipes upstream of every
    ``sharding_filter`` (so all shards see one order), distinct per shard after one."""
    seeds: dict[int, int] = {}
    graph = traverse_dps(datapipe)
    for k, dp in enumerate(list_dps(graph)):
        if not getattr(dp, "is_random", False):
            continue
        upstream = list_dps(traverse_dps(dp))[1:]
        after_shard = any(isinstance(u, ShardingFilter) for u in upstream)
        seeds[id(dp)] = (derive_seed(seed, k, "shard", shard_id) if after_shard
                         else derive_seed(seed, k))
    return seeds
