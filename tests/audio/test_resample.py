"""Resample against a direct windowed-sinc reference written here in numpy."""

import math

import numpy as np
import pytest
import torch

from ember.audio import functional as F
from ember.audio import transforms as T
from ember.audio.functional.resampling import (
    apply_sinc_resample_kernel,
    polyphase_plan,
    sinc_resample_kernel,
)


def reference_resample(x: np.ndarray, orig: int, new: int, width: int = 6,
                       rolloff: float = 0.99, window: str = "hann",
                       beta: float = 14.769656459379492) -> np.ndarray:
    """y[j] = sum_i x[i] * (f_c / orig) * sinc(f_c (i/orig - j/new)) * w(.), f_c = rolloff*min.

    Direct O(len(x) * len(y)) evaluation, float64, with the window reaching zero at
    ``width`` zero-crossings of the low-pass sinc.
    """
    fc = min(orig, new) * rolloff
    n_out = math.ceil(new * len(x) / orig)
    i = np.arange(len(x))[None, :]
    j = np.arange(n_out)[:, None]
    t = fc * (i / orig - j / new)
    inside = np.abs(t) <= width
    tc = np.clip(t, -width, width)
    if window == "hann":
        w = np.cos(np.pi * tc / width / 2) ** 2
    else:
        w = np.i0(beta * np.sqrt(1 - (tc / width) ** 2)) / np.i0(beta)
    kernel = np.sinc(t) * w * inside * fc / orig
    return kernel @ x


@pytest.mark.parametrize("orig,new", [(3, 2), (2, 3), (441, 160), (8, 1), (16, 22)])
@pytest.mark.parametrize("method", ["sinc_interp_hann", "sinc_interp_kaiser"])
def test_matches_direct_windowed_sinc(orig, new, method):
    rng = np.random.default_rng(orig * 100 + new)
    x = rng.uniform(-1, 1, 997)
    ours = F.resample(torch.from_numpy(x), orig, new, resampling_method=method)
    ref = reference_resample(x, orig, new, window="hann" if method.endswith("hann") else "kaiser")
    assert ours.shape == ref.shape
    np.testing.assert_allclose(ours.numpy(), ref, atol=1e-10)


def test_filter_settings_follow_reference():
    x = np.random.default_rng(3).uniform(-1, 1, 500)
    ours = F.resample(torch.from_numpy(x), 5, 4, lowpass_filter_width=12, rolloff=0.9)
    np.testing.assert_allclose(ours.numpy(), reference_resample(x, 5, 4, 12, 0.9), atol=1e-10)


@pytest.mark.parametrize("orig,new,freq", [(44100, 16000, 440.0), (16000, 48000, 1000.0),
                                           (22050, 16000, 3000.0)])
