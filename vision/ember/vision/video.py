"""Video read/write with torchvision.io's names, through ffmpeg-python and the ffmpeg binary.

The binary is a system ``ffmpeg`` on PATH when present, else the one imageio-ffmpeg ships.
Frame timestamps come from ffmpeg's ``showinfo`` filter, so variable frame rates are exact.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

import ffmpeg
import numpy as np
import torch

from ember.core.logs import get_logger

_log = get_logger("vision")

__all__ = ["read_video", "read_video_timestamps", "write_video", "VideoReader", "ffmpeg_exe"]

_INSTALL_HINT = ("no ffmpeg binary found: install one with `pip install imageio-ffmpeg` (it ships "
                 "a static build) or put ffmpeg on PATH (e.g. `apt-get install ffmpeg`)")


def ffmpeg_exe() -> str:
    """Path of the ffmpeg binary: PATH first, then imageio-ffmpeg's bundled build."""
    found = shutil.which("ffmpeg")
    if found:
        _log.debug("ffmpeg: system binary %s", found)
        return found
    try:
        import imageio_ffmpeg

        exe = imageio_ffmpeg.get_ffmpeg_exe()
    except Exception as err:  # ImportError, or imageio's RuntimeError for a missing binary
        raise RuntimeError(_INSTALL_HINT) from err
    if not exe or not os.path.isfile(exe):
        raise RuntimeError(_INSTALL_HINT)
    _log.debug("ffmpeg: imageio-ffmpeg binary %s", exe)
    return exe


_LAYOUTS = {"mono": 1, "stereo": 2, "2.1": 3, "quad": 4, "4.0": 4, "5.0": 5, "5.1": 6,
            "6.1": 7, "7.1": 8}


def _decode_error(message: str, path: str):
    """ember.vision.io.DecodeError (a RuntimeError) for a file ffmpeg cannot decode."""
    from ember.vision.io._limits import DecodeError

    return DecodeError(message, source=path)


