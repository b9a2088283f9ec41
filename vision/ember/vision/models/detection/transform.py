"""GeneralizedRCNNTransform: normalize, resize and batch images (and resize their targets)
before an R-CNN; map detections back to the input sizes afterwards."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ember.vision.models.detection.image_list import ImageList
from ember.vision.models.detection.roi_heads import paste_masks_in_image

__all__ = ["GeneralizedRCNNTransform", "resize_boxes", "resize_keypoints"]


def _resize_image_and_masks(image: Tensor, self_min_size: int, self_max_size: int,
                            target: dict[str, Tensor] | None = None,
                            fixed_size: tuple[int, int] | None = None):
    """Bilinear resize so the short side is ``self_min_size`` unless the long side would pass
    ``self_max_size`` (or to ``fixed_size`` (w, h)); target masks follow (nearest)."""
    if fixed_size is not None:
        size, scale, recompute = [fixed_size[1], fixed_size[0]], None, None
    else:
        h, w = image.shape[-2:]
        size, recompute = None, True
        scale = min(self_min_size / min(h, w), self_max_size / max(h, w))
    image = F.interpolate(image[None], size=size, scale_factor=scale, mode="bilinear",
                          recompute_scale_factor=recompute, align_corners=False)[0]
    if target is not None and "masks" in target:
        masks = F.interpolate(target["masks"][:, None].float(), size=size, scale_factor=scale,
                              recompute_scale_factor=recompute)[:, 0].byte()
        target["masks"] = masks
    return image, target


def _ratios(new_size, original_size, device) -> list[Tensor]:
    return [torch.tensor(s, dtype=torch.float32, device=device)
            / torch.tensor(s0, dtype=torch.float32, device=device)
            for s, s0 in zip(new_size, original_size)]


def resize_boxes(boxes: Tensor, original_size, new_size) -> Tensor:
    """XYXY boxes scaled from an image of ``original_size`` (h, w) to ``new_size``."""
    ratio_h, ratio_w = _ratios(new_size, original_size, boxes.device)
    x1, y1, x2, y2 = boxes.unbind(1)
    return torch.stack([x1 * ratio_w, y1 * ratio_h, x2 * ratio_w, y2 * ratio_h], dim=1)


def resize_keypoints(keypoints: Tensor, original_size, new_size) -> Tensor:
    """Keypoints [N, K, 3] (x, y, visibility) scaled like :func:`resize_boxes`."""
    ratio_h, ratio_w = _ratios(new_size, original_size, keypoints.device)
    out = keypoints.clone()
    out[..., 0] *= ratio_w
    out[..., 1] *= ratio_h
    return out


class GeneralizedRCNNTransform(nn.Module):
    """Per image: ``(x - mean) / std``, resize (a random ``min_size`` entry in training, the
    last in evaluation), then zero-pad the batch to multiples of ``size_divisible``."""

    def __init__(self, min_size, max_size: int, image_mean: list[float], image_std: list[float],
                 size_divisible: int = 32, fixed_size: tuple[int, int] | None = None,
                 **kwargs) -> None:
        super().__init__()
        if not isinstance(min_size, (list, tuple)):
            min_size = (min_size,)
        self.min_size = min_size
        self.max_size = max_size
        self.image_mean = image_mean
        self.image_std = image_std
        self.size_divisible = size_divisible
        self.fixed_size = fixed_size
        self._skip_resize = kwargs.pop("_skip_resize", False)
        if kwargs:
            raise TypeError(f"GeneralizedRCNNTransform got unexpected keyword arguments "
                            f"{sorted(kwargs)}")

    def forward(self, images: list[Tensor], targets: list[dict[str, Tensor]] | None = None
                ) -> tuple[ImageList, list[dict[str, Tensor]] | None]:
        images = list(images)
        if targets is not None:
            targets = [dict(t) for t in targets]   # the caller's dicts stay untouched
        for i, image in enumerate(images):
            if image.dim() != 3:
                raise ValueError(f"images must be a list of 3-D tensors [C, H, W], got shape "
                                 f"{tuple(image.shape)}")
            target = targets[i] if targets is not None else None
            image, target = self.resize(self.normalize(image), target)
            images[i] = image
            if targets is not None and target is not None:
                targets[i] = target
        sizes = [(int(img.shape[-2]), int(img.shape[-1])) for img in images]
        batch = self.batch_images(images, size_divisible=self.size_divisible)
        return ImageList(batch, sizes), targets

    def normalize(self, image: Tensor) -> Tensor:
        if not image.is_floating_point():
            raise TypeError(f"images must be floating point (values in [0, 1]), got "
                            f"{image.dtype}")
        mean = torch.as_tensor(self.image_mean, dtype=image.dtype, device=image.device)
        std = torch.as_tensor(self.image_std, dtype=image.dtype, device=image.device)
        return (image - mean[:, None, None]) / std[:, None, None]

    def torch_choice(self, k: list[int]) -> int:
        """A random entry of ``k`` drawn with torch's RNG (one uniform draw)."""
        return k[int(torch.empty(1).uniform_(0.0, float(len(k))).item())]

    def resize(self, image: Tensor, target: dict[str, Tensor] | None = None):
        h, w = image.shape[-2:]
        if self.training:
            if self._skip_resize:
                return image, target
            size = self.torch_choice(self.min_size)
        else:
            size = self.min_size[-1]
        image, target = _resize_image_and_masks(image, size, self.max_size, target,
                                                self.fixed_size)
        if target is None:
            return image, target
        target["boxes"] = resize_boxes(target["boxes"], (h, w), image.shape[-2:])
        if "keypoints" in target:
            target["keypoints"] = resize_keypoints(target["keypoints"], (h, w),
                                                   image.shape[-2:])
        return image, target

    def max_by_axis(self, the_list: list[list[int]]) -> list[int]:
        return [max(col) for col in zip(*the_list)]

    def batch_images(self, images: list[Tensor], size_divisible: int = 32) -> Tensor:
        """Zero-padded [N, C, H, W] with H, W the largest sizes rounded up to the divisor."""
        c, h, w = self.max_by_axis([list(img.shape) for img in images])
        stride = float(size_divisible)
        h = int(math.ceil(float(h) / stride) * stride)
        w = int(math.ceil(float(w) / stride) * stride)
        batch = images[0].new_full([len(images), c, h, w], 0)
        for i, img in enumerate(images):
            batch[i, :img.shape[0], :img.shape[1], :img.shape[2]].copy_(img)
        return batch

    def postprocess(self, result: list[dict[str, Tensor]], image_shapes: list[tuple[int, int]],
                    original_image_sizes: list[tuple[int, int]]) -> list[dict[str, Tensor]]:
        """Detections from the resized images' frame back to the input images' (boxes,
        keypoints; mask probabilities pasted into full-size images)."""
        if self.training:
            return result
        for pred, size, original in zip(result, image_shapes, original_image_sizes):
            pred["boxes"] = resize_boxes(pred["boxes"], size, original)
            if "masks" in pred:
                pred["masks"] = paste_masks_in_image(pred["masks"], pred["boxes"], original)
            if "keypoints" in pred:
                pred["keypoints"] = resize_keypoints(pred["keypoints"], size, original)
        return result

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(\n    Normalize(mean={self.image_mean}, "
                f"std={self.image_std})\n    Resize(min_size={self.min_size}, "
                f"max_size={self.max_size}, mode='bilinear')\n)")
