"""Transforms: round trips, batching, masking statistics, errors, gradients, TorchDynamo capture."""

import copy
import math

import numpy as np
import pytest
import torch

from ember.audio import functional as F
from ember.audio import transforms as T

SR = 16000


def _wave(*lead: int, n: int = 4000, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(n) / SR
    tone = 0.5 * torch.sin(2 * math.pi * 440 * t)
    return tone + 0.1 * torch.randn(*lead, n, generator=g)


BATCHED = [
    T.Spectrogram(n_fft=256),
    T.Spectrogram(n_fft=256, power=None, normalized=True),
    T.MelSpectrogram(sample_rate=SR, n_fft=256, n_mels=40),
    T.MFCC(sample_rate=SR, n_mfcc=13, melkwargs=dict(n_fft=256, n_mels=40)),
    T.LFCC(sample_rate=SR, n_filter=40, n_lfcc=13, speckwargs=dict(n_fft=256)),
    T.Resample(SR, 8000),
    T.Fade(100, 300, "quarter_sine"),
    T.Vol(3.0, "db"),
    T.Preemphasis(),
    T.MuLawEncoding(),
]


@pytest.mark.parametrize("tr", BATCHED, ids=lambda m: type(m).__name__)
def test_batched_equals_per_item(tr):
    x = _wave(2, 3)
    out = tr(x)
    for i in range(2):
        for c in range(3):
            torch.testing.assert_close(out[i, c], tr(x[i, c]), atol=1e-4, rtol=1e-5)


def test_inverse_spectrogram_round_trip():
    x = _wave(2, n=3000)
    for normalized in (False, True, "frame_length"):
        kw = dict(n_fft=256, hop_length=64, normalized=normalized)
        spec = T.Spectrogram(power=None, **kw)(x)
        back = T.InverseSpectrogram(**kw)(spec, length=3000)
        torch.testing.assert_close(back, x, atol=1e-5, rtol=0)
    spec = T.Spectrogram(n_fft=256, pad=50, power=None)(x)
    torch.testing.assert_close(T.InverseSpectrogram(n_fft=256, pad=50)(spec, length=3000), x,
                               atol=1e-5, rtol=0)
    # without a length the padding stays, as in torchaudio: the padded signal comes back
    padded = torch.nn.functional.pad(x, (50, 50))
    spec = T.Spectrogram(n_fft=256, hop_length=64, pad=50, power=None)(x)
    back = T.InverseSpectrogram(n_fft=256, hop_length=64, pad=50)(spec)
    assert back.shape[-1] == 64 * (spec.shape[-1] - 1) == 3072   # istft's own length
    torch.testing.assert_close(back, padded[..., :3072], atol=1e-5, rtol=0)


def test_griffinlim_recovers_a_consistent_signal():
    x = _wave(n=4000)
    spec = T.Spectrogram(n_fft=256, hop_length=64)(x)
    torch.manual_seed(0)
    y = T.GriffinLim(n_fft=256, hop_length=64, n_iter=60, length=4000)(spec)
    assert y.shape == x.shape
    rebuilt = T.Spectrogram(n_fft=256, hop_length=64)(y)
    # spectral convergence: |S(y)| close to the target magnitude
    err = (rebuilt.sqrt() - spec.sqrt()).norm() / spec.sqrt().norm()
    assert err < 0.15


def test_inverse_melscale_is_clipped_least_squares():
    mel_scale = T.MelScale(n_mels=32, sample_rate=SR, n_stft=129).double()
    spec = T.Spectrogram(n_fft=256)(_wave(2, n=2000)).double()
    mel = mel_scale(spec)
    inv = T.InverseMelScale(n_stft=129, n_mels=32, sample_rate=SR).double()(mel)
    assert inv.shape == spec.shape and (inv >= 0).all()
    fb_t = mel_scale.fb.t().numpy()
    for i in range(2):
        ref = np.maximum(np.linalg.lstsq(fb_t, mel[i].numpy(), rcond=None)[0], 0)
        np.testing.assert_allclose(inv[i].numpy(), ref, atol=1e-8 * mel.max().item())


def test_time_stretch_changes_length_and_keeps_pitch():
    x = _wave(n=SR)
    spec = T.Spectrogram(n_fft=512, hop_length=128, power=None)(x)
    for rate in (0.5, 2.0):
        out = T.TimeStretch(hop_length=128, n_freq=257, fixed_rate=rate)(spec)
        assert out.shape[-1] == math.ceil(spec.shape[-1] / rate)
        assert out.abs().mean(-1).argmax() == spec.abs().mean(-1).argmax()
    with pytest.raises(ValueError, match="rate"):
        T.TimeStretch(n_freq=257)(spec)


def test_frequency_and_time_masking():
    spec = torch.ones(4, 2, 64, 100)
    torch.manual_seed(1)
    out = T.FrequencyMasking(20)(spec)
    masked_rows = (out[0, 0] == 0).all(dim=1)
    assert masked_rows.sum() < 20
    # one band shared by every item and channel when iid_masks=False
    assert torch.equal(out, out[:1, :1].expand_as(out))
    rows = masked_rows.nonzero().flatten()
    if len(rows):
        assert (rows.diff() == 1).all()
    out = T.TimeMasking(30, iid_masks=True)(spec)
    cols = (out == 0).all(dim=-2)  # (4, 2, time)
    assert (cols.sum(-1) < 30).all()
    assert len({tuple(c.nonzero().flatten().tolist()) for c in cols.reshape(8, -1)}) > 1
    out = T.TimeMasking(80, p=0.1)(spec)
    assert (out == 0).all(dim=-2)[0, 0].sum() <= 10
    out = T.FrequencyMasking(20)(spec, mask_value=-5.0)
    assert set(out.unique().tolist()) <= {1.0, -5.0}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_mask_along_axis_iid_draws_in_input_dtype(dtype):
    # torchaudio draws widths and starts with torch.rand in the input's dtype; under one seed
    # the bands must be the ones those draws give (float64 draws consume other random bits)
    spec = torch.rand(3, 2, 40, 50, dtype=dtype) + 1
    torch.manual_seed(7)
    out = F.mask_along_axis_iid(spec, 17, 0.0, axis=3)
    torch.manual_seed(7)
    width = torch.rand(3, 2, dtype=dtype) * 17
    start = torch.rand(3, 2, dtype=dtype) * (50 - width)
    lo, hi = start.long().numpy(), (start.long() + width.long()).numpy()
    cols = np.arange(50)
    expect = (cols >= lo[..., None]) & (cols < hi[..., None])  # (3, 2, time)
    np.testing.assert_array_equal((out == 0).all(dim=-2).numpy(), expect)
    assert expect.any()


def test_specaugment_masks_with_mean_or_zero():
    torch.manual_seed(0)
    spec = torch.rand(3, 40, 200) + 1
    out = T.SpecAugment(n_time_masks=2, time_mask_param=20, n_freq_masks=2,
                        freq_mask_param=8, zero_masking=True)(spec)
    assert (out == 0).any() and out.shape == spec.shape
    assert ((out == 0) | (out == spec)).all()
    out = T.SpecAugment(2, 20, 2, 8)(spec)
    changed = out != spec
    assert changed.any()
    torch.testing.assert_close(out[changed], spec.mean().expand(int(changed.sum())))


def test_fade_shapes():
    x = torch.ones(2, 1000)
    out = T.Fade(fade_in_len=100, fade_out_len=200)(x)
    torch.testing.assert_close(out[0, :100], torch.linspace(0, 1, 100))
    torch.testing.assert_close(out[0, -200:], torch.linspace(1, 0, 200))
    assert (out[:, 100:800] == 1).all()
    for shape in ("exponential", "logarithmic", "quarter_sine", "half_sine"):
        env = T.Fade(50, 50, shape)(x)[0]
        assert env[0] <= 0.04 and env[-1] <= 0.04 and env[500] == 1
        assert (env[:50].diff() >= 0).all() and (env[-50:].diff() <= 0).all()
    with pytest.raises(ValueError, match="fade_shape"):
        T.Fade(10, 10, "cubic")
    with pytest.raises(ValueError, match="fade lengths"):
        T.Fade(2000)(x)


def test_fade_exponential_is_torchaudio_curve():
    # torchaudio >= 2.1: in 2^(f-1) * f, out 2^-f * (1 - f) on f = linspace(0, 1); both reach 0
    f_in, f_out = np.linspace(0, 1, 60), np.linspace(0, 1, 90)
    env = T.Fade(60, 90, "exponential")(torch.ones(400, dtype=torch.float64)).numpy()
    np.testing.assert_allclose(env[:60], 2.0 ** (f_in - 1) * f_in, rtol=1e-12, atol=0)
    np.testing.assert_allclose(env[-90:], 2.0 ** -f_out * (1 - f_out), rtol=1e-12, atol=0)
    assert env[0] == 0 and env[-1] == 0 and (env[60:-90] == 1).all()


def test_vol_gain_types():
    x = torch.full((10,), 0.1)
    torch.testing.assert_close(T.Vol(2.0)(x), x * 2)
    torch.testing.assert_close(T.Vol(20 * math.log10(3), "db")(x), x * 3)
    torch.testing.assert_close(T.Vol(4.0, "power")(x), x * 2)
    assert T.Vol(100.0)(x).max() == 1.0
    with pytest.raises(ValueError, match="gain_type"):
        T.Vol(1.0, "bel")
    with pytest.raises(ValueError, match="gain"):
        T.Vol(-1.0)


def test_mu_law():
    x = torch.linspace(-1, 1, 1001)
    codes = T.MuLawEncoding(256)(x)
    assert codes.dtype == torch.int64 and codes.min() == 0 and codes.max() == 255
    assert (codes.diff() >= 0).all()
    back = T.MuLawDecoding(256)(codes)
    # the quantisation step grows with |x|: error bounded by the local step size
    assert ((back - x).abs() < 0.035).all() and ((back - x).abs()[495:506] < 0.001).all()
    assert F.mu_law_encoding(torch.tensor([0.0]), 256).item() == 128


def test_amplitude_to_db_top_db_is_per_item():
    spec = torch.stack([torch.full((2, 4, 5), 1.0), torch.full((2, 4, 5), 1e-3)])
    spec[0, 0, 0, 0] = 1e-12
    spec[1, 1, 0, 0] = 1e-12
    out = T.AmplitudeToDB("power", top_db=40.0)(spec)
    assert out[0].min() == -40.0  # peak 0 dB
    assert out[1].min() == -70.0  # peak -30 dB
    with pytest.raises(ValueError, match="top_db"):
        T.AmplitudeToDB(top_db=-1)
    with pytest.raises(ValueError, match="stype"):
        T.AmplitudeToDB("energy")


def test_create_dct_is_orthonormal_and_fbanks_are_triangles():
    d = F.create_dct(40, 40, "ortho")
    torch.testing.assert_close(d.t() @ d, torch.eye(40), atol=1e-5, rtol=0)
    fb = F.linear_fbanks(129, 0.0, 8000.0, 10, SR)
    assert fb.shape == (129, 10) and (fb >= 0).all() and (fb.max(0).values > 0.9).all()


def test_bad_shapes_and_arguments():
    with pytest.raises(ValueError, match="MelScale|specgram"):
        T.MelScale(n_mels=40, n_stft=201)(torch.rand(2, 129, 10))
    with pytest.raises(ValueError, match="waveform"):
        T.Spectrogram()(torch.tensor(1.0))
    with pytest.raises(ValueError, match="n_fft"):
        T.Spectrogram(n_fft=400)(torch.rand(100))
    with pytest.raises(ValueError, match="win_length"):
        T.Spectrogram(n_fft=256, win_length=400)
    with pytest.raises(ValueError, match="normalized"):
        T.Spectrogram(normalized="energy")
    with pytest.raises(ValueError, match="n_mfcc"):
        T.MFCC(n_mfcc=50, melkwargs=dict(n_mels=40))
    with pytest.raises(ValueError, match="f_min"):
        T.MelScale(f_min=9000.0, sample_rate=SR)
    with pytest.raises(ValueError, match="mel_scale"):
        F.melscale_fbanks(201, 0.0, 8000.0, 40, SR, mel_scale="bark")
    with pytest.raises(ValueError, match="axis"):
        F.mask_along_axis(torch.rand(3, 4, 5), 2, 0.0, axis=0)
    with pytest.raises(ValueError, match="complex"):
        T.InverseSpectrogram()(torch.rand(201, 10))
    with pytest.raises(ValueError, match="win_length"):
        T.ComputeDeltas(win_length=2)
    with pytest.raises(ValueError, match="momentum"):
        T.GriffinLim(momentum=1.5)


def test_buffers_follow_torchaudio_state_dict_names():
    # torchaudio's defaults (128 mels over 201 bins) leave empty filters; both warn about it
    with pytest.warns(UserWarning, match="all zero"):
        mel, mfcc = T.MelSpectrogram(), T.MFCC()
    assert set(mel.state_dict()) == {"spectrogram.window", "mel_scale.fb"}
    assert set(mfcc.state_dict()) == {"dct_mat", "MelSpectrogram.spectrogram.window",
                                          "MelSpectrogram.mel_scale.fb"}


def test_gradients_flow_through_features():
    x = torch.randn(1, 600, dtype=torch.float64, requires_grad=True)
    mel = T.MelSpectrogram(sample_rate=SR, n_fft=128, n_mels=16).double()
    assert torch.autograd.gradcheck(lambda v: mel(v), (x,), fast_mode=True)
    mfcc = T.MFCC(sample_rate=SR, n_mfcc=8, melkwargs=dict(n_fft=128, n_mels=16)).double()
    mfcc(x).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


TRACEABLE = [
    (T.Spectrogram(n_fft=256), "real"),
    (T.MelSpectrogram(n_fft=256, n_mels=40), "real"),
    (T.MFCC(n_mfcc=13, melkwargs=dict(n_fft=256, n_mels=40)), "real"),
    (T.LFCC(n_filter=40, n_lfcc=13, speckwargs=dict(n_fft=256)), "real"),
    (T.AmplitudeToDB(top_db=80.0), "real"),
    (T.Resample(44100, 16000), "real"),
    (T.Fade(100, 100), "real"),
    (T.Vol(0.5), "real"),
    (T.MuLawEncoding(), "real"),
    (T.Preemphasis(), "real"),
    (T.ComputeDeltas(), "real"),
    (T.InverseSpectrogram(n_fft=256), "complex"),
    (T.TimeStretch(n_freq=129, fixed_rate=1.25), "complex"),
]


@pytest.mark.parametrize("tr,kind", TRACEABLE, ids=lambda v: type(v).__name__)
def test_dynamo_captures_without_graph_breaks(tr, kind):
    torch._dynamo.reset()
    x = _wave(2, n=2000)
    if kind == "complex":
        x = torch.stft(x, 256, 128, window=torch.hann_window(256), return_complex=True)
    compiled = torch.compile(tr, backend="eager", fullgraph=True)
    eager = tr(x)  # the CPU fast paths: another float32 FFT than the traced torch.stft
    torch.testing.assert_close(compiled(x), eager, rtol=1e-4,
                               atol=1e-5 * float(eager.abs().max()))


RANDOM_OR_ITERATIVE = [
    (T.GriffinLim(n_fft=256, n_iter=3), "spec"),
    (T.InverseMelScale(129, n_mels=32), "mel"),
    (T.FrequencyMasking(10), "spec"),
    (T.TimeMasking(10, iid_masks=True), "spec"),
    (T.SpecAugment(2, 10, 2, 10), "spec"),
    (T.Deemphasis(), "wave"),
    (T.MuLawDecoding(), "codes"),
]


@pytest.mark.parametrize("tr,kind", RANDOM_OR_ITERATIVE, ids=lambda v: type(v).__name__)
def test_dynamo_fullgraph_for_random_and_iterative_transforms(tr, kind):
    torch._dynamo.reset()
    x = _wave(2, n=2000)
    spec = T.Spectrogram(n_fft=256)(x)
    inputs = {"wave": x, "spec": spec, "mel": T.MelScale(32, n_stft=129)(spec),
              "codes": T.MuLawEncoding()(x.clamp(-1, 1))}[kind]
    out = torch.compile(tr, backend="eager", fullgraph=True)(inputs)
    assert out.shape == tr(inputs).shape


EMBER_COMPILED = [
    T.Spectrogram(n_fft=256),
    T.MelSpectrogram(n_fft=256, n_mels=40),
    T.MFCC(n_mfcc=13, melkwargs=dict(n_fft=256, n_mels=40)),
    T.Resample(44100, 16000),
    T.AmplitudeToDB(top_db=80.0),
    T.Fade(100, 100),
    T.Preemphasis(),
    T.MuLawEncoding(),
]


@pytest.mark.parametrize("tr", EMBER_COMPILED, ids=lambda m: type(m).__name__)
def test_ember_core_compile_matches_eager(tr):
    import ember.core

    compile_fn = getattr(ember.core, "compile", None)
    if compile_fn is None:
        pytest.skip("ember.core.compile is not available")
    torch._dynamo.reset()
    x = _wave(2, n=4000)
    torch.testing.assert_close(compile_fn(tr, fullgraph=True)(x), tr(x), atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("tr", [T.InverseSpectrogram(n_fft=256),
                                T.TimeStretch(n_freq=129, fixed_rate=1.25)],
                         ids=lambda m: type(m).__name__)
def test_ember_core_compiles_complex_input_graphs(tr):
    """Complex inputs reach the compiled graph (complex ops run as ATen externs, the real parts
    as kernels): no eager fallback of the whole graph, results equal eager's to float32 rounding."""
    import ember.core
    from ember.core.compiler import backend

    torch._dynamo.reset()
    spec = torch.stft(_wave(2, n=4000), 256, 128, window=torch.hann_window(256),
                      return_complex=True)
    fallbacks = backend.stats["graphs_fallback"]
    out = ember.core.compile(tr, fullgraph=True, options={"strict": True})(spec)
    assert backend.stats["graphs_fallback"] == fallbacks
    ref = tr(spec)
    assert out.shape == ref.shape and out.dtype == ref.dtype
    # the phase vocoder accumulates phase over frames, so float32 rounding grows along time:
    # ours must be as close to a float64 run as eager float32 is (or within 1e-5 relative)
    exact = copy.deepcopy(tr).double()(spec.to(torch.complex128))
    ours_err = (out.to(exact.dtype) - exact).abs().max().item()
    eager_err = (ref.to(exact.dtype) - exact).abs().max().item()
    assert ours_err <= max(2 * eager_err, 1e-5 * exact.abs().max().item()), (ours_err, eager_err)
