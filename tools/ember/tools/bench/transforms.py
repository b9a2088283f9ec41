"""`ember bench transforms`: a training augmentation pipeline, batched tensors vs per-sample Pillow,
and a detection pipeline per sample vs torchvision v2.

Classification: RandomResizedCrop(224) -> RandomHorizontalFlip -> ColorJitter(0.4, 0.4, 0.4,
0.1) -> to float -> Normalize(ImageNet), over a batch of decoded uint8 images. The peer is
the classic torchvision-on-PIL recipe, one image at a time, written here with Pillow and numpy
(torchvision does not import beside our torch): crop+resize, transpose, ImageEnhance, an HSV
hue shift, then ToTensor + Normalize in numpy and a final stack.

Detection (SSD's recipe): RandomPhotometricDistort -> RandomZoomOut -> RandomIoUCrop ->
SanitizeBoundingBoxes on images with boxes and labels, one sample at a time, against the
real torchvision v2: measured in one process where torchvision imports, which is the peer
environment `.venv-peers` (`make test-peers` builds it); from the main environment the
measurement runs there in a subprocess.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageEnhance

import ember.core
import ember.vision.transforms as T
from ember.tools.bench.harness import BenchResult, compare_timings

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def _photos(n: int, h: int, w: int, seed: int = 0) -> torch.Tensor:
    """Smooth colourful images with some noise, as decoded photographs look."""
    g = torch.Generator().manual_seed(seed)
    small = torch.rand(n, 3, 8, 10, generator=g) * 255
    big = torch.nn.functional.interpolate(small, size=(h, w), mode="bicubic", align_corners=False)
    big += torch.randn(big.shape, generator=g) * 6
    return big.clamp(0, 255).to(torch.uint8)


def _rrc_box(w: int, h: int, rng: random.Random, size: int):
    area = w * h
    for _ in range(10):
        target = area * rng.uniform(0.08, 1.0)
        aspect = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
        cw, ch = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if 0 < cw <= w and 0 < ch <= h:
            top, left = rng.randint(0, h - ch), rng.randint(0, w - cw)
            return left, top, left + cw, top + ch
    return 0, 0, w, h


def pillow_pipeline(images: list[Image.Image], rng: random.Random, size: int = 224):
    """The per-sample classic recipe: PIL ops per image, then ToTensor/Normalize and stack."""
    mean = np.array(MEAN, np.float32)
    inv_std = 1.0 / np.array(STD, np.float32)
    out = []
    for img in images:
        img = img.crop(_rrc_box(*img.size, rng, size)).resize((size, size), Image.BILINEAR)
        if rng.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        ops = [0, 1, 2, 3]
        rng.shuffle(ops)
        for op in ops:
            if op == 0:
                img = ImageEnhance.Brightness(img).enhance(rng.uniform(0.6, 1.4))
            elif op == 1:
                img = ImageEnhance.Contrast(img).enhance(rng.uniform(0.6, 1.4))
            elif op == 2:
                img = ImageEnhance.Color(img).enhance(rng.uniform(0.6, 1.4))
            else:  # torchvision's PIL hue shift: HSV, wrap-around add on H
                h, s, v = img.convert("HSV").split()
                np_h = np.array(h, dtype=np.uint8)
                np_h += np.uint8(int(rng.uniform(-0.1, 0.1) * 255) % 256)
                img = Image.merge("HSV", (Image.fromarray(np_h, "L"), s, v)).convert("RGB")
        arr = np.asarray(img, dtype=np.float32) * (1.0 / 255)
        arr = (arr - mean) * inv_std
        out.append(torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1))))
    return torch.stack(out)


def ember_pipeline(size: int = 224) -> T.Compose:
    """The same recipe, batched, with independent parameters per image."""
    return T.Compose([
        T.RandomResizedCrop(size, per_sample=True),
        T.RandomHorizontalFlip(per_sample=True),
        T.ToDtype(torch.float32, scale=True),
        T.ColorJitter(0.4, 0.4, 0.4, 0.1, per_sample=True),
        T.Normalize(MEAN, STD, inplace=True),  # its input is the pipeline's own float copy
    ])


def detection_pipeline(T):
    """SSD's augmentation in ``T`` (ember.vision.transforms or torchvision.transforms.v2)."""
    return T.Compose([T.RandomPhotometricDistort(p=1.0), T.RandomZoomOut(fill=0),
                      T.RandomIoUCrop(), T.SanitizeBoundingBoxes()])


def _detection_samples(tv, n: int, h: int, w: int) -> list[dict]:
    images = _photos(n, h, w, seed=1)
    g = torch.Generator().manual_seed(2)
    out = []
    for img in images:
        xy = torch.rand(8, 2, generator=g) * torch.tensor([w * 0.7, h * 0.7])
        wh = torch.rand(8, 2, generator=g) * torch.tensor([w * 0.3, h * 0.3]) + 8
        boxes = tv.BoundingBoxes(torch.cat([xy, xy + wh], 1), format="XYXY", canvas_size=(h, w))
        out.append({"image": tv.Image(img.clone()), "boxes": boxes, "labels": torch.arange(8)})
    return out


