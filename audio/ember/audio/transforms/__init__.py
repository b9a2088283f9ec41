"""``nn.Module`` transforms with torchaudio.transforms' names, arguments and semantics."""

from ember.audio.transforms.augment import (
    AddNoise,
    Fade,
    FrequencyMasking,
    SpecAugment,
    TimeMasking,
    Vol,
)
from ember.audio.transforms.features import SlidingWindowCmn, SpectralCentroid
from ember.audio.transforms.signal import (
    ComputeDeltas,
    Deemphasis,
    FFTConvolve,
    MuLawDecoding,
    MuLawEncoding,
    Preemphasis,
    Resample,
)
from ember.audio.transforms.spectral import (
    LFCC,
    MFCC,
    AmplitudeToDB,
    GriffinLim,
    InverseMelScale,
    InverseSpectrogram,
    MelScale,
    MelSpectrogram,
    Spectrogram,
    TimeStretch,
)
from ember.audio.transforms.speed import Speed, SpeedPerturbation

__all__ = [
    "LFCC",
    "MFCC",
    "AddNoise",
    "AmplitudeToDB",
    "ComputeDeltas",
    "Deemphasis",
    "FFTConvolve",
    "Fade",
    "FrequencyMasking",
    "GriffinLim",
    "InverseMelScale",
    "InverseSpectrogram",
    "MelScale",
    "MelSpectrogram",
    "MuLawDecoding",
    "MuLawEncoding",
    "Preemphasis",
    "Resample",
    "SlidingWindowCmn",
    "SpecAugment",
    "SpectralCentroid",
    "Spectrogram",
    "Speed",
    "SpeedPerturbation",
    "TimeMasking",
    "TimeStretch",
    "Vol",
]
