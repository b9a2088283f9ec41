"""Two-rank gloo training under our backend against the same eager run, for
test_distributed.py: ``python distributed_worker.py {ddp,fsdp} PORT`` prints one JSON line."""

import copy
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

STEPS = 5


class Net(nn.Module):
    """Three linears of about 1 MiB and less: DDP's 1 MiB buckets split them."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(32, 512), nn.Linear(512, 512), nn.Linear(512, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(F.gelu(self.b(torch.relu(self.a(x)))))


def _wrap(kind: str, model: nn.Module) -> nn.Module:
    if kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, bucket_cap_mb=1)
    from torch.distributed.fsdp import fully_shard

    for layer in (model.a, model.b, model.c):
        fully_shard(layer)
    return fully_shard(model)


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def worker(rank: int, kind: str, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    from ember.core.compiler.backend import ember_backend

    torch.manual_seed(0)
    model = Net()
    ref = _wrap(kind, copy.deepcopy(model))
    model = _wrap(kind, model)
    graphs = []

    def ember_counting(gm, inputs):
        graphs.append(len(gm.graph.nodes))
        return ember_backend(gm, inputs)

    compiled = torch.compile(model, backend=ember_counting)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(rank)
    grad_diff = 0.0
    for _ in range(STEPS):
        x = torch.randn(16, 32, generator=gen)
        compiled(x).pow(2).mean().backward()
        ref(x).pow(2).mean().backward()
        for p, q in zip(model.parameters(), ref.parameters()):
            grad_diff = max(grad_diff, (_full(p.grad) - _full(q.grad)).abs().max().item())
        opt.step()
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()
    param_diff = max((_full(p) - _full(q)).abs().max().item()
                     for p, q in zip(model.parameters(), ref.parameters()))
    if rank == 0:
        print(json.dumps({"graphs": graphs, "grad_diff": grad_diff, "param_diff": param_diff}),
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(sys.argv[1], int(sys.argv[2])), nprocs=2)
