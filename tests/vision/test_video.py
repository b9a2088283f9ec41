"""ember.vision.video: write/read round trips, pts, seeking, errors; videos made by the tests."""

from __future__ import annotations

import subprocess

import pytest
import torch

from ember.vision import video as V


def ramp(t=10, h=32, w=48):
    """Frames whose grey level steps by 25 per frame, so each frame is identifiable."""
    frames = torch.zeros(t, h, w, 3, dtype=torch.uint8)
    for i in range(t):
        frames[i] = i * 25
    frames[:, :, : w // 4, 0] = 255  # a red band, to check channel order
    return frames


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    path = tmp_path_factory.mktemp("video") / "ramp.mp4"
    audio = 0.5 * torch.sin(torch.arange(16000.0) * 2 * torch.pi * 440 / 8000).repeat(2, 1)
    V.write_video(str(path), ramp(), fps=5, audio_array=audio, audio_fps=8000)
    return str(path)


def test_read_video_round_trip(clip):
    video, audio, info = V.read_video(clip)
    assert video.shape == (10, 32, 48, 3) and video.dtype == torch.uint8
    assert info == {"video_fps": 5.0, "audio_fps": 8000}
    grey = video[:, 20, 40].float().mean(-1)
    assert torch.allclose(grey, torch.arange(10.0) * 25, atol=4)  # lossy codec
    band = video[:, 16, 2].float()  # red pinned at 255 while green and blue follow the ramp
    assert band[:, 0].mean() > 230
    assert torch.allclose(band[:, 1], torch.arange(10.0) * 25, atol=6)
    assert audio.shape[0] == 2 and abs(audio.shape[1] - 16000) <= 1024
    ref = 0.5 * torch.sin(torch.arange(float(audio.shape[1])) * 2 * torch.pi * 440 / 8000)
    spectrum = torch.fft.rfft(audio[0]).abs()
    assert abs(int(spectrum.argmax()) - int(torch.fft.rfft(ref).abs().argmax())) <= 2
    tchw, _, _ = V.read_video(clip, output_format="TCHW")
    assert torch.equal(tchw, video.permute(0, 3, 1, 2))


def test_read_video_time_window_and_timestamps(clip):
    video, _, _ = V.read_video(clip, start_pts=0.5, end_pts=1.2)
    assert video.shape[0] == 4  # frames at 0.6, 0.8, 1.0, 1.2
    assert abs(float(video[0, 20, 40].float().mean()) - 75) <= 4
    pts, fps = V.read_video_timestamps(clip)
    assert fps == 5.0 and len(pts) == 10
    assert pts == pytest.approx([i / 5 for i in range(10)], abs=1e-3)


def test_video_reader_iterates_and_seeks(clip):
    reader = V.VideoReader(clip)
    frames = list(reader)
    assert len(frames) == 10 and frames[0]["data"].shape == (3, 32, 48)
    assert [f["pts"] for f in frames] == pytest.approx([i / 5 for i in range(10)], abs=1e-3)
    after = [f["pts"] for f in reader.seek(1.0)]
    assert after == pytest.approx([1.0, 1.2, 1.4, 1.6, 1.8], abs=1e-3)
    first = next(reader.seek(0.4))
    assert first["pts"] == pytest.approx(0.4, abs=1e-3)
    assert abs(float(first["data"][1].float().mean()) - 50) <= 4
    assert reader.get_metadata()["video"]["fps"] == [5.0]


def test_lavfi_testsrc_and_odd_sizes(tmp_path):
    src = tmp_path / "testsrc.mkv"
    subprocess.run([V.ffmpeg_exe(), "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i",
                    "testsrc=duration=1:size=40x30:rate=10", "-c:v", "ffv1", str(src)],
                   check=True)
    video, audio, info = V.read_video(str(src))
    assert video.shape == (10, 30, 40, 3) and audio.numel() == 0 and info["video_fps"] == 10.0
    out = tmp_path / "odd.mp4"
    V.write_video(str(out), video[:3, :29, :37], fps=10)
    assert V.read_video(str(out))[0].shape == (3, 29, 37, 3)


def test_errors(tmp_path, monkeypatch):
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"\x00\x01not a video at all" * 50)
    with pytest.raises(RuntimeError, match="could not read"):
        V.read_video(str(bad))
    with pytest.raises(FileNotFoundError):
        V.read_video(str(tmp_path / "missing.mp4"))
    with pytest.raises(ValueError, match="output_format"):
        V.read_video(str(bad), output_format="CTHW")
    with pytest.raises(ValueError, match="pts_unit"):
        V.read_video(str(bad), pts_unit="frames")
    with pytest.raises(ValueError, match="video_array"):
        V.write_video(str(tmp_path / "x.mp4"), torch.zeros(2, 8, 8), fps=5)
    with pytest.raises(ValueError, match="fps"):
        V.write_video(str(tmp_path / "x.mp4"), torch.zeros(2, 8, 8, 3), fps=0)


