"""Backbones for the detectors: a feature extractor (ResNet or MobileNet body) with an FPN
on top, torchvision's builders, freezing rules and state_dict layout."""

from __future__ import annotations

import warnings
from collections import OrderedDict
from collections.abc import Callable

from torch import Tensor, nn

from ember.vision.models._registry import load_weights
from ember.vision.models._weights import resolve
from ember.vision.ops import FrozenBatchNorm2d
from ember.vision.ops.feature_pyramid_network import (
    ExtraFPNBlock,
    FeaturePyramidNetwork,
    LastLevelMaxPool,
)

__all__ = ["BackboneWithFPN", "IntermediateLayerGetter", "resnet_fpn_backbone",
           "mobilenet_backbone", "replace_norm"]


class IntermediateLayerGetter(nn.ModuleDict):
    """The model's direct children up to the last one named in ``return_layers``, run in
    order; returns the outputs of ``return_layers`` keys under their values' names."""

    def __init__(self, model: nn.Module, return_layers: dict[str, str]) -> None:
        names = [name for name, _ in model.named_children()]
        if not set(return_layers).issubset(names):
            raise ValueError(f"return_layers {sorted(return_layers)} are not all children of "
                             f"the model ({names})")
        wanted = set(return_layers)
        layers = OrderedDict()
        for name, module in model.named_children():
            layers[name] = module
            wanted.discard(name)
            if not wanted:
                break
        super().__init__(layers)
        self.return_layers = dict(return_layers)

    def forward(self, x: Tensor) -> dict[str, Tensor]:
        out = OrderedDict()
        for name, module in self.items():
            x = module(x)
            if name in self.return_layers:
                out[self.return_layers[name]] = x
        return out


class BackboneWithFPN(nn.Module):
    """``body`` (an IntermediateLayerGetter over ``backbone``) followed by an FPN with
    ``out_channels`` per level (default extra block: a max-pooled level "pool")."""

    def __init__(self, backbone: nn.Module, return_layers: dict[str, str],
                 in_channels_list: list[int], out_channels: int,
                 extra_blocks: ExtraFPNBlock | None = None,
                 norm_layer: Callable[..., nn.Module] | None = None) -> None:
        super().__init__()
        if extra_blocks is None:
            extra_blocks = LastLevelMaxPool()
        self.body = IntermediateLayerGetter(backbone, return_layers=return_layers)
        self.fpn = FeaturePyramidNetwork(in_channels_list=in_channels_list,
                                         out_channels=out_channels, extra_blocks=extra_blocks,
                                         norm_layer=norm_layer)
        self.out_channels = out_channels

    def forward(self, x: Tensor) -> dict[str, Tensor]:
        return self.fpn(self.body(x))


def replace_norm(module: nn.Module, norm_layer: Callable[..., nn.Module]) -> nn.Module:
    """Every BatchNorm2d inside ``module`` replaced by a fresh ``norm_layer(num_features)``
    (how the MobileNet bodies take torchvision's ``norm_layer=``)."""
    for name, child in module.named_children():
        if isinstance(child, nn.BatchNorm2d):
            setattr(module, name, norm_layer(child.num_features))
        else:
            replace_norm(child, norm_layer)
    return module


def _resnet_fpn_extractor(backbone: nn.Module, trainable_layers: int,
                          returned_layers: list[int] | None = None,
                          extra_blocks: ExtraFPNBlock | None = None,
                          norm_layer: Callable[..., nn.Module] | None = None) -> BackboneWithFPN:
    """A ResNet with the first ``5 - trainable_layers`` stages frozen and an FPN (256
    channels) over ``returned_layers`` (default 1-4)."""
    if not 0 <= trainable_layers <= 5:
        raise ValueError(f"trainable_layers must be in [0, 5], got {trainable_layers}")
    train = ["layer4", "layer3", "layer2", "layer1", "conv1"][:trainable_layers]
    if trainable_layers == 5:
        train.append("bn1")
    for name, p in backbone.named_parameters():
        if not any(name.startswith(t) for t in train):
            p.requires_grad_(False)
    if returned_layers is None:
        returned_layers = [1, 2, 3, 4]
    if min(returned_layers) <= 0 or max(returned_layers) >= 5:
        raise ValueError(f"returned_layers entries must be in [1, 4], got {returned_layers}")
    return_layers = {f"layer{k}": str(v) for v, k in enumerate(returned_layers)}
    stage2 = backbone.inplanes // 8
    in_channels_list = [stage2 * 2 ** (i - 1) for i in returned_layers]
    return BackboneWithFPN(backbone, return_layers, in_channels_list, 256,
                           extra_blocks=extra_blocks, norm_layer=norm_layer)


def resnet_fpn_backbone(*, backbone_name: str, weights=None,
                        norm_layer: Callable[..., nn.Module] = FrozenBatchNorm2d,
                        trainable_layers: int = 3, returned_layers: list[int] | None = None,
                        extra_blocks: ExtraFPNBlock | None = None) -> BackboneWithFPN:
    """ResNet ``backbone_name`` (weights: an entry of its enum, a local file or None) with
    ``norm_layer`` and an FPN on top."""
    from ember.vision.models import resnet
    builder = getattr(resnet, backbone_name, None)
    if builder is None or backbone_name not in resnet._BUILDERS:
        raise ValueError(f"unknown ResNet backbone {backbone_name!r}; one of "
                         f"{', '.join(resnet._BUILDERS)}")
    backbone = builder(weights=weights, norm_layer=norm_layer)
    return _resnet_fpn_extractor(backbone, trainable_layers, returned_layers, extra_blocks)


