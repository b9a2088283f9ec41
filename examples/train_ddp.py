"""Distributed training with Ember end to end: ember.data's DistributedReadingService feeds a
DistributedDataParallel model compiled by our backend, whose AdamW step is compiled too; a
checkpoint of model, optimizer and loader resumes the run exactly.

    torchrun --nproc-per-node 2 examples/train_ddp.py --steps 12 --out losses.json
    torchrun --nproc-per-node 2 examples/train_ddp.py --steps 12 --stop-after 5 --ckpt ck.pt
    torchrun --nproc-per-node 2 examples/train_ddp.py --steps 12 --resume ck.pt --out l2.json

The resumed run's losses for steps 6..12 equal the uninterrupted run's. CPU and gloo only.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import ember.core  # noqa: F401  (registers the "ember" torch.compile backend)
from ember.data import DataLoader2, DistributedReadingService
from ember.data.datapipes.iter import IterableWrapper

FEATURES, CLASSES = 16, 4


class Classifier(nn.Module):
    """A small MLP classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(FEATURES, 64)
        self.out = nn.Linear(64, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(F.gelu(self.hidden(x)))


def make_sample(i: int) -> tuple[torch.Tensor, int]:
    """Sample ``i`` of a fixed synthetic dataset: features and a label they determine."""
    g = torch.Generator().manual_seed(i)
    x = torch.randn(FEATURES, generator=g)
    return x, int(x[:CLASSES].argmax())


def collate(batch):
    return torch.stack([x for x, _ in batch]), torch.tensor([y for _, y in batch])


def loader() -> DataLoader2:
    pipe = (IterableWrapper(range(4096)).shuffle().sharding_filter().map(make_sample)
            .batch(16).map(collate))
    return DataLoader2(pipe, reading_service=DistributedReadingService())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--stop-after", type=int, help="save --ckpt after this step and exit")
    ap.add_argument("--ckpt", help="checkpoint path written by --stop-after")
    ap.add_argument("--resume", help="checkpoint to resume from")
    ap.add_argument("--out", help="rank 0 writes {step: loss} here as JSON")
    args = ap.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(Classifier())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
    data = loader()
    data.seed(1234)
    start = 0
    if args.resume:
        ckpt = torch.load(args.resume, weights_only=False)
        model.module.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        data.load_state_dict(ckpt["loader"][rank])
        start = ckpt["step"]
    forward = torch.compile(model, backend="ember")
    step_fn = torch.compile(opt.step, backend="ember")
    losses = {}
    batches = iter(data)
    for step in range(start + 1, args.steps + 1):
        x, y = next(batches)
        loss = F.cross_entropy(forward(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        step_fn()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses[step] = mean.item() / dist.get_world_size()
        if args.stop_after == step:
            states = [None] * dist.get_world_size()
            dist.all_gather_object(states, data.state_dict())
            if rank == 0:
                torch.save({"model": model.module.state_dict(), "optimizer": opt.state_dict(),
                            "loader": states, "step": step}, args.ckpt)
            break
    if rank == 0:
        print(json.dumps(losses))
        if args.out:
            with open(args.out, "w") as f:
                json.dump(losses, f)
    data.shutdown()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
