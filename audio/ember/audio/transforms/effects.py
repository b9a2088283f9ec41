"""Effect transforms: voice activity trimming (``Vad``) and pitch shifting (``PitchShift``)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.parameter import UninitializedParameter

from ember.audio.functional import effects as FE
from ember.audio.functional import resampling as FR
from ember.audio.functional.voice_activity import vad

__all__ = ["PitchShift", "Vad"]


class Vad(nn.Module):
    """Trim ``(channels, time)`` or ``(time,)`` audio up to its first voice activity (SoX's
    ``vad``; see :func:`ember.audio.functional.vad`)."""

    def __init__(self, sample_rate: int, trigger_level: float = 7.0, trigger_time: float = 0.25,
                 search_time: float = 1.0, allowed_gap: float = 0.25,
                 pre_trigger_time: float = 0.0, boot_time: float = 0.35,
                 noise_up_time: float = 0.1, noise_down_time: float = 0.01,
                 noise_reduction_amount: float = 1.35, measure_freq: float = 20.0,
                 measure_duration: float | None = None, measure_smooth_time: float = 0.4,
                 hp_filter_freq: float = 50.0, lp_filter_freq: float = 6000.0,
                 hp_lifter_freq: float = 150.0, lp_lifter_freq: float = 2000.0) -> None:
        super().__init__()
        self.sample_rate = sample_rate
        self.trigger_level, self.trigger_time = trigger_level, trigger_time
        self.search_time, self.allowed_gap = search_time, allowed_gap
        self.pre_trigger_time, self.boot_time = pre_trigger_time, boot_time
        self.noise_up_time, self.noise_down_time = noise_up_time, noise_down_time
        self.noise_reduction_amount = noise_reduction_amount
        self.measure_freq, self.measure_duration = measure_freq, measure_duration
        self.measure_smooth_time = measure_smooth_time
        self.hp_filter_freq, self.lp_filter_freq = hp_filter_freq, lp_filter_freq
        self.hp_lifter_freq, self.lp_lifter_freq = hp_lifter_freq, lp_lifter_freq

    def forward(self, waveform: Tensor) -> Tensor:
        if torch.compiler.is_exporting():
            raise RuntimeError("Vad cannot be exported with torch.export: the length it trims "
                               "to depends on the signal (a data-dependent output shape); run "
                               "it eagerly or under ember.core.compile")
        return vad(waveform, self.sample_rate, self.trigger_level, self.trigger_time,
                   self.search_time, self.allowed_gap, self.pre_trigger_time, self.boot_time,
                   self.noise_up_time, self.noise_down_time, self.noise_reduction_amount,
                   self.measure_freq, self.measure_duration, self.measure_smooth_time,
                   self.hp_filter_freq, self.lp_filter_freq, self.hp_lifter_freq,
                   self.lp_lifter_freq)


class PitchShift(LazyModuleMixin, nn.Module):
    """Shift the pitch of ``[..., time]`` by ``n_steps`` of ``1/bins_per_octave`` octave.

    As torchaudio, the resampling kernel is a lazy parameter (``kernel``) built on the first
    call, so state_dicts load both ways; ours takes that input's dtype (torchaudio's is
    always float32, so its PitchShift fails on float64 input).
    """

    kernel: UninitializedParameter
    width: int

    def __init__(self, sample_rate: int, n_steps: int, bins_per_octave: int = 12,
                 n_fft: int = 512, win_length: int | None = None, hop_length: int | None = None,
                 window_fn: Callable[..., Tensor] = torch.hann_window,
                 wkwargs: dict | None = None) -> None:
        super().__init__()
        self.n_steps, self.bins_per_octave = n_steps, bins_per_octave
        self.sample_rate, self.n_fft = sample_rate, n_fft
        self.win_length = n_fft if win_length is None else win_length
        self.hop_length = self.win_length // 4 if hop_length is None else hop_length
        self.register_buffer("window", window_fn(self.win_length, **(wkwargs or {})))
        rate = 2.0 ** (-float(n_steps) / bins_per_octave)
        self.orig_freq = int(sample_rate / rate)
        self.gcd = math.gcd(int(self.orig_freq), int(sample_rate))
        self.width = -1
        if self.orig_freq != sample_rate:
            # the kernel's half-width, known without building it (a loaded kernel needs it)
            orig, new = self.orig_freq // self.gcd, sample_rate // self.gcd
            self.width = math.ceil(6 * orig / (min(orig, new) * 0.99))
            self.kernel = UninitializedParameter(device=None, dtype=None)

    def initialize_parameters(self, input: Tensor) -> None:
        if self.has_uninitialized_params() and self.orig_freq != self.sample_rate:
            with torch.no_grad():
                kernel, self.width = FR.sinc_resample_kernel(
                    self.orig_freq, self.sample_rate, dtype=input.dtype, device=input.device)
                self.kernel.materialize(kernel.shape, device=input.device, dtype=input.dtype)
                self.kernel.copy_(kernel)

    def forward(self, waveform: Tensor) -> Tensor:
        stretched = FE.stretch_for_pitch_shift(waveform, self.n_steps, self.bins_per_octave,
                                               self.n_fft, self.win_length, self.hop_length,
                                               self.window)
        if self.orig_freq != self.sample_rate:
            stretched = FR.apply_sinc_resample_kernel(
                stretched, self.orig_freq, self.sample_rate, self.kernel.to(stretched.dtype),
                self.width, FR.polyphase_plan(self.orig_freq, self.sample_rate))
        return FE.fit_length(stretched, waveform.shape)
