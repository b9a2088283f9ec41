"""Models with torchaudio.models' constructors, layouts and parameter counts (no weights)."""

from ember.audio.models.conformer import Conformer
from ember.audio.models.conv_tasnet import ConvTasNet
from ember.audio.models.deepspeech import DeepSpeech
from ember.audio.models.emformer import Emformer
from ember.audio.models.hdemucs import HDemucs, hdemucs_high, hdemucs_low, hdemucs_medium
from ember.audio.models.rnnt import RNNT, emformer_rnnt_base, emformer_rnnt_model
from ember.audio.models.rnnt_decoder import Hypothesis, RNNTBeamSearch
from ember.audio.models.squim import (
    SquimObjective,
    SquimSubjective,
    squim_objective_base,
    squim_objective_model,
    squim_subjective_base,
    squim_subjective_model,
)
from ember.audio.models.tacotron2 import Tacotron2
from ember.audio.models.wav2letter import Wav2Letter
from ember.audio.models.wav2vec2 import (
    HuBERTPretrainModel,
    Wav2Vec2Model,
    hubert_base,
    hubert_large,
    hubert_pretrain_base,
    hubert_pretrain_large,
    hubert_pretrain_model,
    hubert_pretrain_xlarge,
    hubert_xlarge,
    wav2vec2_base,
    wav2vec2_large,
    wav2vec2_large_lv60k,
    wav2vec2_model,
    wav2vec2_xlsr_1b,
    wav2vec2_xlsr_2b,
    wav2vec2_xlsr_300m,
    wavlm_base,
    wavlm_large,
    wavlm_model,
)
from ember.audio.models.wavernn import WaveRNN

__all__ = ["Conformer", "ConvTasNet", "DeepSpeech", "Emformer", "HDemucs", "Hypothesis", "RNNT",
           "RNNTBeamSearch", "SquimObjective", "SquimSubjective", "Tacotron2", "Wav2Letter",
           "WaveRNN", "emformer_rnnt_base", "emformer_rnnt_model", "hdemucs_high", "hdemucs_low",
           "hdemucs_medium", "squim_objective_base", "squim_objective_model",
           "squim_subjective_base", "squim_subjective_model"]
__all__ += ["HuBERTPretrainModel", "Wav2Vec2Model", "hubert_base", "hubert_large",
            "hubert_pretrain_base", "hubert_pretrain_large", "hubert_pretrain_model",
            "hubert_pretrain_xlarge", "hubert_xlarge", "wav2vec2_base", "wav2vec2_large",
            "wav2vec2_large_lv60k", "wav2vec2_model", "wav2vec2_xlsr_1b", "wav2vec2_xlsr_2b",
            "wav2vec2_xlsr_300m", "wavlm_base", "wavlm_large", "wavlm_model"]
