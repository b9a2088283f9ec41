"""Conv-TasNet: time-domain source separation with a dilated TCN mask generator (Luo, 2019)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["ConvTasNet"]


class ConvBlock(nn.Module):
    """1x1 conv -> PReLU -> gLN -> dilated depthwise conv -> PReLU -> gLN; residual and skip."""

    def __init__(self, io_channels: int, hidden_channels: int, kernel_size: int, padding: int,
                 dilation: int = 1, no_residual: bool = False) -> None:
        super().__init__()
        self.conv_layers = nn.Sequential(
            nn.Conv1d(io_channels, hidden_channels, kernel_size=1),
            nn.PReLU(),
            nn.GroupNorm(1, hidden_channels, eps=1e-8),
            nn.Conv1d(hidden_channels, hidden_channels, kernel_size, padding=padding,
                      dilation=dilation, groups=hidden_channels),
            nn.PReLU(),
            nn.GroupNorm(1, hidden_channels, eps=1e-8),
        )
        self.res_out = None if no_residual else nn.Conv1d(hidden_channels, io_channels, 1)
        self.skip_out = nn.Conv1d(hidden_channels, io_channels, 1)

    def forward(self, x: Tensor) -> tuple[Tensor | None, Tensor]:
        feats = self.conv_layers(x)
        residual = self.res_out(feats) if self.res_out is not None else None
        return residual, self.skip_out(feats)


class MaskGenerator(nn.Module):
    """Temporal convolutional network producing one mask per source over encoder features."""

    def __init__(self, input_dim: int, num_sources: int, kernel_size: int, num_feats: int,
                 num_hidden: int, num_layers: int, num_stacks: int,
                 msk_activate: str = "sigmoid") -> None:
        super().__init__()
        self.input_dim, self.num_sources = input_dim, num_sources
        self.input_norm = nn.GroupNorm(1, input_dim, eps=1e-8)
        self.input_conv = nn.Conv1d(input_dim, num_feats, 1)
        self.receptive_field = 0
        self.conv_layers = nn.ModuleList()
        for s in range(num_stacks):
            for layer in range(num_layers):
                dilation = 2**layer
                last = s == num_stacks - 1 and layer == num_layers - 1
                self.conv_layers.append(ConvBlock(num_feats, num_hidden, kernel_size,
                                                  padding=dilation, dilation=dilation,
                                                  no_residual=last))
                first = s == 0 and layer == 0
                self.receptive_field += kernel_size if first else (kernel_size - 1) * dilation
        self.output_prelu = nn.PReLU()
        self.output_conv = nn.Conv1d(num_feats, input_dim * num_sources, 1)
        activations = {"sigmoid": torch.sigmoid, "relu": F.relu}
        if msk_activate not in activations:
            raise ValueError(f"msk_activate must be 'sigmoid' or 'relu', got {msk_activate!r}")
        self.mask_activate = activations[msk_activate]

    def forward(self, x: Tensor) -> Tensor:
        feats = self.input_conv(self.input_norm(x))
        total = torch.zeros_like(feats)
        for block in self.conv_layers:
            residual, skip = block(feats)
            if residual is not None:
                feats = feats + residual
            total = total + skip
        out = self.mask_activate(self.output_conv(self.output_prelu(total)))
        return out.view(x.shape[0], self.num_sources, self.input_dim, -1)


class ConvTasNet(nn.Module):
    """Mixture ``(batch, 1, time)`` -> separated sources ``(batch, num_sources, time)``."""

    def __init__(self, num_sources: int = 2, enc_kernel_size: int = 16, enc_num_feats: int = 512,
                 msk_kernel_size: int = 3, msk_num_feats: int = 128,
                 msk_num_hidden_feats: int = 512, msk_num_layers: int = 8,
                 msk_num_stacks: int = 3, msk_activate: str = "sigmoid") -> None:
        super().__init__()
        self.num_sources, self.enc_num_feats = num_sources, enc_num_feats
        self.enc_kernel_size, self.enc_stride = enc_kernel_size, enc_kernel_size // 2
        self.encoder = nn.Conv1d(1, enc_num_feats, enc_kernel_size, stride=self.enc_stride,
                                 padding=self.enc_stride, bias=False)
        self.mask_generator = MaskGenerator(enc_num_feats, num_sources, msk_kernel_size,
                                            msk_num_feats, msk_num_hidden_feats, msk_num_layers,
                                            msk_num_stacks, msk_activate)
        self.decoder = nn.ConvTranspose1d(enc_num_feats, 1, enc_kernel_size,
                                          stride=self.enc_stride, padding=self.enc_stride,
                                          bias=False)

    def _pad_to_stride(self, x: Tensor) -> tuple[Tensor, int]:
        """Right-pad so the last encoder window ends on the signal end; returns the pad."""
        odd = self.enc_kernel_size % 2
        rem = (x.shape[-1] - odd) % self.enc_stride
        if rem == 0:
            return x, 0
        pad = self.enc_stride - rem
        return F.pad(x, (0, pad)), pad

    def forward(self, input: Tensor) -> Tensor:
        if input.ndim != 3 or input.shape[1] != 1:
            raise ValueError(f"input must be (batch, 1, frames), got {tuple(input.shape)}")
        padded, pad = self._pad_to_stride(input)
        batch, frames = padded.shape[0], padded.shape[-1]
        feats = self.encoder(padded)
        masked = self.mask_generator(feats) * feats.unsqueeze(1)
        decoded = self.decoder(masked.view(batch * self.num_sources, self.enc_num_feats, -1))
        out = decoded.view(batch, self.num_sources, frames)
        return out[..., : frames - pad] if pad else out
