"""Squim subjective: MOS of speech against a non-matching clean reference (NORESQA-MOS).

Both signals go through one self-supervised encoder (wav2vec 2.0 base by default); the
predictor estimates how much worse the speech is than the reference, on a 0..4 scale.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["SquimSubjective", "squim_subjective_base", "squim_subjective_model"]


class AttPool(nn.Module):
    """Attention pooling over time ``(B, T, D)`` -> ``(B, att_dim)``."""

    def __init__(self, input_dim: int, att_dim: int) -> None:
        super().__init__()
        self.linear1 = nn.Linear(input_dim, 1)
        self.linear2 = nn.Linear(input_dim, att_dim)

    def forward(self, x: Tensor) -> Tensor:
        att = torch.softmax(self.linear1(x).transpose(2, 1), dim=2)    # (B, 1, T)
        return self.linear2(torch.matmul(att, x).squeeze(1))


class Predictor(nn.Module):
    """Expected score difference: softmax over ``att_dim`` bins spread evenly on [0, 4]."""

    def __init__(self, input_dim: int, att_dim: int) -> None:
        super().__init__()
        self.att_pool_layer = AttPool(input_dim, att_dim)
        self.att_dim = att_dim

    def forward(self, x: Tensor) -> Tensor:
        probs = torch.softmax(self.att_pool_layer(x), dim=1)
        return (probs * torch.linspace(0, 4, steps=self.att_dim, device=x.device)).sum(dim=1)


class SquimSubjective(nn.Module):
    """(speech ``(B, T)``, reference ``(B, T')``) -> estimated MOS ``(B,)``, 5 minus the gap."""

    def __init__(self, ssl_model: nn.Module, projector: nn.Module, predictor: nn.Module) -> None:
        super().__init__()
        self.ssl_model, self.projector, self.predictor = ssl_model, projector, predictor

    @staticmethod
    def _align_shapes(waveform: Tensor, reference: Tensor) -> tuple[Tensor, Tensor]:
        """Repeats a shorter reference and cuts it to the speech's length."""
        length = waveform.shape[-1]
        if reference.shape[-1] < length:
            reference = reference.repeat(1, length // reference.shape[-1] + 1)
        return waveform, reference[:, :length]

    def forward(self, waveform: Tensor, reference: Tensor) -> Tensor:
        if waveform.ndim != 2 or reference.ndim != 2 or waveform.shape[0] != reference.shape[0]:
            raise ValueError(f"waveform and reference must be (batch, time) with one batch, got "
                             f"{tuple(waveform.shape)} and {tuple(reference.shape)}")
        waveform, reference = self._align_shapes(waveform, reference)
        speech = self.projector(self.ssl_model.extract_features(waveform)[0][-1])
        ref = self.projector(self.ssl_model.extract_features(reference)[0][-1])
        return 5 - self.predictor(torch.cat((ref, speech), dim=2))


def squim_subjective_model(ssl_type: str, feat_dim: int, proj_dim: int,
                           att_dim: int) -> SquimSubjective:
    """A SquimSubjective on the ``ssl_type`` builder of ember.audio.models (e.g. wav2vec2_base)."""
    from ember.audio.models import wav2vec2

    if ssl_type not in wav2vec2.__all__ or not ssl_type.islower():
        raise ValueError(f"ssl_type must name a builder of ember.audio.models.wav2vec2, "
                         f"got {ssl_type!r}")
    return SquimSubjective(getattr(wav2vec2, ssl_type)(), nn.Linear(feat_dim, proj_dim),
                           Predictor(proj_dim * 2, att_dim))


def squim_subjective_base() -> SquimSubjective:
    """torchaudio's SQUIM_SUBJECTIVE configuration (wav2vec 2.0 base encoder, untrained)."""
    return squim_subjective_model(ssl_type="wav2vec2_base", feat_dim=768, proj_dim=32,
                                  att_dim=5)
