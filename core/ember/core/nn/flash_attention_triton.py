"""FlashAttention-2 forward and backward in Triton (the CUDA kernels of ``ember::sdpa``).

Forward: one program per (query block, head); online softmax in the exp2 domain over key
blocks, saving the log-sum-exp. Backward: ``delta = rowsum(dO * O)``, then one kernel per key
block for dK/dV and one per query block for dQ, both recomputing the probability tiles from
the log-sum-exp. Causal programs stop at (or start from) the diagonal, so fully masked tiles
are never visited; tails of any length are masked loads. Dropout draws ``tl.rand(seed,
offset + (bh*L + i)*S + j)``, the same Philox stream as the CPU kernel, so the backward (and
the CPU path) replays the forward's mask. Tested on CPU under ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

from ember.core.logs import get_logger
from ember.core.nn import attention_cpu

_log = get_logger("attention")

_LOG2E = 1.4426950408889634
MAX_HEAD_DIM = 256


@triton.jit
def _dot(a, b, PRECISION: tl.constexpr, DOT_F32: tl.constexpr):
    # DOT_F32: the interpreter multiplies bfloat16 bit patterns, so it gets float32 operands.
    if DOT_F32:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    return tl.dot(a, b, input_precision=PRECISION)


@triton.jit
def _scores(q, k, offs_m, offs_n, Mask, mask_base, smm, sms, L, S, qk_scale,
            HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr, IS_CAUSAL: tl.constexpr,
            PRECISION: tl.constexpr, DOT_F32: tl.constexpr):
    """Masked scores of one tile in the log2 domain (scale * log2(e) folded in)."""
    qk = _dot(q, tl.trans(k), PRECISION, DOT_F32) * qk_scale
    valid = offs_n[None, :] < S
    if IS_CAUSAL:
        valid = valid & (offs_n[None, :] <= offs_m[:, None])
    if HAS_MASK:
        in_bounds = (offs_m[:, None] < L) & (offs_n[None, :] < S)
        ptrs = Mask + mask_base + offs_m[:, None] * smm + offs_n[None, :] * sms
        if MASK_BOOL:
            valid = valid & (tl.load(ptrs, mask=in_bounds, other=0) != 0)
        else:
            qk += tl.load(ptrs, mask=in_bounds, other=0.0).to(tl.float32) * 1.4426950408889634
    return tl.where(valid, qk, float("-inf"))


@triton.jit
def _dropout_keep(seed, rng_offset, bh, L, S, offs_m, offs_n, dropout_p):
    offsets = rng_offset + (bh.to(tl.int64) * L + offs_m[:, None].to(tl.int64)) * S \
        + offs_n[None, :].to(tl.int64)
    return tl.rand(seed, offsets) >= dropout_p


@triton.jit
def _fwd_kernel(Q, K, V, Mask, Out, Lse,
                sqn, sqh, sqm, sqd, skn, skh, sks, skd, svn, svh, svs, svd,
                smn, smh, smm, sms, son, soh, som, sod,
                H, GROUP, L, S, qk_scale, seed, rng_offset, dropout_p, drop_scale,
                D: tl.constexpr, DV: tl.constexpr, HAS_MASK: tl.constexpr,
                MASK_BOOL: tl.constexpr, IS_CAUSAL: tl.constexpr, HAS_DROPOUT: tl.constexpr,
                PRECISION: tl.constexpr, DOT_F32: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    n = bh // H
    h = bh % H
    hk = h // GROUP
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    q = tl.load(Q + n * sqn + h * sqh + offs_m[:, None] * sqm + offs_d[None, :] * sqd,
                mask=(offs_m[:, None] < L) & (offs_d[None, :] < D), other=0.0)
    mask_base = n * smn + h * smh
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)
    end = S
    if IS_CAUSAL:
        end = tl.minimum(S, (pid_m + 1) * BLOCK_M)
    for start_n in range(0, end, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k = tl.load(K + n * skn + hk * skh + offs_n[:, None] * sks + offs_d[None, :] * skd,
                    mask=(offs_n[:, None] < S) & (offs_d[None, :] < D), other=0.0)
        qk = _scores(q, k, offs_m, offs_n, Mask, mask_base, smm, sms, L, S, qk_scale,
                     HAS_MASK, MASK_BOOL, IS_CAUSAL, PRECISION, DOT_F32)
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(qk - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        if HAS_DROPOUT:
            keep = _dropout_keep(seed, rng_offset, bh, L, S, offs_m, offs_n, dropout_p)
            p = tl.where(keep, p * drop_scale, 0.0)
        v = tl.load(V + n * svn + hk * svh + offs_n[:, None] * svs + offs_dv[None, :] * svd,
                    mask=(offs_n[:, None] < S) & (offs_dv[None, :] < DV), other=0.0)
        acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, PRECISION, DOT_F32)
        m_i = m_new
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    tl.store(Out + n * son + h * soh + offs_m[:, None] * som + offs_dv[None, :] * sod,
             out.to(Out.dtype.element_ty), mask=(offs_m[:, None] < L) & (offs_dv[None, :] < DV))
    m_safe = tl.where(m_i == float("-inf"), 0.0, m_i)
    lse = (m_safe + tl.math.log2(tl.where(l_i == 0.0, 1.0, l_i))) * 0.6931471805599453
    lse = tl.where(l_i == 0.0, float("-inf"), lse)  # every key masked
    tl.store(Lse + bh * L + offs_m, lse, mask=offs_m < L)


@triton.jit
def _bwd_kv_kernel(Q, K, V, Mask, DO, Lse, Delta, DK, DV,
                   sqn, sqh, sqm, sqd, skn, skh, sks, skd, svn, svh, svs, svd,
                   smn, smh, smm, sms, son, soh, som, sod,
                   H, GROUP, L, S, scale, qk_scale, seed, rng_offset, dropout_p, drop_scale,
                   D: tl.constexpr, DV_: tl.constexpr, HAS_MASK: tl.constexpr,
                   MASK_BOOL: tl.constexpr, IS_CAUSAL: tl.constexpr, HAS_DROPOUT: tl.constexpr,
                   PRECISION: tl.constexpr, DOT_F32: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    pid_n = tl.program_id(0)
    bh = tl.program_id(1)
    n = bh // H
    h = bh % H
    hk = h // GROUP
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    k = tl.load(K + n * skn + hk * skh + offs_n[:, None] * sks + offs_d[None, :] * skd,
                mask=(offs_n[:, None] < S) & (offs_d[None, :] < D), other=0.0)
    v = tl.load(V + n * svn + hk * svh + offs_n[:, None] * svs + offs_dv[None, :] * svd,
                mask=(offs_n[:, None] < S) & (offs_dv[None, :] < DV_), other=0.0)
    mask_base = n * smn + h * smh
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_DV], tl.float32)
    start = 0
    if IS_CAUSAL:
        start = (pid_n * BLOCK_N // BLOCK_M) * BLOCK_M  # earlier query rows see none of these keys
    for start_m in range(start, L, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        rows = offs_m < L
        q = tl.load(Q + n * sqn + h * sqh + offs_m[:, None] * sqm + offs_d[None, :] * sqd,
                    mask=rows[:, None] & (offs_d[None, :] < D), other=0.0)
        do = tl.load(DO + n * son + h * soh + offs_m[:, None] * som + offs_dv[None, :] * sod,
                     mask=rows[:, None] & (offs_dv[None, :] < DV_), other=0.0)
        lse = tl.load(Lse + bh * L + offs_m, mask=rows, other=float("inf"))
        lse = tl.where(lse == float("-inf"), float("inf"), lse) * 1.4426950408889634
        delta = tl.load(Delta + bh * L + offs_m, mask=rows, other=0.0)
        qk = _scores(q, k, offs_m, offs_n, Mask, mask_base, smm, sms, L, S, qk_scale,
                     HAS_MASK, MASK_BOOL, IS_CAUSAL, PRECISION, DOT_F32)
        p = tl.math.exp2(qk - lse[:, None])
        dp = _dot(do, tl.trans(v), PRECISION, DOT_F32)
        if HAS_DROPOUT:
            keep = _dropout_keep(seed, rng_offset, bh, L, S, offs_m, offs_n, dropout_p)
            p_drop = tl.where(keep, p * drop_scale, 0.0)
            dp = tl.where(keep, dp * drop_scale, 0.0)
        else:
            p_drop = p
        dv += _dot(tl.trans(p_drop.to(do.dtype)), do, PRECISION, DOT_F32)
        ds = p * (dp - delta[:, None])
        dk += _dot(tl.trans(ds.to(q.dtype)), q, PRECISION, DOT_F32)
    # DK / DV are per query head ([N, H, S, *]); grouped heads are summed by the caller.
    out_rows = offs_n[:, None] < S
    dk_ptrs = DK + bh * S * D + offs_n[:, None] * D + offs_d[None, :]
    tl.store(dk_ptrs, (dk * scale).to(DK.dtype.element_ty), mask=out_rows & (offs_d[None, :] < D))
    dv_ptrs = DV + bh * S * DV_ + offs_n[:, None] * DV_ + offs_dv[None, :]
    tl.store(dv_ptrs, dv.to(DV.dtype.element_ty), mask=out_rows & (offs_dv[None, :] < DV_))


@triton.jit
def _bwd_q_kernel(Q, K, V, Mask, DO, Lse, Delta, DQ,
                  sqn, sqh, sqm, sqd, skn, skh, sks, skd, svn, svh, svs, svd,
                  smn, smh, smm, sms, son, soh, som, sod,
                  H, GROUP, L, S, scale, qk_scale, seed, rng_offset, dropout_p, drop_scale,
                  D: tl.constexpr, DV_: tl.constexpr, HAS_MASK: tl.constexpr,
                  MASK_BOOL: tl.constexpr, IS_CAUSAL: tl.constexpr, HAS_DROPOUT: tl.constexpr,
                  PRECISION: tl.constexpr, DOT_F32: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    n = bh // H
    h = bh % H
    hk = h // GROUP
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    rows = offs_m < L
    q = tl.load(Q + n * sqn + h * sqh + offs_m[:, None] * sqm + offs_d[None, :] * sqd,
                mask=rows[:, None] & (offs_d[None, :] < D), other=0.0)
    do = tl.load(DO + n * son + h * soh + offs_m[:, None] * som + offs_dv[None, :] * sod,
                 mask=rows[:, None] & (offs_dv[None, :] < DV_), other=0.0)
    lse = tl.load(Lse + bh * L + offs_m, mask=rows, other=float("inf"))
    lse = tl.where(lse == float("-inf"), float("inf"), lse) * 1.4426950408889634
    delta = tl.load(Delta + bh * L + offs_m, mask=rows, other=0.0)
    mask_base = n * smn + h * smh
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    end = S
    if IS_CAUSAL:
        end = tl.minimum(S, (pid_m + 1) * BLOCK_M)
    for start_n in range(0, end, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k = tl.load(K + n * skn + hk * skh + offs_n[:, None] * sks + offs_d[None, :] * skd,
                    mask=(offs_n[:, None] < S) & (offs_d[None, :] < D), other=0.0)
        v = tl.load(V + n * svn + hk * svh + offs_n[:, None] * svs + offs_dv[None, :] * svd,
                    mask=(offs_n[:, None] < S) & (offs_dv[None, :] < DV_), other=0.0)
        qk = _scores(q, k, offs_m, offs_n, Mask, mask_base, smm, sms, L, S, qk_scale,
                     HAS_MASK, MASK_BOOL, IS_CAUSAL, PRECISION, DOT_F32)
        p = tl.math.exp2(qk - lse[:, None])
        dp = _dot(do, tl.trans(v), PRECISION, DOT_F32)
        if HAS_DROPOUT:
            keep = _dropout_keep(seed, rng_offset, bh, L, S, offs_m, offs_n, dropout_p)
            dp = tl.where(keep, dp * drop_scale, 0.0)
        ds = p * (dp - delta[:, None])
        dq += _dot(ds.to(k.dtype), k, PRECISION, DOT_F32)
    dq_ptrs = DQ + bh * L * D + offs_m[:, None] * D + offs_d[None, :]
    tl.store(dq_ptrs, (dq * scale).to(DQ.dtype.element_ty),
             mask=rows[:, None] & (offs_d[None, :] < D))


def block_sizes(head_dim: int, itemsize: int = 2) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) for a head dim; tiny under the interpreter.

    The tiles' shared memory grows with the bytes of a row, so a float32 head of 64 takes the
    blocks of a 16-bit head of 128 (the float32 backward at 64 otherwise needs 258 KiB).
    """
    if triton.knobs.runtime.interpret:
        return 16, 16, 1, 1
    row = head_dim * itemsize // 2
    if row <= 64:
        return 128, 64, 4, 3
    if row <= 128:
        return 128, 32, 8, 2
    if row <= 256:
        return 64, 32, 8, 1
    return 32, 32, 4, 1


