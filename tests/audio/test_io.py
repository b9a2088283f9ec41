"""ember.audio.io: load/save/info over soundfile, round trips, partial reads, bad inputs."""

import io

import numpy as np
import pytest
import soundfile as sf
import torch

from ember.audio import AudioMetaData, info, load, save


def _grid_signal(bits: int, channels: int = 2, frames: int = 1000, seed: int = 0) -> torch.Tensor:
    """Float samples that lie exactly on the ``bits``-bit PCM grid (so round trips are exact)."""
    g = torch.Generator().manual_seed(seed)
    scale = 2 ** (bits - 1)
    ints = torch.randint(-scale, scale, (channels, frames), generator=g, dtype=torch.int64)
    return (ints.double() / scale).float()


@pytest.mark.parametrize("bits", [16, 24])
@pytest.mark.parametrize("fmt", ["wav", "flac"])
def test_float_round_trip_exact(tmp_path, bits, fmt):
    x = _grid_signal(bits)
    path = tmp_path / f"a.{fmt}"
    save(path, x, 8000, bits_per_sample=bits)
    y, sr = load(path)
    assert sr == 8000 and y.dtype == torch.float32
    torch.testing.assert_close(y, x, rtol=0, atol=0)
    meta = info(path)
    assert meta == AudioMetaData(8000, 1000, 2, bits, "FLAC" if fmt == "flac" else "PCM_S")


def test_int16_round_trip_raw_samples(tmp_path):
    x = torch.randint(-32768, 32767, (3, 500), dtype=torch.int16)
    save(tmp_path / "a.wav", x, 16000)
    y, _ = load(tmp_path / "a.wav", normalize=False)
    assert y.dtype == torch.int16
    assert torch.equal(y, x)
    # normalize=True divides by 2**15, as libsndfile and torchaudio do
    z, _ = load(tmp_path / "a.wav")
    torch.testing.assert_close(z, x.float() / 32768, rtol=0, atol=0)


def test_int32_round_trip_exact(tmp_path):
    x = torch.randint(-2**31, 2**31 - 1, (2, 300), dtype=torch.int32)
    save(tmp_path / "a.wav", x, 16000, encoding="PCM_S", bits_per_sample=32)
    assert info(tmp_path / "a.wav").bits_per_sample == 32
    y, _ = load(tmp_path / "a.wav", normalize=False)
    assert y.dtype == torch.int32 and torch.equal(y, x)


def test_pcm24_raw_is_left_justified_int32(tmp_path):
    x = _grid_signal(24, channels=1, frames=64)
    save(tmp_path / "a.wav", x, 8000, bits_per_sample=24)
    y, _ = load(tmp_path / "a.wav", normalize=False)
    assert y.dtype == torch.int32
    expected = (x.double() * 2**23).round().long() << 8
    assert torch.equal(y.long(), expected)


def test_pcm8_raw(tmp_path):
    x = torch.randint(0, 256, (1, 100), dtype=torch.uint8)
    save(tmp_path / "a.wav", x, 8000)
    assert info(tmp_path / "a.wav").encoding == "PCM_U"
    y, _ = load(tmp_path / "a.wav", normalize=False)
    assert y.dtype == torch.uint8 and torch.equal(y, x)


def test_float_wav_and_channels_last(tmp_path):
    x = torch.rand(400, 2) * 2 - 1
    save(tmp_path / "a.wav", x, 22050, channels_first=False)
    meta = info(tmp_path / "a.wav")
    assert (meta.encoding, meta.bits_per_sample, meta.num_channels) == ("PCM_F", 32, 2)
    y, sr = load(tmp_path / "a.wav", channels_first=False)
    assert sr == 22050 and torch.equal(y, x)
    assert torch.equal(load(tmp_path / "a.wav")[0], x.t())


def test_matches_soundfile_directly(tmp_path):
    data = np.random.default_rng(1).uniform(-1, 1, (777, 2)).astype(np.float32)
    sf.write(tmp_path / "b.flac", data, 44100, subtype="PCM_16")
    ref, _ = sf.read(tmp_path / "b.flac", dtype="float32", always_2d=True)
    y, sr = load(tmp_path / "b.flac")
    assert sr == 44100
    np.testing.assert_array_equal(y.numpy(), ref.T)


