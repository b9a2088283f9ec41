"""`ember bench zoo --suite vision`: ember.vision's model builders under eager, Inductor, Ember.

The models come from the registry (``ember.vision.models.list_models``), so builders added
later are picked up: every classification builder (small inputs) and the segmentation, video
and detection builders that exist. Each runs inference and one training step in float32 and
AMP (bfloat16 autocast on CPU), but for the few listed in :data:`INFERENCE_ONLY` with why;
the measurement (accuracy against eager, compile time, round-robin timing) is the zoo's
(:mod:`ember.tools.bench.zoo`); this module is the model table and the report.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ember.tools.bench import zoo, zoo_detections, zoo_suite
from ember.tools.bench.harness import BenchResult

FAMILIES = ("classification", "segmentation", "video", "detection")
TASK_PACKAGES = ("segmentation", "video", "detection")   # ember.vision.models.<package>

# a training step keeps three models' weights and gradients beside float64 gradients: over
# 20 GB for these 630M-parameter builders
_HUGE = "its training step would hold about 23 GB (3 models with gradients, float64 gradients)"
INFERENCE_ONLY = {"regnet_y_128gf": _HUGE, "vit_h_14": _HUGE}
# input side per classification builder where the default (32 quick, 64) is too small
_MIN_SIDE = {"inception_v3": 80, "maxvit_t": 224, "alexnet": 64, "squeezenet1_0": 64,
             "squeezenet1_1": 64, "googlenet": 64, "vit_h_14": 70}   # 70: 14's multiple
# video clip (batch, frames, side) per builder where the default is too small: s3d's final
# pooling needs 14 frames of 224 x 224 (one clip: a forward is ~1.5 s on one core)
_CLIP = {"s3d": (1, 14, 224)}
# builder keywords where the default model cannot run at the zoo's inputs: inception_v3's
# auxiliary head pools its 768-channel map 5x5 and needs 299x299 images
_KWARGS = {"inception_v3": {"aux_logits": False}}
QUICK_MODELS = ("squeezenet1_1",)
NUM_CLASSES = 5


@dataclass
class VisionModel:
    family: str
    build: Callable[[bool], zoo.Workload]


def _no_dropout(model: torch.nn.Module) -> torch.nn.Module:
    """Zero every dropout, drop-block and stochastic-depth probability, so a training step
    draws no random masks and compiled code is compared with eager without having to draw
    them in eager's order (the HF suite does the same through its configs)."""
    from ember.vision.ops import DropBlock2d, DropBlock3d, StochasticDepth

    for m in model.modules():
        if isinstance(m, (torch.nn.modules.dropout._DropoutNd, StochasticDepth, DropBlock2d,
                          DropBlock3d)):
            m.p = 0.0
    return model


def _classifier(name: str) -> Callable[[bool], zoo.Workload]:
    def build(quick: bool) -> zoo.Workload:
        from ember.vision import models

        side = max(32 if quick else 64, _MIN_SIDE.get(name, 0))
        kwargs = {"num_classes": NUM_CLASSES, **_KWARGS.get(name, {})}
        if name.startswith("vit_"):
            kwargs["image_size"] = side
        model = _no_dropout(models.get_model(name, **kwargs))
        g = torch.Generator().manual_seed(0)
        x = torch.randn(2, 3, side, side, generator=g)
        y = torch.arange(2) % NUM_CLASSES

        def loss(out):
            out = out[0] if isinstance(out, tuple) else out   # googlenet / inception train
            return F.cross_entropy(out.float(), y.to(out.device))
        return zoo.Workload(model, (x,), loss)
    return build


def _segmenter(name: str) -> Callable[[bool], zoo.Workload]:
    def build(quick: bool) -> zoo.Workload:
        from ember.vision import models

        side = 32 if quick else 64
        model = _no_dropout(models.get_model(name, num_classes=NUM_CLASSES))
        x = torch.randn(2, 3, side, side, generator=torch.Generator().manual_seed(0))
        return zoo.Workload(model, (x,), zoo._mean_square)
    return build


def _video(name: str) -> Callable[[bool], zoo.Workload]:
    def build(quick: bool) -> zoo.Workload:
        from ember.vision import models

        batch, frames, side = _CLIP.get(name, (2, 4, 32 if quick else 48))
        model = _no_dropout(models.get_model(name, num_classes=NUM_CLASSES))
        x = torch.randn(batch, 3, frames, side, side,
                        generator=torch.Generator().manual_seed(0))
        y = torch.arange(batch) % NUM_CLASSES
        return zoo.Workload(model, (x,),
                            lambda out: F.cross_entropy(out.float(), y.to(out.device)))
    return build


def _detector_kwargs(side: int) -> list[dict]:
    """Keyword sets to try, first that builds wins: small fixed-size inputs and a zero score
    threshold (untrained heads still detect) in the spellings of each detector family."""
    small = {"min_size": side, "max_size": side}
    return [{**small, "score_thresh": 0.0, "detections_per_img": 20},        # one-stage
            {**small, "box_score_thresh": 0.0, "box_detections_per_img": 20},  # R-CNNs
            {"score_thresh": 0.0, "detections_per_img": 20}]                  # SSD: fixed size


