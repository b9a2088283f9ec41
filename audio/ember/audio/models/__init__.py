"""Models with torchaudio.models' constructors, layouts and parameter counts (no weights)."""

from ember.audio.models.conformer import Conformer
from ember.audio.models.conv_tasnet import ConvTasNet
from ember.audio.models.deepspeech import DeepSpeech
from ember.audio.models.wav2letter import Wav2Letter
from ember.audio.models.wavernn import WaveRNN

__all__ = ["Conformer", "ConvTasNet", "DeepSpeech", "Wav2Letter", "WaveRNN"]
