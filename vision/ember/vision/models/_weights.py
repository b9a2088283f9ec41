"""torchvision's weights API for the classification builders, from local files only.

``ResNet18_Weights.IMAGENET1K_V1`` / ``.DEFAULT``, ``get_weight("ResNet18_Weights.DEFAULT")``,
``get_model_weights("resnet18")``. An entry names torchvision's file (the last part of its
URL, e.g. ``resnet18-f37072fd.pth``); builders given an entry (or its name, or ``"DEFAULT"``)
load that file from ``weights_dir=`` or ``$EMBER_WEIGHTS_DIR``: nothing is downloaded.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

import torch
from torch import nn

from ember.vision.models._imagenet_categories import IMAGENET_CATEGORIES

URL_BASE = "https://download.pytorch.org/models/"
ENV_DIR = "EMBER_WEIGHTS_DIR"

_IMAGENET_MEAN, _IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
_MEAN_STD = {"": (_IMAGENET_MEAN, _IMAGENET_STD), "half": ((0.5,) * 3, (0.5,) * 3),
             # vgg16 IMAGENET1K_FEATURES (amdegroot's SSD backbone): 0..255 inputs
             "vggf": ((0.48235, 0.45882, 0.40784), (1.0 / 255.0,) * 3)}


class ImageClassification(nn.Module):
    """torchvision's ``ImageClassification`` preset: resize the shorter side to
    ``resize_size``, centre-crop ``crop_size``, scale to float in [0, 1], normalize.
    Takes a tensor image ``[..., C, H, W]`` (uint8 or float) or a PIL image."""

    def __init__(self, *, crop_size: int, resize_size: int = 256,
                 mean: Sequence[float] = _IMAGENET_MEAN, std: Sequence[float] = _IMAGENET_STD,
                 interpolation=None, antialias: bool | None = True) -> None:
        super().__init__()
        from ember.vision.transforms.functional import InterpolationMode
        self.crop_size = [crop_size]
        self.resize_size = [resize_size]
        self.mean, self.std = list(mean), list(std)
        self.interpolation = (InterpolationMode.BILINEAR if interpolation is None
                              else interpolation)
        self.antialias = antialias

    def forward(self, img):
        from ember.vision.transforms import functional as F
        if isinstance(img, torch.Tensor) and img.dtype == torch.uint8:
            # torchvision's preset uses v1 ``resize``: uint8 resampled in float32, then rounded
            img = F.resize(img.float(), self.resize_size, interpolation=self.interpolation,
                           antialias=self.antialias).round_().clamp_(0, 255).to(torch.uint8)
        else:
            img = F.resize(img, self.resize_size, interpolation=self.interpolation,
                           antialias=self.antialias)
        img = F.center_crop(img, self.crop_size)
        if not isinstance(img, torch.Tensor):
            img = F.pil_to_tensor(img)
        img = F.convert_image_dtype(img, torch.float)
        return F.normalize(img, mean=self.mean, std=self.std)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(crop_size={self.crop_size}, resize_size="
                f"{self.resize_size}, mean={self.mean}, std={self.std}, "
                f"interpolation={self.interpolation})")

    def describe(self) -> str:
        return (f"Resized to {self.resize_size} with {self.interpolation}, centre-cropped to "
                f"{self.crop_size}, rescaled to [0.0, 1.0], normalized with mean={self.mean} "
                f"and std={self.std}.")


@dataclass(eq=False, frozen=True)
class Weights:
    """One weights entry: torchvision's ``url`` (only its file name is used), the
    ``transforms`` factory of its preset, and ``meta`` (categories, num_params, min_size)."""

    url: str
    transforms: Callable[..., nn.Module]
    meta: dict = field(default_factory=dict)

    @property
    def file_name(self) -> str:
        return self.url.rsplit("/", 1)[-1]


class WeightsEnum(enum.Enum):
    """Base of the ``*_Weights`` enums (torchvision's ``WeightsEnum`` surface)."""

    @classmethod
    def verify(cls, obj):
        """``obj`` as an entry of this enum: an entry, its name, ``"<Enum>.<NAME>"`` or None."""
        if obj is None or isinstance(obj, cls):
            return obj
        if isinstance(obj, str):
            key = obj.removeprefix(cls.__name__ + ".")
            if key in cls.__members__:
                return cls[key]
            raise ValueError(f"{obj!r} is not an entry of {cls.__name__}; entries: "
                             f"{', '.join(cls.__members__)}")
        raise TypeError(f"Invalid Weight class provided; expected {cls.__name__} but received "
                        f"{type(obj).__name__}.")

    @property
    def url(self) -> str:
        return self.value.url

    @property
    def transforms(self) -> Callable[..., nn.Module]:
        return self.value.transforms

    @property
    def meta(self) -> dict:
        return self.value.meta

    @property
    def file_name(self) -> str:
        """torchvision's file name for this entry (the last part of its URL)."""
        return self.value.file_name

    def path(self, weights_dir: str | os.PathLike | None = None) -> str:
        """The local file of this entry: ``weights_dir`` (else ``$EMBER_WEIGHTS_DIR``) joined
        with :attr:`file_name`; raises ``FileNotFoundError`` naming both when it is missing."""
        where = weights_dir if weights_dir is not None else os.environ.get(ENV_DIR)
        if not where:
            raise FileNotFoundError(
                f"{self}: no weights directory; pass weights_dir= or set ${ENV_DIR} to a "
                f"directory holding {self.file_name!r} (ember never downloads weights)")
        path = os.path.join(os.fspath(where), self.file_name)
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"{self}: expected weights file {self.file_name!r} in {os.fspath(where)!r} "
                f"(from {'weights_dir' if weights_dir is not None else '$' + ENV_DIR}), "
                f"not found; download {self.url} there yourself (ember never downloads)")
        return path

    def get_state_dict(self, weights_dir: str | os.PathLike | None = None, *args,
                       **kwargs) -> dict:
        """The state_dict read from :meth:`path` (torchvision's ``progress`` etc. ignored)."""
        return torch.load(self.path(weights_dir), map_location="cpu", weights_only=True)

    def __repr__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"