def test_truncated_and_garbled_files_fail_cleanly(clip, tmp_path):
    data = open(clip, "rb").read()
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(RuntimeError):
        V.read_video(str(cut))
    with pytest.raises(RuntimeError):
        V.VideoReader(str(cut))
    garbled = bytearray(data)
    garbled[len(data) // 2: len(data) // 2 + 100] = bytes(100)
    bad = tmp_path / "garbled.mp4"
    bad.write_bytes(bytes(garbled))
    video, _, _ = V.read_video(str(bad))  # decodes what it can, no crash or hang
    assert video.dtype == torch.uint8 and video.shape[1:] == (32, 48, 3)


def test_missing_binary_says_how_to_install(monkeypatch):
    import imageio_ffmpeg

    monkeypatch.setattr(V.shutil, "which", lambda name: None)

    def no_binary():
        raise RuntimeError("no ffmpeg exe could be found")

    monkeypatch.setattr(imageio_ffmpeg, "get_ffmpeg_exe", no_binary)
    with pytest.raises(RuntimeError, match="pip install imageio-ffmpeg"):
        V.ffmpeg_exe()


def test_pts_unit_pts_counts_ticks_of_the_stream_time_base(clip):
    ticks, fps = V.read_video_timestamps(clip, pts_unit="pts")
    secs, _ = V.read_video_timestamps(clip)
    assert fps == 5.0 and len(ticks) == 10 and all(isinstance(t, int) for t in ticks)
    step = ticks[1] - ticks[0]
    assert step > 0 and ticks == [ticks[0] + i * step for i in range(10)]
    # the same window in ticks and in seconds gives the same frames
    by_pts, _, _ = V.read_video(clip, start_pts=ticks[3], end_pts=ticks[6], pts_unit="pts")
    by_sec, _, _ = V.read_video(clip, start_pts=secs[3], end_pts=secs[6])
    assert by_pts.shape[0] == 4 and torch.equal(by_pts, by_sec)


@pytest.fixture
def video_limit():
    from ember.vision import io as vio

    previous = vio.get_decode_limits()
    yield lambda n: vio.set_decode_limits(max_video_bytes=n)
    vio.set_decode_limits(previous)


def test_read_video_refuses_a_window_over_the_memory_limit_before_decoding(
        clip, video_limit, monkeypatch):
    from ember.vision.io import DecodeError, DecodeLimitError

    frame = 32 * 48 * 3
    video_limit(4 * frame)

    def no_decode(*args, **kwargs):
        raise AssertionError("decoded before checking the memory limit")

    monkeypatch.setattr(V, "_decode", no_decode)
    with pytest.raises(DecodeLimitError, match=r"VideoReader\(.*ramp\.mp4") as info:
        V.read_video(clip)
    assert isinstance(info.value, DecodeError) and info.value.source == clip
    assert "about 11 frames of 48x32" in str(info.value)
    monkeypatch.undo()
    video, _, _ = V.read_video(clip, start_pts=0.4, end_pts=0.8)  # 3 frames fit
    assert video.shape[0] == 3
    assert len(V.read_video_timestamps(clip)[0]) == 10  # keeps no frames: not limited


def test_read_video_stops_decoding_at_the_limit_when_the_length_is_unknown(
        clip, video_limit, monkeypatch):
    from ember.vision.io import DecodeLimitError

    real_probe = V._probe

    def probe_without_duration(path):
        info = real_probe(path)
        info["duration"] = None
        return info

    monkeypatch.setattr(V, "_probe", probe_without_duration)
    video_limit(4 * 32 * 48 * 3)
    with pytest.raises(DecodeLimitError, match="decoded frames passed"):
        V.read_video(clip)
    video_limit(None)
    assert V.read_video(clip)[0].shape[0] == 10


def test_fuzzed_video_bytes_raise_only_decode_error(clip, tmp_path):
    from ember.vision.io import DecodeError

    data = open(clip, "rb").read()
    rng = torch.Generator().manual_seed(3)
    path = tmp_path / "fuzz.mp4"
    for i in range(6):
        buf = bytearray(data)
        if i % 2:
            buf = buf[: int(torch.randint(8, len(data), (1,), generator=rng))]
        else:
            for pos in torch.randint(0, len(data), (16,), generator=rng).tolist():
                buf[pos] ^= 1 << int(torch.randint(0, 8, (1,), generator=rng))
        path.write_bytes(bytes(buf))
        try:
            video, _, _ = V.read_video(str(path))
        except DecodeError:
            continue
        assert video.dtype == torch.uint8 and video.dim() == 4


def test_video_reader_streams_audio_in_frames(clip):
    """stream="audio": float32 [samples, channels] frames whose concatenation is
    read_video's audio (transposed), pts in seconds; seek restarts at a time."""
    reader = V.VideoReader(clip, stream="audio")
    meta = reader.get_metadata()
    assert meta["audio"]["framerate"] == [8000.0] and "video" in meta
    frames = list(reader)
    assert all(f["data"].dtype == torch.float32 and f["data"].shape[1] == 2 for f in frames)
    assert all(f["data"].shape[0] == reader.AUDIO_FRAME for f in frames[:-1])
    assert [f["pts"] for f in frames[:3]] == [0.0, 1024 / 8000, 2048 / 8000]
    whole = torch.cat([f["data"] for f in frames]).T
    _, audio, _ = V.read_video(clip, pts_unit="sec", output_format="TCHW")
    assert whole.shape == audio.shape and torch.equal(whole, audio)
    later = next(iter(reader.seek(1.0)))
    assert later["pts"] == 1.0
    with pytest.raises(ValueError, match="stream"):
        V.VideoReader(clip, stream="subtitles")