def detection_timings(n: int, h: int, w: int, rounds: int) -> dict[str, float]:
    """Seconds per sample of the detection pipeline, ember and torchvision in this process,
    both on one torch thread (as in a DataLoader worker) and from the same seed: both draw
    in torchvision's order, so they get the same crops and factors, i.e. the same work."""
    import torchvision.transforms.v2 as TT
    from torchvision import tv_tensors as ttv

    from ember.vision import tv_tensors as etv

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        def runner(T, tv):
            pipe, samples = detection_pipeline(T), _detection_samples(tv, n, h, w)

            def one_pass():
                torch.manual_seed(0)
                return [pipe(s) for s in samples]
            return one_pass

        t = compare_timings({"ember": runner(T, etv), "torchvision": runner(TT, ttv)},
                            rounds=rounds, min_seconds=0.0)
    finally:
        torch.set_num_threads(threads)
    return {k: v / n for k, v in t.items()}


def _peer_detection_timings(n: int, h: int, w: int, rounds: int) -> dict[str, float] | str:
    """detection_timings where torchvision imports: here, else in .venv-peers; or why not."""
    try:
        import torchvision  # noqa: F401
    except ImportError:
        pass
    else:
        return detection_timings(n, h, w, rounds)
    root = Path(__file__).resolve().parents[4]
    python = root / ".venv-peers" / "bin" / "python"
    if not python.exists():
        return "torchvision not importable here and no .venv-peers (make test-peers builds it)"
    code = ("import json; from ember.tools.bench.transforms import detection_timings; "
            f"print(json.dumps(detection_timings({n}, {h}, {w}, {rounds})))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(root / "tools"), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=env,
                          timeout=3600)
    if proc.returncode != 0:
        return f"the peer run failed: {proc.stderr.strip().splitlines()[-1:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(quick: bool = False) -> BenchResult:
    n, h, w, size = (8, 64, 80, 48) if quick else (256, 256, 320, 224)
    rounds = 2 if quick else 5
    batch = _photos(n, h, w)
    pil_images = [Image.fromarray(batch[i].permute(1, 2, 0).numpy().copy()) for i in range(n)]
    rng = random.Random(0)
    ours = ember_pipeline(size)
    threads = torch.get_num_threads()

    def one_thread():
        torch.set_num_threads(1)
        try:
            return ours(batch)
        finally:
            torch.set_num_threads(threads)

    compiled = ember.core.compile(ember_pipeline(size))  # built by the warm-up call
    t = compare_timings({"ember": lambda: ours(batch), "ember1": one_thread,
                         "compiled": lambda: compiled(batch),
                         "pillow": lambda: pillow_pipeline(pil_images, rng, size)},
                        rounds=rounds, min_seconds=0.0)
    result = BenchResult(
        "transforms",
        f"RandomResizedCrop {size} + flip + ColorJitter + Normalize over a batch of {n} "
        f"decoded {w}x{h} images, images/s (median of {rounds} round-robin rounds)",
        ["pipeline", "images/s", "ratio vs peer", "target"])
    result.rows.append([f"ember, batched on CPU ({threads} threads), per-sample draws",
                        n / t["ember"], t["pillow"] / t["ember"], ">= 3"])
    result.rows.append(["ember, batched on CPU (1 thread), per-sample draws",
                        n / t["ember1"], t["pillow"] / t["ember1"], "-"])
    result.rows.append(["ember under ember.core.compile, per-sample draws",
                        n / t["compiled"], t["pillow"] / t["compiled"], "-"])
    result.rows.append(["Pillow + numpy, per sample (classic torchvision recipe)",
                        n / t["pillow"], 1.0, "-"])
    dn, dh, dw = (4, 60, 80) if quick else (64, 375, 500)
    det = _peer_detection_timings(dn, dh, dw, rounds)
    result.title += (f"; detection: PhotometricDistort + ZoomOut + IoUCrop + Sanitize on "
                     f"{dn} {dw}x{dh} images with 8 boxes each, per sample")
    if isinstance(det, str):
        result.notes.append(f"detection pipeline vs torchvision not measured: {det}")
    else:
        result.rows.append(["detection, ember per sample (1 thread)", 1 / det["ember"],
                            det["torchvision"] / det["ember"], ">= 2"])
        result.rows.append(["detection, torchvision v2 per sample (1 thread)",
                            1 / det["torchvision"], 1.0, "-"])
    result.notes.append("ratio vs peer: the classification rows against the Pillow recipe, "
                        "the detection rows against torchvision 0.29 v2 (same process, same "
                        "torch, in .venv-peers; the same seed gives both the same draws)")
    result.notes.append("ember: Compose runs the five stages fused: each cache-sized chunk "
                        "of images goes through uint8 crop+resize (Pillow's fixed-point "
                        "filter), a flip of the chosen images, ToDtype written straight into "
                        "the output, then ColorJitter and Normalize in place on those rows; "
                        "chunks are spread over torch's thread count")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    result.notes.append(f"1-minute load average during the run: {load:.1f} on {os.cpu_count()} "
                        f"cores; under oversubscription torch's OpenMP barriers stall, which "
                        f"the 1-thread row avoids")
    result.notes.append("compiled: the whole pipeline is one graph; the per-sample crop is "
                        "the extern op ember_vision::resized_crop (the same CPU kernel), the "
                        "colour ops become fused C++ passes over the whole batch; ColorJitter "
                        "keeps a fixed op order there (a drawn order would break the graph)")
    return result
