"""``ember::winograd_conv2d``: a float32 3x3, stride-1 2-d convolution by Winograd's
F(2x2, 3x3) algorithm, with the bias, a residual add and a ReLU fused; the compiler routes
large enough convolutions here (``compiler.prepack`` in frozen graphs, ``lowering.externs``
otherwise).

Each 2x2 block of outputs (a tile) takes 16 multiplications per channel pair where the direct
convolution takes 36; the 16 channel reductions are one grouped 1x1 convolution run by
oneDNN on a weight packed once. ``winograd_conv.cpp`` (built through ``runtime.build``)
moves the tiles in and out of that form, a chunk of tiles at a time so they stay in cache,
and adds the bias and the residual in its output transform.
Its rounding error is of the direct convolution's order, as the transforms only add,
subtract and halve (3-6e-7 of the largest output against eager's 2.5-3.6e-7 in ``ember bench
conv``); the larger F(4x4, 3x3) measured ten times less accurate in float32 and is not
used. A NaN or inf input spreads over its whole tile, where the direct convolution keeps it
to the outputs that read it (inf may also become NaN there).

Frozen graphs pass the filter's transform packed once; otherwise each call transforms and
packs it (2-3% of the time of a 256-channel convolution at 80 x 80). Where the native
kernels do not build, or for other dtypes, the op is ATen's direct convolution.
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

__all__ = ["applies", "available", "chunk_tiles", "pack", "suits", "tiles", "transform_weight",
           "winograd_conv2d"]

_log = get_logger("kernels")

POINTS = 16  # 4 x 4 transformed points per tile
TILE = 2     # outputs per tile side

winograd_conv2d = kernels.define(
    "ember::winograd_conv2d",
    "(Tensor input, Tensor weight, Tensor? packed, Tensor? bias, Tensor? other, int[2] padding, "
    "str unary, bool channels_last) -> Tensor")

_P, _I = ctypes.c_void_p, ctypes.c_int64
_SIGNATURES = {
    "ember_winograd_weight_f32": [_P, _P, _I, _I],
    "ember_winograd_input_f32": [_P, _P] + [_I] * 12,
    "ember_winograd_output_f32": [_P, _P, _P, _P] + [_I] * 11,
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


def suits(in_channels: int, out_channels: int, n_tiles: int, packed_once: bool = True,
          channels_last: bool = True) -> bool:
    """Whether this algorithm beats oneDNN's direct convolution at these sizes: its matrix
    products need enough channels and tiles. ``ember bench conv`` (1 and 2 threads): with
    the filter packed once, 1.1-1.7x faster on ResNet-50's, VGG-16's and the FPN's shapes
    (64-512 channels, 49-12544 tiles), 0.9-1.1x on 16 tiles, 0.9-1.0x with 32 channels.
    Packed per call from NCHW (the input and output copied), 1.0-1.5x eager from 128
    channels and 128 tiles, 0.2-1.04x below; 64 channels pay off only channels-last from
    512 tiles (1.3x, measured apart)."""
    small = min(in_channels, out_channels)
    if packed_once:
        return small >= 64 and n_tiles >= 32 and n_tiles * small >= 10_000
    if small >= 128:
        return n_tiles >= 128
    return small >= 64 and channels_last and n_tiles >= 512


def applies(weight_shape, input_shape, stride, padding, dilation, groups, *,
            packed_once: bool, channels_last: bool = True) -> bool:
    """The routing decision both compiler routes (frozen packing, the lowering) ask: a 3x3,
    stride-1, undilated, ungrouped convolution at sizes that ``suits``, with the native
    kernels available here."""
    k, c, *kernel = weight_shape
    return list(kernel) == [3, 3] and groups == 1 and list(stride) == [1, 1] and \
        list(dilation) == [1, 1] and min(padding) >= 0 and \
        suits(c, k, tiles(input_shape, padding), packed_once, channels_last) and available()


def transform_weight(weight: Tensor) -> Tensor:
    """G g G^T of each (out, in) filter of a float32 [K, C, 3, 3] weight, as the
    [16 K, C, 1, 1] weight of the grouped 1x1 convolution (group p holds point p)."""
    k, c = weight.shape[:2]
    w = weight.detach().contiguous()
    u = torch.empty((POINTS * k, c, 1, 1), dtype=torch.float32)
    status = _library().ember_winograd_weight_f32(w.data_ptr(), u.data_ptr(), k, c)
    if status:
        raise RuntimeError(f"native Winograd filter transform failed (status {status})")
    return u


def pack(weight: Tensor, input_shape, padding) -> Tensor:
    """oneDNN's packed form of the transformed [K, C, 3, 3] ``weight`` for the chunked
    grouped convolution of an input of ``input_shape`` (another shape still runs, with a
    reorder per call)."""
    k, c = weight.shape[:2]
    shape = [1, POINTS * c, chunk_tiles(c, k, tiles(input_shape, padding)), 1]
    return torch.ops.mkldnn._reorder_convolution_weight(
        transform_weight(weight), [0, 0], [1, 1], [1, 1], POINTS, shape)


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


def _geometry(input: Tensor, weight: Tensor, padding) -> _Geometry:
    n, c, h, w = input.shape
    out_h, out_w = h + 2 * padding[0] - 2, w + 2 * padding[1] - 2
    return _Geometry(n, c, h, w, weight.shape[0], out_h, out_w, -(-out_h // TILE),
                     -(-out_w // TILE))


def _format(channels_last: bool) -> torch.memory_format:
    return torch.channels_last if channels_last else torch.contiguous_format


@winograd_conv2d.register_fake
def _(input, weight, packed, bias, other, padding, unary, channels_last):
    g = _geometry(input, weight, padding)
    return input.new_empty((g.n, g.k, g.out_h, g.out_w), memory_format=_format(channels_last))


def _direct(input: Tensor, weight: Tensor, bias: Tensor | None, other: Tensor | None,
            padding, unary: str, channels_last: bool) -> Tensor:
    """ATen's direct convolution, for what the native path does not take."""
    y = F.conv2d(input, weight, bias, padding=list(padding))
    if other is not None:
        y = y + other
    if unary == "relu":
        y = torch.relu(y)
    return y.contiguous(memory_format=_format(channels_last))


