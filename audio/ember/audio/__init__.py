"""ember.audio: audio I/O over libsndfile, torchaudio-compatible transforms and models."""

from ember.audio import compliance, functional, models, transforms
from ember.audio.io import AudioMetaData, info, load, save

__all__ = ["AudioMetaData", "compliance", "functional", "info", "load", "models", "save",
           "transforms"]