def _detector(name: str) -> Callable[[bool], zoo.Workload]:
    def build(quick: bool) -> zoo.Workload:
        from ember.vision import models

        side = 64 if quick else 128
        for kwargs in _detector_kwargs(side):
            try:
                model = models.get_model(name, num_classes=NUM_CLASSES, **kwargs)
                break
            except TypeError:   # keywords this detector's class does not take
                continue
        else:
            model = models.get_model(name, num_classes=NUM_CLASSES)   # raises its error
        g = torch.Generator().manual_seed(0)
        images = [torch.rand(3, side, side, generator=g) for _ in range(2)]
        box = torch.tensor([[4.0, 6.0, side / 2, side / 2 + 3]])
        targets = []
        for _ in images:
            t = {"boxes": box.clone(), "labels": torch.tensor([1])}
            if "mask" in name:
                mask = torch.zeros(1, side, side, dtype=torch.uint8)
                mask[:, 6:side // 2 + 3, 4:side // 2] = 1
                t["masks"] = mask
            if "keypoint" in name:
                t["keypoints"] = torch.tensor([[[8.0, 10.0, 1.0]] * 17])
            targets.append(t)
        zoo_detections.unit_layers(model, (images,))
        return zoo.Workload(model, (images,), lambda out: sum(out.values()),
                            train_args=(images, targets))
    return build


_MAKERS = {"classification": _classifier, "segmentation": _segmenter, "video": _video,
           "detection": _detector}


def discover() -> dict[str, str]:
    """Every registered ember.vision builder -> its family (task packages by module; the
    flat ``ember.vision.models.retinanet`` is detection)."""
    from ember.vision import models

    family = dict.fromkeys(models.list_models(), "classification")
    for package in TASK_PACKAGES:
        try:
            module = importlib.import_module(f"ember.vision.models.{package}")
        except ImportError:   # not written yet
            continue
        family.update(dict.fromkeys(models.list_models(module=module), package))
    family.update(dict.fromkeys(models.list_models(module="ember.vision.models.retinanet"),
                                "detection"))
    return family


def table() -> dict[str, VisionModel]:
    """The suite's models (registry order by family)."""
    found = discover()
    return {name: VisionModel(fam, _MAKERS[fam](name))
            for fam in FAMILIES for name in sorted(found) if found[name] == fam}


def run(quick: bool = False, models: str | None = None,
        store: str | None = None) -> BenchResult:
    """Every vision model (quick: one) x inference/training x float32/AMP; ``store``: a folder
    keeping each model's rows, reused by the next run (see :mod:`ember.tools.bench.zoo_store`)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    available = table()
    names = (models or os.environ.get("EMBER_ZOO_MODELS") or "").split(",")
    names = [n for n in names if n] or list(QUICK_MODELS if quick else available)
    unknown = [n for n in names if n not in available]
    if unknown:
        raise ValueError(f"unknown vision zoo model(s) {unknown}; known: {list(available)}")
    modes = [m for m in (os.environ.get("EMBER_ZOO_MODES") or "").split(",") if m] \
        or list(zoo.MODES)
    if set(modes) - set(zoo.MODES):
        raise ValueError(f"unknown zoo mode(s) {sorted(set(modes) - set(zoo.MODES))} in "
                         f"EMBER_ZOO_MODES; known: {list(zoo.MODES)}")
    runs = [(mode, precision) for mode in zoo.MODES if mode in modes
            for precision in zoo.PRECISIONS]
    entries = {n: zoo_suite.Entry(available[n].family, available[n].build,
                                  [r for r in runs if n not in INFERENCE_ONLY
                                   or r[0] == "inference"]) for n in names}
    parts = zoo_suite.run("vision", entries, names, quick, device,
                          lambda precision, mode: zoo.TOLERANCE[(precision, mode)], store)
    backends = zoo.BACKENDS
    columns = zoo_suite.columns(backends)
    rows = [row for p in parts for row in p.rows]
    errors = [e for p in parts for e in p.errors]
    passed, speedups = zoo_suite.tally(columns, rows, backends)
    total = len(rows)
    notes = []
    for b in backends:
        notes.append(zoo.suite_summary(b, passed[b], total, speedups,
                                       training=("amp", "float32"), label=""))
    notes.append(f"device {device}; AMP = torch.autocast({device!r}, bfloat16 on CPU); "
                 "timing rules of the default zoo; dropout and stochastic depth off (p = 0) "
                 "in classification, segmentation and video models; "
                 + zoo.accuracy_rule(zoo.TOLERANCE))
    notes.append("inputs: classification 2x3x64x64 (32 quick; inception 80 without its "
                 "auxiliary head, which needs 299, maxvit 224, vit_h_14 70, vit built at that "
                 "size), segmentation 2x3x64x64 (loss: mean square of the outputs), video "
                 "2x3x4x48x48 (s3d 1x3x14x224x224, its smallest clip), detection 2 images "
                 "128x128 (64 quick) with one box each, score threshold 0; "
                 f"{NUM_CLASSES} classes; random weights "
                 "(a detector's rescaled once on its images so each layer's product has unit "
                 f"RMS, box deltas {zoo_detections.BOX_DELTA_RMS:g}: see zoo_detections)")
    notes.append("models: " + ", ".join(names)
                 + ("" if quick or set(names) == set(available) else " (a subset)"))
    if set(modes) != set(zoo.MODES):
        notes.append("modes: " + ", ".join(modes) + " only (EMBER_ZOO_MODES)")
    notes.append("inference only: " + "; ".join(f"{n} ({why})"
                                                 for n, why in INFERENCE_ONLY.items()))
    notes += zoo_suite.store_notes(entries, names, parts, store)
    notes += [f"error: {e}" for e in errors]
    title = ("Vision model zoo (ember.vision.models): eager vs Inductor vs Ember, inference and "
             f"a training step, float32 and AMP ({'quick' if quick else 'small inputs'})")
    return BenchResult("zoo-vision", title, columns, rows, notes)