def _probe(path: str) -> dict[str, Any]:
    """Stream facts parsed from ``ffmpeg -i`` (imageio-ffmpeg ships no ffprobe)."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"video file not found: {path!r}")
    proc = subprocess.run([ffmpeg_exe(), "-hide_banner", "-i", path], capture_output=True,
                          text=True, errors="replace", timeout=60)
    err = proc.stderr
    info: dict[str, Any] = {"duration": None, "video": None, "audio": None}
    m = re.search(r"Duration: (\d+):(\d+):([\d.]+)", err)
    if m:
        info["duration"] = int(m[1]) * 3600 + int(m[2]) * 60 + float(m[3])
    v = re.search(r"Stream #\d+:\d+.*?: Video: (.*)", err)
    if v:
        size = re.search(r", (\d{1,5})x(\d{1,5})", v[1])
        fps = re.search(r"([\d.]+)(k?) fps", v[1]) or re.search(r"([\d.]+)(k?) tbr", v[1])
        tbn = re.search(r"([\d.]+)(k?) tbn", v[1])
        if size:
            rate = float(fps[1]) * (1000 if fps and fps[2] else 1) if fps else None
            ticks = float(tbn[1]) * (1000 if tbn[2] else 1) if tbn else None
            info["video"] = {"width": int(size[1]), "height": int(size[2]), "fps": rate,
                             "time_base": 1.0 / ticks if ticks else None}
    a = re.search(r"Stream #\d+:\d+.*?: Audio: [^,]*, (\d+) Hz, ([^,]+)", err)
    if a:
        layout = a[2].strip()
        ch = _LAYOUTS.get(layout.split("(")[0])
        m2 = re.match(r"(\d+) channels", layout)
        info["audio"] = {"sample_rate": int(a[1]), "channels": ch or (int(m2[1]) if m2 else 2)}
    if info["video"] is None and info["audio"] is None:
        tail = "\n".join(err.strip().splitlines()[-3:])
        raise _decode_error(f"could not read {path!r} as a video: {tail}", path)
    return info


_PTS = re.compile(r"\bn:\s*(\d+)\s+pts:\s*(-?\d+)\s+pts_time:\s*(-?[\d.e+-]+)")


def _limit_error(path: str, detail: str, limit: int):
    from ember.vision.io._limits import DecodeLimitError

    return DecodeLimitError(
        f"read_video: {path!r}: {detail}, over the read_video memory limit of "
        f"{limit / 2**30:.2f} GiB; iterate ember.vision.video.VideoReader({path!r}) instead "
        f"(it streams one frame at a time), read a shorter window with start_pts/end_pts, or "
        f"raise the limit with ember.vision.io.set_decode_limits(max_video_bytes=...)",
        source=path)


def _check_video_budget(path: str, info: dict, start: float, end: float | None) -> None:
    """Refuse, before decoding, a window whose frames would not fit the memory limit."""
    from ember.vision.io._limits import get_decode_limits

    limit, v = get_decode_limits().max_video_bytes, info["video"]
    stop = end if end is not None else info["duration"]
    if limit is None or v is None or stop is None or not v["fps"]:
        return  # unknown length: _decode's running count stops it instead
    frames = max(0, math.floor((stop - max(start, 0.0)) * v["fps"] + 1e-6)) + 1
    need = frames * v["width"] * v["height"] * 3
    if need > limit:
        raise _limit_error(path, f"the frames from {max(start, 0.0):g} s to {stop:g} s (about "
                           f"{frames} frames of {v['width']}x{v['height']}) need "
                           f"{need / 2**30:.2f} GiB", limit)


def _run_capped(args: list[str], limit: int | None) -> tuple[bytes | None, bytes, int]:
    """Run ffmpeg, collecting stdout up to ``limit`` bytes (None: no limit) and stderr.
    Returns (stdout, or None when it passed the limit, stderr, return code)."""
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    err_chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: err_chunks.append(proc.stderr.read()), daemon=True)
    reader.start()
    chunks, total, over = [], 0, False
    try:
        while True:
            chunk = proc.stdout.read(1 << 20)
            if not chunk:
                break
            total += len(chunk)
            if limit is not None and total > limit:
                over = True
                proc.kill()
                break
            chunks.append(chunk)
    finally:
        proc.stdout.close()
        code = proc.wait()
        reader.join()
        proc.stderr.close()
    return (None if over else b"".join(chunks)), b"".join(err_chunks), code


def _decode(path: str, info: dict, start: float, end: float | None, keep_frames: bool = True):
    """All frames with pts in [start, end] as uint8 [T, H, W, 3] and their pts in seconds
    (``keep_frames=False``: only the pts, nothing decoded is kept)."""
    from ember.vision.io._limits import get_decode_limits

    v = info["video"]
    stream = ffmpeg.input(path, ss=max(start, 0.0), copyts=None)
    if end is not None:
        stream = ffmpeg.input(path, ss=max(start, 0.0), to=end + 1e-3, copyts=None)
    if keep_frames:
        out = stream.video.filter("showinfo").output(
            "pipe:", format="rawvideo", pix_fmt="rgb24", fps_mode="passthrough")
    else:
        out = stream.video.filter("showinfo").output("-", format="null", fps_mode="passthrough")
    args = out.global_args("-hide_banner", "-nostdin").compile(cmd=ffmpeg_exe())
    limit = get_decode_limits().max_video_bytes if keep_frames else None
    data, err, code = _run_capped(args, limit)
    if data is None:
        raise _limit_error(path, f"the decoded frames passed {limit / 2**30:.2f} GiB", limit)
    if code != 0:
        tail = "\n".join(err.decode(errors="replace").strip().splitlines()[-3:])
        raise _decode_error(f"ffmpeg failed to decode {path!r}: {tail}", path)
    if not keep_frames:
        pts = [float(m[3]) for m in _PTS.finditer(err.decode(errors="replace"))]
        keep = [p for p in pts if p >= start - 1e-6 and (end is None or p <= end + 1e-6)]
        return None, keep
    frame = v["width"] * v["height"] * 3
    n = len(data) // frame
    frames = np.frombuffer(data[:n * frame], np.uint8).reshape(n, v["height"], v["width"], 3)
    pts = [float(m[3]) for m in _PTS.finditer(err.decode(errors="replace"))][:n]
    if len(pts) < n:  # showinfo missing: fall back to the nominal rate
        fps = v["fps"] or 1.0
        pts = pts + [start + i / fps for i in range(len(pts), n)]
    keep = [i for i, p in enumerate(pts) if p >= start - 1e-6 and (end is None or p <= end + 1e-6)]
    return torch.from_numpy(frames[keep].copy()), [pts[i] for i in keep]


def _decode_audio(path: str, info: dict, start: float, end: float | None) -> torch.Tensor:
    a = info["audio"]
    kw = {"ss": max(start, 0.0)}
    if end is not None:
        kw["to"] = end
    out = (ffmpeg.input(path, **kw).audio
           .output("pipe:", format="f32le", acodec="pcm_f32le", ac=a["channels"])
           .global_args("-hide_banner", "-nostdin"))
    try:
        data, _ = out.run(cmd=ffmpeg_exe(), capture_stdout=True, capture_stderr=True)
    except ffmpeg.Error as e:
        tail = "\n".join(e.stderr.decode(errors="replace").strip().splitlines()[-3:])
        raise _decode_error(f"ffmpeg failed to decode the audio of {path!r}: {tail}",
                            path) from None
    samples = np.frombuffer(data[:len(data) // (4 * a["channels"]) * 4 * a["channels"]],
                            np.float32)
    return torch.from_numpy(samples.reshape(-1, a["channels"]).T.copy())


def _check_range(start_pts, end_pts, pts_unit):
    if pts_unit not in ("sec", "pts"):
        raise ValueError(f"pts_unit must be 'sec' (seconds) or 'pts' (ticks of the video "
                         f"stream's time base), got {pts_unit!r}")
    if end_pts is not None and end_pts < start_pts:
        raise ValueError(f"end_pts ({end_pts}) must not be less than start_pts ({start_pts})")
    return float(start_pts), (None if end_pts is None or end_pts == float("inf")
                              else float(end_pts))


def _time_base(info: dict, path: str) -> float:
    """Seconds per pts tick of the video stream."""
    tb = (info["video"] or {}).get("time_base")
    if not tb:
        raise RuntimeError(f"pts_unit='pts' needs the video stream's time base, which ffmpeg "
                           f"did not report for {path!r}; use pts_unit='sec'")
    return tb


def read_video(filename: str, start_pts: float = 0, end_pts: float | None = None,
               pts_unit: str = "sec", output_format: str = "THWC"
               ) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """(video uint8 [T, H, W, C] or [T, C, H, W], audio float32 [channels, samples], info)
    for the frames with pts in [start_pts, end_pts], in seconds or (``pts_unit="pts"``)
    in ticks of the video stream's time base."""
    if output_format not in ("THWC", "TCHW"):
        raise ValueError(f"output_format must be 'THWC' or 'TCHW', got {output_format!r}")
    start, end = _check_range(start_pts, end_pts, pts_unit)
    path = os.fspath(filename)
    info = _probe(path)
    if pts_unit == "pts":
        tb = _time_base(info, path)
        start, end = start * tb, (None if end is None else end * tb)
    meta: dict[str, float] = {}
    if info["video"] is not None:
        _check_video_budget(path, info, start, end)
        video, _ = _decode(path, info, start, end)
        meta["video_fps"] = info["video"]["fps"]
    else:
        video = torch.empty(0, 1, 1, 3, dtype=torch.uint8)
    if info["audio"] is not None:
        audio = _decode_audio(path, info, start, end)
        meta["audio_fps"] = info["audio"]["sample_rate"]
    else:
        audio = torch.empty(1, 0, dtype=torch.float32)
    if output_format == "TCHW":
        video = video.permute(0, 3, 1, 2)
    return video, audio, meta


