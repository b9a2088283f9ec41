"""The zoo's detectors: a workload whose detections mean something, and their accuracy rule.

A detector's inference returns, per image, the boxes that survive a score threshold, top-k
and non-maximum suppression. Where two candidates score within rounding of each other, which
one survives is rounding: AMP eager itself keeps other boxes than float64 eager, so the
per-tensor rule (shapes and labels exact) fails any backend whose rounding differs from
eager's. This rule asks instead how many of float64 eager's detections a run reproduces
(same label, box IoU at least :data:`MIN_IOU`) and holds the backend to eager's own count,
and its scores (masks, keypoints) on the reproduced ones to eager's error, after torch's
benchmark runners' float64 check: a miscompile loses most detections, rounding a few. Where
eager itself reproduces under :data:`MIN_AGREEMENT` of them, rounding decides the output and
there is no verdict (a fail). :func:`unit_layers` makes an untrained detector's scores spread
enough for such a comparison to have content.
"""

from __future__ import annotations

import math
import re

import torch

FIELDS = ("boxes", "labels", "scores")
# a detection reproduces a float64 one with the same label at this box IoU or more: tight in
# float32; in AMP (tolerance 2e-2 and up) COCO's "same object", as bfloat16 rounding picks
# other proposals among overlapping ones and eager's own boxes move that far
MIN_IOU = {"float32": 0.9, "amp": 0.5}
# pixels each box grows by a side before its IoU is taken
PAD = 0.5
# a backend may miss this many times eager's misses, plus one per image (two runs rounded
# differently swap a few detections at the top-k and NMS boundaries)
MISS_MULTIPLIER = 1.5
# eager must reproduce at least this share of float64's detections for a verdict
MIN_AGREEMENT = 0.5


def is_detections(out) -> bool:
    """A list of per-image dicts with boxes, labels and scores (torchvision's detector output)."""
    return isinstance(out, (list, tuple)) and len(out) > 0 and all(
        isinstance(d, dict) and all(isinstance(d.get(k), torch.Tensor) for k in FIELDS)
        for d in out)


def _box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """ember.vision's pairwise IoU of ``a`` [N, 4] and ``b`` [M, 4] in float64, each box grown
    by :data:`PAD` pixels a side, so boxes clipped to a line at the image's edge (an
    untrained head's) compare too."""
    from ember.vision.ops import box_iou

    grow = torch.tensor([-PAD, -PAD, PAD, PAD], dtype=torch.float64)
    return box_iou(a.detach().double() + grow, b.detach().double() + grow)


def _min_iou(tol: float) -> float:
    return MIN_IOU["amp" if tol >= 2e-2 else "float32"]


def _pairs(got: dict, ref: dict, tol: float) -> list[tuple[int, int]]:
    """(got index, ref index) of the float64 detections ``got`` reproduces, matched greedily
    in ref's order (highest score first), each detection used once."""
    if not len(got["boxes"]) or not len(ref["boxes"]):
        return []
    ok = (_box_iou(got["boxes"], ref["boxes"]) >= _min_iou(tol)) & \
        (got["labels"][:, None] == ref["labels"][None, :])
    pairs, used = [], set()
    for r in torch.argsort(ref["scores"].detach().double(), descending=True, stable=True).tolist():
        g = next((g for g in torch.nonzero(ok[:, r]).flatten().tolist() if g not in used), None)
        if g is not None:
            used.add(g)
            pairs.append((g, r))
    return pairs


def _extra_fields(ref: list[dict]) -> list[str]:
    """Per-detection float fields judged on the matched detections: scores, and masks and
    keypoints where the detector has them."""
    return sorted(k for k, v in ref[0].items() if k not in ("boxes", "labels") and
                  isinstance(v, torch.Tensor) and v.is_floating_point())


def _field_rmse(run: list[dict], ref: list[dict], pairs: list[list[tuple[int, int]]],
                key: str) -> tuple[float, float]:
    """RMS difference of ``key`` over the matched detections, and float64's RMS there."""
    diffs, refs = [], []
    for d, r, p in zip(run, ref, pairs):
        for g, i in p:
            diffs.append((d[key][g].detach().double() - r[key][i].detach().double()).flatten())
            refs.append(r[key][i].detach().double().flatten())
    if not diffs:
        return 0.0, 0.0
    rms = lambda t: float(t.pow(2).mean().sqrt()) if t.numel() else 0.0
    return rms(torch.cat(diffs)), rms(torch.cat(refs))


