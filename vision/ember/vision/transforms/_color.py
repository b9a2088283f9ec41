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
from ember.vision.transforms.functional._color import jitter_


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
