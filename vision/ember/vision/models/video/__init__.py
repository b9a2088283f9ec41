"""Video classification models (torchvision.models.video's names, layouts and weights enums;
weights load from local files only)."""

from ember.vision.models.video.resnet import (
    MC3_18_Weights,
    R2Plus1D_18_Weights,
    R3D_18_Weights,
    VideoResNet,
    mc3_18,
    r2plus1d_18,
    r3d_18,
)
from ember.vision.models.video.s3d import S3D, S3D_Weights, s3d

__all__ = ["VideoResNet", "R3D_18_Weights", "MC3_18_Weights", "R2Plus1D_18_Weights", "r3d_18",
           "mc3_18", "r2plus1d_18", "S3D", "S3D_Weights", "s3d"]