def read_video_timestamps(filename: str, pts_unit: str = "sec"
                          ) -> tuple[list[float] | list[int], float]:
    """Every frame's pts (seconds, or integer ticks with ``pts_unit="pts"``) and the fps."""
    _check_range(0, None, pts_unit)
    path = os.fspath(filename)
    info = _probe(path)
    if info["video"] is None:
        return [], 0.0
    tb = _time_base(info, path) if pts_unit == "pts" else None
    _, pts = _decode(path, info, 0.0, None, keep_frames=False)
    if tb is not None:
        return [int(round(p / tb)) for p in pts], info["video"]["fps"]
    return pts, info["video"]["fps"]


def write_video(filename: str, video_array: torch.Tensor, fps: float, video_codec: str = "libx264",
                options: dict[str, Any] | None = None, audio_array: torch.Tensor | None = None,
                audio_fps: int | None = None, audio_codec: str | None = None,
                audio_options: dict[str, Any] | None = None) -> None:
    """Encode uint8 frames [T, H, W, C] (C = 3) at ``fps``, with optional float audio
    [channels, samples] at ``audio_fps``."""
    v = torch.as_tensor(video_array)
    if v.ndim != 4 or v.shape[-1] != 3:
        raise ValueError(f"video_array must have shape [T, H, W, 3], got {tuple(v.shape)}")
    if v.shape[0] == 0:
        raise ValueError("video_array must hold at least one frame")
    if not isinstance(fps, (int, float)) or fps <= 0:
        raise ValueError(f"fps must be a positive number, got {fps!r}")
    if v.dtype != torch.uint8:
        v = v.clamp(0, 255).round().to(torch.uint8) if v.is_floating_point() else v.to(torch.uint8)
    t, h, w, _ = v.shape
    pix = "yuv420p" if h % 2 == 0 and w % 2 == 0 else "yuv444p"
    inputs = [ffmpeg.input("pipe:", format="rawvideo", pix_fmt="rgb24", s=f"{w}x{h}",
                           r=fps).video]
    out_kw: dict[str, Any] = {"vcodec": video_codec, "pix_fmt": pix, **(options or {})}
    tmp = None
    try:
        if audio_array is not None:
            a = torch.as_tensor(audio_array, dtype=torch.float32)
            if a.ndim != 2:
                raise ValueError(f"audio_array must have shape [channels, samples], "
                                 f"got {tuple(a.shape)}")
            if not audio_fps or audio_fps <= 0:
                raise ValueError(f"audio_fps must be a positive int with audio, got {audio_fps!r}")
            fd, tmp = tempfile.mkstemp(suffix=".f32")
            with os.fdopen(fd, "wb") as f:
                f.write(a.T.contiguous().numpy().tobytes())
            inputs.append(ffmpeg.input(tmp, format="f32le", ar=int(audio_fps),
                                       ac=int(a.shape[0])).audio)
            out_kw["acodec"] = audio_codec or "aac"
            out_kw.update(audio_options or {})
        out = (ffmpeg.output(*inputs, os.fspath(filename), **out_kw)
               .global_args("-hide_banner", "-nostdin", "-loglevel", "error").overwrite_output())
        try:
            out.run(cmd=ffmpeg_exe(), input=v.contiguous().numpy().tobytes(),
                    capture_stdout=True, capture_stderr=True)
        except ffmpeg.Error as e:
            tail = "\n".join(e.stderr.decode(errors="replace").strip().splitlines()[-3:])
            raise RuntimeError(f"ffmpeg failed to write {filename!r}: {tail}") from None
    finally:
        if tmp is not None:
            os.unlink(tmp)