def failures(result, eager, ref64, tol: float, multiplier: float) -> list[str]:
    """Why ``result``'s detections do not match (empty: they do), judged against float64.

    Per run: the float64 detections it reproduces (:func:`_pairs`) out of the larger of the
    two counts, per image. The backend must miss at most :data:`MISS_MULTIPLIER` x eager's
    misses plus one per image; its scores (masks, keypoints), over the matched detections,
    must be within ``multiplier`` x eager's RMS error from float64 plus tol / 10 of float64's
    RMS.
    """
    if ref64 is None:
        return ["detections: not within tol of eager's, and no float64 reference to judge by"]
    if not (is_detections(result) and is_detections(ref64)) or len(result) != len(eager) or \
            len(ref64) != len(eager):
        return ["detections: the images' count differs from eager's or float64's"]
    def misses(run):
        pairs = [_pairs(d, r, tol) for d, r in zip(run, ref64)]
        total = sum(max(len(d["boxes"]), len(r["boxes"])) for d, r in zip(run, ref64))
        return total - sum(map(len, pairs)), total, pairs
    got_miss, got_total, got_pairs = misses(result)
    eager_miss, eager_total, eager_pairs = misses(eager)
    if eager_total and eager_total - eager_miss < MIN_AGREEMENT * eager_total:
        return [f"detections: eager reproduces {eager_total - eager_miss} of {eager_total} of "
                "float64's (rounding decides them): no verdict"]
    out = []
    allowed = MISS_MULTIPLIER * eager_miss + len(ref64)
    if got_miss > allowed:
        out.append(f"detections: reproduces {got_total - got_miss} of {got_total} of float64's, "
                   f"eager {eager_total - eager_miss} of {eager_total} (at most {allowed:g} "
                   "misses allowed)")
    for key in _extra_fields(ref64):
        if any(key not in d for d in list(result) + list(eager)):
            out.append(f"detections: {key!r} missing")
            continue
        got_err, ref_rms = _field_rmse(result, ref64, got_pairs, key)
        eager_err, _ = _field_rmse(eager, ref64, eager_pairs, key)
        if not got_err <= multiplier * eager_err + tol / 10 * ref_rms or math.isnan(got_err):
            out.append(f"detections: {key} RMS error vs float64 {got_err:.3g} > {multiplier:g} x "
                       f"eager's {eager_err:.3g} + {tol / 10 * ref_rms:.3g}")
    return out


# the layers that output box deltas (RetinaNet / FCOS / R-CNN heads, SSD's per-level heads)
_BOX_DELTAS = re.compile(r"(bbox_reg|bbox_pred|regression_head\.module_list\.\d+(\.1)?)$")
BOX_DELTA_RMS = 0.1


def unit_layers(model: torch.nn.Module, args: tuple) -> torch.nn.Module:
    """Each convolution and linear layer's weight rescaled so that its product (the output
    less the bias) has unit RMS on ``args`` at its first call, in the order the layers run
    (LSUV's data-dependent pass, eval mode); box-delta layers to :data:`BOX_DELTA_RMS`.

    torchvision draws detection heads at std 0.01 (and SSDlite's whole backbone at 0.03), so
    untrained activations shrink to ~1e-14, every anchor scores within rounding of one value
    and rounding alone picks the surviving boxes: float32 eager and float64 eager then share
    none of their detections. With unit-RMS layers the scores spread as a trained model's do
    (the logits' prior bias kept), and small deltas keep boxes near their anchors, as trained
    ones are, rather than clipped to nothing at the image's edge."""
    layers = (torch.nn.Conv2d, torch.nn.ConvTranspose2d, torch.nn.Linear)
    target = {m: BOX_DELTA_RMS if _BOX_DELTAS.search(name) else 1.0
              for name, m in model.named_modules() if isinstance(m, layers)}
    handles = {}

    def rescale(module, _inputs, output):
        handles.pop(module).remove()   # the first call sets the scale
        bias = 0.0 if module.bias is None else module.bias
        if module.bias is not None and not isinstance(module, torch.nn.Linear):
            shape = [1] * output.dim()   # channels precede the spatial dims
            shape[output.dim() - (module.weight.dim() - 2) - 1] = -1
            bias = module.bias.view(shape)
        product = output - bias
        rms = float(product.detach().double().pow(2).mean().sqrt())
        if rms > 0 and math.isfinite(rms):
            scale = target[module] / rms
            module.weight.mul_(scale)
            output.copy_(product * scale + bias)
    for m in target:
        handles[m] = m.register_forward_hook(rescale)
    training = model.training
    try:
        with torch.no_grad():
            model.eval()(*args)
    finally:
        for h in handles.values():
            h.remove()
        model.train(training)
    return model
