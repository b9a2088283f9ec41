"""`ember bench io`: image decode against Pillow -> numpy -> tensor, in one process."""

from __future__ import annotations

import io
import warnings

import numpy as np
import torch
from PIL import Image

from ember.tools.bench.harness import BenchResult, compare_timings
from ember.vision import io as vio


def _photo(h: int, w: int, seed: int) -> np.ndarray:
    """Smooth gradients, a few shapes and sensor-like noise: compresses like a photograph."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    base = np.stack([x / w * 200 + 30 * np.sin(y / 17), y / h * 180 + 40 * np.cos(x / 23),
                     (x + y) / (w + h) * 220], -1)
    cy, cx = rng.uniform(0.2, 0.8, 2) * (h, w)
    base[(y - cy) ** 2 + (x - cx) ** 2 < (min(h, w) / 5) ** 2] *= 0.5
    return np.clip(base + rng.normal(0, 6, base.shape), 0, 255).astype(np.uint8)


def _encoded(fmt: str, h: int, w: int, seed: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(_photo(h, w, seed)).save(buffer, fmt, **({"quality": 90} if fmt == "JPEG"
                                                             else {}))
    return buffer.getvalue()


def _pillow_decode(data: bytes) -> torch.Tensor:
    with warnings.catch_warnings():  # Pillow's array is read-only; the peer path ignores that
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(np.asarray(Image.open(io.BytesIO(data))))


def _as_tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def run(quick: bool = False) -> BenchResult:
    h, w = (120, 160) if quick else (480, 640)
    batch = 16 if quick else 256
    rounds = 3 if quick else 9
    result = BenchResult(
        "io", f"Image decode, {w}x{h} RGB, images/s (median of {rounds} round-robin rounds)",
        ["case", "ember", "peer", "peer is", "ratio (ember/peer)", "target"])

    jpeg, png = _encoded("JPEG", h, w, 0), _encoded("PNG", h, w, 0)
    for name, data, ours in [("JPEG decode", jpeg, vio.decode_jpeg),
                             ("PNG decode", png, vio.decode_png)]:
        tensor = _as_tensor(data)
        t = compare_timings({"ember": lambda f=ours, x=tensor: f(x),
                             "pillow": lambda d=data: _pillow_decode(d)}, rounds=rounds)
        result.rows.append([name, 1 / t["ember"], 1 / t["pillow"], "Pillow->numpy->tensor",
                            t["pillow"] / t["ember"], ">= 0.95"])

    items = [_as_tensor(_encoded("JPEG", h, w, s)) for s in range(batch)]
    t = compare_timings({"batched": lambda: vio.decode_jpeg(items),
                         "loop": lambda: [vio.decode_jpeg(x) for x in items]},
                        rounds=rounds, min_seconds=0.0)
    result.rows.append([f"JPEG batch of {batch}", batch / t["batched"], batch / t["loop"],
                        "ember, one thread", t["loop"] / t["batched"], ">= 1.7"])

    small = (h // 4, w // 4)
    tensor = _as_tensor(jpeg)

    def pillow_resize():
        return Image.open(io.BytesIO(jpeg)).resize((small[1], small[0]), Image.BILINEAR)

    def torch_resize():
        full = vio.decode_jpeg(tensor).float()[None]
        return torch.nn.functional.interpolate(full, size=small, mode="bilinear",
                                               antialias=True).round().to(torch.uint8)

    t = compare_timings({"reduced": lambda: vio.decode_jpeg(tensor, size=small),
                         "pillow": pillow_resize, "torch": torch_resize}, rounds=rounds)
    peer = min(t["pillow"], t["torch"])
    peer_name = "Pillow decode+resize" if t["pillow"] <= t["torch"] else "decode+torch resize"
    result.rows.append([f"4x reduced decode to {small[1]}x{small[0]}", 1 / t["reduced"],
                        1 / peer, f"{peer_name} (faster of two)", peer / t["reduced"], ">= 2.5"])
    result.notes.append("ratio > 1 means ember is faster; the batched case uses a thread pool over "
                        "all cores (Pillow releases the GIL while decoding)")
    result.notes.append("antialiased resizes: Pillow BILINEAR resize and torch interpolate "
                        "(bilinear, antialias=True); the faster one is the peer")
    return result