class VideoReader:
    """Iterate a video's frames as {"data": uint8 [C, H, W], "pts": seconds}, or with
    ``stream="audio"`` its sound as {"data": float32 [samples, channels], "pts": seconds} in
    frames of ``AUDIO_FRAME`` samples; ``seek(t)`` restarts at the first frame with pts >= t.
    Frames stream from one ffmpeg process."""

    AUDIO_FRAME = 1024  # samples per audio frame (an AAC frame's length)

    def __init__(self, path: str, stream: str = "video") -> None:
        if stream not in ("video", "audio"):
            raise ValueError(f"stream must be 'video' or 'audio', got {stream!r}")
        self.path = os.fspath(path)
        self.stream = stream
        self._info = _probe(self.path)
        if self._info[stream] is None:
            raise RuntimeError(f"{self.path!r} has no {stream} stream")
        self._start = 0.0
        self._proc: subprocess.Popen | None = None

    def get_metadata(self) -> dict[str, dict[str, list[float]]]:
        duration = [self._info["duration"] or 0.0]
        out = {}
        if self._info["video"] is not None:
            out["video"] = {"fps": [self._info["video"]["fps"]], "duration": duration}
        if self._info["audio"] is not None:
            out["audio"] = {"framerate": [float(self._info["audio"]["sample_rate"])],
                            "duration": duration}
        return out

    def seek(self, time_s: float) -> VideoReader:
        if time_s < 0:
            raise ValueError(f"time_s must be >= 0, got {time_s!r}")
        self._close()
        self._start = float(time_s)
        return self

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self._frames()

    def __next__(self) -> dict[str, Any]:
        if not hasattr(self, "_it") or self._it is None:
            self._it = self._frames()
        return next(self._it)

    def _frames(self) -> Iterator[dict[str, Any]]:
        return self._audio_frames() if self.stream == "audio" else self._video_frames()

    def _audio_frames(self) -> Iterator[dict[str, Any]]:
        self._close()
        a = self._info["audio"]
        rate, ch = a["sample_rate"], a["channels"]
        args = (ffmpeg.input(self.path, ss=self._start).audio
                .output("pipe:", format="f32le", acodec="pcm_f32le", ac=ch, ar=rate)
                .global_args("-hide_banner", "-nostdin", "-loglevel", "error")
                .compile(cmd=ffmpeg_exe()))
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self._proc = proc
        size = self.AUDIO_FRAME * ch * 4
        done = 0
        try:
            while True:
                buf = proc.stdout.read(size)
                n = len(buf) // (4 * ch)
                if n == 0:
                    break
                data = torch.frombuffer(bytearray(buf[:n * 4 * ch]), dtype=torch.float32)
                yield {"data": data.view(n, ch), "pts": self._start + done / rate}
                done += n
        finally:
            self._close()

    def _video_frames(self) -> Iterator[dict[str, Any]]:
        self._close()
        v = self._info["video"]
        args = (ffmpeg.input(self.path, ss=self._start, copyts=None).video.filter("showinfo")
                .output("pipe:", format="rawvideo", pix_fmt="rgb24", fps_mode="passthrough")
                .global_args("-hide_banner", "-nostdin").compile(cmd=ffmpeg_exe()))
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self._proc = proc
        pts: list[float] = []
        cond = threading.Condition()

        def read_err():
            try:
                for line in iter(proc.stderr.readline, b""):
                    m = _PTS.search(line.decode(errors="replace"))
                    if m:
                        with cond:
                            pts.append(float(m[3]))
                            cond.notify_all()
            except (ValueError, OSError):
                pass  # the reader was closed (a seek or close ends this process's pipes)
            with cond:
                pts.append(float("nan"))  # end marker
                cond.notify_all()

        threading.Thread(target=read_err, daemon=True).start()
        size = v["width"] * v["height"] * 3
        i = 0
        try:
            while True:
                buf = proc.stdout.read(size)
                if len(buf) < size:
                    break
                with cond:
                    cond.wait_for(lambda k=i: len(pts) > k, timeout=10)
                    p = pts[i] if i < len(pts) and pts[i] == pts[i] else self._start + i / (
                        v["fps"] or 1.0)
                i += 1
                if p < self._start - 1e-6:
                    continue
                frame = torch.frombuffer(bytearray(buf), dtype=torch.uint8)
                yield {"data": frame.view(v["height"], v["width"], 3).permute(2, 0, 1),
                       "pts": p}
        finally:
            self._close()

    def _close(self) -> None:
        self._it = None
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            for f in (self._proc.stdout, self._proc.stderr):
                if f:
                    f.close()
            self._proc = None

    def __del__(self) -> None:
        try:
            self._close()
        except Exception:
            pass
