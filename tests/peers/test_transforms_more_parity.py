"""AugMix, SanitizeKeyPoints, the v2 sample helpers and PIL resize against torchvision 0.29.

Same conventions as test_parity.py: ``@compares`` names the shared API each test covers
(test_coverage.py reads them), tolerances sit beside the comparisons, and where torchvision
raises ember must raise an exception of the same type.
"""

from __future__ import annotations

import numpy as np
import PIL.Image
import pytest

torchvision = pytest.importorskip("torchvision")

import torch  # noqa: E402
import torchvision.transforms.v2 as TT  # noqa: E402
import torchvision.transforms.v2.functional as TF  # noqa: E402
from torchvision import tv_tensors as ttv  # noqa: E402

import ember.vision.transforms as ET  # noqa: E402
import ember.vision.transforms.functional as EF  # noqa: E402
from ember.vision import tv_tensors as etv  # noqa: E402
from ember.vision.transforms import _augment as EA  # noqa: E402


class Lib:
    def __init__(self, name, T, F, tv):
        self.name, self.T, self.F, self.tv = name, T, F, tv


EM, TV = Lib("ember", ET, EF, etv), Lib("torchvision", TT, TF, ttv)


def compares(*names):
    """Names the shared API ("namespace:name") a test compares; read by test_coverage.py."""
    def mark(fn):
        fn.compares = names
        return fn
    return mark


def rand_image(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)
    return x if dtype == torch.uint8 else x.to(dtype) / 255


def plain(x):
    if isinstance(x, torch.Tensor):
        return x.as_subclass(torch.Tensor)
    if isinstance(x, PIL.Image.Image):
        return ("PIL", x.mode, x.size, torch.from_numpy(np.array(x)))
    if isinstance(x, (list, tuple)):
        return type(x)(plain(v) for v in x)
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    return x


def assert_exact(e, t, what=""):
    """Same structure, types of leaves, shapes, dtypes and values (bit for bit)."""
    assert type(e).__name__ == type(t).__name__, (what, type(e), type(t))
    e, t = plain(e), plain(t)
    if isinstance(t, (list, tuple)):
        assert len(e) == len(t), what
        for i, (a, b) in enumerate(zip(e, t)):
            assert_exact(a, b, f"{what}[{i}]")
    elif isinstance(t, dict):
        assert e.keys() == t.keys(), what
        for k in t:
            assert_exact(e[k], t[k], f"{what}[{k!r}]")
    elif isinstance(t, torch.Tensor):
        assert (e.shape, e.dtype) == (t.shape, t.dtype), (what, e.shape, e.dtype, t.shape)
        assert torch.equal(e, t), f"{what}: {int((e != t).sum())} values differ"
    else:
        assert e == t, (what, e, t)


def same_error(call):
    """call(lib) raises in torchvision; ember must raise the same exception type."""
    with pytest.raises(Exception) as t_err:
        call(TV)
    with pytest.raises(t_err.type):
        call(EM)


# ---------------------------------------------------------------- AugMix

AUGMIX_CONFIGS = {
    "default": {},
    "narrow": dict(severity=10, mixture_width=2, chain_depth=3, alpha=0.5, all_ops=False),
    "nearest": dict(severity=1, mixture_width=4, chain_depth=1, interpolation="nearest"),
}


def _record_augmix(L, cfg, x, seed):
    """The output, the ops (name, magnitude) and the Dirichlet draws of one AugMix call."""
    t = L.T.AugMix(**cfg)
    ops, draws = [], []
    if L is TV:
        apply = t._apply_image_or_video_transform

        def spy(img, op, mag, **kw):
            ops.append((op, round(mag, 6)))
            return apply(img, op, mag, **kw)

        t._apply_image_or_video_transform = spy
    else:
        chain = t.chain

        def spy(h, w):
            out = chain(h, w)
            ops.extend((op, round(mag, 6)) for op, mag in out)
            return out

        t.chain = spy
    sample = t._sample_dirichlet
    t._sample_dirichlet = lambda p: draws.append(sample(p)) or draws[-1]
    torch.manual_seed(seed)
    return t(x), ops, draws


@compares("transforms.v2:AugMix")
@pytest.mark.parametrize("cfg", sorted(AUGMIX_CONFIGS))
@pytest.mark.parametrize("seed", range(8))
def test_augmix_draws_torchvisions_stream(cfg, seed):
    # under the same torch seed ember draws the mixing weights, chain depths, ops, bins and
    # signs in torchvision's order: the same ops with the same magnitudes, the same weights
    # (exact), and the random stream left in the same state
    x = rand_image((3, 37, 53), torch.uint8, seed=40 + seed)
    _, e_ops, e_w = _record_augmix(EM, AUGMIX_CONFIGS[cfg], etv.Image(x), seed)
    e_next = torch.rand(3)
    _, t_ops, t_w = _record_augmix(TV, AUGMIX_CONFIGS[cfg], ttv.Image(x), seed)
    t_next = torch.rand(3)
    assert e_ops == t_ops and len(e_ops) > 0
    assert len(e_w) == len(t_w) == 2
    for a, b in zip(e_w, t_w):
        assert torch.equal(a, b)
    assert torch.equal(e_next, t_next)