# torchvision 0.29's classification weights: "<model> <Enum>" then one line per entry:
# "<ENTRY> <file> <crop> <resize> <L bilinear | C bicubic> <num_params> <min_size> [mean/std] [*]"
# (* marks DEFAULT). tests/peers/test_weights_parity.py checks it against torchvision.
_TABLE = """
alexnet AlexNet_Weights
    IMAGENET1K_V1 alexnet-owt-7be5be79.pth 224 256 L 61100840 63 *
convnext_base ConvNeXt_Base_Weights
    IMAGENET1K_V1 convnext_base-6075fbad.pth 224 232 L 88591464 32 *
convnext_large ConvNeXt_Large_Weights
    IMAGENET1K_V1 convnext_large-ea097f82.pth 224 232 L 197767336 32 *
convnext_small ConvNeXt_Small_Weights
    IMAGENET1K_V1 convnext_small-0c510722.pth 224 230 L 50223688 32 *
convnext_tiny ConvNeXt_Tiny_Weights
    IMAGENET1K_V1 convnext_tiny-983f1562.pth 224 236 L 28589128 32 *
densenet121 DenseNet121_Weights
    IMAGENET1K_V1 densenet121-a639ec97.pth 224 256 L 7978856 29 *
densenet161 DenseNet161_Weights
    IMAGENET1K_V1 densenet161-8d451a50.pth 224 256 L 28681000 29 *
densenet169 DenseNet169_Weights
    IMAGENET1K_V1 densenet169-b2777c0a.pth 224 256 L 14149480 29 *
densenet201 DenseNet201_Weights
    IMAGENET1K_V1 densenet201-c1103571.pth 224 256 L 20013928 29 *
efficientnet_b0 EfficientNet_B0_Weights
    IMAGENET1K_V1 efficientnet_b0_rwightman-7f5810bc.pth 224 256 C 5288548 1 *
efficientnet_b1 EfficientNet_B1_Weights
    IMAGENET1K_V1 efficientnet_b1_rwightman-bac287d4.pth 240 256 C 7794184 1
    IMAGENET1K_V2 efficientnet_b1-c27df63c.pth 240 255 L 7794184 1 *
efficientnet_b2 EfficientNet_B2_Weights
    IMAGENET1K_V1 efficientnet_b2_rwightman-c35c1473.pth 288 288 C 9109994 1 *
efficientnet_b3 EfficientNet_B3_Weights
    IMAGENET1K_V1 efficientnet_b3_rwightman-b3899882.pth 300 320 C 12233232 1 *
efficientnet_b4 EfficientNet_B4_Weights
    IMAGENET1K_V1 efficientnet_b4_rwightman-23ab8bcd.pth 380 384 C 19341616 1 *
efficientnet_b5 EfficientNet_B5_Weights
    IMAGENET1K_V1 efficientnet_b5_lukemelas-1a07897c.pth 456 456 C 30389784 1 *
efficientnet_b6 EfficientNet_B6_Weights
    IMAGENET1K_V1 efficientnet_b6_lukemelas-24a108a5.pth 528 528 C 43040704 1 *
efficientnet_b7 EfficientNet_B7_Weights
    IMAGENET1K_V1 efficientnet_b7_lukemelas-c5b4e57e.pth 600 600 C 66347960 1 *
efficientnet_v2_l EfficientNet_V2_L_Weights
    IMAGENET1K_V1 efficientnet_v2_l-59c71312.pth 480 480 C 118515272 33 half *
efficientnet_v2_m EfficientNet_V2_M_Weights
    IMAGENET1K_V1 efficientnet_v2_m-dc08266a.pth 480 480 L 54139356 33 *
efficientnet_v2_s EfficientNet_V2_S_Weights
    IMAGENET1K_V1 efficientnet_v2_s-dd5fe13b.pth 384 384 L 21458488 33 *
googlenet GoogLeNet_Weights
    IMAGENET1K_V1 googlenet-1378be20.pth 224 256 L 6624904 15 *
inception_v3 Inception_V3_Weights
    IMAGENET1K_V1 inception_v3_google-0cc3c7bd.pth 299 342 L 27161264 75 *
maxvit_t MaxVit_T_Weights
    IMAGENET1K_V1 maxvit_t-bc5ab103.pth 224 224 C 30919624 224 *
mnasnet0_5 MNASNet0_5_Weights
    IMAGENET1K_V1 mnasnet0.5_top1_67.823-3ffadce67e.pth 224 256 L 2218512 1 *
mnasnet0_75 MNASNet0_75_Weights
    IMAGENET1K_V1 mnasnet0_75-7090bc5f.pth 224 232 L 3170208 1 *
mnasnet1_0 MNASNet1_0_Weights
    IMAGENET1K_V1 mnasnet1.0_top1_73.512-f206786ef8.pth 224 256 L 4383312 1 *
mnasnet1_3 MNASNet1_3_Weights
    IMAGENET1K_V1 mnasnet1_3-a4c69d6f.pth 224 232 L 6282256 1 *
mobilenet_v2 MobileNet_V2_Weights
    IMAGENET1K_V1 mobilenet_v2-b0353104.pth 224 256 L 3504872 1
    IMAGENET1K_V2 mobilenet_v2-7ebf99e0.pth 224 232 L 3504872 1 *
mobilenet_v3_large MobileNet_V3_Large_Weights
    IMAGENET1K_V1 mobilenet_v3_large-8738ca79.pth 224 256 L 5483032 1
    IMAGENET1K_V2 mobilenet_v3_large-5c1a4163.pth 224 232 L 5483032 1 *
mobilenet_v3_small MobileNet_V3_Small_Weights
    IMAGENET1K_V1 mobilenet_v3_small-047dcff4.pth 224 256 L 2542856 1 *
regnet_x_16gf RegNet_X_16GF_Weights
    IMAGENET1K_V1 regnet_x_16gf-2007eb11.pth 224 256 L 54278536 1
    IMAGENET1K_V2 regnet_x_16gf-ba3796d7.pth 224 232 L 54278536 1 *
regnet_x_1_6gf RegNet_X_1_6GF_Weights
    IMAGENET1K_V1 regnet_x_1_6gf-e3633e7f.pth 224 256 L 9190136 1
    IMAGENET1K_V2 regnet_x_1_6gf-a12f2b72.pth 224 232 L 9190136 1 *
regnet_x_32gf RegNet_X_32GF_Weights
    IMAGENET1K_V1 regnet_x_32gf-9d47f8d0.pth 224 256 L 107811560 1
    IMAGENET1K_V2 regnet_x_32gf-6eb8fdc6.pth 224 232 L 107811560 1 *
regnet_x_3_2gf RegNet_X_3_2GF_Weights
    IMAGENET1K_V1 regnet_x_3_2gf-f342aeae.pth 224 256 L 15296552 1
    IMAGENET1K_V2 regnet_x_3_2gf-7071aa85.pth 224 232 L 15296552 1 *
regnet_x_400mf RegNet_X_400MF_Weights
    IMAGENET1K_V1 regnet_x_400mf-adf1edd5.pth 224 256 L 5495976 1
    IMAGENET1K_V2 regnet_x_400mf-62229a5f.pth 224 232 L 5495976 1 *
regnet_x_800mf RegNet_X_800MF_Weights
    IMAGENET1K_V1 regnet_x_800mf-ad17e45c.pth 224 256 L 7259656 1
    IMAGENET1K_V2 regnet_x_800mf-94a99ebd.pth 224 232 L 7259656 1 *
regnet_x_8gf RegNet_X_8GF_Weights
    IMAGENET1K_V1 regnet_x_8gf-03ceed89.pth 224 256 L 39572648 1
    IMAGENET1K_V2 regnet_x_8gf-2b70d774.pth 224 232 L 39572648 1 *
regnet_y_128gf RegNet_Y_128GF_Weights
    IMAGENET1K_SWAG_E2E_V1 regnet_y_128gf_swag-c8ce3e52.pth 384 384 C 644812894 1 *
    IMAGENET1K_SWAG_LINEAR_V1 regnet_y_128gf_lc_swag-cbe8ce12.pth 224 224 C 644812894 1
regnet_y_16gf RegNet_Y_16GF_Weights
    IMAGENET1K_V1 regnet_y_16gf-9e6ed7dd.pth 224 256 L 83590140 1
    IMAGENET1K_V2 regnet_y_16gf-3e4a00f9.pth 224 232 L 83590140 1 *
    IMAGENET1K_SWAG_E2E_V1 regnet_y_16gf_swag-43afe44d.pth 384 384 C 83590140 1
    IMAGENET1K_SWAG_LINEAR_V1 regnet_y_16gf_lc_swag-f3ec0043.pth 224 224 C 83590140 1
regnet_y_1_6gf RegNet_Y_1_6GF_Weights
    IMAGENET1K_V1 regnet_y_1_6gf-b11a554e.pth 224 256 L 11202430 1
    IMAGENET1K_V2 regnet_y_1_6gf-0d7bc02a.pth 224 232 L 11202430 1 *
regnet_y_32gf RegNet_Y_32GF_Weights
    IMAGENET1K_V1 regnet_y_32gf-4dee3f7a.pth 224 256 L 145046770 1
    IMAGENET1K_V2 regnet_y_32gf-8db6d4b5.pth 224 232 L 145046770 1 *
    IMAGENET1K_SWAG_E2E_V1 regnet_y_32gf_swag-04fdfa75.pth 384 384 C 145046770 1
    IMAGENET1K_SWAG_LINEAR_V1 regnet_y_32gf_lc_swag-e1583746.pth 224 224 C 145046770 1
regnet_y_3_2gf RegNet_Y_3_2GF_Weights
    IMAGENET1K_V1 regnet_y_3_2gf-b5a9779c.pth 224 256 L 19436338 1
    IMAGENET1K_V2 regnet_y_3_2gf-9180c971.pth 224 232 L 19436338 1 *
regnet_y_400mf RegNet_Y_400MF_Weights
    IMAGENET1K_V1 regnet_y_400mf-c65dace8.pth 224 256 L 4344144 1
    IMAGENET1K_V2 regnet_y_400mf-e6988f5f.pth 224 232 L 4344144 1 *
regnet_y_800mf RegNet_Y_800MF_Weights
    IMAGENET1K_V1 regnet_y_800mf-1b27b58c.pth 224 256 L 6432512 1
    IMAGENET1K_V2 regnet_y_800mf-58fc7688.pth 224 232 L 6432512 1 *
regnet_y_8gf RegNet_Y_8GF_Weights
    IMAGENET1K_V1 regnet_y_8gf-d0d0e4a8.pth 224 256 L 39381472 1
    IMAGENET1K_V2 regnet_y_8gf-dc2b1b54.pth 224 232 L 39381472 1 *
resnet101 ResNet101_Weights
    IMAGENET1K_V1 resnet101-63fe2227.pth 224 256 L 44549160 1
    IMAGENET1K_V2 resnet101-cd907fc2.pth 224 232 L 44549160 1 *
resnet152 ResNet152_Weights
    IMAGENET1K_V1 resnet152-394f9c45.pth 224 256 L 60192808 1
    IMAGENET1K_V2 resnet152-f82ba261.pth 224 232 L 60192808 1 *
resnet18 ResNet18_Weights
    IMAGENET1K_V1 resnet18-f37072fd.pth 224 256 L 11689512 1 *
resnet34 ResNet34_Weights
    IMAGENET1K_V1 resnet34-b627a593.pth 224 256 L 21797672 1 *
resnet50 ResNet50_Weights
    IMAGENET1K_V1 resnet50-0676ba61.pth 224 256 L 25557032 1
    IMAGENET1K_V2 resnet50-11ad3fa6.pth 224 232 L 25557032 1 *
resnext101_32x8d ResNeXt101_32X8D_Weights
    IMAGENET1K_V1 resnext101_32x8d-8ba56ff5.pth 224 256 L 88791336 1
    IMAGENET1K_V2 resnext101_32x8d-110c445d.pth 224 232 L 88791336 1 *
resnext101_64x4d ResNeXt101_64X4D_Weights
    IMAGENET1K_V1 resnext101_64x4d-173b62eb.pth 224 232 L 83455272 1 *
resnext50_32x4d ResNeXt50_32X4D_Weights
    IMAGENET1K_V1 resnext50_32x4d-7cdf4587.pth 224 256 L 25028904 1
    IMAGENET1K_V2 resnext50_32x4d-1a0047aa.pth 224 232 L 25028904 1 *
shufflenet_v2_x0_5 ShuffleNet_V2_X0_5_Weights
    IMAGENET1K_V1 shufflenetv2_x0.5-f707e7126e.pth 224 256 L 1366792 1 *
shufflenet_v2_x1_0 ShuffleNet_V2_X1_0_Weights
    IMAGENET1K_V1 shufflenetv2_x1-5666bf0f80.pth 224 256 L 2278604 1 *
shufflenet_v2_x1_5 ShuffleNet_V2_X1_5_Weights
    IMAGENET1K_V1 shufflenetv2_x1_5-3c479a10.pth 224 232 L 3503624 1 *
shufflenet_v2_x2_0 ShuffleNet_V2_X2_0_Weights
    IMAGENET1K_V1 shufflenetv2_x2_0-8be3c8ee.pth 224 232 L 7393996 1 *
squeezenet1_0 SqueezeNet1_0_Weights
    IMAGENET1K_V1 squeezenet1_0-b66bff10.pth 224 256 L 1248424 21 *
squeezenet1_1 SqueezeNet1_1_Weights
    IMAGENET1K_V1 squeezenet1_1-b8a52dc0.pth 224 256 L 1235496 17 *
swin_b Swin_B_Weights
    IMAGENET1K_V1 swin_b-68c6b09e.pth 224 238 C 87768224 224 *
swin_s Swin_S_Weights
    IMAGENET1K_V1 swin_s-5e29d889.pth 224 246 C 49606258 224 *
swin_t Swin_T_Weights
    IMAGENET1K_V1 swin_t-704ceda3.pth 224 232 C 28288354 224 *
swin_v2_b Swin_V2_B_Weights
    IMAGENET1K_V1 swin_v2_b-781e5279.pth 256 272 C 87930848 256 *
swin_v2_s Swin_V2_S_Weights
    IMAGENET1K_V1 swin_v2_s-637d8ceb.pth 256 260 C 49737442 256 *
swin_v2_t Swin_V2_T_Weights
    IMAGENET1K_V1 swin_v2_t-b137f0e2.pth 256 260 C 28351570 256 *
vgg11 VGG11_Weights
    IMAGENET1K_V1 vgg11-8a719046.pth 224 256 L 132863336 32 *
vgg11_bn VGG11_BN_Weights
    IMAGENET1K_V1 vgg11_bn-6002323d.pth 224 256 L 132868840 32 *
vgg13 VGG13_Weights
    IMAGENET1K_V1 vgg13-19584684.pth 224 256 L 133047848 32 *
vgg13_bn VGG13_BN_Weights
    IMAGENET1K_V1 vgg13_bn-abd245e5.pth 224 256 L 133053736 32 *
vgg16 VGG16_Weights
    IMAGENET1K_V1 vgg16-397923af.pth 224 256 L 138357544 32 *
    IMAGENET1K_FEATURES vgg16_features-amdegroot-88682ab5.pth 224 256 L 138357544 32 vggf
vgg16_bn VGG16_BN_Weights
    IMAGENET1K_V1 vgg16_bn-6c64b313.pth 224 256 L 138365992 32 *
vgg19 VGG19_Weights
    IMAGENET1K_V1 vgg19-dcbb9e9d.pth 224 256 L 143667240 32 *
vgg19_bn VGG19_BN_Weights
    IMAGENET1K_V1 vgg19_bn-c79401a0.pth 224 256 L 143678248 32 *
vit_b_16 ViT_B_16_Weights
    IMAGENET1K_V1 vit_b_16-c867db91.pth 224 256 L 86567656 224 *
    IMAGENET1K_SWAG_E2E_V1 vit_b_16_swag-9ac1b537.pth 384 384 C 86859496 384
    IMAGENET1K_SWAG_LINEAR_V1 vit_b_16_lc_swag-4e70ced5.pth 224 224 C 86567656 224
vit_b_32 ViT_B_32_Weights
    IMAGENET1K_V1 vit_b_32-d86f8d99.pth 224 256 L 88224232 224 *
vit_h_14 ViT_H_14_Weights
    IMAGENET1K_SWAG_E2E_V1 vit_h_14_swag-80465313.pth 518 518 C 633470440 518 *
    IMAGENET1K_SWAG_LINEAR_V1 vit_h_14_lc_swag-c1eb923e.pth 224 224 C 632045800 224
vit_l_16 ViT_L_16_Weights
    IMAGENET1K_V1 vit_l_16-852ce7e3.pth 224 242 L 304326632 224 *
    IMAGENET1K_SWAG_E2E_V1 vit_l_16_swag-4f3808c9.pth 512 512 C 305174504 512
    IMAGENET1K_SWAG_LINEAR_V1 vit_l_16_lc_swag-4d563306.pth 224 224 C 304326632 224
vit_l_32 ViT_L_32_Weights
    IMAGENET1K_V1 vit_l_32-c7638314.pth 224 256 L 306535400 224 *
wide_resnet101_2 Wide_ResNet101_2_Weights
    IMAGENET1K_V1 wide_resnet101_2-32ee1156.pth 224 256 L 126886696 1
    IMAGENET1K_V2 wide_resnet101_2-d733dc28.pth 224 232 L 126886696 1 *
wide_resnet50_2 Wide_ResNet50_2_Weights
    IMAGENET1K_V1 wide_resnet50_2-95faca4d.pth 224 256 L 68883240 1
    IMAGENET1K_V2 wide_resnet50_2-9ba9bcbe.pth 224 232 L 68883240 1 *
"""