def test_sine_keeps_frequency_and_amplitude(orig, new, freq):
    t = torch.arange(orig) / orig
    x = 0.8 * torch.sin(2 * math.pi * freq * t)
    y = F.resample(x, orig, new).double()
    assert y.shape[-1] == new
    mid = y[new // 10: -new // 10]  # away from the zero-padded edges
    expected = 0.8 * torch.sin(2 * math.pi * freq * (torch.arange(new) / new)).double()
    torch.testing.assert_close(mid, expected[new // 10: -new // 10], atol=2e-3, rtol=0)
    spectrum = torch.fft.rfft(y * torch.hann_window(new, dtype=torch.float64)).abs()
    assert spectrum.argmax().item() == pytest.approx(freq, abs=1)  # bins are 1 Hz apart


def test_kernel_is_cached_per_rate_pair():
    k1, w1 = sinc_resample_kernel(44100, 16000)
    k2, w2 = sinc_resample_kernel(88200, 32000)  # same ratio after the gcd
    k3, _ = sinc_resample_kernel(44100, 22050)
    assert k1 is k2 and w1 == w2
    assert k3 is not k1
    assert k1.shape[0] == 160 and k1.dtype == torch.float32


def test_transform_equals_functional_and_batched_equals_per_item():
    x = torch.randn(2, 3, 4410)
    tr = T.Resample(44100, 16000)
    out = tr(x)
    torch.testing.assert_close(out, F.resample(x, 44100, 16000))
    for i in range(2):
        for c in range(3):
            torch.testing.assert_close(out[i, c], F.resample(x[i, c], 44100, 16000),
                                       atol=1e-6, rtol=1e-5)
    assert "kernel" in tr.state_dict()
    assert torch.equal(T.Resample(16000, 16000)(x), x)


def test_kaiser_beta_changes_the_kernel():
    a, _ = sinc_resample_kernel(3, 2, resampling_method="sinc_interp_kaiser")
    b, _ = sinc_resample_kernel(3, 2, resampling_method="sinc_interp_kaiser", beta=6.0)
    assert not torch.allclose(a, b)


def test_gradient_flows():
    x = torch.randn(1, 40, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v: F.resample(v, 3, 2), (x,))


def test_bad_rates_and_shapes():
    x = torch.randn(100)
    with pytest.raises(ValueError, match="orig_freq"):
        F.resample(x, 0, 16000)
    with pytest.raises(ValueError, match="new_freq"):
        F.resample(x, 16000, -8000)
    with pytest.raises(ValueError, match="new_freq"):
        F.resample(x, 44100, 5512.5)
    with pytest.raises(ValueError, match="resampling_method"):
        F.resample(x, 2, 3, resampling_method="linear")
    with pytest.raises(ValueError, match="lowpass_filter_width"):
        F.resample(x, 2, 3, lowpass_filter_width=0)
    with pytest.raises(ValueError, match="waveform"):
        F.resample(torch.tensor(1.0), 2, 3)
    with pytest.raises(TypeError, match="waveform"):
        F.resample(torch.ones(10, dtype=torch.int64), 2, 3)
    with pytest.raises(ValueError, match="orig_freq"):
        T.Resample(-1, 16000)


@pytest.mark.parametrize("orig,new", [(44100, 16000), (48000, 44100), (16000, 8000)])
def test_grouped_polyphase_equals_dense_strided_conv(orig, new):
    kernel, width = sinc_resample_kernel(orig, new, dtype=torch.float64)
    plan = polyphase_plan(orig, new)
    g = math.gcd(orig, new)
    x = torch.randn(2, 3 * orig // g + 17, dtype=torch.float64)
    padded = torch.nn.functional.pad(x, (width, width + orig // g))
    dense = torch.nn.functional.conv1d(padded[:, None], kernel, stride=orig // g)
    dense = dense.transpose(1, 2).reshape(2, -1)[:, : math.ceil(new * x.shape[-1] / orig)]
    torch.testing.assert_close(apply_sinc_resample_kernel(x, orig, new, kernel, width, plan),
                               dense, atol=1e-12, rtol=0)


@pytest.mark.filterwarnings("ignore:Dynamo detected a call to a `functools.lru_cache`")
def test_functional_resample_traces_without_graph_breaks():
    torch._dynamo.reset()
    x = torch.randn(2, 4410)
    fn = torch.compile(lambda v: F.resample(v, 44100, 16000), backend="eager", fullgraph=True)
    torch.testing.assert_close(fn(x), F.resample(x, 44100, 16000))


@pytest.mark.parametrize("legacy,name", [("sinc_interpolation", "sinc_interp_hann"),
                                         ("kaiser_window", "sinc_interp_kaiser")])
def test_legacy_method_names_warn_and_map(legacy, name):
    # torchaudio < 2.0's names (renamed in pytorch/audio#2922, "numerical behavior unchanged")
    x = torch.randn(2, 4410, generator=torch.Generator().manual_seed(0))
    with pytest.warns(UserWarning, match=name):
        got = F.resample(x, 44100, 16000, resampling_method=legacy)
    torch.testing.assert_close(got, F.resample(x, 44100, 16000, resampling_method=name),
                               rtol=0, atol=0)
    with pytest.warns(UserWarning, match=name):
        tr = T.Resample(44100, 16000, resampling_method=legacy)
    torch.testing.assert_close(tr(x), T.Resample(44100, 16000, resampling_method=name)(x),
                               rtol=0, atol=0)