def _augmix_input(kind, seed):
    dtype = torch.float32 if kind.startswith("float") else torch.uint8
    shape = {"3ch": (3, 37, 53), "1ch": (1, 29, 41), "batch": (2, 3, 19, 27),
             "video": (2, 3, 3, 17, 23)}[kind.split("-")[1]]
    return rand_image(shape, dtype, seed=50 + seed), "Video" if kind.endswith("video") else \
        "Image"


AUGMIX_KINDS = ["uint8-3ch", "uint8-1ch", "float-3ch", "uint8-batch", "uint8-video"]


@compares()
@pytest.mark.parametrize("kind", AUGMIX_KINDS)
@pytest.mark.parametrize("cfg", sorted(AUGMIX_CONFIGS))
@pytest.mark.parametrize("seed", range(4))
def test_augmix_mixing_is_exact(kind, cfg, seed, monkeypatch):
    """AugMix itself, apart from its op kernels: ember's chains run with torchvision's op
    kernel, so the draws, the batching of images and videos, the float mix and its
    truncation to uint8 must give torchvision's output bit for bit."""
    x, wrap = _augmix_input(kind, seed)
    ref = TT.AugMix()

    def tv_op(img, name, mag, interpolation, fill):
        return ref._apply_image_or_video_transform(
            img, name, mag, interpolation=TT.InterpolationMode(interpolation.value),
            fill={torch.Tensor: fill})

    t_out = _record_augmix(TV, AUGMIX_CONFIGS[cfg], getattr(ttv, wrap)(x.clone()), seed)[0]
    monkeypatch.setattr(EA, "_apply_op", tv_op)
    e_out = _record_augmix(EM, AUGMIX_CONFIGS[cfg], getattr(etv, wrap)(x.clone()), seed)[0]
    assert type(e_out).__name__ == type(t_out).__name__ == wrap
    assert_exact(e_out, t_out, f"{kind} {cfg}")


@compares()
@pytest.mark.parametrize("kind", AUGMIX_KINDS)
@pytest.mark.parametrize("cfg", sorted(AUGMIX_CONFIGS))
@pytest.mark.parametrize("seed", range(4))
def test_augmix_pixels(kind, cfg, seed):
    """End to end with our kernels. The op kernels are compared in test_parity.py: our warps'
    float64 grid moves a few uint8 pixels by 1 level (WARP_UINT8 there) and float colour ops
    differ in the last bit; a later Solarize, Posterize or Equalize of the same chain can turn
    such a difference into a jump at its threshold. So: most pixels (99%) within 1 level
    (uint8) or 1e-5 (float), and the mean within 0.5 level."""
    x, wrap = _augmix_input(kind, seed)
    e, t = (plain(_record_augmix(L, AUGMIX_CONFIGS[cfg], getattr(L.tv, wrap)(x.clone()),
                                 seed)[0]) for L in (EM, TV))
    assert (e.shape, e.dtype) == (t.shape, t.dtype)
    d = (e.double() - t.double()).abs()
    unit = 1.0 if x.dtype == torch.uint8 else 1e-5
    assert float((d > unit).double().mean()) <= 0.01, float(d.max())
    scale = 1.0 if x.dtype == torch.uint8 else 1 / 255
    assert abs(float(e.double().mean() - t.double().mean())) <= 0.5 * scale


@compares()
def test_augmix_plain_tensor_and_pil():
    x = rand_image((3, 31, 45), torch.uint8, seed=7)
    pil = PIL.Image.fromarray(x.permute(1, 2, 0).numpy())
    for inp in (x, pil):
        outs = []
        for L in (EM, TV):
            torch.manual_seed(5)
            outs.append(L.T.AugMix(severity=2)(inp))
        e, t = plain(outs[0]), plain(outs[1])
        assert type(outs[0]) is type(outs[1])   # plain tensor or PIL image, as given
        if isinstance(inp, PIL.Image.Image):
            assert e[:3] == t[:3]   # mode and size
            e, t = e[3], t[3]
        # the kernels' 1-level warp differences (test_augmix_pixels): a few pixels
        d = (e.int() - t.int()).abs()
        assert int(d.max()) <= 1 and float((d > 0).float().mean()) <= 0.01


@compares()
def test_augmix_errors():
    x = rand_image((3, 21, 25), torch.uint8)
    for sev in (0, 11):
        same_error(lambda L, sev=sev: L.T.AugMix(severity=sev))
    boxes = torch.tensor([[1.0, 2.0, 8.0, 9.0]])

    def with_boxes(L):
        b = L.tv.BoundingBoxes(boxes, format="XYXY", canvas_size=(21, 25))
        return L.T.AugMix()({"image": L.tv.Image(x), "boxes": b})

    def with_points(L):
        return L.T.AugMix()((L.tv.Image(x), L.tv.KeyPoints([[1.0, 2.0]], canvas_size=(21, 25))))

    for call in (with_boxes, with_points,
                 lambda L: L.T.AugMix()((L.tv.Image(x), L.tv.Mask(x[0] > 9))),
                 lambda L: L.T.AugMix()((L.tv.Image(x), L.tv.Image(x))),
                 lambda L: L.T.AugMix()({"label": 3})):
        same_error(call)


# ---------------------------------------------------------------- keypoints

def _points(seed=0):
    g = torch.Generator().manual_seed(seed)
    single = torch.rand(9, 2, generator=g) * torch.tensor([40.0, 30.0]) - 6  # some off canvas
    groups = torch.rand(6, 3, 2, generator=g) * torch.tensor([36.0, 28.0]) - 3
    return single, groups


