"""`ember demo` / `make demo`: the main job, end to end, on data it generates itself."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def _write_images(folder: Path, count: int, size: tuple[int, int]) -> list[Path]:
    from ember.tools.bench.io import _photo
    from ember.vision import io as vio

    paths = []
    for i in range(count):
        img = torch.from_numpy(_photo(*size, seed=i).transpose(2, 0, 1).copy())
        path = folder / f"img_{i:04d}.jpg"
        vio.write_jpeg(img, path, quality=90)
        paths.append(path)
    return paths


def _images_per_second(fn, count: int) -> float:
    start = time.perf_counter()
    fn()
    return count / (time.perf_counter() - start)


def main(quick: bool = False) -> int:
    """Generate a folder of JPEGs, decode it in batches, and report images/s."""
    from ember.vision import io as vio

    count, size = (16, (120, 160)) if quick else (256, (480, 640))
    with tempfile.TemporaryDirectory(prefix="ember-demo-") as tmp:
        paths = _write_images(Path(tmp), count, size)
        print(f"wrote {count} JPEGs of {size[1]}x{size[0]} to {tmp}")
        data = [vio.read_file(p) for p in paths]
        one = _images_per_second(lambda: [vio.decode_jpeg(d) for d in data], count)
        batched = _images_per_second(lambda: vio.decode_jpeg(data), count)
        small = (size[0] // 4, size[1] // 4)
        reduced = _images_per_second(lambda: vio.decode_jpeg(data, size=small), count)
        images = torch.stack(vio.decode_jpeg(data, size=small))
        mean = images.float().mean(dim=(0, 2, 3)) / 255
        print(f"decode one at a time : {one:8.0f} images/s")
        print(f"decode as a batch    : {batched:8.0f} images/s (thread pool over all cores)")
        print(f"reduced-size decode  : {reduced:8.0f} images/s "
              f"(DCT scaling to {small[1]}x{small[0]})")
        print(f"batch tensor {tuple(images.shape)} {images.dtype}, channel means "
              f"{np.round(mean.numpy(), 3).tolist()}")
    return 0
