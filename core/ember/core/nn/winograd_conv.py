"""``ember::winograd_conv2d``: a float32 3x3, stride-1 2-d convolution by Winograd's
F(2x2, 3x3) algorithm, for frozen CPU graphs (``compiler.prepack`` routes convolutions here).

Each 2x2 block of outputs (a tile) takes 16 multiplications per channel pair where the direct
convolution takes 36; the 16 channel reductions are one grouped 1x1 convolution run by
oneDNN on a weight packed once. ``winograd_conv.cpp`` (built through ``runtime.build``)
moves the tiles in and out of that form, a chunk of tiles at a time so they stay in cache.
The rounding error is that of the direct convolution (F(2x2, 3x3)'s transforms only add,
subtract and halve; the larger F(4x4, 3x3) was ten times less accurate in float32, so it is
not used). A NaN or inf input spreads over its whole tile, where the direct convolution
keeps it to the outputs that read it (inf may also become NaN there).

Where the native kernels do not build, the op runs the same algorithm in torch ops.
"""

from __future__ import annotations

import ctypes
import functools
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ember.core import kernels
from ember.core.logs import get_logger

__all__ = ["available", "chunk_tiles", "pack", "suits", "tiles", "transform_weight",
           "winograd_conv2d"]

_log = get_logger("kernels")

POINTS = 16  # 4 x 4 transformed points per tile
TILE = 2     # outputs per tile side

# F(2x2, 3x3): input transform B^T, filter transform G, output transform A^T
_BT = ((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1))
_G = ((1, 0, 0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0, 0, 1))
_AT = ((1, 1, 1, 0), (0, 1, -1, -1))

winograd_conv2d = kernels.define(
    "ember::winograd_conv2d",
    "(Tensor input, Tensor packed, Tensor transformed, Tensor? bias, int[2] padding, "
    "str unary) -> Tensor")

_P, _I = ctypes.c_void_p, ctypes.c_int64
_SIGNATURES = {
    "ember_winograd_input_f32": [_P, _P] + [_I] * 12,
    "ember_winograd_output_f32": [_P, _P, _P] + [_I] * 11,
}


@functools.lru_cache(maxsize=1)
def _library() -> ctypes.CDLL | None:
    from ember.core.compiler.runtime import build

    return build.load_kernels(__package__, "winograd_conv.cpp", _SIGNATURES,
                              "native Winograd convolution", _log)


def available() -> bool:
    """The native transforms build here and oneDNN's packed convolution is in this torch."""
    return _library() is not None and torch.backends.mkldnn.is_available() and \
        hasattr(torch.ops.mkldnn, "_convolution_pointwise") and \
        hasattr(torch.ops.mkldnn, "_reorder_convolution_weight")


