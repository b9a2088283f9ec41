"""examples/train_ddp.py under torchrun on 2 ranks: a run stopped at a checkpoint and resumed
gives the same losses as an uninterrupted run."""

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).parents[2] / "examples" / "train_ddp.py"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(*args: str) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-port", str(_port()), str(EXAMPLE), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None, reason="needs a C++ compiler")
def test_resumed_run_repeats_the_uninterrupted_losses(tmp_path):
    whole, resumed = tmp_path / "whole.json", tmp_path / "resumed.json"
    _torchrun("--steps", "8", "--out", str(whole))
    _torchrun("--steps", "8", "--stop-after", "4", "--ckpt", str(tmp_path / "ck.pt"))
    _torchrun("--steps", "8", "--resume", str(tmp_path / "ck.pt"), "--out", str(resumed))
    whole_losses, resumed_losses = json.loads(whole.read_text()), json.loads(resumed.read_text())
    assert sorted(resumed_losses) == ["5", "6", "7", "8"]
    assert resumed_losses == {k: whole_losses[k] for k in resumed_losses}
    assert whole_losses["8"] < whole_losses["1"]  # it trains
