"""``nn.Module`` transforms with torchaudio.transforms' names, arguments and semantics."""

from ember.audio.transforms.augment import (
    AddNoise,
    Fade,
    FrequencyMasking,
    SpecAugment,
    TimeMasking,
    Vol,
)
from ember.audio.transforms.effects import PitchShift, Vad
from ember.audio.transforms.features import Loudness, SlidingWindowCmn, SpectralCentroid
from ember.audio.transforms.loss import RNNTLoss
from ember.audio.transforms.multichannel import MVDR, PSD, RTFMVDR, SoudenMVDR
from ember.audio.transforms.signal import (
    ComputeDeltas,
    Convolve,
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
    "MVDR",
    "PSD",
    "RNNTLoss",
    "RTFMVDR",
    "AddNoise",
    "AmplitudeToDB",
    "ComputeDeltas",
    "Convolve",
    "Deemphasis",
    "FFTConvolve",
    "Fade",
    "FrequencyMasking",
    "GriffinLim",
    "InverseMelScale",
    "InverseSpectrogram",
    "Loudness",
    "MelScale",
    "MelSpectrogram",
    "MuLawDecoding",
    "MuLawEncoding",
    "PitchShift",
    "Preemphasis",
    "Resample",
    "SlidingWindowCmn",
    "SoudenMVDR",
    "SpecAugment",
    "SpectralCentroid",
    "Spectrogram",
    "Speed",
    "SpeedPerturbation",
    "TimeMasking",
    "TimeStretch",
    "Vad",
    "Vol",
]
