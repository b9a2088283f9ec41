"""Color transforms: ColorJitter, Grayscale, RandomGrayscale, GaussianBlur."""

from __future__ import annotations

import torch

from ember.vision import tv_tensors
from ember.vision.transforms import functional as F
from ember.vision.transforms._transform import (
    RandomTransform,
    Transform,
    batch_info,
    check_range,
    plain,
    uniform,
)
from ember.vision.transforms.functional._color import jitter_, photometric_uint8


class ColorJitter(Transform):
    """Random brightness, contrast, saturation and hue, applied in a random order.

    With ``per_sample=True`` every image gets its own factors (the order is shared per call).
    Under ``torch.compile`` the order is fixed (brightness, contrast, saturation, hue).
    """

    chunkable = True

    def __init__(self, brightness=None, contrast=None, saturation=None, hue=None,
                 per_sample: bool = False) -> None:
        super().__init__()
        self.brightness = None if brightness is None else check_range(brightness, "brightness", 1.0)
        self.contrast = None if contrast is None else check_range(contrast, "contrast", 1.0)
        self.saturation = None if saturation is None else check_range(saturation, "saturation", 1.0)
        self.hue = None if hue is None else check_range(hue, "hue", bound=(-0.5, 0.5))
        if not isinstance(per_sample, bool):
            raise TypeError(f"per_sample must be a bool, got {per_sample!r}")
        self.per_sample = per_sample

    def make_params(self, leaves):
        n, dev = batch_info(leaves) if self.per_sample else (None, None)
        if torch.compiler.is_compiling():
            order = [0, 1, 2, 3]  # a drawn order would break the graph; factors stay random
        else:
            order = torch.randperm(4).tolist()
        draw = lambda r: None if r is None or r[0] == r[1] == (0.0 if r is self.hue else 1.0) \
            else uniform(*r, n, dev)
        return {"order": order, "factors": [draw(self.brightness), draw(self.contrast),
                                            draw(self.saturation), draw(self.hue)]}

    in_place = True

    @staticmethod
    def _float_rgb(inpt) -> bool:
        return (type(inpt) in (torch.Tensor, tv_tensors.Image, tv_tensors.Video)
                and inpt.dtype in (torch.float32, torch.float64) and inpt.ndim >= 3
                and inpt.shape[-3] == 3 and not torch.compiler.is_compiling())

    def transform_(self, inpt, params):
        if self._float_rgb(inpt):
            jitter_(plain(inpt), params["order"], params["factors"])
            return inpt
        return super().transform_(inpt, params)

    def transform(self, inpt, params):
        if self._float_rgb(inpt):
            out = jitter_(plain(inpt).clone(), params["order"], params["factors"])
            return tv_tensors.wrap(out, like=inpt) if inpt is not plain(inpt) else out
        fns = (F.adjust_brightness, F.adjust_contrast, F.adjust_saturation, F.adjust_hue)
        out = inpt
        for k in params["order"]:
            f = params["factors"][k]
            if f is not None:
                out = fns[k](out, f)
        return out


class Grayscale(Transform):
    """Convert RGB to grayscale with 1 or 3 output channels."""

    chunkable = True

    def __init__(self, num_output_channels: int = 1) -> None:
        super().__init__()
        if num_output_channels not in (1, 3):
            raise ValueError(f"num_output_channels must be 1 or 3, got {num_output_channels!r}")
        self.num_output_channels = num_output_channels

    def transform(self, inpt, params):
        return F.rgb_to_grayscale(inpt, self.num_output_channels)


class RandomGrayscale(RandomTransform):
    """With probability ``p``, grayscale keeping the channel count."""

    chunkable = True

    def __init__(self, p: float = 0.1, per_sample: bool = False) -> None:
        super().__init__(p, per_sample)

    def transform(self, inpt, params):
        if not isinstance(inpt, torch.Tensor) or inpt.ndim < 3:
            return F.rgb_to_grayscale(inpt)
        return F.rgb_to_grayscale(inpt, num_output_channels=inpt.shape[-3])


