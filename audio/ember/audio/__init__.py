"""ember.audio: audio I/O over libsndfile, torchaudio-compatible transforms and models."""

from ember.audio.io import AudioMetaData, info, load, save

__all__ = ["AudioMetaData", "info", "load", "save"]
