"""The native float32 STFT-power-projection kernel against float64 torch.stft."""

import importlib.resources
import itertools

import pytest
import torch

from ember.audio.functional import _framed_power as FP
from ember.audio.functional import _stft_native as N

native = pytest.mark.skipif(not N.available(400, torch.float32),
                            reason="no C++ compiler: the native kernel is not built")


def test_the_kernel_source_ships_beside_its_module():
    source = importlib.resources.files(N.__package__) / "_stft_native.cpp"
    assert "ember_stft_power_project" in source.read_text(encoding="utf-8")


def _reference(x, window, n_fft, hop, pad, center, mode, proj):
    spec = torch.stft(torch.nn.functional.pad(x.double(), (pad, pad)), n_fft, hop,
                      win_length=window.shape[0], window=window.double(), center=center,
                      pad_mode=mode, return_complex=True).abs().square()
    return proj.double() @ spec


# n_fft covers radix 4/2 (256), 4/2/5 (400), 7 (98 = 2 * 7 * 7), generic primes (286 = 2 * 11
# * 13, 74 = 2 * 37), odd lengths (63, 45: full-length complex transform) and tiny ones
LENGTHS = [400, 256, 98, 286, 74, 63, 45, 6, 3]
CASES = list(itertools.product(LENGTHS, [16, 37], [0, 9], [True, False],
                               sorted(FP.PAD_MODES)))


@native
@pytest.mark.parametrize("n_fft,hop,pad,center,mode", CASES[::5])
def test_native_kernel_matches_float64_stft(monkeypatch, n_fft, hop, pad, center, mode):
    monkeypatch.setattr(FP, "BLOCK_FRAMES", 23)  # partial 16-frame groups at every block end
    calls = []
    real = N.frames_power_project
    monkeypatch.setattr(N, "frames_power_project", lambda *a: calls.append(1) or real(*a))
    g = torch.Generator().manual_seed(n_fft * hop + pad)
    x = torch.randn(3, 700, generator=g)
    window = torch.hann_window(n_fft - 2 if n_fft > 8 else n_fft)  # centred in n_fft
    proj = torch.rand(7, n_fft // 2 + 1, generator=g)
    proj[:, ::3] = 0
    proj[2] = 0  # an all-zero row
    got = FP.stft_power_project(x, window, n_fft, hop, pad, center, mode, proj)
    ref = _reference(x, window, n_fft, hop, pad, center, mode, proj)
    assert calls and got.dtype == torch.float32 and got.shape == ref.shape
    torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=2e-6 * float(ref.abs().max()))


@native
def test_without_a_compiler_the_torch_path_serves(monkeypatch):
    x = torch.randn(2, 3000, generator=torch.Generator().manual_seed(0))
    window, proj = torch.hann_window(400), torch.rand(10, 201)
    native = FP.stft_power_project(x, window, 400, 160, 0, True, "reflect", proj)
    monkeypatch.setattr(N, "_library", lambda: None)
    assert not N.available(400, torch.float32)
    plain = FP.stft_power_project(x, window, 400, 160, 0, True, "reflect", proj)
    torch.testing.assert_close(native, plain, rtol=1e-5, atol=1e-5 * float(plain.max()))


@native
def test_kernel_serves_float32_and_small_prime_factors_only():
    assert N.available(512, torch.float32) and N.available(2 * 61, torch.float32)
    assert not N.available(400, torch.float64)
    assert not N.available(2 * 67, torch.float32)  # a large prime: torch's FFT is faster


def test_bands_are_the_nonzero_column_span_of_each_row():
    proj = torch.tensor([[0.0, 1.0, 0.0, 2.0, 0.0], [0.0] * 5, [3.0, 0.0, 0.0, 0.0, 4.0]])
    lo, hi = N.bands(proj)
    assert lo.tolist() == [1, 0, 0] and hi.tolist() == [4, 0, 5] and lo.dtype == torch.int32
