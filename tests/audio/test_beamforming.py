"""PSD, RTF, MVDR and Frechet distance against numpy/scipy; filtfilt against scipy.signal."""

import numpy as np
import pytest
import scipy.linalg
import scipy.signal
import torch

from ember.audio import functional as F


def _spec(seed=0, shape=(2, 4, 17, 40)):
    g = torch.Generator().manual_seed(seed)
    spec = torch.randn(*shape, generator=g, dtype=torch.complex128)
    mask = torch.rand(shape[0], shape[2], shape[3], generator=g, dtype=torch.float64)
    return spec, mask


def _np_psd(spec, mask=None, eps=1e-10):
    x = spec.numpy()                                   # (b, c, f, t)
    w = np.ones(x.shape[:1] + x.shape[2:]) if mask is None else mask.numpy()
    w = w / (w.sum(-1, keepdims=True) + eps) if mask is not None else w
    return np.einsum("bcft,bdft,bft->bfcd", x, x.conj(), w)


def test_psd_matches_numpy():
    spec, mask = _spec()
    np.testing.assert_allclose(F.psd(spec).numpy(), _np_psd(spec), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(F.psd(spec, mask).numpy(), _np_psd(spec, mask), rtol=1e-12,
                               atol=1e-12)
    with pytest.raises(ValueError, match="mask"):
        F.psd(spec, mask[..., :-1])


def _loaded(p, reg=1e-7, eps=1e-8):
    tr = np.trace(p, axis1=-2, axis2=-1).real
    return p + (tr * reg + eps)[..., None, None] * np.eye(p.shape[-1])


def test_mvdr_and_rtf_match_numpy():
    spec, mask = _spec(1)
    ps, pn = F.psd(spec, mask), F.psd(spec, 1 - mask)
    ps_np, pn_np = ps.numpy(), _loaded(pn.numpy())
    ratio = np.linalg.solve(pn_np, ps_np)
    ratio = ratio / (np.trace(ratio, axis1=-2, axis2=-1)[..., None, None] + 1e-8)
    np.testing.assert_allclose(F.mvdr_weights_souden(ps, pn, 2).numpy(), ratio[..., :, 2],
                               rtol=1e-9, atol=1e-12)
    onehot = torch.tensor([0.0, 1.0, 0.0, 0.0])
    torch.testing.assert_close(F.mvdr_weights_souden(ps, pn, onehot),
                               F.mvdr_weights_souden(ps, pn, 1), rtol=1e-12, atol=1e-14)
    # principal eigenvector: Phi v = lambda_max v, unit norm
    v = F.rtf_evd(ps).numpy()
    lam = np.linalg.eigvalsh(ps_np)[..., -1]
    np.testing.assert_allclose(np.einsum("bfcd,bfd->bfc", ps_np, v), lam[..., None] * v,
                               rtol=1e-9, atol=1e-9)
    # MVDR from an RTF: w = Pn^-1 h / (h^H Pn^-1 h), so w^H h = 1 (distortionless)
    h = F.rtf_evd(ps)
    w = F.mvdr_weights_rtf(h, pn)
    np.testing.assert_allclose((w.conj() * h).sum(-1).numpy(), 1.0, rtol=0, atol=1e-7)
    w_ref = F.mvdr_weights_rtf(h, pn, 0)
    torch.testing.assert_close(w_ref, w * h[..., 0:1].conj(), rtol=1e-12, atol=1e-14)
    # power iteration from the reference column of Pn^-1 Ps, mapped back through Ps
    phi = np.linalg.solve(pn_np, ps_np)
    vec = phi[..., :, 1]
    for _ in range(2):
        vec = np.einsum("bfcd,bfd->bfc", phi, vec)
    np.testing.assert_allclose(F.rtf_power(ps, pn, 1, n_iter=4).numpy(),
                               np.einsum("bfcd,bfd->bfc", ps_np, vec), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(F.rtf_power(ps, pn, 1, n_iter=1).numpy(),
                               np.einsum("bfcd,bfd->bfc", pn_np, phi[..., :, 1]), rtol=1e-9,
                               atol=1e-9)
    with pytest.raises(TypeError, match="complex"):
        F.mvdr_weights_souden(ps.real, pn.real, 0)
    with pytest.raises(ValueError, match="n_iter"):
        F.rtf_power(ps, pn, 0, n_iter=0)


def test_apply_beamforming_matches_einsum():
    spec, _ = _spec(2)
    g = torch.Generator().manual_seed(3)
    w = torch.randn(2, 17, 4, generator=g, dtype=torch.complex128)
    want = np.einsum("bfc,bcft->bft", w.numpy().conj(), spec.numpy())
    np.testing.assert_allclose(F.apply_beamforming(w, spec).numpy(), want, rtol=1e-12,
                               atol=1e-12)
    with pytest.raises(ValueError, match="leading"):
        F.apply_beamforming(w[:1], spec)


def test_frechet_distance_matches_scipy_sqrtm():
    g = torch.Generator().manual_seed(4)
    a, b = torch.randn(6, 6, generator=g, dtype=torch.float64), torch.randn(
        6, 6, generator=g, dtype=torch.float64)
    sx, sy = a @ a.T + 0.1 * torch.eye(6), b @ b.T + 0.1 * torch.eye(6)
    mx, my = torch.randn(6, generator=g, dtype=torch.float64), torch.randn(
        6, generator=g, dtype=torch.float64)
    covmean = scipy.linalg.sqrtm(sx.numpy() @ sy.numpy()).real
    want = ((mx - my) ** 2).sum().item() + np.trace(sx.numpy() + sy.numpy() - 2 * covmean)
    assert F.frechet_distance(mx, sx, my, sy).item() == pytest.approx(want, rel=1e-9)
    assert F.frechet_distance(mx, sx, mx, sx).item() == pytest.approx(0.0, abs=1e-9)
    with pytest.raises(ValueError, match="sigma_x"):
        F.frechet_distance(mx, sx[:5, :5], my, sy)


def test_filtfilt_is_forward_then_backward_lfilter():
    g = torch.Generator().manual_seed(5)
    x = torch.rand(2, 1500, generator=g, dtype=torch.float64) - 0.5
    b, a = scipy.signal.butter(3, 0.1)
    fwd = scipy.signal.lfilter(b, a, x.numpy())
    want = scipy.signal.lfilter(b, a, fwd[:, ::-1])[:, ::-1]
    got = F.filtfilt(x, torch.tensor(a), torch.tensor(b), clamp=False)
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-12)
    loud = F.filtfilt(x * 8, torch.tensor(a), torch.tensor(b))
    assert loud.abs().max() <= 1.0


def test_multichannel_transforms_and_convolve():
    from ember.audio import transforms as T

    spec, mask = _spec(6)
    masks = mask[:, None].expand(2, 4, 17, 40) * torch.linspace(0.5, 1.5, 4)[:, None, None]
    np.testing.assert_allclose(T.PSD(multi_mask=True)(spec, masks).numpy(),
                               _np_psd(spec, masks.mean(1), eps=1e-15), rtol=1e-12,
                               atol=1e-12)
    ps, pn = F.psd(spec, mask), F.psd(spec, 1 - mask)
    want = np.einsum("bfc,bcft->bft", F.mvdr_weights_souden(ps, pn, 1).numpy().conj(),
                     spec.numpy())
    np.testing.assert_allclose(T.SoudenMVDR()(spec, ps, pn, 1).numpy(), want, rtol=1e-12,
                               atol=1e-12)
    rtf = F.rtf_evd(ps)
    want = np.einsum("bfc,bcft->bft", F.mvdr_weights_rtf(rtf, pn, 0).numpy().conj(),
                     spec.numpy())
    np.testing.assert_allclose(T.RTFMVDR()(spec, rtf, pn, 0).numpy(), want, rtol=1e-12,
                               atol=1e-12)
    x, y = torch.randn(2, 50, dtype=torch.float64), torch.randn(2, 7, dtype=torch.float64)
    for mode in ("full", "valid", "same"):
        want = np.stack([np.convolve(a, b, mode) for a, b in zip(x.numpy(), y.numpy())])
        np.testing.assert_allclose(T.Convolve(mode)(x, y).numpy(), want, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="mode"):
        T.Convolve("circular")
