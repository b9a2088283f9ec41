"""`ember bench attention-gpu`: Ember's Triton FlashAttention-2 vs torch's flash backend on CUDA.

Throughput in TFLOP/s (the matrix products only: 4 N H L S D forward, 2.5 times that backward,
halved when causal), forward and forward+backward, float16 and bfloat16, head dim 64 and 128.
Timed with CUDA events around repeated calls after a warm-up; each candidate's output is
checked against the other's before it is timed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ember.tools.bench.harness import BenchResult

BATCH, HEADS = 4, 16


def _flops(length: int, head_dim: int, causal: bool, backward: bool) -> float:
    fwd = 4.0 * BATCH * HEADS * length * length * head_dim * (0.5 if causal else 1.0)
    return fwd * (3.5 if backward else 1.0)


def _candidates():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from ember.core.nn import scaled_dot_product_attention

    def torch_flash(q, k, v, causal):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def ember(q, k, v, causal):
        return scaled_dot_product_attention(q, k, v, is_causal=causal)

    return {"ember": ember, "torch_flash": torch_flash}


def _time_ms(fn, repeats: int) -> float:
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(3):
        start.record()
        for _ in range(repeats):
            fn()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) / repeats)
    return sorted(samples)[1]


def _rows(length: int, head_dim: int, dtype: torch.dtype, causal: bool, repeats: int):
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(BATCH, HEADS, length, head_dim, device="cuda", dtype=dtype,
                           generator=g).requires_grad_() for _ in range(3))
    grad = torch.randn_like(q)
    cands = _candidates()
    outs = {name: fn(q, k, v, causal) for name, fn in cands.items()}
    diff = (outs["ember"].float() - outs["torch_flash"].float()).abs().max().item()
    rows = []
    for backward in (False, True):
        times = {}
        for name, fn in cands.items():
            def call(fn=fn, backward=backward):
                out = fn(q, k, v, causal)
                if backward:
                    q.grad = k.grad = v.grad = None
                    out.backward(grad)
            times[name] = _time_ms(call, repeats)
        flops = _flops(length, head_dim, causal, backward)
        for name, ms in times.items():
            rows.append([str(dtype).replace("torch.", ""), head_dim, causal, length,
                         "fwd+bwd" if backward else "fwd", name, ms, flops / ms / 1e9,
                         times["torch_flash"] / ms, diff])
    return rows


def run(quick: bool = False) -> BenchResult:
    """Causal and not, fp16/bf16, head dim 64/128, L = S in {1024, 4096} (quick: 512)."""
    result = BenchResult(
        name="attention-gpu",
        title=f"scaled_dot_product_attention on CUDA, batch {BATCH}, {HEADS} heads, L = S",
        columns=["dtype", "head dim", "causal", "L=S", "pass", "candidate", "ms", "TFLOP/s",
                 "speed vs torch flash", "max |ember - torch| fwd"])
    if not torch.cuda.is_available():
        result.notes.append("no CUDA device in this run: no rows.")
        return result
    lengths = (512,) if quick else (1024, 4096)
    for dtype in (torch.float16, torch.bfloat16):
        for head_dim in (64, 128):
            for causal in (False, True):
                for length in lengths:
                    result.rows += _rows(length, head_dim, dtype, causal, 3 if quick else 20)
    result.notes += [
        f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}.",
        "ember = ember.core.nn.scaled_dot_product_attention (Triton FlashAttention-2 kernels); "
        "torch_flash = F.scaled_dot_product_attention under SDPBackend.FLASH_ATTENTION.",
        "TFLOP/s counts the matrix products: 4 N H L S D forward, x3.5 forward+backward, "
        "halved when causal; ms = median of 3 CUDA-event timings of repeated calls.",
    ]
    return result