@compares("functional:sanitize_keypoints")
@pytest.mark.parametrize("which", ["single", "groups"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=["float32", "int64"])
def test_sanitize_keypoints_functional(which, dtype):
    pts = _points()[which == "groups"].to(dtype)
    canvas = (25, 33)
    for L in (EM, TV):
        assert L.F.sanitize_keypoints is not None
    res = [L.F.sanitize_keypoints(L.tv.KeyPoints(pts, canvas_size=canvas)) for L in (EM, TV)]
    assert_exact(res[0], res[1], "KeyPoints")
    assert res[0][0].canvas_size == res[1][0].canvas_size
    assert 0 < int(res[1][1].sum()) < pts.shape[0]   # the case drops some and keeps some
    res = [L.F.sanitize_keypoints(pts.clone(), canvas_size=canvas) for L in (EM, TV)]
    assert_exact(res[0], res[1], "plain")


@compares()
def test_sanitize_keypoints_functional_errors():
    pts = _points()[0]
    same_error(lambda L: L.F.sanitize_keypoints(pts.clone()))
    same_error(lambda L: L.F.sanitize_keypoints(L.tv.KeyPoints(pts, canvas_size=(9, 9)),
                                                canvas_size=(9, 9)))
    same_error(lambda L: L.F.sanitize_keypoints(
        L.tv.BoundingBoxes([[0, 0, 2, 2]], format="XYXY", canvas_size=(9, 9))))
    same_error(lambda L: L.F.sanitize_keypoints([[1.0, 2.0]], canvas_size=(9, 9)))


@compares("transforms.v2:SanitizeKeyPoints")
@pytest.mark.parametrize("which", ["single", "groups"])
@pytest.mark.parametrize("getter", ["none", "default", "callable", "tuple"])
def test_sanitize_keypoints_transform(which, getter):
    pts = _points(1)[which == "groups"]
    n = pts.shape[0]
    getters = {"none": None, "default": "default", "callable": lambda s: s["ids"],
               "tuple": lambda s: (s["labels"], s["ids"])}

    def run(L):
        sample = {"image": L.tv.Image(rand_image((3, 25, 33), torch.uint8)),
                  "points": L.tv.KeyPoints(pts.clone(), canvas_size=(25, 33)),
                  "labels": torch.arange(n), "ids": torch.arange(n) * 10, "other": "x"}
        return L.T.SanitizeKeyPoints(labels_getter=getters[getter])(sample)

    e, t = run(EM), run(TV)
    assert_exact(e, t, getter)
    assert e["points"].canvas_size == t["points"].canvas_size


@compares()
def test_sanitize_keypoints_transform_errors():
    pts = _points()[0]

    def run(L, sample_fn, getter="default"):
        return L.T.SanitizeKeyPoints(labels_getter=getter)(sample_fn(L))

    same_error(lambda L: run(L, lambda L: {"image": L.tv.Image(rand_image((3, 5, 5),
                                                                          torch.uint8)),
                                           "labels": torch.arange(3)}))
    same_error(lambda L: run(L, lambda L: {"points": L.tv.KeyPoints(pts, canvas_size=(9, 9)),
                                           "labels": torch.arange(3)}))
    same_error(lambda L: run(L, lambda L: {"points": L.tv.KeyPoints(pts, canvas_size=(9, 9)),
                                           "labels": [1, 2]}, lambda s: s["labels"]))
    same_error(lambda L: run(L, lambda L: {"points": L.tv.KeyPoints(pts, canvas_size=(9, 9))}))
    same_error(lambda L: L.T.SanitizeKeyPoints(labels_getter=3))


# ---------------------------------------------------------------- sample helpers

def _sample(L, pil=False):
    img = rand_image((3, 21, 25), torch.uint8)
    image = PIL.Image.fromarray(img.permute(1, 2, 0).numpy()) if pil else L.tv.Image(img)
    return [image, L.tv.Mask(img[0] > 9),
            L.tv.BoundingBoxes([[1, 2, 5, 6]], format="XYXY", canvas_size=(21, 25)),
            L.tv.KeyPoints([[1.0, 2.0]], canvas_size=(21, 25)), "label", 3]


@compares("transforms.v2:check_type", "transforms.v2:has_any", "transforms.v2:has_all",
          "transforms.v2:get_bounding_boxes", "transforms.v2:get_keypoints",
          "transforms.v2:query_chw", "transforms.v2:query_size")
@pytest.mark.parametrize("pil", [False, True], ids=["tensor", "pil"])
def test_sample_helpers(pil):
    def calls(L):
        flat = _sample(L, pil)
        is_str = lambda x: isinstance(x, str)
        return [L.T.check_type(flat[0], (L.tv.Mask, PIL.Image.Image)),
                L.T.check_type(flat[4], (L.tv.Mask, is_str)),
                L.T.check_type(flat[5], (L.tv.Mask, is_str)),
                L.T.has_any(flat, L.tv.Video, L.tv.KeyPoints),
                L.T.has_any(flat, L.tv.Video),
                L.T.has_all(flat, L.tv.Mask, L.tv.BoundingBoxes, is_str),
                L.T.has_all(flat, L.tv.Mask, L.tv.Video),
                L.T.get_bounding_boxes(flat), L.T.get_keypoints(flat),
                L.T.query_chw(flat), L.T.query_size(flat), L.T.query_size(flat[1:4])]

    e, t = calls(EM), calls(TV)
    for i, (a, b) in enumerate(zip(e, t)):
        if isinstance(b, torch.Tensor):
            assert_exact(a, b, str(i))
        else:
            assert a == b and type(a) is type(b), (i, a, b)


@compares()
def test_sample_helper_errors():
    img = rand_image((3, 21, 25), torch.uint8)
    for fn in ("get_bounding_boxes", "get_keypoints", "query_chw", "query_size"):
        same_error(lambda L, fn=fn: getattr(L.T, fn)(["label", 3]))
    for fn in ("query_chw", "query_size"):   # two sizes in one sample
        same_error(lambda L, fn=fn: getattr(L.T, fn)([L.tv.Image(img),
                                                      L.tv.Image(img[..., :20])]))
    same_error(lambda L: L.T.query_chw([L.tv.Image(img), L.tv.Image(img[:1])]))


@compares("tv_tensors:is_rotated_bounding_format")
def test_is_rotated_bounding_format():
    for name in ("XYXY", "XYWH", "CXCYWH"):
        for L in (EM, TV):
            fmt = getattr(L.tv.BoundingBoxFormat, name)
            assert L.tv.is_rotated_bounding_format(fmt) is False
    for s in ("XYXY", "XYWHR", "CXCYWHR", "XYXYXYXY", "xywhr", "nonsense"):
        assert EM.tv.is_rotated_bounding_format(s) == TV.tv.is_rotated_bounding_format(s), s
    same_error(lambda L: L.tv.is_rotated_bounding_format(3))


# ---------------------------------------------------------------- PIL resize

def _pil(mode, seed=3):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 256, (37, 53, 4), dtype=np.uint8)
    a[..., 3] = rng.choice([0, 0, 40, 128, 200, 255, 255], (37, 53))   # transparent pixels
    if mode == "I;16":
        return PIL.Image.fromarray(a[..., 0].astype(np.uint16) * 257)
    if mode == "F":
        return PIL.Image.fromarray(rng.random((37, 53)).astype(np.float32))
    arr = {"L": a[..., 0], "LA": a[..., [0, 3]], "RGB": a[..., :3], "RGBA": a}[mode]
    return PIL.Image.fromarray(arr, mode)


