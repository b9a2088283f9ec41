"""lfilter (a biquad and a 6th-order resonator) and kaldi fbank: ember vs scipy and torchaudio.

Accuracy of every lfilter candidate is measured against scipy.signal.lfilter in float64 on
the same input; torchaudio runs in `.venv-peers-audio` through audio_peers.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ember.audio.compliance import kaldi
from ember.audio.functional import lfilter
from ember.tools.bench.audio_peers import torchaudio_runs
from ember.tools.bench.harness import compare_timings

SR = 16000
FBANK = dict(num_mel_bins=80, dither=0.0)


def biquad_coefficients(cutoff: float = 1000.0, q: float = 0.707) -> tuple[list, list]:
    """(b, a) of a lowpass biquad (torchaudio's lowpass_biquad formula)."""
    w0 = 2 * math.pi * cutoff / SR
    alpha, cos = math.sin(w0) / 2 / q, math.cos(w0)
    b = [(1 - cos) / 2, 1 - cos, (1 - cos) / 2]
    a = [1 + alpha, -2 * cos, 1 - alpha]
    return b, a


def resonator_coefficients() -> tuple[list, list]:
    """(b, a) of the 6th-order filter with poles 0.95 e^{±0.1i, ±0.15i, ±0.2i}, zeros at -1,
    unit gain at DC."""
    poles = [0.95 * np.exp(s * 1j * w) for w in (0.1, 0.15, 0.2) for s in (1, -1)]
    a = np.poly(poles).real
    b = np.poly([-1.0] * 6).real
    b *= a.sum() / b.sum()
    return b.tolist(), a.tolist()


def _error(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(got.astype(np.float64) - ref).max() / np.abs(ref).max())


def _lfilter_candidates(x32: torch.Tensor, b: list, a: list) -> dict:
    """ember and scipy lfilter calls, float32 and float64, coefficients in the data's dtype."""
    import scipy.signal

    x64, c32, c64 = x32.double().numpy(), x32.numpy(), {}
    for name, v in (("a", a), ("b", b)):
        c64[name] = torch.tensor(v, dtype=torch.float64)
    t64, b32, a32 = torch.from_numpy(x64), np.float32(b), np.float32(a)
    return {
        "ember float32": lambda: lfilter(x32, c64["a"].float(), c64["b"].float(), clamp=False),
        "ember float64": lambda: lfilter(t64, c64["a"], c64["b"], clamp=False),
        # scipy stays in float32 only when the coefficients are float32 too
        "scipy float32": lambda: scipy.signal.lfilter(b32, a32, c32, axis=-1),
        "scipy float64": lambda: scipy.signal.lfilter(b, a, x64, axis=-1),
    }


def lfilter_rows(clips: np.ndarray, rounds: int, settle: float) -> tuple[list[list], list[str]]:
    """Rows for both filters: ember and scipy here (round-robin), torchaudio in its venv."""
    try:
        import scipy.signal
    except ImportError:
        return [], ["lfilter not measured: scipy (the float64 reference) is not installed here"]

    x32 = torch.from_numpy(clips)
    threads = torch.get_num_threads()
    filters = {"biquad": biquad_coefficients(), "6th-order": resonator_coefficients()}
    peer = torchaudio_runs(
        [{"name": f"{f}_{d}", "kind": "lfilter", "b": ba[0], "a": ba[1], "rounds": rounds}
         for f, ba in filters.items() for d in ("float32", "float64")],
        {f"{f}_{d}": clips.astype(d) for f in filters for d in ("float32", "float64")},
        threads)
    rows, notes = [], []
    task_shape = f"{clips.shape[0]} ch x {clips.shape[1] / SR:g} s @ 16 kHz"
    for fname, (b, a) in filters.items():
        ref = scipy.signal.lfilter(b, a, clips.astype(np.float64), axis=-1)
        cands = _lfilter_candidates(x32, b, a)
        t = compare_timings(cands, rounds=rounds, min_seconds=0.0, settle=settle)
        err = {k: _error(np.asarray(fn()), ref) for k, fn in cands.items()}
        if isinstance(peer, str):
            base, base_name = t["scipy float32"], "scipy float32"
        else:
            times, outputs = peer
            for d in ("float32", "float64"):
                t[f"torchaudio {d}"] = times[f"{fname}_{d}"]
                err[f"torchaudio {d}"] = _error(outputs[f"{fname}_{d}"], ref)
            base, base_name = t["torchaudio float32"], "torchaudio float32"
        task = f"lfilter {fname}, {task_shape}"
        names = {"ember float32": "ember.audio.functional.lfilter, float32 in (float64 "
                                  "recursion)",
                 "ember float64": "ember.audio.functional.lfilter, float64",
                 "scipy float32": "scipy.signal.lfilter, float32",
                 "scipy float64": "scipy.signal.lfilter, float64",
                 "torchaudio float32": "torchaudio.functional.lfilter, float32",
                 "torchaudio float64": "torchaudio.functional.lfilter, float64"}
        for key in [k for k in names if k in t]:
            target = f">= 1 vs {base_name}" if key == "ember float32" else "-"
            rows.append([task, f"{names[key]}; err {err[key]:.1e}", t[key] * 1e3,
                         base / t[key], target])
    notes.append("lfilter: clamp=False everywhere; err = max |y - ref| / max |ref| against "
                 "scipy.signal.lfilter in float64; speed-up = "
                 + ("torchaudio float32's time / the row's (torchaudio timed in "
                    ".venv-peers-audio, median of its own calls, same thread count)"
                    if not isinstance(peer, str) else
                    f"scipy float32's time / the row's; torchaudio not measured: {peer}"))
    if not isinstance(peer, str):
        notes.append(f"peer environment: {peer[0]['versions']}")
    return rows, notes


def fbank_rows(clips: np.ndarray, rounds: int, settle: float) -> tuple[list[list], list[str]]:
    """kaldi.fbank looped over utterances: ember here, torchaudio in its venv."""
    x = torch.from_numpy(clips)

    def ours():
        return [kaldi.fbank(c[None], **FBANK) for c in x]

    t = compare_timings({"ember": ours}, rounds=rounds, min_seconds=0.0, settle=settle)
    task = (f"kaldi fbank ({FBANK['num_mel_bins']} bins, dither 0), {clips.shape[0]} "
            f"utterances x {clips.shape[1] / SR:g} s, looped")
    peer = torchaudio_runs([{"name": "fbank", "kind": "fbank", "options": FBANK,
                             "rounds": rounds}], {"fbank": clips}, torch.get_num_threads())
    if isinstance(peer, str):
        return [], [f"fbank vs torchaudio not measured: {peer} (ember alone: "
                    f"{t['ember'] * 1e3:.3g} ms for {task})"]
    times, outputs = peer
    got = torch.stack(ours()).numpy()
    diff = float(np.abs(got - outputs["fbank"]).max())
    rows = [[task, "ember.audio.compliance.kaldi.fbank", t["ember"] * 1e3,
             times["fbank"] / t["ember"], ">= 1"],
            [task, "torchaudio.compliance.kaldi.fbank", times["fbank"] * 1e3, 1.0, "-"]]
    return rows, [f"fbank: max |ember - torchaudio| = {diff:.1e} (log mel energies)"]