def _validate_trainable_layers(is_trained: bool, trainable_backbone_layers: int | None,
                               max_value: int, default_value: int) -> int:
    """torchvision's rule: everything trains without pretrained weights; otherwise the
    default unless given, and it must be in [0, max_value]."""
    if not is_trained:
        if trainable_backbone_layers is not None:
            warnings.warn("trainable_backbone_layers has no effect without pretrained weights "
                          f"(weights or weights_backbone); using {max_value}, all layers "
                          "trainable", stacklevel=3)
        trainable_backbone_layers = max_value
    if trainable_backbone_layers is None:
        trainable_backbone_layers = default_value
    if not 0 <= trainable_backbone_layers <= max_value:
        raise ValueError(f"trainable_backbone_layers must be in [0, {max_value}], got "
                         f"{trainable_backbone_layers}")
    return trainable_backbone_layers


def _is_stage_start(block: nn.Module) -> bool:
    """Whether an inverted-residual block starts a new stage (it downsamples)."""
    flag = getattr(block, "_is_cn", None)
    if flag is not None:
        return bool(flag)
    if not hasattr(block, "use_res") and not hasattr(block, "use_res_connect"):
        return False    # stem or last conv
    if getattr(block, "stride", 1) > 1:
        return True
    for m in block.modules():
        if isinstance(m, nn.Conv2d) and m.groups > 1:
            return max(m.stride) > 1 or max(m.dilation) > 1
    return False


def _out_channels(block: nn.Module) -> int:
    if hasattr(block, "out_channels"):
        return int(block.out_channels)
    convs = [m for m in block.modules() if isinstance(m, nn.Conv2d)]
    return convs[-1].out_channels


def _mobilenet_extractor(backbone: nn.Module, fpn: bool, trainable_layers: int,
                         returned_layers: list[int] | None = None,
                         extra_blocks: ExtraFPNBlock | None = None,
                         norm_layer: Callable[..., nn.Module] | None = None) -> nn.Module:
    """``backbone.features`` split into stages at its downsampling blocks, the first ones
    frozen; with ``fpn`` an FPN over the last two stages (by default), else a 1x1 conv."""
    features = backbone.features
    stage_indices = ([0] + [i for i, b in enumerate(features) if _is_stage_start(b)]
                     + [len(features) - 1])
    num_stages = len(stage_indices)
    if not 0 <= trainable_layers <= num_stages:
        raise ValueError(f"trainable_layers must be in [0, {num_stages}], got {trainable_layers}")
    freeze_before = (len(features) if trainable_layers == 0
                     else stage_indices[num_stages - trainable_layers])
    for b in features[:freeze_before]:
        for p in b.parameters():
            p.requires_grad_(False)
    out_channels = 256
    if not fpn:
        m = nn.Sequential(features, nn.Conv2d(_out_channels(features[-1]), out_channels, 1))
        m.out_channels = out_channels
        return m
    if returned_layers is None:
        returned_layers = [num_stages - 2, num_stages - 1]
    if min(returned_layers) < 0 or max(returned_layers) >= num_stages:
        raise ValueError(f"returned_layers entries must be in [0, {num_stages - 1}], got "
                         f"{returned_layers}")
    return_layers = {f"{stage_indices[k]}": str(v) for v, k in enumerate(returned_layers)}
    in_channels_list = [_out_channels(features[stage_indices[i]]) for i in returned_layers]
    return BackboneWithFPN(features, return_layers, in_channels_list, out_channels,
                           extra_blocks=extra_blocks, norm_layer=norm_layer)


def _mobilenet_body(backbone_name: str, weights, norm_layer: Callable[..., nn.Module]):
    """An ember MobileNetV2/V3 with its BatchNorm layers replaced by ``norm_layer``, then
    ``weights`` (an enum entry, its name, a local file or None) loaded."""
    from ember.vision.models import mobilenetv2, mobilenetv3
    builders = {"mobilenet_v2": mobilenetv2.mobilenet_v2,
                "mobilenet_v3_large": mobilenetv3.mobilenet_v3_large,
                "mobilenet_v3_small": mobilenetv3.mobilenet_v3_small}
    if backbone_name not in builders:
        raise ValueError(f"unknown MobileNet backbone {backbone_name!r}; one of "
                         f"{', '.join(builders)}")
    model = replace_norm(builders[backbone_name](), norm_layer)
    return load_weights(model, resolve(backbone_name, weights))


def mobilenet_backbone(*, backbone_name: str, weights=None, fpn: bool,
                       norm_layer: Callable[..., nn.Module] = FrozenBatchNorm2d,
                       trainable_layers: int = 2, returned_layers: list[int] | None = None,
                       extra_blocks: ExtraFPNBlock | None = None) -> nn.Module:
    """MobileNet ``backbone_name`` features with an FPN (``fpn=True``) or a 1x1 conv."""
    backbone = _mobilenet_body(backbone_name, weights, norm_layer)
    return _mobilenet_extractor(backbone, fpn, trainable_layers, returned_layers, extra_blocks)