WEIGHTS_ENUMS: dict[str, type[WeightsEnum]] = {}   # enum name -> enum
MODEL_WEIGHTS: dict[str, type[WeightsEnum]] = {}   # builder name -> enum


def _entry(file, crop, resize, interp, num_params, min_size, mean_std="") -> Weights:
    from ember.vision.transforms.functional import InterpolationMode
    mode = InterpolationMode.BILINEAR if interp == "L" else InterpolationMode.BICUBIC
    mean, std = _MEAN_STD[mean_std]
    transforms = partial(ImageClassification, crop_size=int(crop), resize_size=int(resize),
                         interpolation=mode, mean=mean, std=std)
    meta = {"categories": None if mean_std == "vggf" else list(IMAGENET_CATEGORIES),
            "num_params": int(num_params), "min_size": (int(min_size), int(min_size))}
    return Weights(URL_BASE + file, transforms, meta)


def _build() -> None:
    model = enum_name = None
    rows: list = []

    def close():
        if model is not None:
            members = [(n, w) for n, w, _ in rows]
            members += [("DEFAULT", w) for _, w, star in rows if star]
            weights = WeightsEnum(enum_name, members, module=__name__)
            WEIGHTS_ENUMS[enum_name] = MODEL_WEIGHTS[model] = weights

    for line in _TABLE.strip().splitlines():
        if not line.startswith(" "):
            close()
            (model, enum_name), rows = line.split(), []
            continue
        name, *cols = line.split()
        star = cols[-1] == "*"
        rows.append((name, _entry(*(cols[:-1] if star else cols)), star))
    close()


