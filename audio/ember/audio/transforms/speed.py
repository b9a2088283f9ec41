"""Speed change and speed perturbation (resampling, so the pitch moves with the speed)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ember.audio.transforms.signal import Resample

__all__ = ["Speed", "SpeedPerturbation"]


class Speed(nn.Module):
    """Play ``[..., time]`` ``factor`` times faster; returns the waveform and scaled lengths."""

    def __init__(self, orig_freq, factor) -> None:
        super().__init__()
        self.orig_freq, self.factor = orig_freq, factor
        source, target = int(factor * orig_freq), int(orig_freq)
        if source <= 0:
            raise ValueError(f"factor * orig_freq must be at least 1, got {factor} * {orig_freq}")
        g = math.gcd(source, target)
        self.source_sample_rate, self.target_sample_rate = source // g, target // g
        self.resampler = Resample(orig_freq=self.source_sample_rate,
                                  new_freq=self.target_sample_rate)

    def forward(self, waveform, lengths: Tensor | None = None
                ) -> tuple[Tensor, Tensor | None]:
        out_lengths = None
        if lengths is not None:
            out_lengths = torch.ceil(lengths * self.target_sample_rate
                                     / self.source_sample_rate).to(lengths.dtype)
        return self.resampler(waveform), out_lengths


class SpeedPerturbation(nn.Module):
    """Speed change by a factor drawn uniformly from ``factors`` on each call."""

    def __init__(self, orig_freq: int, factors: Sequence[float]) -> None:
        super().__init__()
        if len(factors) == 0:
            raise ValueError("factors must not be empty")
        self.speeders = nn.ModuleList([Speed(orig_freq=orig_freq, factor=f) for f in factors])

    def forward(self, waveform: Tensor, lengths: Tensor | None = None
                ) -> tuple[Tensor, Tensor | None]:
        if torch.compiler.is_exporting():
            raise RuntimeError("SpeedPerturbation cannot be exported with torch.export: the "
                               "factor is drawn per call and the output length follows it; "
                               "export Speed with a fixed factor, or run it eagerly or under "
                               "ember.core.compile")
        pick = int(torch.randint(len(self.speeders), ()))
        return self.speeders[pick](waveform, lengths)