@pytest.mark.parametrize("fmt,bits", [("wav", 16), ("flac", 24), ("ogg", None)])
def test_partial_reads_equal_slices(tmp_path, fmt, bits):
    x = _grid_signal(16, channels=2, frames=4000) * 0.5
    path = tmp_path / f"p.{fmt}"
    save(path, x, 16000, bits_per_sample=bits)
    full, _ = load(path)
    for offset, n in [(0, 100), (123, 1000), (3900, -1), (3990, 50), (0, 0)]:
        part, _ = load(path, frame_offset=offset, num_frames=n)
        end = full.shape[1] if n == -1 else offset + n
        torch.testing.assert_close(part, full[:, offset:end], rtol=0, atol=0)
    empty, _ = load(path, frame_offset=10_000)
    assert empty.shape == (2, 0)


@pytest.mark.parametrize("ext,fmt,subtype,mode", [
    ("opus", "OGG", "OPUS", None),
    ("mp3", "MP3", "MPEG_LAYER_III", "CONSTANT"),
    ("mp3", "MP3", "MPEG_LAYER_III", "VARIABLE"),
])
def test_lossy_partial_reads_equal_slices_exactly(tmp_path, ext, fmt, subtype, mode):
    """A VBR MP3 once read 0.44 off after a seek: partial reads are slices of a full read."""
    rate = 48000 if ext == "opus" else 44100
    t = np.arange(rate * 2) / rate
    x = (0.3 * np.sin(2 * np.pi * 440 * t)
         + 0.1 * np.random.default_rng(0).standard_normal(t.size)).astype(np.float32)
    path = tmp_path / f"l.{ext}"
    extra = {} if mode is None else {"bitrate_mode": mode, "compression_level": 0.9}
    sf.write(path, x, rate, format=fmt, subtype=subtype, **extra)
    full, _ = load(path)
    for offset, n in [(40000, 500), (1, 100), (12345, 3000), (70000, -1), (0, 700)]:
        part, _ = load(path, frame_offset=offset, num_frames=n)
        end = full.shape[1] if n == -1 else offset + n
        assert torch.equal(part, full[:, offset:end]), (offset, n)


def test_partial_read_seeks_instead_of_decoding(tmp_path, monkeypatch):
    x = _grid_signal(16, channels=1, frames=10_000)
    save(tmp_path / "s.wav", x, 8000, bits_per_sample=16)
    requested = []
    real_read = sf.SoundFile.read

    def spy(self, frames=-1, *args, **kwargs):
        requested.append((self.tell(), frames))
        return real_read(self, frames, *args, **kwargs)

    monkeypatch.setattr(sf.SoundFile, "read", spy)
    part, _ = load(tmp_path / "s.wav", frame_offset=9000, num_frames=10)
    assert requested == [(9000, 10)]
    assert part.shape == (1, 10)


def test_ogg_vorbis_round_trip_is_close(tmp_path):
    t = torch.arange(16000) / 16000
    x = (0.5 * torch.sin(2 * torch.pi * 440 * t))[None]
    save(tmp_path / "v.ogg", x, 16000)
    meta = info(tmp_path / "v.ogg")
    assert meta.encoding == "VORBIS" and meta.num_frames == 16000 and meta.sample_rate == 16000
    y, _ = load(tmp_path / "v.ogg")
    assert y.shape == x.shape
    assert (y - x).pow(2).mean().sqrt() < 0.02  # lossy codec: close, not exact


@pytest.mark.parametrize("ext,encoding", [("opus", "OPUS"), ("mp3", "MP3")])
def test_other_lossy_codecs(tmp_path, ext, encoding):
    t = torch.arange(48000) / 48000
    x = (0.5 * torch.sin(2 * torch.pi * 440 * t))[None]
    save(tmp_path / f"a.{ext}", x, 48000)
    meta = info(tmp_path / f"a.{ext}")
    assert meta.encoding == encoding and meta.sample_rate == 48000
    y, _ = load(tmp_path / f"a.{ext}")
    n = min(y.shape[1], x.shape[1])
    assert abs(n - 48000) < 2048  # codec priming/padding frames
    spectrum = torch.fft.rfft(y[0, :n]).abs()
    assert spectrum.argmax().item() == pytest.approx(440 * n / 48000, abs=2)