def _out_of_resources(err: Exception, what: str, q: torch.Tensor) -> None:
    """Log why a launch fell back to the tiled torch path."""
    _log.warning("flash attention %s: %s for %s head dim %d (%s); using the tiled torch path",
                 what, type(err).__name__, q.dtype, q.shape[-1], err)


def _supported(q: torch.Tensor, v: torch.Tensor) -> bool:
    return (q.dtype in (torch.float16, torch.bfloat16, torch.float32)
            and max(q.shape[-1], v.shape[-1]) <= MAX_HEAD_DIM)


class _Launch:
    """Arguments shared by the three kernels."""

    def __init__(self, q, k, v, attn_mask, dropout_p, is_causal, scale, rng):
        n, h, self.length_q, self.head_dim = q.shape
        self.heads = h
        self.group = h // k.shape[1]
        self.length_k = k.shape[2]
        self.value_dim = v.shape[-1]
        self.bh = n * h
        self.scale = scale
        if attn_mask is None:
            self.mask, self.mask_strides, mask_bool = q, (0, 0, 0, 0), False
        else:
            mask = attn_mask.expand(n, h, self.length_q, self.length_k)
            mask_bool = mask.dtype == torch.bool
            self.mask = mask.view(torch.uint8) if mask_bool else mask
            self.mask_strides = self.mask.stride()
        seed, offset = (int(x) for x in rng.tolist()) if (dropout_p > 0 and rng is not None) \
            else (0, 0)
        self.rng_args = (seed, offset, float(dropout_p),
                         0.0 if dropout_p >= 1 else 1.0 / (1.0 - dropout_p))
        self.block_m, self.block_n, self.num_warps, self.num_stages = block_sizes(
            max(self.head_dim, self.value_dim), q.element_size())
        self.meta = dict(
            HAS_MASK=attn_mask is not None, MASK_BOOL=mask_bool, IS_CAUSAL=bool(is_causal),
            HAS_DROPOUT=dropout_p > 0 and rng is not None,
            PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
            DOT_F32=bool(triton.knobs.runtime.interpret) and q.dtype == torch.bfloat16,
            BLOCK_M=self.block_m, BLOCK_N=self.block_n,
            BLOCK_D=max(16, triton.next_power_of_2(self.head_dim)),
            BLOCK_DV=max(16, triton.next_power_of_2(self.value_dim)),
            num_warps=self.num_warps, num_stages=self.num_stages)

    def strides(self, q, k, v, o):
        return (*q.stride(), *k.stride(), *v.stride(), *self.mask_strides, *o.stride())


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None,
            dropout_p: float, is_causal: bool, scale: float,
            rng: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Output ``[N, H, L, Ev]`` and float32 log-sum-exp ``[N, H, L]``."""
    if not _supported(q, v):
        _log.info("flash attention: %s / head dim %d unsupported, using the tiled torch path",
                  q.dtype, max(q.shape[-1], v.shape[-1]))
        return attention_cpu.forward(q, k, v, attn_mask, dropout_p, is_causal, scale, rng)
    a = _Launch(q, k, v, attn_mask, dropout_p, is_causal, scale, rng)
    n, h = q.shape[:2]
    out = torch.empty(n, h, a.length_q, a.value_dim, dtype=q.dtype, device=q.device)
    lse = torch.empty(n, h, a.length_q, dtype=torch.float32, device=q.device)
    grid = (triton.cdiv(a.length_q, a.block_m), a.bh)
    try:
        _fwd_kernel[grid](q, k, v, a.mask, out, lse, *a.strides(q, k, v, out),
                          h, a.group, a.length_q, a.length_k, scale * _LOG2E, *a.rng_args,
                          D=a.head_dim, DV=a.value_dim, **a.meta)
    except OutOfResources as err:
        _out_of_resources(err, "forward", q)
        return attention_cpu.forward(q, k, v, attn_mask, dropout_p, is_causal, scale, rng)
    return out, lse


def backward(grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             out: torch.Tensor, lse: torch.Tensor, attn_mask: torch.Tensor | None,
             dropout_p: float, is_causal: bool, scale: float,
             rng: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV recomputed tile by tile from the saved log-sum-exp."""
    if not _supported(q, v):
        return attention_cpu.backward(grad_out, q, k, v, out, lse, attn_mask, dropout_p,
                                      is_causal, scale, rng)
    a = _Launch(q, k, v, attn_mask, dropout_p, is_causal, scale, rng)
    n, h = q.shape[:2]
    hkv = k.shape[1]
    grad_out = grad_out.contiguous()
    delta = (grad_out.float() * out.float()).sum(-1).contiguous()
    lse = lse.float().contiguous()
    dk = torch.empty(n, h, a.length_k, a.head_dim, dtype=torch.float32, device=q.device)
    dv = torch.empty(n, h, a.length_k, a.value_dim, dtype=torch.float32, device=q.device)
    dq = torch.empty(n, h, a.length_q, a.head_dim, dtype=q.dtype, device=q.device)
    args = (*a.strides(q, k, v, grad_out), h, a.group, a.length_q, a.length_k, scale,
            scale * _LOG2E, *a.rng_args)
    try:
        _bwd_kv_kernel[(triton.cdiv(a.length_k, a.block_n), a.bh)](
            q, k, v, a.mask, grad_out, lse, delta, dk, dv, *args,
            D=a.head_dim, DV_=a.value_dim, **a.meta)
        _bwd_q_kernel[(triton.cdiv(a.length_q, a.block_m), a.bh)](
            q, k, v, a.mask, grad_out, lse, delta, dq, *args,
            D=a.head_dim, DV_=a.value_dim, **a.meta)
    except OutOfResources as err:
        _out_of_resources(err, "backward", q)
        return attention_cpu.backward(grad_out, q, k, v, out, lse, attn_mask, dropout_p,
                                      is_causal, scale, rng)
    dk = dk.view(n, hkv, h // hkv, a.length_k, a.head_dim).sum(2).to(k.dtype)
    dv = dv.view(n, hkv, h // hkv, a.length_k, a.value_dim).sum(2).to(v.dtype)
    return dq, dk, dv
