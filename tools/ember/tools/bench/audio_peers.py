"""Runs audio_peer_script.py in `.venv-peers-audio` (torchaudio lives only there) and reads
back its timings and outputs; says why not when that environment is missing or fails."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[4]
PEER_PYTHON = ROOT / ".venv-peers-audio" / "bin" / "python"
SCRIPT = Path(__file__).with_name("audio_peer_script.py")


def torchaudio_runs(tasks: list[dict], inputs: dict[str, np.ndarray],
                    threads: int) -> tuple[dict, dict[str, np.ndarray]] | str:
    """Times each task (``inputs[name]`` is its input) under torchaudio.

    Returns (median seconds by task name plus "versions", the output of each task), or the
    reason nothing was measured.
    """
    if not PEER_PYTHON.exists():
        return "no .venv-peers-audio (make test-peers-audio builds it)"
    with tempfile.TemporaryDirectory() as tmp:
        job = {"threads": threads, "tasks": []}
        for task in tasks:
            name = task["name"]
            np.save(Path(tmp) / f"{name}.in.npy", inputs[name])
            job["tasks"].append({**task, "input": str(Path(tmp) / f"{name}.in.npy"),
                                 "output": str(Path(tmp) / f"{name}.out.npy")})
        (Path(tmp) / "job.json").write_text(json.dumps(job))
        proc = subprocess.run([str(PEER_PYTHON), str(SCRIPT), str(Path(tmp) / "job.json")],
                              capture_output=True, text=True, timeout=3600,
                              env={**os.environ, "PYTHONPATH": ""})
        if proc.returncode != 0:
            return f"the torchaudio run failed: {proc.stderr.strip().splitlines()[-1:]}"
        times = json.loads(proc.stdout.strip().splitlines()[-1])
        outputs = {t["name"]: np.load(Path(tmp) / f"{t['name']}.out.npy") for t in tasks}
    return times, outputs
