"""Stochastic depth and DropBlock: torchvision's functions and modules, drawing their masks
with the same torch random calls in the same order (a seed gives torchvision's mask)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["stochastic_depth", "StochasticDepth", "drop_block2d", "DropBlock2d",
           "drop_block3d", "DropBlock3d"]


def _check_p(p: float) -> None:
    if p < 0.0 or p > 1.0:
        raise ValueError(f"drop probability has to be between 0 and 1, but got {p}")


def stochastic_depth(input: Tensor, p: float, mode: str, training: bool = True) -> Tensor:
    """Zero the whole input (``mode="batch"``) or each sample of dim 0 (``"row"``) with
    probability ``p``, scaling survivors by ``1 / (1 - p)`` (Huang et al.)."""
    _check_p(p)
    if mode not in ("batch", "row"):
        raise ValueError(f"mode has to be either 'batch' or 'row', but got {mode}")
    if not training or p == 0.0:
        return input
    keep = 1.0 - p
    size = [input.shape[0]] + [1] * (input.ndim - 1) if mode == "row" else [1] * input.ndim
    noise = torch.empty(size, dtype=input.dtype, device=input.device).bernoulli_(keep)
    if keep > 0.0:
        noise.div_(keep)
    return input * noise


class StochasticDepth(nn.Module):
    """:func:`stochastic_depth` as a module (active in training mode)."""

    def __init__(self, p: float, mode: str) -> None:
        super().__init__()
        self.p = p
        self.mode = mode

    def forward(self, input: Tensor) -> Tensor:
        return stochastic_depth(input, self.p, self.mode, self.training)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(p={self.p}, mode={self.mode})"


def _drop_block(input, p, block_size, inplace, eps, training, dims):
    _check_p(p)
    if input.ndim != dims + 2:
        raise ValueError(f"input should be {dims + 2} dimensional. Got {input.ndim} dimensions.")
    if not training or p == 0.0:
        return input
    sizes = input.shape[2:]
    block_size = min(block_size, *sizes)
    if block_size % 2 == 0:
        raise ValueError(f"block size should be odd. Got {block_size} which is even.")
    num, valid = p, 1
    for s in sizes:  # torchvision's evaluation order, so the threshold is the same float
        num, valid = num * s, valid * (s - block_size + 1)
    gamma = num / ((block_size ** dims) * valid)
    noise = torch.empty((*input.shape[:2], *(s - block_size + 1 for s in sizes)),
                        dtype=input.dtype, device=input.device).bernoulli_(gamma)
    noise = F.pad(noise, [block_size // 2] * (2 * dims), value=0)
    pool = F.max_pool2d if dims == 2 else F.max_pool3d
    noise = 1 - pool(noise, stride=(1,) * dims, kernel_size=(block_size,) * dims,
                     padding=block_size // 2)
    scale = noise.numel() / (eps + noise.sum())
    if inplace:
        return input.mul_(noise).mul_(scale)
    return input * noise * scale


def drop_block2d(input: Tensor, p: float, block_size: int, inplace: bool = False,
                 eps: float = 1e-06, training: bool = True) -> Tensor:
    """DropBlock (Ghiasi et al.) on ``[N, C, H, W]``: zero ``block_size`` squares around
    random centres so that about ``p`` of the input drops, rescale the rest."""
    return _drop_block(input, p, block_size, inplace, eps, training, 2)


def drop_block3d(input: Tensor, p: float, block_size: int, inplace: bool = False,
                 eps: float = 1e-06, training: bool = True) -> Tensor:
    """:func:`drop_block2d` on ``[N, C, D, H, W]`` with cubes."""
    return _drop_block(input, p, block_size, inplace, eps, training, 3)


class DropBlock2d(nn.Module):
    """:func:`drop_block2d` as a module (active in training mode)."""

    def __init__(self, p: float, block_size: int, inplace: bool = False,
                 eps: float = 1e-06) -> None:
        super().__init__()
        self.p = p
        self.block_size = block_size
        self.inplace = inplace
        self.eps = eps

    def forward(self, input: Tensor) -> Tensor:
        return drop_block2d(input, self.p, self.block_size, self.inplace, self.eps,
                            self.training)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(p={self.p}, block_size={self.block_size}, "
                f"inplace={self.inplace})")


class DropBlock3d(DropBlock2d):
    """:func:`drop_block3d` as a module (active in training mode)."""

    def forward(self, input: Tensor) -> Tensor:
        return drop_block3d(input, self.p, self.block_size, self.inplace, self.eps,
                            self.training)
