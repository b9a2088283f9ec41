"""Times torchaudio in its own environment (`.venv-peers-audio`); run as a script, not imported.

Reads a JSON job: ``{"threads": n, "tasks": [{"name", "kind", "input", "output", "rounds",
...}]}``; each task's input is a ``.npy`` file and its last output is saved to ``output``.
Prints one JSON line: task name -> median seconds per call, plus the torch/torchaudio versions.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np
import torch
import torchaudio
import torchaudio.functional as TAF
from torchaudio.compliance import kaldi


def _call(task: dict, x: torch.Tensor):
    if task["kind"] == "lfilter":
        a = torch.tensor(task["a"], dtype=x.dtype)
        b = torch.tensor(task["b"], dtype=x.dtype)
        return lambda: TAF.lfilter(x, a, b, clamp=False)
    if task["kind"] == "fbank":
        return lambda: [kaldi.fbank(c[None], **task["options"]) for c in x]
    raise ValueError(f"unknown task kind {task['kind']!r}")


def _median_seconds(fn, rounds: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(path: str) -> None:
    with open(path) as f:
        job = json.load(f)
    torch.set_num_threads(int(job["threads"]))
    out = {"versions": f"torch {torch.__version__}, torchaudio {torchaudio.__version__}"}
    for task in job["tasks"]:
        x = torch.from_numpy(np.load(task["input"]))
        fn = _call(task, x)
        out[task["name"]] = _median_seconds(fn, int(task["rounds"]))
        result = fn()
        if isinstance(result, list):
            result = torch.stack(result)
        np.save(task["output"], result.numpy())
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