class GaussianBlur(Transform):
    """Gaussian blur with sigma drawn uniformly from ``sigma`` (min, max)."""

    chunkable = True

    def __init__(self, kernel_size, sigma=(0.1, 2.0), per_sample: bool = False) -> None:
        super().__init__()
        ks = [kernel_size] * 2 if isinstance(kernel_size, int) else list(kernel_size)
        if len(ks) != 2 or not all(isinstance(k, int) and k > 0 and k % 2 for k in ks):
            raise ValueError(f"kernel_size must be positive odd ints, got {kernel_size!r}")
        self.kernel_size = ks
        if isinstance(sigma, (int, float)):
            sigma = (float(sigma), float(sigma))
        if len(sigma) != 2 or not 0 < sigma[0] <= sigma[1]:
            raise ValueError(f"sigma must be a positive number or a pair (min, max), got {sigma!r}")
        self.sigma = tuple(float(s) for s in sigma)
        if not isinstance(per_sample, bool):
            raise TypeError(f"per_sample must be a bool, got {per_sample!r}")
        self.per_sample = per_sample

    def make_params(self, leaves):
        n, dev = batch_info(leaves) if self.per_sample else (None, None)
        s = uniform(*self.sigma, n, dev)
        return {"sigma": s if n is not None else [s, s]}

    def transform(self, inpt, params):
        return F.gaussian_blur(inpt, self.kernel_size, params["sigma"])


class _RandomColorOp(RandomTransform):
    """With probability ``p``, ``op(image, **args)``; masks and boxes pass."""

    chunkable = True
    op = staticmethod(lambda x: x)

    def _args(self) -> dict:
        return {}

    def transform(self, inpt, params):
        return type(self).op(inpt, **self._args())


class RandomInvert(_RandomColorOp):
    """With probability ``p``, invert the colours."""

    op = staticmethod(F.invert)


class RandomEqualize(_RandomColorOp):
    """With probability ``p``, equalize the histogram."""

    op = staticmethod(F.equalize)


class RandomAutocontrast(_RandomColorOp):
    """With probability ``p``, stretch every channel to the full range."""

    op = staticmethod(F.autocontrast)


class RandomPosterize(_RandomColorOp):
    """With probability ``p``, keep the ``bits`` high bits of every value."""

    op = staticmethod(F.posterize)

    def __init__(self, bits: int, p: float = 0.5, per_sample: bool = False) -> None:
        super().__init__(p, per_sample)
        if isinstance(bits, bool) or not isinstance(bits, int) or not 0 <= bits <= 8:
            raise ValueError(f"bits must be an int in [0, 8], got {bits!r}")
        self.bits = bits

    def _args(self):
        return {"bits": self.bits}


class RandomSolarize(_RandomColorOp):
    """With probability ``p``, invert the values at or above ``threshold``."""

    op = staticmethod(F.solarize)

    def __init__(self, threshold: float, p: float = 0.5, per_sample: bool = False) -> None:
        super().__init__(p, per_sample)
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
            raise TypeError(f"threshold must be a number, got {threshold!r}")
        self.threshold = threshold

    def _args(self):
        return {"threshold": self.threshold}


class RandomAdjustSharpness(_RandomColorOp):
    """With probability ``p``, ``adjust_sharpness(image, sharpness_factor)``."""

    op = staticmethod(F.adjust_sharpness)

    def __init__(self, sharpness_factor: float, p: float = 0.5, per_sample: bool = False) -> None:
        super().__init__(p, per_sample)
        if not isinstance(sharpness_factor, (int, float)) or sharpness_factor < 0:
            raise ValueError(f"sharpness_factor must be a non-negative number, "
                             f"got {sharpness_factor!r}")
        self.sharpness_factor = float(sharpness_factor)

    def _args(self):
        return {"sharpness_factor": self.sharpness_factor}


def _channels(leaves) -> int:
    for x in leaves:
        if isinstance(x, torch.Tensor) and not isinstance(
                x, (tv_tensors.Mask, tv_tensors.BoundingBoxes)):
            return F.get_num_channels(x)
    raise TypeError("the sample holds no image or video")


class RandomChannelPermutation(Transform):
    """Shuffle the channels of the images and videos (one permutation per call)."""

    chunkable = True

    def make_params(self, leaves):
        return {"permutation": torch.randperm(_channels(leaves)).tolist()}

    def transform(self, inpt, params):
        return F.permute_channels(inpt, params["permutation"])