def test_file_objects(tmp_path):
    x = _grid_signal(16, channels=1, frames=256)
    buf = io.BytesIO()
    save(buf, x, 8000, format="wav", bits_per_sample=16)
    buf.seek(0)
    y, sr = load(buf, frame_offset=10, num_frames=20)
    assert sr == 8000
    torch.testing.assert_close(y, x[:, 10:30], rtol=0, atol=0)
    buf.seek(0)
    assert info(buf).num_frames == 256


def test_corrupt_and_missing_files_raise_runtime_error_naming_file(tmp_path):
    bad = tmp_path / "garbage.wav"
    bad.write_bytes(b"RIFF\x00\x00\x00\x00WAVEnot really audio" * 3)
    for fn in (load, info):
        with pytest.raises(RuntimeError, match="garbage.wav"):
            fn(bad)
        with pytest.raises(RuntimeError, match="missing.flac"):
            fn(tmp_path / "missing.flac")
    empty = tmp_path / "empty.ogg"
    empty.write_bytes(b"")
    with pytest.raises(RuntimeError, match="empty.ogg"):
        load(empty)
    # a truncated FLAC stream decodes what it can or raises RuntimeError; never crashes
    save(tmp_path / "ok.flac", _grid_signal(16, 1, 20000), 16000, bits_per_sample=16)
    raw = (tmp_path / "ok.flac").read_bytes()
    (tmp_path / "cut.flac").write_bytes(raw[: len(raw) // 2])
    try:
        y, _ = load(tmp_path / "cut.flac")
        assert y.shape[1] <= 20000
    except RuntimeError as err:
        assert "cut.flac" in str(err)


def test_bad_arguments():
    x = torch.zeros(1, 10)
    with pytest.raises(ValueError, match="src"):
        save("/tmp/x.wav", torch.zeros(10), 8000)
    with pytest.raises(ValueError, match="sample_rate"):
        save("/tmp/x.wav", x, 0)
    with pytest.raises(ValueError, match="bits_per_sample"):
        save("/tmp/x.wav", x, 8000, encoding="PCM_S", bits_per_sample=12)
    with pytest.raises(ValueError, match="encoding"):
        save("/tmp/x.wav", x, 8000, encoding="MAGIC")
    with pytest.raises(ValueError, match="format"):
        save(io.BytesIO(), x, 8000)
    with pytest.raises(ValueError, match="format"):
        save("/tmp/x.nope", x, 8000)
    with pytest.raises(ValueError, match="frame_offset"):
        load("/tmp/x.wav", frame_offset=-1)
    with pytest.raises(ValueError, match="num_frames"):
        load("/tmp/x.wav", num_frames=-5)
    with pytest.raises(TypeError, match="path_or_fileobj"):
        load(12345)


def test_implausible_length_claims_are_read_block_by_block(tmp_path, monkeypatch):
    # a corrupt header can claim terabytes of frames; past a samples-per-byte bound, load
    # reads in blocks until the decoder stops instead of allocating the claim up front
    import ember.audio.io as eio

    x = _grid_signal(16, channels=2, frames=5000)
    save(tmp_path / "a.flac", x, 8000, bits_per_sample=16)
    full, _ = load(tmp_path / "a.flac")
    monkeypatch.setattr(eio, "_MAX_SAMPLES_PER_BYTE", 0)
    monkeypatch.setattr(eio, "_SLACK_SAMPLES", 0)
    monkeypatch.setattr(eio, "_BLOCK_FRAMES", 700)
    requested = []
    real_read = sf.SoundFile.read

    def spy(self, frames=-1, *args, **kwargs):
        requested.append(frames)
        return real_read(self, frames, *args, **kwargs)

    monkeypatch.setattr(sf.SoundFile, "read", spy)
    torch.testing.assert_close(load(tmp_path / "a.flac")[0], full, rtol=0, atol=0)
    assert max(requested) == 700 and len(requested) == 8  # ceil(5000 / 700)
    part, _ = load(tmp_path / "a.flac", frame_offset=1234, num_frames=2000)
    torch.testing.assert_close(part, full[:, 1234:3234], rtol=0, atol=0)
