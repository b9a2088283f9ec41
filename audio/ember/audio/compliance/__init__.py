"""Feature pipelines compatible with other toolkits (torchaudio.compliance): ``kaldi``."""

from ember.audio.compliance import kaldi

__all__ = ["kaldi"]
