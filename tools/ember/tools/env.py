"""`ember env`: everything a bug report needs, one fact per line."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import platform
import shutil
import subprocess
import sys
from pathlib import Path


def _version(module: str) -> str:
    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # a broken install is itself a fact to report
        return f"not available ({type(exc).__name__}: {exc})"
    return str(getattr(mod, "__version__", "installed (no version)"))


DISTRIBUTIONS = ("ember-core", "ember-vision", "ember-audio", "ember-data", "ember-arrow",
                 "ember-tools")


def _distribution(name: str) -> str:
    """The installed version of ``name`` (from its metadata), marked when installed editable."""
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"
    direct = json.loads(dist.read_text("direct_url.json") or "{}")
    editable = direct.get("dir_info", {}).get("editable", False)
    return f"{dist.version} (editable)" if editable else dist.version


def _first_line(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"not available ({exc})"
    text = (out.stdout or out.stderr).strip().splitlines()
    return text[0] if text else "no output"


def _libsndfile() -> str:
    try:
        import soundfile
    except Exception as exc:
        return f"not available ({exc})"
    return soundfile.__libsndfile_version__


def _ffmpeg() -> str:
    exe = shutil.which("ffmpeg")
    source = "PATH"
    if exe is None:
        try:
            import imageio_ffmpeg

            exe, source = imageio_ffmpeg.get_ffmpeg_exe(), "imageio-ffmpeg"
        except Exception as exc:
            return f"not found (no ffmpeg on PATH, imageio-ffmpeg: {exc})"
    return f"{exe} ({source}): {_first_line([exe, '-version'])}"


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                wanted = ["sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_bf16",
                          "amx_tile"]
                return " ".join(f for f in wanted if f in flags) or "none of the SIMD flags"
    except OSError:
        pass
    return f"unknown ({platform.machine()})"


def _gpus() -> str:
    try:
        import torch
    except Exception as exc:
        return f"unknown ({exc})"
    if torch.cuda.is_available():
        return "; ".join(f"cuda:{i} {torch.cuda.get_device_name(i)}"
                         for i in range(torch.cuda.device_count()))
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return "mps"
    return "none"


def report() -> list[tuple[str, str]]:
    """The environment as (label, value) pairs."""
    cxx = shutil.which("g++") or shutil.which("c++")
    return [
        ("Python", f"{sys.version.split()[0]} ({sys.executable})"),
        ("platform", platform.platform()),
        *((name, _distribution(name)) for name in DISTRIBUTIONS),
        ("torch", _version("torch")),
        ("triton", _version("triton")),
        ("numpy", _version("numpy")),
        ("pillow", _version("PIL")),
        ("soundfile", _version("soundfile")),
        ("libsndfile", _libsndfile()),
        ("ffmpeg-python", _version("ffmpeg")),
        ("ffmpeg", _ffmpeg()),
        ("pyarrow", _version("pyarrow")),
        ("C++ compiler", f"{cxx}: {_first_line([cxx, '--version'])}" if cxx else "not found"),
        ("CPU flags", _cpu_flags()),
        ("GPUs", _gpus()),
    ]


def main() -> int:
    rows = report()
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0
