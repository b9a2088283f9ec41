"""Raw bytes between files and 1-D uint8 tensors."""

from __future__ import annotations

import os

import numpy as np
import torch


def read_file(path: str | os.PathLike) -> torch.Tensor:
    """The bytes of ``path`` as a 1-D uint8 tensor."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise ValueError(f"read_file: {path!r} is a directory, expected a file")
    data = np.fromfile(path, dtype=np.uint8)  # raises FileNotFoundError naming the path
    return torch.from_numpy(data)


def check_bytes(data: object, name: str = "input") -> torch.Tensor:
    """Validate an encoded-image argument: a non-empty 1-D uint8 tensor (moved to CPU)."""
    if not isinstance(data, torch.Tensor):
        raise TypeError(f"{name} must be a 1-D uint8 tensor, got {type(data).__name__}")
    if data.dtype != torch.uint8:
        raise ValueError(f"{name} must be a 1-D uint8 tensor, got dtype {data.dtype}")
    if data.dim() != 1:
        raise ValueError(f"{name} must be a 1-D uint8 tensor, got shape {tuple(data.shape)}")
    if data.numel() == 0:
        from ember.vision.io._limits import DecodeError

        raise DecodeError(f"{name} is empty: there are no bytes to decode")
    return data.cpu()


def write_file(path: str | os.PathLike, data: torch.Tensor) -> None:
    """Write a 1-D uint8 tensor's bytes to ``path``."""
    if not isinstance(data, torch.Tensor) or data.dtype != torch.uint8 or data.dim() != 1:
        raise ValueError("write_file: data must be a 1-D uint8 tensor, got "
                         f"{getattr(data, 'dtype', type(data).__name__)} "
                         f"{tuple(getattr(data, 'shape', ()))}")
    with open(path, "wb") as f:
        f.write(data.cpu().contiguous().numpy().tobytes())
