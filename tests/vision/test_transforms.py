"""ember.vision.transforms: v2-style modules over sample pytrees, per-sample randomness."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

import ember.vision.transforms as T
from ember.vision import tv_tensors as tv
from ember.vision.transforms import functional as F


def batch(n=4, h=32, w=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    small = torch.rand(n, 3, 6, 8, generator=g) * 255
    return torch.nn.functional.interpolate(small, size=(h, w), mode="bilinear").round().to(
        torch.uint8)


def rect_sample(n=4, h=32, w=40, box=(6, 5, 25, 22)):
    x1, y1, x2, y2 = box
    img = torch.zeros(n, 3, h, w, dtype=torch.uint8)
    img[:, :, y1:y2, x1:x2] = 255
    mask = torch.zeros(n, h, w, dtype=torch.uint8)
    mask[:, y1:y2, x1:x2] = 1
    boxes = torch.tensor([[[x1, y1, x2, y2]]] * n, dtype=torch.float32)
    return {"image": tv.Image(img), "mask": tv.Mask(mask),
            "boxes": tv.BoundingBoxes(boxes, format="XYXY", canvas_size=(h, w)),
            "meta": "keep me", "id": 7}


ALL = {
    "hflip": lambda ps: T.RandomHorizontalFlip(p=0.5, per_sample=ps),
    "vflip": lambda ps: T.RandomVerticalFlip(p=0.5, per_sample=ps),
    "crop": lambda ps: T.RandomCrop(20, padding=2, per_sample=ps),
    "rrc": lambda ps: T.RandomResizedCrop(24, per_sample=ps),
    "rotation": lambda ps: T.RandomRotation(25, per_sample=ps),
    "affine": lambda ps: T.RandomAffine(15, translate=(0.1, 0.1), scale=(0.9, 1.1), shear=5,
                                        per_sample=ps),
    "perspective": lambda ps: T.RandomPerspective(0.3, p=1.0, per_sample=ps),
    "jitter": lambda ps: T.ColorJitter(0.4, 0.4, 0.4, 0.1, per_sample=ps),
    "gray": lambda ps: T.RandomGrayscale(0.5, per_sample=ps),
    "blur": lambda ps: T.GaussianBlur(5, per_sample=ps),
    "erase": lambda ps: T.RandomErasing(p=1.0, per_sample=ps),
    "apply": lambda ps: T.RandomApply([T.ColorJitter(0.5)], p=0.5, per_sample=ps),
}

GEOMETRIC = {"hflip", "vflip", "crop", "rrc", "rotation", "affine", "perspective"}


@pytest.mark.parametrize("name", sorted(ALL))
@pytest.mark.parametrize("per_sample", [False, True])
def test_random_transforms_on_samples(name, per_sample):
    torch.manual_seed(0)
    t = ALL[name](per_sample)
    sample = rect_sample()
    before = sample["image"].clone()
    out = t(sample)
    assert torch.equal(sample["image"], before)
    assert out["meta"] == "keep me" and out["id"] == 7
    assert type(out["image"]) is tv.Image and out["image"].dtype == torch.uint8
    assert type(out["mask"]) is tv.Mask and type(out["boxes"]) is tv.BoundingBoxes
    assert out["boxes"].canvas_size == tuple(out["image"].shape[-2:])
    assert pickle.loads(pickle.dumps(t)) is not None
    if name in GEOMETRIC:
        for i in range(4):
            m = out["mask"][i]
            if m.sum() < 4:
                continue  # cropped away
            ys, xs = torch.nonzero(m, as_tuple=True)
            got = [int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1]
            assert np.allclose(got, out["boxes"][i, 0].tolist(), atol=2.0), (i, got)
            img_on = out["image"][i, 0] > 127
            # resampled image edges vs nearest-neighbour mask edges differ by <= 1 px
            assert (img_on != m.bool()).float().mean() < 0.06


@pytest.mark.parametrize("name", ["crop", "rrc", "rotation", "affine", "perspective", "jitter",
                                  "blur", "erase"])
def test_per_sample_draws_differ_within_the_batch(name):
    torch.manual_seed(1)
    x = batch(1).expand(6, -1, -1, -1).contiguous()
    out = ALL[name](True)(x)
    assert not all(torch.equal(out[0], out[i]) for i in range(1, 6))
    torch.manual_seed(1)
    shared = ALL[name](False)(x)
    assert all(torch.equal(shared[0], shared[i]) for i in range(1, 6))


def test_per_sample_flip_matches_functional_per_image():
    torch.manual_seed(3)
    x = batch(8)
    out = T.RandomHorizontalFlip(per_sample=True)(x)
    flipped = [torch.equal(out[i], F.horizontal_flip(x[i])) for i in range(8)]
    kept = [torch.equal(out[i], x[i]) for i in range(8)]
    assert all(f or k for f, k in zip(flipped, kept)) and any(flipped) and any(kept)


def test_seeded_runs_repeat():
    t = T.Compose([T.RandomResizedCrop(16, per_sample=True), T.ColorJitter(0.3, 0.3, 0.3, 0.05)])
    x = batch()
    torch.manual_seed(5)
    a = t(x)
    torch.manual_seed(5)
    assert torch.equal(a, t(x))


def test_plain_tensor_rules_and_empty_batch():
    x = batch(2)
    other = torch.arange(5)
    out_img, out_other = T.Resize(16)(x, other)
    assert out_img.shape[-2:] == (16, 20) and out_other is other
    empty = T.RandomResizedCrop(8, per_sample=True)(x[:0])
    assert empty.shape == (0, 3, 8, 8)
    assert T.RandomHorizontalFlip(per_sample=True)(x[:0]).shape == (0, 3, 32, 40)
    video = tv.Video(batch(3).unsqueeze(0))
    assert T.RandomResizedCrop(12)(video).shape == (1, 3, 3, 12, 12)


def test_pipeline_uint8_to_normalized_float():
    pipe = T.Compose([T.RandomResizedCrop(24, per_sample=True),
                      T.RandomHorizontalFlip(per_sample=True),
                      T.ColorJitter(0.4, 0.4, 0.4, 0.1, per_sample=True),
                      T.ToDtype(torch.float32, scale=True),
                      T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    out = pipe(batch(5))
    assert out.shape == (5, 3, 24, 24) and out.dtype == torch.float32
    assert torch.isfinite(out).all()


def test_five_crop_and_to_dtype_dict():
    img = tv.Image(batch(1)[0])
    # torchvision: the image leaf becomes the tuple of crops, the rest of the sample stays
    out = T.FiveCrop(10)({"image": img, "k": 1})
    crops = out["image"]
    assert out["k"] == 1 and len(crops) == 5 and all(c.shape == (3, 10, 10) for c in crops)
    assert torch.equal(crops[0], img[:, :10, :10])
    with pytest.raises(TypeError):
        T.FiveCrop(10)(img, tv.Mask(torch.zeros(32, 40)))
    mask = tv.Mask(torch.zeros(32, 40, dtype=torch.uint8))
    out = T.ToDtype({tv.Image: torch.float32, "others": None}, scale=True)(img, mask)
    assert out[0].dtype == torch.float32 and out[1].dtype == torch.uint8


def test_mixup_cutmix_labels_are_convex():
    torch.manual_seed(0)
    x, labels = batch(4).float() / 255, torch.tensor([0, 1, 2, 3])
    for t in (T.MixUp(alpha=1.0, num_classes=4), T.CutMix(alpha=1.0, num_classes=4)):
        imgs, soft = t(x, labels)
        assert imgs.shape == x.shape and soft.shape == (4, 4)
        assert torch.allclose(soft.sum(1), torch.ones(4))
        assert torch.allclose(soft.diagonal() + soft.roll(1, 0).diagonal().roll(-1, 0) * 0,
                              soft.diagonal())
    lam = soft[0, 0]
    pasted = (imgs[0] != x[0]).any(0).float().mean()
    assert abs(float(1 - lam) - float(pasted)) < 0.1
    with pytest.raises(ValueError, match="labels"):
        T.MixUp(num_classes=4)(x)
    sample = {"img": x, "target": labels}
    out = T.MixUp(num_classes=4, labels_getter=lambda s: s["target"])(sample)
    assert out["target"].shape == (4, 4) and out["img"].shape == x.shape


def test_auto_augment_family_keeps_shape_and_dtype():
    torch.manual_seed(0)
    x = batch(2)
    for t in (T.AutoAugment(), T.RandAugment(), T.TrivialAugmentWide()):
        for _ in range(15):
            out = t(x)
            assert out.shape == x.shape and out.dtype == torch.uint8
        assert pickle.loads(pickle.dumps(t)) is not None


def test_box_utilities():
    boxes = tv.BoundingBoxes([[2, 2, 10, 10], [5, 5, 5.5, 9], [-5, 0, 3, 3]], format="XYXY",
                             canvas_size=(20, 20))
    sample = {"image": tv.Image(torch.zeros(3, 20, 20)), "boxes": boxes,
              "labels": torch.tensor([1, 2, 3])}
    out = T.SanitizeBoundingBoxes()(sample)
    assert out["boxes"].tolist() == [[2, 2, 10, 10]] and out["labels"].tolist() == [1]
    conv = T.ConvertBoundingBoxFormat("XYWH")(sample)["boxes"]
    assert conv.format is tv.BoundingBoxFormat.XYWH and conv[0].tolist() == [2, 2, 8, 8]
    clamped = T.ClampBoundingBoxes()(sample)["boxes"]
    assert clamped[2].tolist() == [0, 0, 3, 3]


@pytest.mark.parametrize("make, exc, match", [
    (lambda: T.RandomHorizontalFlip(p=1.5), ValueError, "p must"),
    (lambda: T.RandomHorizontalFlip(per_sample="yes"), TypeError, "per_sample"),
    (lambda: T.Resize(-3), ValueError, "size"),
    (lambda: T.RandomResizedCrop(8, scale=(0.9, 0.1)), ValueError, "scale"),
    (lambda: T.RandomRotation(10, expand=True, per_sample=True), ValueError, "expand"),
    (lambda: T.RandomAffine(10, translate=(2, 0)), ValueError, "translate"),
    (lambda: T.ColorJitter(hue=0.9), ValueError, "hue"),
    (lambda: T.ColorJitter(brightness="a"), TypeError, "brightness"),
    (lambda: T.GaussianBlur(4), ValueError, "kernel_size"),
    (lambda: T.Normalize([0.5], [0.0]), ValueError, "std"),
    (lambda: T.ToDtype("float"), TypeError, "dtype"),
    (lambda: T.Pad(1, padding_mode="wrap"), ValueError, "padding_mode"),
    (lambda: T.RandomErasing(value="noise"), ValueError, "value"),
    (lambda: T.Compose("abc"), TypeError, "transforms"),
    (lambda: T.RandomChoice([T.Resize(3)], p=[1, 2]), ValueError, "p must"),
    (lambda: T.MixUp(alpha=0, num_classes=3), ValueError, "alpha"),
    (lambda: T.RandAugment(magnitude=40), ValueError, "magnitude"),
    (lambda: T.ConvertBoundingBoxFormat("XY"), ValueError, "format"),
])
def test_bad_arguments(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


def test_per_sample_needs_a_batch():
    with pytest.raises(ValueError, match="batched"):
        T.RandomResizedCrop(8, per_sample=True)(torch.zeros(3, 16, 16, dtype=torch.uint8))


def test_pipeline_traces_without_graph_breaks():
    """Per-sample random parameters are tensors, so TorchDynamo captures one graph."""
    pipe = T.Compose([T.RandomResizedCrop(16, per_sample=True),
                      T.RandomHorizontalFlip(per_sample=True),
                      T.ColorJitter(0.4, 0.4, 0.4, 0.1, per_sample=True),
                      T.Normalize([0.5] * 3, [0.2] * 3)])
    x = batch(3).float() / 255
    compiled = torch.compile(pipe, backend="eager", fullgraph=True)
    out = compiled(x)
    assert out.shape == (3, 3, 16, 16) and torch.isfinite(out).all()


@pytest.mark.parametrize("make", [lambda: T.ColorJitter(0.4, 0.4, 0.4, 0.1, per_sample=True),
                                  lambda: T.RandomHorizontalFlip(per_sample=True),
                                  lambda: T.RandomAffine(20, scale=(0.8, 1.2), per_sample=True),
                                  lambda: T.Normalize([0.4, 0.5, 0.6], [0.2, 0.3, 0.25])])
def test_chunked_cpu_path_equals_whole_batch(make, monkeypatch):
    """CPU batches run in cache-sized chunks over threads; results equal the one-shot path."""
    import ember.vision.transforms._transform as base

    x = batch(9, 20, 24).float() / 255
    t = make()
    monkeypatch.setattr(base, "_CHUNK_BYTES", 3 * 20 * 24 * 4 * 2)  # 2 images per chunk
    torch.manual_seed(4)
    chunked = t(x)
    monkeypatch.setattr(type(t), "chunkable", False)
    torch.manual_seed(4)
    whole = t(x)
    assert torch.allclose(chunked, whole, atol=1e-6)


def test_inplace_normalize_on_chunked_batches_writes_into_its_input():
    x = batch(6, 20, 24).float() / 255
    ref = (x - 0.5) / 0.25
    out = T.Normalize([0.5] * 3, [0.25] * 3, inplace=True)(x)
    assert out.data_ptr() == x.data_ptr() and torch.allclose(out, ref, atol=1e-6)
    y = batch(6, 20, 24).float() / 255
    keep = y.clone()
    T.Normalize([0.5] * 3, [0.25] * 3)(y)
    assert torch.equal(y, keep)


def test_chunked_resize_and_crop_with_boxes_equal_whole_batch(monkeypatch):
    import ember.vision.transforms._transform as base

    sample = rect_sample(n=7)
    monkeypatch.setattr(base, "_CHUNK_BYTES", 3 * 32 * 40 * 4 * 2)
    for make in (lambda: T.Resize([20, 30]), lambda: T.RandomCrop(24, per_sample=True)):
        t = make()
        torch.manual_seed(2)
        chunked = t(sample)
        monkeypatch.setattr(type(t), "chunkable", False)
        torch.manual_seed(2)
        whole = t(sample)
        monkeypatch.setattr(type(t), "chunkable", True)
        for key in ("image", "mask", "boxes"):
            assert type(chunked[key]) is type(whole[key])
            assert torch.equal(chunked[key], whole[key]), key
        assert chunked["boxes"].canvas_size == whole["boxes"].canvas_size


def test_every_transform_pickles_and_reprs():
    every = [T.Compose([T.Resize(8)]), T.RandomApply([T.Grayscale()], p=0.3),
             T.RandomChoice([T.Resize(8), T.CenterCrop(4)]), T.RandomOrder([T.Resize(8)]),
             T.Resize([8, 9]), T.CenterCrop(4), T.RandomCrop(4), T.RandomResizedCrop(5),
             T.FiveCrop(3), T.Pad([1, 2]), T.RandomHorizontalFlip(), T.RandomVerticalFlip(),
             T.RandomRotation(10), T.RandomAffine(5), T.RandomPerspective(), T.ColorJitter(0.1),
             T.Grayscale(), T.RandomGrayscale(), T.GaussianBlur(3), T.Normalize([0.5], [0.5]),
             T.ToDtype(torch.float32), T.RandomErasing(), T.AutoAugment(), T.RandAugment(),
             T.TrivialAugmentWide(), T.MixUp(num_classes=3), T.CutMix(num_classes=3),
             T.ConvertBoundingBoxFormat("XYWH"), T.ClampBoundingBoxes(),
             T.SanitizeBoundingBoxes(), T.ToImage(), T.PILToTensor(), T.ToPILImage(),
             T.ToPureTensor(), T.TenCrop(3), T.RandomResize(8, 12), T.RandomShortestSize(8),
             T.ScaleJitter((16, 16)), T.RandomZoomOut(), T.RandomIoUCrop(),
             T.ElasticTransform(sigma=1.0),
             T.RandomInvert(), T.RandomEqualize(), T.RandomAutocontrast(), T.RandomPosterize(4),
             T.RandomSolarize(128), T.RandomAdjustSharpness(2.0), T.RandomChannelPermutation(),
             T.RandomPhotometricDistort(), T.GaussianNoise(), T.JPEG(50), T.RGB(), T.Identity(),
             T.Lambda(abs), T.LinearTransformation(torch.eye(2), torch.zeros(2)),
             T.UniformTemporalSubsample(1), T.ConvertImageDtype(), T.SetClampingMode(None),
             T.ClampKeyPoints(), T.AugMix(), T.SanitizeKeyPoints()]
    with pytest.warns(DeprecationWarning):
        every.append(T.ToTensor())
    names = {type(t).__name__ for t in every}
    helpers = {"check_type", "get_bounding_boxes", "get_keypoints", "has_all", "has_any",
               "query_chw", "query_size"}
    assert names == set(T.__all__) - {"functional", "Transform", "InterpolationMode",
                                      "AutoAugmentPolicy"} - helpers
    x = batch(2, 16, 16)
    for t in every:
        back = pickle.loads(pickle.dumps(t))
        assert type(back) is type(t) and repr(back) == repr(t)
        if isinstance(t, (T.MixUp, T.CutMix, T.SanitizeBoundingBoxes, T.Normalize,
                          T.ToPILImage, T.RandomIoUCrop, T.LinearTransformation,
                          T.SanitizeKeyPoints)):
            continue
        torch.manual_seed(0)
        a = t(x)
        torch.manual_seed(0)
        assert str(back(x)) == str(a)  # same draws, same output


@pytest.mark.parametrize("name", sorted(ALL))
def test_per_sample_on_videos_shares_parameters_across_frames(name):
    torch.manual_seed(0)
    frames = batch(2, 24, 32).unsqueeze(1).expand(2, 3, 3, 24, 32).clone()
    out = ALL[name](True)(tv.Video(frames))
    assert type(out) is tv.Video and out.shape[:3] == (2, 3, 3)
    for i in range(2):
        for k in (1, 2):
            assert torch.equal(out[i, 0], out[i, k])


@pytest.mark.parametrize("make", [lambda: T.AutoAugment(per_sample=True),
                                  lambda: T.RandAugment(per_sample=True),
                                  lambda: T.TrivialAugmentWide(per_sample=True)])
def test_auto_augment_per_sample_draws_a_program_per_image(make):
    torch.manual_seed(0)
    x = batch(1, 24, 24).expand(8, -1, -1, -1).contiguous()
    t = make()
    out = t(x)
    assert out.shape == x.shape and out.dtype == torch.uint8
    assert len({tuple(out[i].flatten().tolist()) for i in range(8)}) > 1
    # each image is its program applied alone: replaying the draws reproduces the batch
    torch.manual_seed(0)
    programs = [t.program(24, 24) for _ in range(8)]
    from ember.vision.transforms._augment import _apply_op

    for i, prog in enumerate(programs):
        img = x[i:i + 1]
        for name, mag in prog:
            img = _apply_op(img, name, mag, t.interpolation, t.fill)
        assert torch.equal(img[0], out[i])
    with pytest.raises(ValueError, match="batched"):
        t(x[0])


def test_random_choice_and_order_per_sample():
    torch.manual_seed(0)
    sample = rect_sample(n=8)
    choice = T.RandomChoice([T.RandomHorizontalFlip(p=1.0), T.RandomVerticalFlip(p=1.0)],
                            per_sample=True)
    out = choice(sample)
    kinds = set()
    for i in range(8):
        h = torch.equal(out["image"][i], F.horizontal_flip(sample["image"][i]))
        v = torch.equal(out["image"][i], F.vertical_flip(sample["image"][i]))
        assert h or v
        kinds.add("h" if h else "v")
        one = tv.wrap(sample["boxes"][i], like=sample["boxes"])  # indexing gives a plain tensor
        ref = F.horizontal_flip(one) if h else F.vertical_flip(one)
        assert torch.equal(out["boxes"][i], ref)
    assert kinds == {"h", "v"} and type(out["boxes"]) is tv.BoundingBoxes
    order = T.RandomOrder([T.ColorJitter(brightness=(2.0, 2.0)), T.Grayscale(3)],
                          per_sample=True)
    x = batch(8)
    res = order(x)
    a = T.Grayscale(3)(T.ColorJitter(brightness=(2.0, 2.0))(x))
    b = T.ColorJitter(brightness=(2.0, 2.0))(T.Grayscale(3)(x))
    assert all(torch.equal(res[i], a[i]) or torch.equal(res[i], b[i]) for i in range(8))
    with pytest.raises(ValueError, match="keep the shape"):
        T.RandomChoice([T.Resize(8), T.Resize(9)], per_sample=True)(x)


@pytest.mark.parametrize("make", [lambda: T.RandomResizedCrop(12, per_sample=True),
                                  lambda: T.RandomCrop(12, per_sample=True),
                                  lambda: T.RandomAffine(10, translate=(0.1, 0.1), shear=3,
                                                         per_sample=True),
                                  lambda: T.RandomPerspective(p=0.5, per_sample=True),
                                  lambda: T.GaussianBlur(3, per_sample=True),
                                  lambda: T.RandomErasing(per_sample=True),
                                  lambda: T.RandomGrayscale(0.5, per_sample=True)])
def test_per_sample_transforms_trace_as_one_graph(make):
    torch._dynamo.reset()
    x = batch(3, 20, 20)
    out = torch.compile(make(), backend="eager", fullgraph=True)(x)
    assert out.shape[0] == 3 and out.dtype == torch.uint8


def _stagewise(pipe, sample):
    """Every stage called on its own (no fused chunking), for comparison."""
    for t in pipe.transforms:
        sample = t(sample)
    return sample


@pytest.mark.parametrize("make_input", [
    lambda: batch(9, 20, 24),
    lambda: {"image": tv.Image(batch(9, 20, 24)), "tag": "x",
             "boxes": tv.BoundingBoxes(torch.tensor([[[2.0, 3.0, 15.0, 12.0]]] * 9), format="XYXY",
                                       canvas_size=(20, 24))},
])
def test_compose_runs_chunkable_stages_fused_with_the_same_draws(make_input, monkeypatch):
    """Compose sends each chunk through all chunkable stages at once; the random draws and
    the results equal calling the stages one after the other."""
    import ember.vision.transforms._transform as base

    monkeypatch.setattr(base, "_CHUNK_BYTES", 3 * 20 * 24 * 4 * 2)  # 2 images per chunk
    pipe = T.Compose([T.RandomResizedCrop(16, per_sample=True),
                      T.RandomHorizontalFlip(per_sample=True),
                      T.RandomVerticalFlip(p=0.5),
                      T.ToDtype(torch.float32, scale=True),
                      T.ColorJitter(0.4, 0.4, 0.4, 0.1, per_sample=True),
                      T.Normalize([0.5] * 3, [0.25] * 3, inplace=True)])
    sample = make_input()
    calls = []
    real = base.run_fused
    monkeypatch.setattr("ember.vision.transforms._container.run_fused",
                        lambda stages, s: calls.append(len(stages)) or real(stages, s))
    for seed in range(3):
        torch.manual_seed(seed)
        fused = pipe(sample)
        torch.manual_seed(seed)
        ref = _stagewise(pipe, sample)
        f_img = fused["image"] if isinstance(fused, dict) else fused
        r_img = ref["image"] if isinstance(ref, dict) else ref
        assert f_img.shape == (9, 3, 16, 16) and type(f_img) is type(r_img)
        assert torch.allclose(f_img, r_img, atol=1e-5)
        if isinstance(fused, dict):
            assert fused["tag"] == "x" and torch.equal(fused["boxes"], ref["boxes"])
            assert fused["boxes"].canvas_size == (16, 16)
    assert calls == [6, 6, 6]


def test_per_sample_random_transform_touches_only_chosen_images():
    x = batch(10)
    torch.manual_seed(1)
    out = T.RandomGrayscale(p=0.5, per_sample=True)(x)
    gray = F.rgb_to_grayscale(x, num_output_channels=3)
    changed = [not torch.equal(out[i], x[i]) for i in range(10)]
    assert any(changed) and not all(changed)
    for i in range(10):
        assert torch.equal(out[i], gray[i] if changed[i] else x[i])


def test_fused_tail_writes_into_the_output_and_keeps_inputs(monkeypatch):
    """The fused run's last stages overwrite only buffers it owns: the caller's batch is
    untouched and the result equals stage-by-stage calls."""
    import ember.vision.transforms._transform as base

    monkeypatch.setattr(base, "_CHUNK_BYTES", 3 * 20 * 24 * 4 * 2)
    x = batch(9, 20, 24).float() / 255
    keep = x.clone()
    pipe = T.Compose([T.ColorJitter(0.4, 0.4, 0.4, 0.1, per_sample=True),
                      T.Normalize([0.5] * 3, [0.25] * 3)])
    torch.manual_seed(3)
    fused = pipe(x)
    assert torch.equal(x, keep)
    torch.manual_seed(3)
    assert torch.allclose(fused, _stagewise(pipe, x), atol=1e-5)


@pytest.mark.parametrize("policy", list(T.AutoAugmentPolicy))
def test_auto_augment_policies_draw_only_their_own_ops(policy):
    from ember.vision.transforms._augment import _POLICIES

    table = _POLICIES[policy.value]
    assert len(table) == 25
    allowed = {name for sub in table for name, p, _ in sub if p > 0}
    t = T.AutoAugment(policy)
    torch.manual_seed(0)
    drawn = set()
    for _ in range(300):
        drawn |= {name for name, _ in t.program(32, 40)}
    assert drawn <= allowed and len(drawn) >= len(allowed) - 2
    out = t(batch(2))
    assert out.shape == (2, 3, 32, 40) and out.dtype == torch.uint8
    assert T.AutoAugment(policy.value).policy is policy


def test_auto_augment_rejects_unknown_policy():
    with pytest.raises(ValueError, match="policy"):
        T.AutoAugment("mnist")


def test_typed_samples_under_torch_compile_stay_typed_and_correct():
    """unwrap traces in one graph; whole typed pipelines compile (with breaks where a result
    is re-wrapped, see ember.vision.tv_tensors) and match eager."""
    img = tv.Image(batch(3).float() / 255)
    plain = torch.compile(lambda x: tv.unwrap(x) * 2, backend="eager", fullgraph=True)(img)
    assert type(plain) is torch.Tensor and torch.equal(plain, img.as_subclass(torch.Tensor) * 2)
    pipe = T.Compose([T.RandomHorizontalFlip(per_sample=True), T.Normalize([0.5] * 3, [0.2] * 3)])
    sample = {"image": img, "boxes": tv.BoundingBoxes(torch.tensor([[[1.0, 2, 8, 9]]] * 3),
                                                      format="XYXY", canvas_size=(32, 40))}
    torch.manual_seed(0)
    out = torch.compile(pipe, backend="eager")(sample)
    torch.manual_seed(0)
    ref = pipe(sample)
    assert type(out["image"]) is tv.Image and type(out["boxes"]) is tv.BoundingBoxes
    assert torch.allclose(out["image"], ref["image"]) and torch.equal(out["boxes"], ref["boxes"])
