"""Resuming a mid-epoch checkpoint on a different number of ranks.

A rank's checkpoint lists its logical shards by global id (shard ``g`` of ``N``) with each
shard's iterator state and the items produced but not yet yielded. Given the checkpoints of
every rank of the saved run, the shards still running are dealt to the new ranks in order
(new rank ``r`` of ``W`` takes live shards ``r, r + W, r + 2W, ...``). Each shard goes on
exactly where it stopped, with its own seeds, so the new ranks together yield every
remaining item once; only the interleaving of shards within a rank is new.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["global_ids", "reshard"]


def global_ids(it: dict) -> list[int]:
    """The global shard id of each local shard of one rank's epoch state."""
    ids = it.get("global_ids")
    if ids is None:  # states written before re-sharding existed: contiguous per rank
        ids = [it["rank"] * it["num_shards"] + s for s in range(it["num_shards"])]
    return list(ids)


def _num_global(it: dict) -> int:
    return it.get("num_global", it["world_size"] * it["num_shards"])


def _get(d: dict, s: int, default=None):
    return d.get(s, d.get(str(s), default))  # keys may have become strings (JSON)


def reshard(iterations: Sequence[dict | None], rank: int, world_size: int) -> dict | None:
    """This rank's share of the epoch saved by ``iterations`` (one per saved rank, in rank
    order; None for a rank that had finished the epoch), as an epoch state; None when no
    rank was mid-epoch."""
    old_world = len(iterations)
    live = [it for it in iterations if it is not None]
    if not live:
        return None
    seeds = {it["seed"] for it in live}
    totals = {_num_global(it) for it in live}
    if len(seeds) != 1 or len(totals) != 1:
        raise ValueError("states must come from one run and one epoch: they have different "
                         f"seeds or shard counts (seeds {sorted(seeds)}, shards {sorted(totals)})")
    for r, it in enumerate(iterations):
        if it is not None and (it["rank"], it["world_size"]) != (r, old_world):
            raise ValueError(f"states[{r}] was saved on rank {it['rank']} of "
                             f"{it['world_size']}; pass every rank's state in rank order "
                             f"({old_world} states given)")
    total = totals.pop()
    shards: dict[int, tuple] = {}
    for it in live:
        done = {int(s) for s in it["exhausted"]}
        for s, g in enumerate(global_ids(it)):
            if g in shards:
                raise ValueError(f"shard {g} appears in two states")
            shards[g] = None if s in done else (_get(it["shards"], s, "exhausted"),
                                                 list(_get(it["pending"], s, [])))
    if len(live) == old_world and sorted(shards) != list(range(total)):
        raise ValueError(f"the states cover shards {sorted(shards)}, expected 0..{total - 1}")
    running = [g for g in sorted(shards) if shards[g] is not None]
    mine = running[rank::world_size]
    return {"seed": live[0]["seed"], "num_shards": len(mine), "rank": rank,
            "world_size": world_size, "cursor": 0, "exhausted": [],
            "shards": {s: shards[g][0] for s, g in enumerate(mine)},
            "pending": {s: shards[g][1] for s, g in enumerate(mine) if shards[g][1]},
            "global_ids": mine, "num_global": total}