INTERPS = ["NEAREST", "NEAREST_EXACT", "BILINEAR", "BICUBIC", "BOX", "HAMMING", "LANCZOS"]


@compares()
@pytest.mark.parametrize("interp", INTERPS)
@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA", "LA", "I;16", "F"])
def test_pil_resize_is_pillows(mode, interp):
    """PIL images are resized by Pillow in both (RGBA and LA with premultiplied alpha, the
    two passes in Pillow's order): exact, through the functional, Resize and
    resized_crop, sizes shrinking and growing per axis."""
    pil = _pil(mode)
    for size in ([20, 25], [60, 81], [13, 200], [100, 7], 17, [37, 53]):
        outs = [L.F.resize(pil, size, getattr(L.F.InterpolationMode, interp)) for L in (EM, TV)]
        assert_exact(outs[0], outs[1], f"resize {size}")
        outs = [L.T.Resize(size, getattr(L.F.InterpolationMode, interp))(pil) for L in (EM, TV)]
        assert_exact(outs[0], outs[1], f"Resize {size}")
    # resized_crop: Pillow's crop then Pillow's resize in torchvision (ours: the same
    # crop, then Pillow's resize)
    for box in ((3, 5, 25, 31), (0, 0, 37, 53), (10, 2, 9, 40)):
        outs = [L.F.resized_crop(pil, *box, [19, 30], getattr(L.F.InterpolationMode, interp))
                for L in (EM, TV)]
        assert_exact(outs[0], outs[1], f"resized_crop {box}")


# ---------------------------------------------------------------- colour ops, narrow range

@compares()
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32], ids=["uint8", "float32"])
@pytest.mark.parametrize("shape", [(3, 29, 41), (1, 17, 23), (2, 3, 3, 17, 23)],
                         ids=["3ch", "1ch", "video"])
def test_autocontrast_equalize_narrow_range(dtype, shape):
    """Images that do not span the full range (random full-range images leave autocontrast
    the identity): the same float operations and truncation as torchvision, so exact."""
    g = torch.Generator().manual_seed(8)
    x = (torch.randint(0, 256, shape, generator=g).float() * 0.55 + 31).to(torch.uint8)
    x = x if dtype == torch.uint8 else x.to(dtype) / 255
    for fn in ("autocontrast", "equalize"):
        e, t = (getattr(L.F, fn)(L.tv.Image(x.clone())) for L in (EM, TV))
        assert_exact(e, t, fn)


# ---------------------------------------------------------------- fill given per input type

FILL_TRANSFORMS = {
    "Pad": lambda L, fill: L.T.Pad([2, 3, 1, 4], fill=fill),
    "RandomCrop": lambda L, fill: L.T.RandomCrop([30, 40], padding=5, fill=fill),
    "RandomRotation": lambda L, fill: L.T.RandomRotation(40, fill=fill),
    "RandomAffine": lambda L, fill: L.T.RandomAffine(20, translate=(0.2, 0.1), fill=fill),
    "RandomPerspective": lambda L, fill: L.T.RandomPerspective(p=1.0, fill=fill),
    "RandomZoomOut": lambda L, fill: L.T.RandomZoomOut(fill=fill, p=1.0),
    "ElasticTransform": lambda L, fill: L.T.ElasticTransform(alpha=80.0, fill=fill),
}
FILLS = {"dict": lambda L: {L.tv.Image: 9, L.tv.Mask: 3},
         "dict-seq": lambda L: {L.tv.Image: [10, 20, 30], "others": 7},
         "others": lambda L: {"others": 5}, "number": lambda L: 6}


