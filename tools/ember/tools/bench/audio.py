"""`ember bench audio`: MelSpectrogram and Resample vs librosa, ``load`` vs soundfile directly.

- MelSpectrogram over a batch of 10 s clips at 16 kHz (n_fft 400, hop 160, 80 HTK mels),
  one batched call vs librosa.feature.melspectrogram looped over the clips.
- Resample 44.1 kHz -> 16 kHz of 10 s clips: one batched call vs librosa.resample on the
  same array, with its default res_type (soxr_hq) and with 'polyphase' (scipy's FIR).
- ember.audio.load vs soundfile.read on the same WAV files (decode overhead).
- lfilter (biquad, 6th-order) vs scipy and torchaudio with accuracy, kaldi fbank vs
  torchaudio (audio_filters), Wav2Vec2 Base eager vs Inductor vs Ember (audio_wav2vec2).
"""

from __future__ import annotations

import gc
import math
import os
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from ember.audio import load
from ember.audio import transforms as T
from ember.core.parallel import spare_cores
from ember.tools.bench.audio_filters import fbank_rows, lfilter_rows
from ember.tools.bench.audio_wav2vec2 import wav2vec2_rows
from ember.tools.bench.harness import BenchResult, compare_timings


def _single_thread(fn):
    """``fn`` run with one torch thread: the per-core comparison with single-threaded peers."""
    def wrapped():
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return fn()
        finally:
            torch.set_num_threads(threads)
    return wrapped

SR = 16000
# seconds of idle before each timed call: the previous candidate's BLAS/OpenMP threads stop
# spinning (librosa's numpy and soxr leave them busy; they would tax whoever runs next)
SETTLE = 0.2
MEL = dict(n_fft=400, hop_length=160, n_mels=80)


