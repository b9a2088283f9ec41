"""deform_conv2d and DeformConv2d (Dai et al.; modulated when a mask is given, Zhu et al.):
torchvision's signature, offset/mask layout and bilinear sampling, in torch ops (an
im2col of bilinear samples and a grouped matmul), differentiable in every tensor argument."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn.modules.utils import _pair

__all__ = ["deform_conv2d", "DeformConv2d"]


def _columns(input: Tensor, offset: Tensor, mask: Tensor | None, kh: int, kw: int,
             stride, padding, dilation, out_hw) -> Tensor:
    """Sampled columns ``[N, C * kh * kw, oh * ow]`` (channel-major, then tap)."""
    n, c, h, w = input.shape
    oh, ow = out_hw
    taps = kh * kw
    groups = offset.shape[1] // (2 * taps)
    dev, dt = input.device, input.dtype
    off = offset.view(n, groups, taps, 2, oh, ow)
    ki = torch.arange(kh, device=dev).repeat_interleave(kw)
    kj = torch.arange(kw, device=dev).repeat(kh)
    base_y = ((torch.arange(oh, device=dev) * stride[0] - padding[0])[None, :]
              + ki[:, None] * dilation[0])
    base_x = ((torch.arange(ow, device=dev) * stride[1] - padding[1])[None, :]
              + kj[:, None] * dilation[1])
    y = base_y.to(dt)[None, None, :, :, None] + off[:, :, :, 0]      # [N, G, taps, oh, ow]
    x = base_x.to(dt)[None, None, :, None, :] + off[:, :, :, 1]
    inside = (y > -1) & (y < h) & (x > -1) & (x < w)
    y0, x0 = torch.floor(y), torch.floor(x)
    ly, lx = y - y0, x - x0
    y0, x0 = y0.long(), x0.long()
    flat = input.reshape(n, groups, c // groups, h * w)
    cols = None
    for dy, wy in ((0, 1 - ly), (1, ly)):
        for dx, wx in ((0, 1 - lx), (1, lx)):
            yc, xc = y0 + dy, x0 + dx
            ok = inside & (yc >= 0) & (yc < h) & (xc >= 0) & (xc < w)
            idx = torch.where(ok, yc * w + xc, 0).reshape(n, groups, 1, -1)
            vals = torch.gather(flat, 3, idx.expand(n, groups, c // groups, idx.shape[-1]))
            term = vals * torch.where(ok, wy * wx, 0).reshape(n, groups, 1, -1)
            cols = term if cols is None else cols + term
    if mask is not None:
        cols = cols * mask.reshape(n, groups, 1, -1)
    return cols.reshape(n, c * taps, oh * ow)


def deform_conv2d(input: Tensor, offset: Tensor, weight: Tensor, bias: Tensor | None = None,
                  stride=(1, 1), padding=(0, 0), dilation=(1, 1),
                  mask: Tensor | None = None) -> Tensor:
    """Convolution whose kernel taps sample ``input`` at positions moved by ``offset``
    ``[N, 2 * offset_groups * kh * kw, oh, ow]`` ((dy, dx) per tap), each sample scaled by
    ``mask`` ``[N, offset_groups * kh * kw, oh, ow]`` when given."""
    for name, t, dims in (("input", input, 4), ("offset", offset, 4), ("weight", weight, 4)):
        if not isinstance(t, Tensor) or t.ndim != dims:
            raise ValueError(f"{name} must be a 4-D tensor, got "
                             f"{tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__}")
    stride, padding, dilation = _pair(stride), _pair(padding), _pair(dilation)
    n, c, h, w = input.shape
    out_c, c_per_group, kh, kw = weight.shape
    taps = kh * kw
    offset_groups = offset.shape[1] // (2 * taps)
    if offset_groups == 0 or offset.shape[1] % (2 * taps):
        raise RuntimeError(f"offset.shape[1] must be a multiple of 2 * kh * kw = {2 * taps}, "
                           f"got {offset.shape[1]}")
    if c_per_group == 0 or c % c_per_group or out_c % (c // c_per_group):
        raise RuntimeError(f"weight {tuple(weight.shape)} does not fit {c} input channels")
    if c % offset_groups:
        raise RuntimeError(f"input channels ({c}) must be a multiple of the offset groups "
                           f"({offset_groups})")
    oh = (h + 2 * padding[0] - (dilation[0] * (kh - 1) + 1)) // stride[0] + 1
    ow = (w + 2 * padding[1] - (dilation[1] * (kw - 1) + 1)) // stride[1] + 1
    if oh <= 0 or ow <= 0:
        raise RuntimeError(f"the output would be empty ({oh}x{ow}) for input {h}x{w}")
    if offset.shape != (n, 2 * offset_groups * taps, oh, ow):
        raise RuntimeError(f"offset must have shape {(n, 2 * offset_groups * taps, oh, ow)}, "
                           f"got {tuple(offset.shape)}")
    if mask is not None and mask.shape != (n, offset_groups * taps, oh, ow):
        raise RuntimeError(f"mask must have shape {(n, offset_groups * taps, oh, ow)}, got "
                           f"{tuple(mask.shape)}")
    cols = _columns(input, offset, mask, kh, kw, stride, padding, dilation, (oh, ow))
    groups = c // c_per_group
    wg = weight.reshape(groups, out_c // groups, c_per_group * taps)
    out = torch.einsum("gok,ngkl->ngol", wg, cols.view(n, groups, c_per_group * taps, -1))
    out = out.reshape(n, out_c, oh, ow)
    return out if bias is None else out + bias.view(1, -1, 1, 1)


class DeformConv2d(nn.Module):
    """:func:`deform_conv2d` with its own weight and bias (Conv2d's initialisation)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True) -> None:
        super().__init__()
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _pair(kernel_size)
        self.stride, self.padding = _pair(stride), _pair(padding)
        self.dilation = _pair(dilation)
        self.groups = groups
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels // groups,
                                               *self.kernel_size))
        if bias:
            self.bias = nn.Parameter(torch.empty(out_channels))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.weight[0].numel())
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, input: Tensor, offset: Tensor, mask: Tensor | None = None) -> Tensor:
        return deform_conv2d(input, offset, self.weight, self.bias, stride=self.stride,
                             padding=self.padding, dilation=self.dilation, mask=mask)

    def __repr__(self) -> str:
        s = (f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, "
             f"kernel_size={self.kernel_size}, stride={self.stride}")
        s += f", padding={self.padding}" if self.padding != (0, 0) else ""
        s += f", dilation={self.dilation}" if self.dilation != (1, 1) else ""
        s += f", groups={self.groups}" if self.groups != 1 else ""
        s += ", bias=False" if self.bias is None else ""
        return s + ")"