@compares()
@pytest.mark.parametrize("fill", sorted(FILLS))
@pytest.mark.parametrize("name", sorted(FILL_TRANSFORMS))
def test_fill_by_input_type(name, fill):
    """``fill`` as a dict by input type (or "others"), as torchvision: image and mask each get
    their own. Same seed, same draws; warps within a level on a few pixels (WARP_UINT8)."""
    x = rand_image((3, 31, 43), torch.uint8, seed=12)
    outs = []
    for L in (EM, TV):
        torch.manual_seed(4)
        t = FILL_TRANSFORMS[name](L, FILLS[fill](L))
        out = t({"image": L.tv.Image(x.clone()), "mask": L.tv.Mask(x[0] > 100)})
        outs.append((plain(out["image"]), plain(out["mask"])))
    for (e, t), what in zip(zip(*outs), ("image", "mask")):
        assert (e.shape, e.dtype) == (t.shape, t.dtype), what
        d = (e.int() - t.int()).abs()
        assert int(d.max()) <= 1 and float((d > 0).float().mean()) <= 1e-3, (what, int(d.max()))


@compares()
@pytest.mark.parametrize("name", ["AugMix", "AutoAugment", "RandAugment", "TrivialAugmentWide"])
def test_auto_augment_fill_by_input_type(name):
    # AugMix looks the fill up for the plain batch it works on (an Image key does not apply),
    # the others for the image itself; the same ops and fills as torchvision's
    x = rand_image((3, 31, 43), torch.uint8, seed=13)
    ref = TT.AugMix()

    def tv_op(img, op, mag, interpolation, fill_):
        return ref._apply_image_or_video_transform(
            img, op, mag, interpolation=TT.InterpolationMode(interpolation.value),
            fill={"others": fill_})

    for fill in (lambda L: {L.tv.Image: 200}, lambda L: {"others": 90},
                 lambda L: {torch.Tensor: [1, 2, 3]}):
        outs = []
        for L in (EM, TV):
            torch.manual_seed(9)
            with pytest.MonkeyPatch.context() as mp:
                if L is EM:   # the kernels apart (compared elsewhere): the fills chosen
                    mp.setattr(EA, "_apply_op", tv_op)
                outs.append(plain(getattr(L.T, name)(fill=fill(L))(L.tv.Image(x.clone()))))
        assert_exact(outs[0], outs[1], name)   # values (the patched kernel returns plain)


@compares()
def test_fill_errors():
    for bad in ("white", {TT.Pad: "x"}, object()):
        same_error(lambda L, bad=bad: L.T.RandomRotation(10, fill=bad))
        same_error(lambda L, bad=bad: L.T.Pad(2, fill=bad))
        same_error(lambda L, bad=bad: L.T.AugMix(fill=bad))


# ---------------------------------------------------------------- random windows and corners

@compares()
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("name", ["RandomResizedCrop", "RandomResizedCrop_narrow",
                                  "RandomPerspective"])
def test_random_window_and_corners_same_stream(name, seed):
    """RandomResizedCrop's window and RandomPerspective's corners are drawn with
    torchvision's random numbers in its order: the same seed moves image, boxes and mask
    alike. Pixels: resize exact; the perspective warp within a level on a few pixels and
    its nearest-neighbour mask on a few tie pixels (our float64 grid); boxes to float32
    rounding."""
    make = {"RandomResizedCrop": lambda L: L.T.RandomResizedCrop([19, 30], scale=(0.2, 0.9)),
            "RandomResizedCrop_narrow": lambda L: L.T.RandomResizedCrop(
                12, scale=(0.9, 1.0), ratio=(0.2, 0.3)),   # falls back to the centre crop
            "RandomPerspective": lambda L: L.T.RandomPerspective(0.6, p=0.7)}[name]
    x = rand_image((3, 31, 43), torch.uint8, seed=seed)
    boxes = torch.tensor([[3.0, 4.0, 20.0, 25.0], [10.0, 2.0, 40.0, 12.0]])
    outs = []
    for L in (EM, TV):
        torch.manual_seed(seed)
        sample = {"image": L.tv.Image(x.clone()), "mask": L.tv.Mask(x[0] > 100),
                  "boxes": L.tv.BoundingBoxes(boxes.clone(), format="XYXY",
                                              canvas_size=(31, 43))}
        outs.append(plain(make(L)(sample)))
    e, t = outs
    if name.startswith("RandomResizedCrop"):
        assert_exact(e["mask"], t["mask"], "mask")
    else:   # nearest warp: a sample point on a pixel edge may pick the neighbour (ties)
        assert e["mask"].shape == t["mask"].shape
        assert float((e["mask"] != t["mask"]).float().mean()) <= 5e-3
    torch.testing.assert_close(e["boxes"], t["boxes"], atol=1e-4, rtol=1e-5)
    d = (e["image"].int() - t["image"].int()).abs()
    assert e["image"].shape == t["image"].shape
    if name.startswith("RandomResizedCrop"):
        assert int(d.max()) == 0
    else:
        assert int(d.max()) <= 1 and float((d > 0).float().mean()) <= 2e-3


# ---------------------------------------------------------------- the random stream

