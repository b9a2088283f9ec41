"""Compile a small CNN ahead of time and save an input for ``run_model.cpp``.

    python examples/aot/make_package.py OUT_DIR   # OUT_DIR/model.pt2, OUT_DIR/input.pt
"""

import os
import sys

import torch
from torch import nn

from ember.core import aot


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10)).eval()


def main(out_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    x = torch.randn(2, 3, 32, 32)
    batch = torch.export.Dim("batch", min=1, max=64)
    path = aot.aot_compile(model(), (x,), dynamic_shapes=({0: batch},),
                           path=os.path.join(out_dir, "model.pt2"))
    torch.save(torch.randn(5, 3, 32, 32), os.path.join(out_dir, "input.pt"))
    print(path)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "aot_example")