_build()
globals().update(WEIGHTS_ENUMS)
# the classification enums (the table above); task packages register theirs later
CLASSIFICATION_WEIGHTS: dict[str, type[WeightsEnum]] = dict(MODEL_WEIGHTS)


def add_weights_enum(model: str, enum_name: str, entries: Sequence[tuple[str, Weights]],
                     default: str) -> type[WeightsEnum]:
    """Make and register the enum ``enum_name`` of builder ``model`` (segmentation, video and
    detection modules): ``entries`` are (NAME, Weights), ``default`` names the DEFAULT one."""
    names = [n for n, _ in entries]
    if default not in names:
        raise ValueError(f"{enum_name}: default {default!r} is not one of {names}")
    if enum_name in WEIGHTS_ENUMS or model in MODEL_WEIGHTS:
        raise ValueError(f"weights of {model!r} ({enum_name}) are already registered")
    members = [*entries, ("DEFAULT", dict(entries)[default])]
    weights = WeightsEnum(enum_name, members, module=__name__)
    WEIGHTS_ENUMS[enum_name] = MODEL_WEIGHTS[model] = weights
    return weights


def get_weight(name: str) -> WeightsEnum:
    """The entry named ``"<Enum>.<ENTRY>"``, e.g. ``get_weight("ResNet50_Weights.DEFAULT")``."""
    enum_name, _, entry = name.partition(".")
    if enum_name not in WEIGHTS_ENUMS or not entry:
        raise ValueError(f"unknown weights {name!r}; expected '<Enum>.<ENTRY>' with <Enum> one "
                         f"of {', '.join(sorted(WEIGHTS_ENUMS))}")
    return WEIGHTS_ENUMS[enum_name].verify(entry)


