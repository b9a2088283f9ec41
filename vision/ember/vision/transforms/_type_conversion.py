"""ToImage, PILToTensor, ToPILImage, ToPureTensor (torchvision.transforms.v2 names)."""

from __future__ import annotations

from typing import Any

import numpy as np
import PIL.Image
import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from ember.vision import tv_tensors
from ember.vision.transforms import functional as F
from ember.vision.transforms._transform import Transform


def _is_pure(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and not isinstance(x, tv_tensors.TVTensor)


class _Conversion(Transform):
    """Maps the leaves ``wanted`` picks; a plain tensor counts as the image only when the
    sample holds no Image, Video or PIL image, and only the first one (torchvision's rule)."""

    pil = "pass"  # the conversion itself decides what a PIL image becomes
    pure_tensors = False

    def wanted(self, x: Any) -> bool:
        raise NotImplementedError

    def forward(self, *inputs: Any) -> Any:
        sample = inputs if len(inputs) > 1 else inputs[0]
        leaves, spec = tree_flatten(sample)
        take_pure = self.pure_tensors and not any(
            isinstance(x, (tv_tensors.Image, tv_tensors.Video, PIL.Image.Image)) for x in leaves)
        out = []
        for x in leaves:
            if _is_pure(x):
                if take_pure:
                    take_pure = False
                    out.append(self.transform(x, {}))
                else:
                    out.append(x)
            elif self.wanted(x):
                out.append(self.transform(x, {}))
            else:
                out.append(x)
        return tree_unflatten(out, spec)


class ToImage(_Conversion):
    """PIL images, numpy arrays (HWC) and the image tensor become ``tv_tensors.Image``."""

    pure_tensors = True

    def wanted(self, x):
        return isinstance(x, (PIL.Image.Image, np.ndarray))

    def transform(self, inpt, params):
        return F.to_image(inpt)


class PILToTensor(_Conversion):
    """PIL images become plain [C, H, W] tensors of their own dtype (no scaling)."""

    def wanted(self, x):
        return isinstance(x, PIL.Image.Image)

    def transform(self, inpt, params):
        return F.pil_to_tensor(inpt)


class ToPILImage(_Conversion):
    """Image tensors and numpy arrays become PIL images (``mode`` as ``to_pil_image``)."""

    pure_tensors = True

    def __init__(self, mode: str | None = None) -> None:
        super().__init__()
        self.mode = mode

    def wanted(self, x):
        return isinstance(x, (tv_tensors.Image, np.ndarray))

    def transform(self, inpt, params):
        return F.to_pil_image(tv_tensors.unwrap(inpt), mode=self.mode)


class ToPureTensor(_Conversion):
    """Typed tensors (Image, Video, Mask, BoundingBoxes) become plain tensors."""

    def wanted(self, x):
        return isinstance(x, tv_tensors.TVTensor)

    def transform(self, inpt, params):
        return tv_tensors.unwrap(inpt)


class ToTensor(_Conversion):
    """Deprecated in torchvision (use ``ToImage()`` then ``ToDtype(torch.float32,
    scale=True)``): PIL images and numpy arrays become [C, H, W] tensors, uint8 scaled
    to float32 in [0, 1] (see ``functional.to_tensor``)."""

    def __init__(self) -> None:
        import warnings

        warnings.warn("ToTensor() is deprecated (as in torchvision): use ToImage() followed by "
                      "ToDtype(torch.float32, scale=True)", DeprecationWarning, stacklevel=2)
        super().__init__()

    def wanted(self, x):
        return isinstance(x, (PIL.Image.Image, np.ndarray))

    def transform(self, inpt, params):
        return F.to_tensor(inpt)