def _clips(n: int, seconds: float, sr: int, seed: int = 0) -> np.ndarray:
    """Speech-like test audio: a few harmonics with a slow vibrato plus noise, float32."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * sr)) / sr
    out = np.empty((n, t.size), np.float32)
    for i in range(n):
        f0 = rng.uniform(100, 250)
        phase = 2 * np.pi * np.cumsum(f0 * (1 + 0.05 * np.sin(2 * np.pi * 3 * t))) / sr
        y = sum(0.3 / k * np.sin(k * phase) for k in range(1, 6))
        out[i] = y + 0.01 * rng.standard_normal(t.size)
    return out


def _mel_rows(librosa, n: int, seconds: float, rounds: int,
              settle: float) -> tuple[list[list], str]:
    clips = _clips(n, seconds, SR)
    batch = torch.from_numpy(clips)
    ours = T.MelSpectrogram(sample_rate=SR, **MEL)

    def peer():
        return [librosa.feature.melspectrogram(y=c, sr=SR, htk=True, norm=None,
                                               pad_mode="reflect", **MEL) for c in clips]

    ref = np.stack(peer())
    got = ours(batch).numpy()
    err = float(np.abs(got - ref).max() / np.abs(ref).max())
    t = compare_timings({"ember": lambda: ours(batch),
                         "ember1": _single_thread(lambda: ours(batch)), "librosa": peer},
                        rounds=rounds, min_seconds=0.0, settle=settle)
    task = f"MelSpectrogram, {n} clips x {seconds:g} s @ 16 kHz"
    name = "ember.audio.transforms.MelSpectrogram, batched"
    rows = [[task, f"{name} ({torch.get_num_threads()} threads)", t["ember"] * 1e3,
             t["librosa"] / t["ember"], ">= 5"],
            [task, f"{name} (1 thread)", t["ember1"] * 1e3, t["librosa"] / t["ember1"], "-"],
            [task, "librosa.feature.melspectrogram, looped", t["librosa"] * 1e3, 1.0, "-"]]
    return rows, f"MelSpectrogram max |ember - librosa| / max|librosa| = {err:.1e}"


def _resample_rows(librosa, n: int, seconds: float, rounds: int,
                   settle: float) -> tuple[list[list], str]:
    clips = _clips(n, seconds, 44100, seed=1)
    batch = torch.from_numpy(clips)
    ours = T.Resample(44100, 16000)
    t = compare_timings({
        "ember": lambda: ours(batch),
        "ember1": _single_thread(lambda: ours(batch)),
        "soxr_hq": lambda: librosa.resample(clips, orig_sr=44100, target_sr=16000),
        "polyphase": lambda: librosa.resample(clips, orig_sr=44100, target_sr=16000,
                                              res_type="polyphase"),
    }, rounds=rounds, min_seconds=0.0 if not settle else 0.1, settle=settle)
    task = f"Resample 44.1 -> 16 kHz, {n} clips x {seconds:g} s"
    name = "ember.audio.transforms.Resample (Hann sinc, width 6), batched"
    rows = [[task, f"{name} ({torch.get_num_threads()} threads)", t["ember"] * 1e3,
             t["soxr_hq"] / t["ember"], ">= 2 vs soxr_hq"],
            [task, f"{name} (1 thread)", t["ember1"] * 1e3, t["soxr_hq"] / t["ember1"], "-"],
            [task, "librosa.resample, res_type='soxr_hq' (its default)", t["soxr_hq"] * 1e3,
             1.0, "-"],
            [task, "librosa.resample, res_type='polyphase' (scipy resample_poly)",
             t["polyphase"] * 1e3, t["soxr_hq"] / t["polyphase"], "-"]]
    y = ours(batch[:1]).double()
    mid = y[0, y.shape[-1] // 4: -y.shape[-1] // 4]
    ref = torch.from_numpy(librosa.resample(clips[:1], orig_sr=44100, target_sr=16000)).double()
    ref = ref[0, ref.shape[-1] // 4: -ref.shape[-1] // 4]
    diff = float((mid - ref).abs().max())
    return rows, f"Resample: max |ember - soxr_hq| away from the edges = {diff:.1e}"


def _load_rows(n: int, seconds: float, rounds: int) -> tuple[list[list], str]:
    clips = _clips(n, seconds, SR, seed=2)
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, c in enumerate(clips):
            path = Path(tmp) / f"clip{i}.wav"
            sf.write(path, c, SR, subtype="PCM_16")
            paths.append(path)

        def ours():
            return [load(p) for p in paths]

        def peer():
            return [sf.read(p, dtype="float32", always_2d=True) for p in paths]

        assert all(np.array_equal(a[0].numpy(), b[0].T) for a, b in zip(ours(), peer()))
        # a few % is the question: one call per block and many rounds, so the machine's
        # drift between blocks (several % over a second here) averages out
        t = compare_timings({"ember": ours, "soundfile": peer}, rounds=12 * rounds,
                            min_seconds=0.0)
    task = f"load {n} WAV files (16-bit, {seconds:g} s, 16 kHz)"
    overhead = t["ember"] / t["soundfile"] - 1
    rows = [[task, "ember.audio.load", t["ember"] * 1e3, t["soundfile"] / t["ember"],
             "overhead <= 5%"],
            [task, "soundfile.read(dtype='float32')", t["soundfile"] * 1e3, 1.0, "-"]]
    return rows, f"load overhead vs soundfile.read: {overhead * 100:+.1f}%"


def run(quick: bool = False, backends: str | None = None,
        rounds: int | None = None) -> BenchResult:
    """``backends``: the torch.compile backends of the Wav2Vec2 rows, comma-separated
    (default inductor,ember; quick runs default to ember alone, Inductor's cold compile
    would dominate them); ``rounds``: timed rounds per task (default 2 quick, 5 full)."""
    import librosa

    if rounds is not None and rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    rounds = rounds or (2 if quick else 5)
    mel_n, mel_s = (4, 1.0) if quick else (64, 10.0)
    rs_n, rs_s = (2, 1.0) if quick else (8, 10.0)
    ld_n, ld_s = (4, 0.5) if quick else (32, 10.0)
    load_avg = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    result = BenchResult(
        "audio",
        f"ember.audio vs librosa / soundfile / scipy / torchaudio, and Wav2Vec2 under "
        f"compilers, milliseconds per call (median of {rounds} round-robin rounds); "
        f"speed-up = the task's reference time / the row's time",
        ["task", "candidate", "ms", "speed-up", "target"])
    settle = 0.0 if quick else SETTLE
    lf_n, lf_s = (2, 0.1) if quick else (64, 10.0)
    fb_n, fb_s = (1, 0.25) if quick else (8, 10.0)
    w2v_n, w2v_s = (2, 0.2) if quick else (4, 5.0)
    compilers = (backends or ("ember" if quick else "inductor,ember")).split(",")
    tasks = (lambda: _mel_rows(librosa, mel_n, mel_s, rounds, settle),
             lambda: _resample_rows(librosa, rs_n, rs_s, rounds, settle),
             lambda: _load_rows(ld_n, ld_s, rounds),
             lambda: lfilter_rows(_clips(lf_n, lf_s, SR, seed=3), rounds, settle),
             lambda: fbank_rows(_clips(fb_n, fb_s, SR, seed=4), rounds, settle),
             lambda: wav2vec2_rows(w2v_n, w2v_s, rounds, quick=quick,
                                   backends=tuple(compilers)))
    for task in tasks:
        gc.collect()  # the previous task's garbage is not collected on the next one's time
        rows, notes = task()
        result.rows += rows
        result.notes += [notes] if isinstance(notes, str) else notes
    result.notes.append(f"torch threads: {torch.get_num_threads()}; ember's CPU MelSpectrogram "
                        f"and Resample split the batch into cache-sized units run by up to that "
                        f"many threads with one intra-op thread each (no OpenMP team per op), "
                        f"extra threads only on cores no other runnable thread wants (spare at "
                        f"start: {spare_cores()}); librosa/soxr single-threaded; 1-min load "
                        f"average at start: {load_avg:.1f}; {settle:g} s idle before every timed "
                        f"MelSpectrogram/Resample call of every candidate (a previous "
                        f"candidate's spinning BLAS/OpenMP threads would tax the next); load: "
                        f"{12 * rounds} rounds of one call each, alternating")
    result.notes.append("MelSpectrogram peer settings: htk=True, norm=None, pad_mode='reflect' "
                        "(ember's defaults; librosa's own default pad_mode is 'constant')")
    result.notes.append("ember's float32 CPU MelSpectrogram: one native pass per block of frames "
                        "(window, real FFT of 16 frames at a time across SIMD lanes, power, "
                        "band-limited mel sums); librosa: numpy FFT, dense filterbank product")
    return result