def get_model_weights(name: str | Callable) -> type[WeightsEnum]:
    """The weights enum of a builder, given by name or as the builder itself."""
    if not isinstance(name, str):
        name = getattr(name, "_ember_model_name", None) or getattr(name, "__name__", "")
    if name not in MODEL_WEIGHTS:
        raise ValueError(f"no weights enum for model {name!r}; models with weights: "
                         f"{', '.join(sorted(MODEL_WEIGHTS))}")
    return MODEL_WEIGHTS[name]


def entry_of(model: str, weights) -> WeightsEnum | None:
    """``weights`` as an entry of ``model``'s enum when it is one (or names one), else None."""
    enum_cls = MODEL_WEIGHTS.get(model)
    if isinstance(weights, WeightsEnum):
        return weights
    if isinstance(weights, str) and enum_cls is not None:
        key = weights.removeprefix(enum_cls.__name__ + ".")
        if key in enum_cls.__members__:
            return enum_cls[key]
    return None


def resolve(model: str, weights, weights_dir=None, kwargs: dict | None = None):
    """A builder's ``weights=`` as its loader takes it: an entry of the model's enum (or its
    name, or ``"DEFAULT"``) becomes the local file path (and fixes ``num_classes``, and a ViT's
    ``image_size``, in ``kwargs`` as torchvision does); anything else passes through."""
    enum_cls = MODEL_WEIGHTS.get(model)
    weights = entry_of(model, weights) or weights
    if isinstance(weights, WeightsEnum):
        if enum_cls is None or not isinstance(weights, enum_cls):
            expected = enum_cls.__name__ if enum_cls is not None else "no weights enum"
            raise TypeError(f"{model}: got weights {weights}; expected {expected}")
        if kwargs is not None:
            from ember.vision.models._utils import fixed
            if weights.meta["categories"] is not None:
                kwargs.update(fixed(kwargs, num_classes=len(weights.meta["categories"])))
            if model.startswith("vit_"):
                kwargs.update(fixed(kwargs, image_size=weights.meta["min_size"][0]))
        return weights.path(weights_dir)
    if weights_dir is not None:
        raise ValueError("weights_dir= is for weights enum entries; got "
                         f"weights={weights!r}")
    return weights
