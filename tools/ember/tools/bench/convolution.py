"""`ember bench conv`: float32 3x3 stride-1 convolutions on CPU, ATen's (eager) and oneDNN's
prepacked direct convolution against Ember's Winograd F(2x2, 3x3) (``ember::winograd_conv2d``)
with the filter packed once (frozen graphs) and per call (unfrozen graphs, NCHW).

The shapes are those of ResNet-50 at 224 x 224 (batch 1), of Faster R-CNN's FPN and RPN at
320 x 320 (batch 2), VGG's first layers, and small ones the routing rule keeps on oneDNN.
Each row says whether the compiler routes that shape to Winograd (``winograd_conv.suits``),
so the table is the evidence for the rule. Error: the largest difference from a float64
convolution over the largest output, for the direct and the Winograd result.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ember.tools.bench.harness import BenchResult, compare_timings

# (label, batch, in channels, out channels, side)
SHAPES = [
    ("FPN/RPN P2", 2, 256, 256, 80),
    ("FPN/RPN P3", 2, 256, 256, 40),
    ("FPN/RPN P4", 2, 256, 256, 20),
    ("ResNet-50 layer1", 1, 64, 64, 56),
    ("ResNet-50 layer2", 1, 128, 128, 28),
    ("ResNet-50 layer3", 1, 256, 256, 14),
    ("ResNet-50 layer4", 1, 512, 512, 7),
    ("VGG-16 conv1_2", 1, 64, 64, 224),
    ("VGG-16 conv2_2", 1, 128, 128, 112),
    ("small: 32 channels", 1, 32, 32, 56),
    ("small: 64 at 20x20", 2, 64, 64, 20),
]
QUICK_SHAPES = [("quick: 64 at 16x16", 1, 64, 64, 16), ("quick: 16 at 8x8", 1, 16, 16, 8)]
CANDIDATES = ("eager", "onednn-packed", "winograd-packed", "winograd-per-call")


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _error(y: torch.Tensor, ref: torch.Tensor) -> float:
    return ((y.double() - ref).abs().max() / ref.abs().max()).item()


def _candidates(x, w, b, packed_direct, packed_winograd):
    from ember.core.nn import winograd_conv as wg

    x_cl = x.contiguous(memory_format=torch.channels_last)
    pad = [1, 1]
    return {
        "eager": lambda: F.conv2d(x, w, b, padding=1),
        "onednn-packed": lambda: torch.ops.mkldnn._convolution_pointwise(
            x_cl, packed_direct, b, pad, [1, 1], [1, 1], 1, "none", [], ""),
        "winograd-packed": lambda: wg.winograd_conv2d(x_cl, w, packed_winograd, b, None, pad,
                                                      "none", True),
        "winograd-per-call": lambda: wg.winograd_conv2d(x, w, None, b, None, pad, "none", False),
    }


def run(quick: bool = False) -> BenchResult:
    """Per shape and thread count: ms of each candidate, Winograd's speed-ups over oneDNN's
    packed direct convolution and over eager, the routing decisions and the errors."""
    from ember.core.nn import winograd_conv as wg

    result = BenchResult(
        name="conv",
        title="float32 3x3 stride-1 convolutions on CPU: ATen and oneDNN's direct convolution "
              "vs Ember's Winograd F(2x2, 3x3)" + (" (quick)" if quick else ""),
        columns=["threads", "shape", "N x C -> K @ side", "tiles", "routed frozen / unfrozen",
                 *(f"{c} ms" for c in CANDIDATES), "packed speed-up vs oneDNN packed",
                 "per call speed-up vs eager", "error direct", "error winograd"])
    if not wg.available():
        result.notes.append("skipped: the native Winograd kernels or oneDNN are unavailable")
        return result
    default_threads = torch.get_num_threads()
    try:
        for threads in sorted({1, default_threads}):
            torch.set_num_threads(threads)
            for label, n, c, k, side in QUICK_SHAPES if quick else SHAPES:
                g = torch.Generator().manual_seed(0)
                x = torch.rand(n, c, side, side, generator=g) * 2
                w = torch.randn(k, c, 3, 3, generator=g) / (9 * c) ** 0.5
                b = torch.randn(k, generator=g)
                packed_direct = torch.ops.mkldnn._reorder_convolution_weight(
                    w, [1, 1], [1, 1], [1, 1], 1, list(x.shape))
                packed_winograd = wg.pack(w, x.shape, [1, 1])
                fns = _candidates(x, w, b, packed_direct, packed_winograd)
                times = compare_timings(fns, rounds=3 if quick else 7,
                                        min_seconds=0.001 if quick else 0.1)
                ref = F.conv2d(x.double(), w.double(), b.double(), padding=1)
                tiles = wg.tiles(x.shape, [1, 1])
                unfrozen = wg.suits(c, k, tiles, packed_once=False, channels_last=False)
                routed = f"{_yes(wg.suits(c, k, tiles))} / {_yes(unfrozen)}"
                result.rows.append([
                    threads, label, f"{n} x {c} -> {k} @ {side}", tiles, routed,
                    *(times[name] * 1e3 for name in CANDIDATES),
                    times["onednn-packed"] / times["winograd-packed"],
                    times["eager"] / times["winograd-per-call"],
                    _error(fns["eager"](), ref), _error(fns["winograd-packed"](), ref)])
    finally:
        torch.set_num_threads(default_threads)
    result.notes += [
        "routed: whether the compiler sends the shape to Winograd with the filter packed once "
        "(frozen graphs, options={'freezing': True}) / packed per call with NCHW activations "
        "(unfrozen graphs); the rule is ember.core.nn.winograd_conv.suits",
        "onednn-packed: what a frozen graph runs otherwise (weight reordered once, "
        "channels-last input); winograd-per-call includes the filter's transform and packing "
        "and the NCHW <-> channels-last copies",
        "timing: median of round-robin rounds in one process (compare_timings)",
    ]
    return result
