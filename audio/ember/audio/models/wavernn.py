"""WaveRNN vocoder (Kalchbrenner et al., 2018; fatchord's variant) with autoregressive ``infer``."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["MelResNet", "ResBlock", "Stretch2d", "UpsampleNetwork", "WaveRNN"]


class ResBlock(nn.Module):
    """Two 1x1 conv + batch-norm layers with a skip connection."""

    def __init__(self, n_freq: int = 128) -> None:
        super().__init__()
        self.resblock_model = nn.Sequential(
            nn.Conv1d(n_freq, n_freq, kernel_size=1, bias=False), nn.BatchNorm1d(n_freq),
            nn.ReLU(inplace=True),
            nn.Conv1d(n_freq, n_freq, kernel_size=1, bias=False), nn.BatchNorm1d(n_freq),
        )

    def forward(self, specgram: Tensor) -> Tensor:
        return self.resblock_model(specgram) + specgram


class MelResNet(nn.Module):
    """Conv front-end, ``n_res_block`` ResBlocks and a 1x1 output conv over a spectrogram."""

    def __init__(self, n_res_block: int = 10, n_freq: int = 128, n_hidden: int = 128,
                 n_output: int = 128, kernel_size: int = 5) -> None:
        super().__init__()
        self.melresnet_model = nn.Sequential(
            nn.Conv1d(n_freq, n_hidden, kernel_size=kernel_size, bias=False),
            nn.BatchNorm1d(n_hidden), nn.ReLU(inplace=True),
            *[ResBlock(n_hidden) for _ in range(n_res_block)],
            nn.Conv1d(n_hidden, n_output, kernel_size=1),
        )

    def forward(self, specgram: Tensor) -> Tensor:
        return self.melresnet_model(specgram)


class Stretch2d(nn.Module):
    """Repeat each frequency ``freq_scale`` and each frame ``time_scale`` times."""

    def __init__(self, time_scale: int, freq_scale: int) -> None:
        super().__init__()
        self.freq_scale, self.time_scale = freq_scale, time_scale

    def forward(self, specgram: Tensor) -> Tensor:
        return specgram.repeat_interleave(self.freq_scale, -2).repeat_interleave(
            self.time_scale, -1)


class UpsampleNetwork(nn.Module):
    """Upsample a spectrogram to sample rate: stretch + smoothing conv per scale, and MelResNet."""

    def __init__(self, upsample_scales: list[int], n_res_block: int = 10, n_freq: int = 128,
                 n_hidden: int = 128, n_output: int = 128, kernel_size: int = 5) -> None:
        super().__init__()
        self.total_scale = math.prod(upsample_scales)
        self.indent = (kernel_size - 1) // 2 * self.total_scale
        self.resnet = MelResNet(n_res_block, n_freq, n_hidden, n_output, kernel_size)
        self.resnet_stretch = Stretch2d(self.total_scale, 1)
        layers: list[nn.Module] = []
        for scale in upsample_scales:
            conv = nn.Conv2d(1, 1, kernel_size=(1, 2 * scale + 1), padding=(0, scale), bias=False)
            nn.init.constant_(conv.weight, 1.0 / (2 * scale + 1))  # moving average at init
            layers += [Stretch2d(scale, 1), conv]
        self.upsample_layers = nn.Sequential(*layers)

    def forward(self, specgram: Tensor) -> tuple[Tensor, Tensor]:
        aux = self.resnet_stretch(self.resnet(specgram).unsqueeze(1)).squeeze(1)
        up = self.upsample_layers(specgram.unsqueeze(1)).squeeze(1)
        return up[:, :, self.indent: -self.indent], aux


class WaveRNN(nn.Module):
    """Waveform ``(n, 1, T * hop)`` + spectrogram ``(n, 1, n_freq, T + kernel_size - 1)`` ->
    class logits ``(n, 1, T * hop, n_classes)``; ``infer`` samples audio autoregressively."""

    def __init__(self, upsample_scales: list[int], n_classes: int, hop_length: int,
                 n_res_block: int = 10, n_rnn: int = 512, n_fc: int = 512, kernel_size: int = 5,
                 n_freq: int = 128, n_hidden: int = 128, n_output: int = 128) -> None:
        super().__init__()
        if math.prod(upsample_scales) != hop_length:
            raise ValueError(f"the product of upsample_scales ({math.prod(upsample_scales)}) "
                             f"must equal hop_length ({hop_length})")
        self.kernel_size = kernel_size
        self._pad = (kernel_size - 1 if kernel_size % 2 else kernel_size) // 2
        self.n_rnn, self.n_aux = n_rnn, n_output // 4
        self.hop_length, self.n_classes = hop_length, n_classes
        self.n_bits = int(math.log2(n_classes))
        self.upsample = UpsampleNetwork(upsample_scales, n_res_block, n_freq, n_hidden, n_output,
                                        kernel_size)
        self.fc = nn.Linear(n_freq + self.n_aux + 1, n_rnn)
        self.rnn1 = nn.GRU(n_rnn, n_rnn, batch_first=True)
        self.rnn2 = nn.GRU(n_rnn + self.n_aux, n_rnn, batch_first=True)
        self.relu1, self.relu2 = nn.ReLU(inplace=True), nn.ReLU(inplace=True)
        self.fc1 = nn.Linear(n_rnn + self.n_aux, n_fc)
        self.fc2 = nn.Linear(n_fc + self.n_aux, n_fc)
        self.fc3 = nn.Linear(n_fc, n_classes)

    def _aux_split(self, aux: Tensor, dim: int) -> list[Tensor]:
        return [aux.narrow(dim, self.n_aux * i, self.n_aux) for i in range(4)]

    def forward(self, waveform: Tensor, specgram: Tensor) -> Tensor:
        if waveform.ndim != 3 or waveform.shape[1] != 1:
            raise ValueError(f"waveform must be (n_batch, 1, time), got {tuple(waveform.shape)}")
        if specgram.ndim != 4 or specgram.shape[1] != 1:
            raise ValueError(f"specgram must be (n_batch, 1, n_freq, n_time), "
                             f"got {tuple(specgram.shape)}")
        waveform, specgram = waveform.squeeze(1), specgram.squeeze(1)
        h = waveform.new_zeros(1, waveform.shape[0], self.n_rnn)
        specgram, aux = self.upsample(specgram)
        specgram, aux = specgram.transpose(1, 2), aux.transpose(1, 2)
        a1, a2, a3, a4 = self._aux_split(aux, 2)
        x = self.fc(torch.cat([waveform.unsqueeze(-1), specgram, a1], dim=-1))
        x = self.rnn1(x, h)[0] + x
        x = self.rnn2(torch.cat([x, a2], dim=-1), h)[0] + x
        x = self.relu1(self.fc1(torch.cat([x, a3], dim=-1)))
        x = self.relu2(self.fc2(torch.cat([x, a4], dim=-1)))
        return self.fc3(x).unsqueeze(1)

    @torch.no_grad()
    def infer(self, specgram: Tensor, lengths: Tensor | None = None
              ) -> tuple[Tensor, Tensor | None]:
        """Sample a waveform ``(n_batch, 1, time)`` from ``(n_batch, n_freq, n_time)``.

        Multinomial sampling over the ``n_classes`` levels, one sample per step; returns the
        valid output lengths when ``lengths`` (frames) is given.
        """
        if specgram.ndim != 3:
            raise ValueError(f"specgram must be (n_batch, n_freq, n_time), "
                             f"got {tuple(specgram.shape)}")
        specgram = F.pad(specgram, (self._pad, self._pad))
        specgram, aux = self.upsample(specgram)
        if lengths is not None:
            lengths = lengths * self.upsample.total_scale
        batch, _, steps = specgram.shape
        h1 = specgram.new_zeros(1, batch, self.n_rnn)
        h2 = specgram.new_zeros(1, batch, self.n_rnn)
        x = specgram.new_zeros(batch, 1)
        aux_parts = self._aux_split(aux, 1)
        out = []
        for i in range(steps):
            a1, a2, a3, a4 = (a[:, :, i] for a in aux_parts)
            x = self.fc(torch.cat([x, specgram[:, :, i], a1], dim=1))
            _, h1 = self.rnn1(x.unsqueeze(1), h1)
            x = x + h1[0]
            _, h2 = self.rnn2(torch.cat([x, a2], dim=1).unsqueeze(1), h2)
            x = x + h2[0]
            x = F.relu(self.fc1(torch.cat([x, a3], dim=1)))
            x = F.relu(self.fc2(torch.cat([x, a4], dim=1)))
            probs = F.softmax(self.fc3(x), dim=1)
            x = torch.multinomial(probs, 1).to(specgram.dtype)
            x = 2 * x / (2**self.n_bits - 1.0) - 1.0  # class index -> [-1, 1]
            out.append(x)
        return torch.stack(out).permute(1, 2, 0), lengths