def chunk_tiles(in_channels: int, out_channels: int, tiles: int) -> int:
    """Tiles per chunk of a call with ``tiles`` tiles in all: the transformed input and
    products of a chunk take about 2 MiB (at least 64 tiles), and the chunks are of equal
    size (the last one is padded with zero tiles)."""
    per_tile = POINTS * (in_channels + out_channels) * 4
    target = max(64, min(512, (2 << 20) // per_tile))
    chunks = -(-tiles // target)
    return -(-tiles // chunks)


def tiles(input_shape, padding) -> int:
    """Tiles of a convolution of an input of ``input_shape`` (NCHW) with ``padding``."""
    n, _, h, w = input_shape
    return n * -(-(h + 2 * padding[0] - 2) // TILE) * -(-(w + 2 * padding[1] - 2) // TILE)


def suits(in_channels: int, out_channels: int, n_tiles: int) -> bool:
    """Whether this algorithm beats oneDNN's direct convolution at these sizes: its matrix
    products need enough channels and tiles. Measured on 3x3 convolutions at 1 and 2
    threads: 1.1-1.9x faster for ResNet-50's and its FPN's (64-512 channels, 50-3200
    tiles), 0.3-0.95x with 16-32 channels or under about 10,000 tile-channels."""
    small = min(in_channels, out_channels)
    return small >= 64 and n_tiles >= 32 and n_tiles * small >= 10_000


def transform_weight(weight: Tensor) -> Tensor:
    """G g G^T of each (out, in) filter of a [K, C, 3, 3] weight, as the [16 K, C, 1, 1]
    weight of the grouped 1x1 convolution (group p holds point p), in float32."""
    g = torch.tensor(_G, dtype=torch.float64)
    u = torch.einsum("ai,kcij,bj->abkc", g, weight.detach().double(), g)
    k, c = weight.shape[:2]
    return u.reshape(POINTS * k, c, 1, 1).to(torch.float32).contiguous()


def pack(transformed: Tensor, input_shape, padding) -> Tensor:
    """oneDNN's packed form of ``transformed`` for the chunked grouped convolution of an
    input of ``input_shape`` (another shape still runs, with a reorder per call)."""
    c = transformed.shape[1]
    k = transformed.shape[0] // POINTS
    shape = [1, POINTS * c, chunk_tiles(c, k, tiles(input_shape, padding)), 1]
    return torch.ops.mkldnn._reorder_convolution_weight(
        transformed, [0, 0], [1, 1], [1, 1], POINTS, shape)


class _Geometry(NamedTuple):
    n: int
    c: int
    h: int
    w: int
    k: int
    out_h: int
    out_w: int
    tiles_y: int
    tiles_x: int


def _geometry(input: Tensor, transformed: Tensor, padding) -> _Geometry:
    n, c, h, w = input.shape
    out_h, out_w = h + 2 * padding[0] - 2, w + 2 * padding[1] - 2
    return _Geometry(n, c, h, w, transformed.shape[0] // POINTS, out_h, out_w,
                     -(-out_h // TILE), -(-out_w // TILE))


@winograd_conv2d.register_fake
def _(input, packed, transformed, bias, padding, unary):
    g = _geometry(input, transformed, padding)
    return input.new_empty((g.n, g.k, g.out_h, g.out_w),
                           memory_format=torch.channels_last)


def _finish(y: Tensor, bias: Tensor | None, unary: str) -> Tensor:
    if bias is not None:
        y = y + bias.view(1, -1, 1, 1)
    if unary == "relu":
        y = torch.relu(y)
    return y.contiguous(memory_format=torch.channels_last)


def _torch_ops(input: Tensor, transformed: Tensor, bias: Tensor | None, padding,
               unary: str) -> Tensor:
    """The same algorithm in torch ops (float32 throughout, as the native path)."""
    g = _geometry(input, transformed, padding)
    bt = torch.tensor(_BT, dtype=input.dtype)
    at = torch.tensor(_AT, dtype=input.dtype)
    ph, pw = padding
    x = F.pad(input, (pw, TILE * g.tiles_x + 2 - g.w - pw, ph, TILE * g.tiles_y + 2 - g.h - ph))
    d = x.unfold(2, 4, TILE).unfold(3, 4, TILE)  # n, c, ty, tx, 4, 4
    v = torch.einsum("ai,nctxij,bj->abntxc", bt, d, bt).reshape(POINTS, -1, g.c)
    u = transformed.reshape(POINTS, g.k, g.c).transpose(1, 2)
    m = torch.bmm(v, u).reshape(4, 4, g.n, g.tiles_y, g.tiles_x, g.k)
    y = torch.einsum("ia,abntxk,jb->nktixj", at, m, at)
    y = y.reshape(g.n, g.k, TILE * g.tiles_y, TILE * g.tiles_x)[:, :, :g.out_h, :g.out_w]
    return _finish(y, bias, unary)


@winograd_conv2d.register_kernel("portable")
def _(input, packed, transformed, bias, padding, unary):
    return _torch_ops(input, transformed, bias, padding, unary)


def _native(input: Tensor, packed: Tensor, transformed: Tensor, bias: Tensor | None,
            padding, unary: str) -> Tensor:
    lib = _library()
    g = _geometry(input, transformed, padding)
    if lib is None or packed.layout != torch._mkldnn or input.dtype != torch.float32 or \
            transformed.dtype != torch.float32 or (
                bias is not None and bias.dtype != torch.float32) or g.out_h < 1 or \
            g.out_w < 1 or min(padding) < 0:
        return _torch_ops(input, transformed, bias, padding, unary)
    x = input.contiguous(memory_format=torch.channels_last)
    b = bias.contiguous() if bias is not None else None
    y = torch.empty((g.n, g.k, g.out_h, g.out_w), dtype=torch.float32,
                    memory_format=torch.channels_last)
    total = g.n * g.tiles_y * g.tiles_x
    chunk = chunk_tiles(g.c, g.k, total)
    v = torch.empty((1, POINTS * g.c, chunk, 1), dtype=torch.float32,
                    memory_format=torch.channels_last)
    relu = 1 if unary == "relu" else 0
    for t0 in range(0, total, chunk):
        status = lib.ember_winograd_input_f32(
            x.data_ptr(), v.data_ptr(), g.n, g.h, g.w, g.c, padding[0], padding[1],
            g.tiles_y, g.tiles_x, t0, chunk, POINTS * g.c, g.c)
        if status:
            raise RuntimeError(f"native Winograd input transform failed (status {status})")
        m = torch.ops.mkldnn._convolution_pointwise(v, packed, None, [0, 0], [1, 1], [1, 1],
                                                    POINTS, "none", [], "")
        if not m.is_contiguous(memory_format=torch.channels_last):
            m = m.contiguous(memory_format=torch.channels_last)
        status = lib.ember_winograd_output_f32(
            m.data_ptr(), b.data_ptr() if b is not None else None, y.data_ptr(), g.n,
            g.out_h, g.out_w, g.k, g.tiles_y, g.tiles_x, t0, chunk, POINTS * g.k, g.k, relu)
        if status:
            raise RuntimeError(f"native Winograd output transform failed (status {status})")
    return y


winograd_conv2d.register_kernel("cpu")(_native)
winograd_conv2d.register_kernel("mkldnn")(_native)