class RandomPhotometricDistort(Transform):
    """SSD's photometric distortion: each of brightness, contrast, saturation and hue with
    probability ``p`` (factors uniform in their ranges), contrast before or after the
    saturation and hue (even odds), then a random channel permutation with probability
    ``p``. Draws in torchvision's order, so a seed gives torchvision's parameters."""

    chunkable = True

    def __init__(self, brightness=(0.875, 1.125), contrast=(0.5, 1.5), saturation=(0.5, 1.5),
                 hue=(-0.05, 0.05), p: float = 0.5) -> None:
        super().__init__()
        self.brightness = check_range(brightness, "brightness", 1.0)
        self.contrast = check_range(contrast, "contrast", 1.0)
        self.saturation = check_range(saturation, "saturation", 1.0)
        self.hue = check_range(hue, "hue", bound=(-0.5, 0.5))
        if not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
            raise ValueError(f"p must be a probability in [0, 1], got {p!r}")
        self.p = float(p)

    def make_params(self, leaves):
        c = _channels(leaves)
        factors = []
        for lo, hi in (self.brightness, self.contrast, self.saturation, self.hue):
            # the factor is drawn only when the coin says apply
            factors.append(float(torch.empty(1).uniform_(lo, hi))
                           if torch.rand(1) < self.p else None)
        contrast_first = bool(torch.rand(()) < 0.5)
        perm = torch.randperm(c).tolist() if torch.rand(1) < self.p else None
        return {"factors": factors, "contrast_first": contrast_first, "permutation": perm}

    _STEPS = {"brightness": F.adjust_brightness, "contrast": F.adjust_contrast,
              "saturation": F.adjust_saturation, "hue": F.adjust_hue}

    def transform(self, inpt, params):
        b, c, s, h = params["factors"]
        middle = [("saturation", s), ("hue", h)]
        steps = [("brightness", b)] + ([("contrast", c)] + middle if params["contrast_first"]
                                       else middle + [("contrast", c)])
        steps = [(name, f) for name, f in steps if f is not None]
        plain = tv_tensors.unwrap(inpt)
        if ((type(inpt) is torch.Tensor or isinstance(inpt, (tv_tensors.Image, tv_tensors.Video)))
                and plain.dtype == torch.uint8 and plain.ndim >= 3 and plain.shape[-3] in (1, 3)
                and steps):
            # one float copy for the whole chain instead of a uint8 round trip per step
            out = photometric_uint8(plain, steps)
            inpt = tv_tensors.wrap(out, like=inpt) if isinstance(
                inpt, tv_tensors.TVTensor) else out
        else:
            for name, f in steps:
                inpt = self._STEPS[name](inpt, f)
        if params["permutation"] is not None:
            inpt = F.permute_channels(inpt, params["permutation"])
        return inpt


class GaussianNoise(Transform):
    """Add ``mean + sigma * N(0, 1)`` noise (in [0, 1] units) to images and videos."""

    def __init__(self, mean: float = 0.0, sigma: float = 0.1, clip: bool = True) -> None:
        super().__init__()
        if not isinstance(sigma, (int, float)) or sigma < 0:
            raise ValueError(f"sigma must be a non-negative number, got {sigma!r}")
        self.mean, self.sigma, self.clip = float(mean), float(sigma), bool(clip)

    def transform(self, inpt, params):
        return F.gaussian_noise(inpt, mean=self.mean, sigma=self.sigma, clip=self.clip)


class JPEG(Transform):
    """JPEG compression at a quality drawn uniformly from ``quality`` (an int or (lo, hi))."""

    chunkable = True

    def __init__(self, quality) -> None:
        super().__init__()
        if isinstance(quality, bool):
            raise TypeError("quality must be an int or a pair of ints, got a bool")
        q = [quality, quality] if isinstance(quality, int) else list(quality)
        if len(q) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in q) \
                or not 1 <= q[0] <= q[1] <= 100:
            raise ValueError(f"quality must be an int or a pair of ints with "
                             f"1 <= lo <= hi <= 100, got {quality!r}")
        self.quality = q

    def make_params(self, leaves):
        return {"quality": int(torch.randint(self.quality[0], self.quality[1] + 1, ()))}

    def transform(self, inpt, params):
        return F.jpeg(inpt, params["quality"])


class RGB(Transform):
    """Grayscale images to 3 channels; RGB images unchanged."""

    chunkable = True

    def transform(self, inpt, params):
        if isinstance(inpt, (tv_tensors.Mask, tv_tensors.BoundingBoxes, tv_tensors.Video)):
            return inpt
        return F.grayscale_to_rgb(inpt)
