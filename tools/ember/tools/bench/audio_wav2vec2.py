"""Wav2Vec2 Base forward (random weights): eager vs torch.compile with Inductor vs with Ember,
timed round-robin in one process."""

from __future__ import annotations

import time

import torch

from ember.audio.models.wav2vec2 import wav2vec2_base, wav2vec2_model
from ember.tools.bench.harness import compare_timings


def _tiny():
    """A two-layer model for quick runs."""
    return wav2vec2_model("group_norm", [(32, 10, 5), (32, 3, 2), (32, 2, 2)], False, 48, 0.1,
                          8, 4, 2, 4, 0.1, 96, 0.1, 0.1, False, 0.1, None)


def wav2vec2_rows(batch: int, seconds: float, rounds: int, quick: bool = False,
                  backends: tuple[str, ...] = ("inductor", "ember")) -> tuple[list[list],
                                                                         list[str]]:
    """Rows: eager and each torch.compile backend; speed-up against eager; compile times and
    errors in the notes."""
    unknown = set(backends) - {"inductor", "ember"}
    if unknown:
        raise ValueError(f"backends must be among 'inductor' and 'ember', got {sorted(unknown)}")
    torch.manual_seed(0)
    model = (_tiny() if quick else wav2vec2_base()).eval()
    waves = torch.rand(batch, int(seconds * 16000)) * 1.6 - 0.8
    compiled = {name: torch.compile(model, backend=name) for name in backends}
    notes = []
    with torch.no_grad():
        want, _ = model(waves)
        cold = {}
        for name, fn in compiled.items():
            t0 = time.perf_counter()
            got, _ = fn(waves)
            cold[name] = time.perf_counter() - t0
            err = float((got - want).abs().max() / want.abs().max())
            notes.append(f"Wav2Vec2 {name}: first call (compile) {cold[name]:.1f} s, "
                         f"max |out - eager| / max |eager| = {err:.1e}")
        calls = {"eager": lambda: model(waves)}
        calls.update({name: (lambda fn=fn: fn(waves)) for name, fn in compiled.items()})
        t = compare_timings(calls, rounds=rounds, min_seconds=0.0)
    task = (f"Wav2Vec2 {'tiny (2 layers)' if quick else 'Base'} forward, random weights, "
            f"{batch} x {seconds:g} s")
    rows = [[task, "eager", t["eager"] * 1e3, 1.0, "-"]]
    for name in compiled:
        target = "-"
        if name == "ember" and "inductor" in t:
            target = f">= inductor's (here {t['inductor'] / t['ember']:.2f}x inductor's speed)"
        rows.append([task, f'torch.compile(backend="{name}")', t[name] * 1e3,
                     t["eager"] / t[name], target])
    return rows, notes