STREAM_CASES = {
    "RandomCrop": lambda L: L.T.RandomCrop(20, padding=3, pad_if_needed=True),
    "RandomRotation": lambda L: L.T.RandomRotation(35),
    "RandomAffine": lambda L: L.T.RandomAffine(25, translate=(0.1, 0.2), scale=(0.8, 1.2),
                                               shear=(-5, 5, -3, 3)),
    "RandomResizedCrop": lambda L: L.T.RandomResizedCrop(20),
    "RandomPerspective": lambda L: L.T.RandomPerspective(),
    "RandomErasing": lambda L: L.T.RandomErasing(p=0.9, value="random"),
    "ColorJitter": lambda L: L.T.ColorJitter(0.3, 0.3, 0.3, 0.1),
    "GaussianBlur": lambda L: L.T.GaussianBlur(5, (0.1, 2.0)),
    "RandomZoomOut": lambda L: L.T.RandomZoomOut(p=0.9),
    "RandomIoUCrop": lambda L: L.T.RandomIoUCrop(),
    "ElasticTransform": lambda L: L.T.ElasticTransform(),
    "ScaleJitter": lambda L: L.T.ScaleJitter((30, 40)),
    "RandomShortestSize": lambda L: L.T.RandomShortestSize([15, 20, 25], max_size=40),
    "RandomPhotometricDistort": lambda L: L.T.RandomPhotometricDistort(),
    "RandomOrder": lambda L: L.T.RandomOrder([L.T.RandomHorizontalFlip(), L.T.CenterCrop(20)]),
    "TrivialAugmentWide": lambda L: L.T.TrivialAugmentWide(),
    "RandAugment": lambda L: L.T.RandAugment(),
    "AutoAugment": lambda L: L.T.AutoAugment(),
    "AugMix": lambda L: L.T.AugMix(),
}
_IMAGE_ONLY = {"RandomErasing", "ColorJitter", "GaussianBlur", "RandomPhotometricDistort",
               "TrivialAugmentWide", "RandAugment", "AutoAugment", "AugMix"}


@compares()
@pytest.mark.parametrize("name", sorted(STREAM_CASES))
def test_random_stream_left_as_torchvision_leaves_it(name):
    """After each call, the global generator is where torchvision leaves it (the same draws,
    no extra or missing ones, e.g. TrivialAugmentWide's bin for ops without magnitudes), and
    the outputs have torchvision's shapes, over 12 seeds."""
    for seed in range(12):
        x = rand_image((3, 31, 43), torch.uint8, seed=seed)
        res = []
        for L in (EM, TV):
            torch.manual_seed(seed)
            s = {"image": L.tv.Image(x.clone())}
            if name not in _IMAGE_ONLY:
                s["mask"] = L.tv.Mask(x[0] > 100)
                s["boxes"] = L.tv.BoundingBoxes([[3.0, 4.0, 20.0, 25.0], [10.0, 2.0, 40.0, 12.0]],
                                                format="XYXY", canvas_size=(31, 43))
                s["labels"] = torch.tensor([1, 2])
            out = STREAM_CASES[name](L)(s)
            res.append(({k: tuple(v.shape) for k, v in out.items()}, torch.rand(4)))
        assert res[0][0] == res[1][0], (seed, res[0][0], res[1][0])
        assert torch.equal(res[0][1], res[1][1]), seed


@compares()
@pytest.mark.parametrize("value", ["random", 0.5, (0.1, 0.2, 0.3)], ids=str)
def test_random_erasing_same_stream(value):
    """torchvision's rectangles (and its N(0, 1) noise for value="random") for the same seed:
    float images exact."""
    for seed in range(10):
        x = rand_image((3, 31, 43), torch.float32, seed=seed)
        outs = []
        for L in (EM, TV):
            torch.manual_seed(seed)
            outs.append(L.T.RandomErasing(p=0.8, value=value, scale=(0.02, 0.6))(
                L.tv.Image(x.clone())))
        assert_exact(outs[0], outs[1], f"seed {seed}")


# ---------------------------------------------------------------- error types

def _img4(L):
    return L.tv.Image(rand_image((4, 21, 25), torch.uint8))


