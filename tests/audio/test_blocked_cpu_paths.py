"""The CPU inference fast paths (blocked mel power spectrum, blocked resampling on
``ember.core.parallel``) against the plain torch compositions they replace."""

import itertools

import pytest
import torch

from ember.audio import transforms as T
from ember.audio.functional import _framed_power as FP
from ember.audio.functional import melscale_fbanks
from ember.audio.functional import resampling as R
from ember.core import parallel


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 7 frames: every signal crosses block boundaries and edge blocks."""
    monkeypatch.setattr(FP, "BLOCK_FRAMES", 7)


@pytest.fixture
def two_threads(monkeypatch):
    """Two torch threads on an (apparently) idle machine: the worker threads do run."""
    monkeypatch.setattr(parallel, "spare_cores", lambda: 2)
    prev = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(prev)


CASES = list(itertools.product([300, 1001], [64, 100], [16, 37], [None, 50], [0, 40],
                               [True, False], sorted(FP.PAD_MODES)))


@pytest.mark.parametrize("length,n_fft,hop,win,pad,center,mode", CASES[::3])
def test_stft_power_project_equals_stft_power_then_matmul(small_blocks, length, n_fft, hop,
                                                          win, pad, center, mode):
    g = torch.Generator().manual_seed(length + n_fft + hop)
    x = torch.randn(3, length, dtype=torch.float64, generator=g)
    window = torch.hann_window(win or n_fft, dtype=torch.float64)
    ref = torch.stft(torch.nn.functional.pad(x, (pad, pad)), n_fft, hop,
                     win_length=win or n_fft, window=window, center=center, pad_mode=mode,
                     return_complex=True).abs().square()
    proj = torch.rand(5, n_fft // 2 + 1, dtype=torch.float64, generator=g)
    proj[:, ::3] = 0
    proj[2] = 0  # an all-zero filter
    got = FP.stft_power_project(x, window, n_fft, hop, pad, center, mode, proj)
    torch.testing.assert_close(got, proj @ ref, atol=1e-10, rtol=1e-10)


def test_band_groups_cover_every_row_and_nonzero_column():
    fb = melscale_fbanks(201, 0.0, 8000.0, 80, 16000).t()
    groups = FP.band_groups(fb)
    assert [g[0] for g in groups] == [0] + [g[1] for g in groups[:-1]] and groups[-1][1] == 80
    assert 1 < len(groups) < 80
    covered = torch.zeros_like(fb, dtype=torch.bool)
    for m0, m1, c0, c1 in groups:
        covered[m0:m1, c0:c1] = True
    assert not (fb != 0)[~covered].any()
    assert sum((m1 - m0) * (c1 - c0) for m0, m1, c0, c1 in groups) < fb.numel() / 2
    dense = torch.ones(4, 9)
    assert FP.band_groups(dense) == [(0, 4, 0, 9)]


MEL_SETTINGS = [
    dict(n_fft=400, hop_length=160, n_mels=80),
    dict(n_fft=512, win_length=400, hop_length=128, n_mels=64, norm="slaney",
         mel_scale="slaney", f_min=30.0, f_max=7600.0),
    dict(n_fft=256, n_mels=40, pad=30, normalized=True),
    dict(n_fft=256, n_mels=40, normalized="frame_length", center=False),
    dict(n_fft=256, n_mels=40, pad_mode="constant"),
]


@pytest.mark.parametrize("kw", MEL_SETTINGS)
def test_mel_spectrogram_fast_path_equals_plain_composition(small_blocks, two_threads, kw):
    tr = T.MelSpectrogram(sample_rate=16000, **kw)
    x = torch.randn(2, 3, 4000, generator=torch.Generator().manual_seed(1))
    assert tr._blocked_cpu_path(x)
    plain = tr.mel_scale(tr.spectrogram(x))
    got = tr(x)
    assert got.shape == plain.shape and got.is_contiguous()
    torch.testing.assert_close(got, plain, atol=1e-4 * float(plain.abs().max()), rtol=1e-5)
    x64 = x.double()
    tr64 = tr.double()
    torch.testing.assert_close(tr64(x64), tr64.mel_scale(tr64.spectrogram(x64)),
                               atol=1e-9, rtol=1e-9)


def test_mel_spectrogram_autograd_takes_the_differentiable_path():
    tr = T.MelSpectrogram(n_fft=256, n_mels=40)
    x = torch.randn(2, 2000, requires_grad=True)
    assert not tr._blocked_cpu_path(x)
    with torch.no_grad():
        assert tr._blocked_cpu_path(x)
        fast = tr(x)
    out = tr(x)
    out.sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    torch.testing.assert_close(out.detach(), fast, atol=1e-4 * float(fast.max()), rtol=1e-5)


def test_mel_spectrogram_errors_match_the_plain_path():
    with pytest.raises(ValueError, match="reflect padding"):
        T.MelSpectrogram(n_fft=400, n_mels=40)(torch.randn(2, 150))
    with pytest.raises(RuntimeError):  # torch.stft: shorter than one frame without centring
        T.MelSpectrogram(n_fft=400, n_mels=40, center=False)(torch.randn(2, 150))
    assert T.MelSpectrogram(n_fft=256, n_mels=40)(torch.randn(0, 3, 1000)).shape == (0, 3, 40, 8)


@pytest.mark.parametrize("spans", [(1, 1), (1, 50), R.SPAN_SAMPLES])
@pytest.mark.parametrize("orig,new", [(441, 160), (3, 2), (2, 3), (8, 1), (16, 22), (160, 147)])
def test_blocked_resample_equals_the_traced_composition(monkeypatch, two_threads, spans, orig,
                                                        new):
    monkeypatch.setattr(R, "SPAN_SAMPLES", spans)
    kernel, width = R.sinc_resample_kernel(orig, new, dtype=torch.float64)
    plan = R.polyphase_plan(orig, new)
    g = torch.Generator().manual_seed(orig * new)
    for length in (1, 5, 997, 5000):
        x = torch.randn(3, length, dtype=torch.float64, generator=g)
        assert R._blocked_cpu_path(x, kernel)
        got = R.apply_sinc_resample_kernel(x, orig, new, kernel, width, plan)
        traced = R.apply_sinc_resample_kernel(x.requires_grad_(), orig, new, kernel, width, plan)
        assert not R._blocked_cpu_path(x, kernel)  # autograd takes the traced path
        assert got.shape == traced.shape and got.is_contiguous()
        torch.testing.assert_close(got, traced.detach(), atol=1e-12, rtol=0)


def test_resample_with_grad_disabled_uses_the_blocked_path():
    x = torch.randn(2, 3, 4410, requires_grad=True)
    kernel, _ = R.sinc_resample_kernel(441, 160)
    with torch.no_grad():
        assert R._blocked_cpu_path(x, kernel)
        fast = R.resample(x, 44100, 16000)
    torch.testing.assert_close(fast, R.resample(x, 44100, 16000).detach(), atol=1e-6, rtol=0)
    assert not R._blocked_cpu_path(x.double(), kernel)  # kernel dtype differs: plain path


def test_blocked_paths_take_strided_input(two_threads):
    from ember.audio import functional as AF

    mel = T.MelSpectrogram(n_fft=256, n_mels=40)
    for x in (torch.randn(3000, 2).t(), torch.randn(2, 6000)[:, ::2]):
        assert not x.is_contiguous()
        torch.testing.assert_close(mel(x), mel(x.contiguous()), atol=0, rtol=0)
        torch.testing.assert_close(AF.resample(x, 441, 160), AF.resample(x.contiguous(), 441, 160),
                                   atol=0, rtol=0)


@pytest.mark.parametrize("orig,new", [(441, 160), (160, 441), (160, 147), (2, 1), (11, 8)])
def test_uniform_bank_holds_every_nonzero_tap_of_the_kernel(orig, new):
    kernel, _ = R.sinc_resample_kernel(orig, new, dtype=torch.float64)
    ub = R._uniform_bank(kernel, orig, new)
    assert ub.groups * ub.size >= new > (ub.groups - 1) * ub.size
    assert ub.groups * ub.size * ub.taps <= new * kernel.shape[-1]  # never above the dense cost
    dense = torch.zeros_like(kernel[:, 0])
    for p in range(new):
        g, j = divmod(p, ub.size)
        start = ub.first + g * ub.step
        for t in range(ub.taps):
            if 0 <= start + t < dense.shape[1]:
                dense[p, start + t] = ub.bank[g, t, j]
    torch.testing.assert_close(dense, kernel[:, 0], atol=0, rtol=0)
    assert R._uniform_bank(kernel, orig, new) is ub  # cached per kernel tensor
    changed = kernel.clone()
    assert R._uniform_bank(changed, orig, new) is not ub
    changed.mul_(2)  # an in-place change is seen
    torch.testing.assert_close(R._uniform_bank(changed, orig, new).bank, ub.bank * 2)