@winograd_conv2d.register_kernel("portable")
def _(input, weight, packed, bias, other, padding, unary, channels_last):
    return _direct(input, weight, bias, other, padding, unary, channels_last)


def _native(input: Tensor, weight: Tensor, packed: Tensor | None, bias: Tensor | None,
            other: Tensor | None, padding, unary: str, channels_last: bool) -> Tensor:
    lib = _library()
    g = _geometry(input, weight, padding)
    if lib is None or input.dtype != torch.float32 or weight.dtype != torch.float32 or \
            tuple(weight.shape[1:]) != (g.c, 3, 3) or (
                bias is not None and bias.dtype != torch.float32) or g.out_h < 1 or \
            g.out_w < 1 or min(padding) < 0 or g.n == 0 or \
            (packed is not None and packed.layout != torch._mkldnn) or (
                other is not None and (other.dtype != torch.float32 or
                                       other.shape != (g.n, g.k, g.out_h, g.out_w))):
        return _direct(input, weight, bias, other, padding, unary, channels_last)
    if packed is None:
        packed = pack(weight, input.shape, padding)
    x = input.contiguous(memory_format=torch.channels_last)
    b = bias.contiguous() if bias is not None else None
    o = other.contiguous(memory_format=torch.channels_last) if other is not None else None
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
        m = m.contiguous(memory_format=torch.channels_last)
        status = lib.ember_winograd_output_f32(
            m.data_ptr(), b.data_ptr() if b is not None else None,
            o.data_ptr() if o is not None else None, y.data_ptr(), g.n,
            g.out_h, g.out_w, g.k, g.tiles_y, g.tiles_x, t0, chunk, POINTS * g.k, g.k, relu)
        if status:
            raise RuntimeError(f"native Winograd output transform failed (status {status})")
    return y if channels_last else y.contiguous()


winograd_conv2d.register_kernel("cpu")(_native)
winograd_conv2d.register_kernel("mkldnn")(_native)