ERROR_CASES = {
    "erasing_value_length": lambda L: L.T.RandomErasing(p=1.0, value=[1, 2])(
        L.tv.Image(rand_image((3, 21, 25), torch.uint8))),
    "resized_crop_scale_not_pair": lambda L: L.T.RandomResizedCrop(10, scale=0.5),
    "resized_crop_ratio_not_pair": lambda L: L.T.RandomResizedCrop(10, ratio=(1.0,)),
    "contrast_4ch": lambda L: L.F.adjust_contrast(_img4(L), 0.5),
    "saturation_4ch": lambda L: L.F.adjust_saturation(_img4(L), 0.5),
    "hue_4ch": lambda L: L.F.adjust_hue(_img4(L), 0.1),
    "sharpness_4ch": lambda L: L.F.adjust_sharpness(_img4(L), 2.0),
    "grayscale_4ch": lambda L: L.F.rgb_to_grayscale(_img4(L)),
    "todtype_not_a_dtype": lambda L: L.T.ToDtype("float32"),
    "todtype_dict_without_entry": lambda L: L.T.ToDtype({L.tv.Mask: torch.int64})(
        L.tv.Image(rand_image((3, 5, 5), torch.uint8))),
    "todtype_dict_tensor_key_for_image": lambda L: L.T.ToDtype({torch.Tensor: torch.float32})(
        L.tv.Image(rand_image((3, 5, 5), torch.uint8))),
    "augmix_float_severity": lambda L: L.T.AugMix(severity=2.5)(
        L.tv.Image(rand_image((3, 9, 9), torch.uint8))),
    # functionals: ours are ValueError/TypeError subclasses of torchvision's type
    "resize_negative": lambda L: L.F.resize(rand_image((3, 9, 11), torch.uint8), [-1, 5]),
    "pad_reflect_too_wide": lambda L: L.F.pad(rand_image((3, 9, 11), torch.uint8), 20,
                                              padding_mode="reflect"),
    "posterize_9_bits": lambda L: L.F.posterize(rand_image((3, 9, 11), torch.uint8), 9),
    "solarize_over_range": lambda L: L.F.solarize(rand_image((3, 9, 11), torch.uint8), 300),
    "jpeg_float": lambda L: L.F.jpeg(rand_image((3, 9, 11), torch.float32), 50),
    "affine_three_shears": lambda L: L.F.affine(rand_image((3, 9, 11), torch.uint8), 0, [0, 0],
                                                1.0, [0.0, 0.0, 1.0]),
    "affine_shear_str": lambda L: L.F.affine(rand_image((3, 9, 11), torch.uint8), 0, [0, 0],
                                             1.0, "x"),
    "rotate_center_one_value": lambda L: L.F.rotate(rand_image((3, 9, 11), torch.uint8), 10,
                                                    center=[1]),
}


@compares()
@pytest.mark.parametrize("shear", [[5.0], (3.0, -2.0), 4.0], ids=str)
def test_affine_shear_forms(shear):
    x = rand_image((3, 19, 21), torch.uint8, seed=15)
    outs = [L.F.affine(L.tv.Image(x.clone()), 10, [1, 2], 1.1, shear,
                       L.F.InterpolationMode.BILINEAR) for L in (EM, TV)]
    d = (plain(outs[0]).int() - plain(outs[1]).int()).abs()   # warp: WARP_UINT8
    assert int(d.max()) <= 1 and float((d > 0).float().mean()) <= 1e-3


@compares()
@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_error_types(case):
    same_error(ERROR_CASES[case])


@compares()
def test_todtype_dict_by_exact_type():
    x = rand_image((3, 5, 5), torch.uint8)
    for make in (lambda L: {L.tv.Image: torch.float32, "others": None},
                 lambda L: {torch.Tensor: torch.float64, "others": torch.int32},
                 lambda L: {L.tv.Mask: torch.int64, "others": torch.float32}):
        outs = []
        for L in (EM, TV):
            out = L.T.ToDtype(make(L), scale=True)(
                {"image": L.tv.Image(x.clone()), "mask": L.tv.Mask(x[0] > 9)})
            outs.append(out)
        assert_exact(outs[0], outs[1], "ToDtype")
    outs = [L.T.AugMix(mixture_width=0)(L.tv.Image(x.clone())) for L in (EM, TV)]
    assert outs[0].shape == outs[1].shape   # no chains: the image scaled by its Beta weight


@compares()
@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "symmetric"])
@pytest.mark.parametrize("padding", [[-1], [-1, 2], [2, -1, 1, 0], [0, 3, -2, -4]], ids=str)
def test_negative_padding_crops(mode, padding):
    """Negative padding crops that side (then the others are padded), as torchvision's:
    images, masks, boxes and keypoints exact, through the functional and Pad."""
    x = rand_image((3, 13, 17), torch.uint8, seed=14)

    def sample(L):
        out = {"image": L.tv.Image(x.clone()), "mask": L.tv.Mask(x[0] > 100)}
        if mode == "constant":   # torchvision pads boxes and points in constant mode only
            out["boxes"] = L.tv.BoundingBoxes([[1, 1, 9, 8], [0, 5, 17, 12]], format="XYXY",
                                              canvas_size=(13, 17))
            out["points"] = L.tv.KeyPoints([[1.0, 1.0], [12.5, 9.0]], canvas_size=(13, 17))
        return out

    outs = [L.T.Pad(padding, fill=5, padding_mode=mode)(sample(L)) for L in (EM, TV)]
    assert_exact(outs[0], outs[1], "Pad")
    for k in ("boxes", "points"):
        if k in outs[1]:
            assert outs[0][k].canvas_size == outs[1][k].canvas_size
    outs = [L.F.pad(L.tv.Image(x.clone()), padding, 3, mode) for L in (EM, TV)]
    assert_exact(outs[0], outs[1], "pad")


@compares()
@pytest.mark.parametrize("dtype", [torch.int16, torch.int32, torch.uint16],
                         ids=["int16", "int32", "uint16"])
def test_equalize_other_integer_dtypes(dtype):
    """Through uint8 and back (to_dtype with scaling), as torchvision's: exact."""
    hi = {torch.int16: 32767, torch.int32: 2 ** 31 - 1, torch.uint16: 65535}[dtype]
    g = torch.Generator().manual_seed(16)
    x = (torch.rand(2, 3, 9, 11, generator=g, dtype=torch.float64) * hi * 0.6 + hi * 0.1)
    x = x.to(dtype)
    outs = [L.F.equalize(L.tv.Image(x.clone())) for L in (EM, TV)]
    assert_exact(outs[0], outs[1], str(dtype))


# ---------------------------------------------------------------- PIL rotate/affine/perspective

_WARPS = {
    "rotate": lambda L, m, f: L.F.rotate(_pil_w(m), 23.0, m_(L, f)),
    "rotate_expand_fill": lambda L, m, f: L.F.rotate(_pil_w(m), -31.0, m_(L, f), expand=True,
                                                     fill=7),
    "rotate_center_fill1": lambda L, m, f: L.F.rotate(_pil_w(m), 30, m_(L, f), center=[3, 10],
                                                      fill=[200.7]),
    "rotate_center_expand": lambda L, m, f: L.F.rotate(_pil_w(m), 12.5, m_(L, f), expand=True,
                                                       center=[40, 5]),
    "rotate_90_expand": lambda L, m, f: L.F.rotate(_pil_w(m), 90, m_(L, f), expand=True),
    "affine": lambda L, m, f: L.F.affine(_pil_w(m), 17.0, [3, -2], 1.1, [5.0, 2.0], m_(L, f)),
    "affine_center_fill": lambda L, m, f: L.F.affine(_pil_w(m), -9.0, [1.5, 4], 0.9, 7.0,
                                                     m_(L, f), fill=100.7, center=[0, 0]),
    "affine_shear1": lambda L, m, f: L.F.affine(_pil_w(m), 40, [0, 0], 1.3, [12.0], m_(L, f),
                                                fill=[1, 2, 3, 4][:_bands(m)]),
    "perspective": lambda L, m, f: L.F.perspective(
        _pil_w(m), [[0, 0], [52, 0], [52, 36], [0, 36]], [[3, 2], [49, 0], [50, 33], [1, 35]],
        m_(L, f), fill=50),
    "perspective_fractional": lambda L, m, f: L.F.perspective(
        _pil_w(m), [[0, 0], [52, 0], [52, 36], [0, 36]],
        [[3.5, 2], [49, 0.25], [50, 33], [1, 35]], m_(L, f)),
    "perspective_coefficients": lambda L, m, f: L.F.perspective(
        _pil_w(m), None, None, m_(L, f), fill=3,
        coefficients=[1.05, 0.02, -1.5, 0.01, 0.97, 2.0, 1e-4, -2e-4]),
}


def _pil_w(mode):
    return _pil(mode, seed=11) if mode != "I" else PIL.Image.fromarray(
        np.random.default_rng(11).integers(-5000, 70000, (37, 53), dtype=np.int32))


def _bands(mode):
    return len(PIL.Image.new(mode, (1, 1)).getbands())


def m_(L, name):
    return getattr(L.F.InterpolationMode, name)


@compares()
@pytest.mark.parametrize("interp", ["NEAREST", "BILINEAR", "BICUBIC", "LANCZOS"])
@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA", "LA", "F", "I;16", "I"])
@pytest.mark.parametrize("case", sorted(_WARPS))
def test_pil_warps_are_pillows(case, mode, interp):
    """PIL images are rotated / affine- / perspective-warped by Pillow in both (the same
    output-to-input maps to the last bit, torchvision's fill rule, RGBA and LA through
    Pillow's premultiplied alpha): exact; LANCZOS is refused by Pillow in both (ValueError)."""
    outs = []
    for L in (EM, TV):
        try:
            outs.append(_WARPS[case](L, mode, interp))
        except Exception as exc:   # compared by type below
            outs.append(exc)
    e, t = outs
    if isinstance(t, Exception):
        assert isinstance(e, type(t)), (e, t)
        return
    assert_exact(e, t, case)


_WARP_TRANSFORMS = {
    "RandomRotation": lambda L: L.T.RandomRotation(35, L.T.InterpolationMode.BILINEAR),
    "RandomRotation_expand": lambda L: L.T.RandomRotation(35, expand=True, fill=9),
    "RandomRotation_center": lambda L: L.T.RandomRotation(
        (-50, 50), L.T.InterpolationMode.BICUBIC, expand=True, center=[5, 30]),
    "RandomAffine": lambda L: L.T.RandomAffine(25, translate=(0.1, 0.2), scale=(0.8, 1.2),
                                               shear=(-5, 5, -3, 3),
                                               interpolation=L.T.InterpolationMode.BILINEAR),
    "RandomAffine_nearest_fill": lambda L: L.T.RandomAffine(
        10, scale=(0.7, 0.9), shear=8, fill={PIL.Image.Image: 70, "others": 0}),
    "RandomPerspective": lambda L: L.T.RandomPerspective(0.6, p=1.0, fill=40),
}


@compares()
@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA"])
@pytest.mark.parametrize("name", sorted(_WARP_TRANSFORMS))
def test_pil_warp_transforms_are_pillows(name, mode):
    """The random warps on PIL images: torchvision's draws (float32 uniform_) and Pillow's
    pixels, over 6 seeds, exact; a mask in the same sample gets the image's size."""
    for seed in range(6):
        pic = _pil(mode, seed)
        outs = []
        for L in (EM, TV):
            torch.manual_seed(seed)
            outs.append(_WARP_TRANSFORMS[name](L)(pic))
        assert_exact(outs[0], outs[1], f"seed {seed}")
    torch.manual_seed(0)
    out = _WARP_TRANSFORMS[name](EM)({"image": pic, "mask": EM.tv.Mask(
        torch.zeros(37, 53, dtype=torch.uint8))})
    assert tuple(out["mask"].shape) == (out["image"].height, out["image"].width)
