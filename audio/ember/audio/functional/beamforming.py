"""Multichannel speech enhancement with torchaudio's names: power spectral density matrices,
relative transfer functions, MVDR beamforming weights, and the Frechet distance.

Spectrograms are complex ``[..., channel, freq, time]``; PSD matrices
``[..., freq, channel, channel]``.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["apply_beamforming", "frechet_distance", "mvdr_weights_rtf", "mvdr_weights_souden",
           "psd", "rtf_evd", "rtf_power"]


def psd(specgram: Tensor, mask: Tensor | None = None, normalize: bool = True,
        eps: float = 1e-10) -> Tensor:
    """Cross-channel PSD ``[..., freq, channel, channel]``: ``sum_t m[t] x_t x_t^H`` over time
    frames, weighted by a time-frequency ``mask`` ``[..., freq, time]`` (normalised over time)."""
    per_freq = specgram.transpose(-3, -2)   # (..., freq, channel, time)
    if mask is not None:
        if mask.shape[:-1] != per_freq.shape[:-2] or mask.shape[-1] != per_freq.shape[-1]:
            raise ValueError(f"mask must be (..., freq, time) = "
                             f"{tuple(per_freq.shape[:-2]) + (per_freq.shape[-1],)}, "
                             f"got {tuple(mask.shape)}")
        if normalize:
            mask = mask / (mask.sum(-1, keepdim=True) + eps)
        weighted = per_freq * mask.unsqueeze(-2)
    else:
        weighted = per_freq
    return weighted @ per_freq.conj().transpose(-1, -2)


def _trace(mat: Tensor) -> Tensor:
    return torch.diagonal(mat, dim1=-2, dim2=-1).sum(-1)


def _load_diagonal(mat: Tensor, reg: float, eps: float = 1e-8) -> Tensor:
    """Tikhonov regularisation: add ``reg * trace + eps`` to the diagonal."""
    eye = torch.eye(mat.shape[-1], dtype=mat.dtype, device=mat.device)
    return mat + (_trace(mat).real * reg + eps)[..., None, None] * eye


def _check_psds(psd_s: Tensor, psd_n: Tensor) -> None:
    if psd_s.ndim < 3 or psd_n.ndim < 3:
        raise ValueError(f"psd_s and psd_n must be (..., freq, channel, channel), got "
                         f"{tuple(psd_s.shape)} and {tuple(psd_n.shape)}")
    if not (psd_s.is_complex() and psd_n.is_complex()):
        raise TypeError(f"psd_s and psd_n must be complex, got {psd_s.dtype} and {psd_n.dtype}")
    if psd_s.shape != psd_n.shape:
        raise ValueError(f"psd_s and psd_n must have the same shape, got "
                         f"{tuple(psd_s.shape)} and {tuple(psd_n.shape)}")
    if psd_s.shape[-1] != psd_s.shape[-2]:
        raise ValueError(f"psd matrices must be square in the last two dims, got "
                         f"{tuple(psd_s.shape)}")


def _pick_reference(mat: Tensor, reference_channel, dtype) -> Tensor:
    """Column ``reference_channel`` of ``mat`` (..., C, C), or its mix by a one-hot/soft vector."""
    if isinstance(reference_channel, int):
        return mat[..., :, reference_channel]
    if isinstance(reference_channel, Tensor):
        return (mat * reference_channel.to(dtype)[..., None, None, :]).sum(-1)
    raise TypeError(f"reference_channel must be an int or a Tensor, "
                    f"got {type(reference_channel)}")


def mvdr_weights_souden(psd_s: Tensor, psd_n: Tensor, reference_channel: int | Tensor,
                        diagonal_loading: bool = True, diag_eps: float = 1e-7,
                        eps: float = 1e-8) -> Tensor:
    """MVDR weights ``[..., freq, channel]`` by Souden's solution
    ``(Phi_n^-1 Phi_s / tr(Phi_n^-1 Phi_s)) u``."""
    _check_psds(psd_s, psd_n)
    if diagonal_loading:
        psd_n = _load_diagonal(psd_n, diag_eps)
    ratio = torch.linalg.solve(psd_n, psd_s)
    ratio = ratio / (_trace(ratio)[..., None, None] + eps)
    return _pick_reference(ratio, reference_channel, psd_n.dtype)


def mvdr_weights_rtf(rtf: Tensor, psd_n: Tensor, reference_channel: int | Tensor | None = None,
                     diagonal_loading: bool = True, diag_eps: float = 1e-7,
                     eps: float = 1e-8) -> Tensor:
    """MVDR weights ``[..., freq, channel]`` from a relative transfer function ``rtf``
    ``[..., freq, channel]``: ``Phi_n^-1 h / (h^H Phi_n^-1 h)``, rescaled to the reference."""
    if rtf.ndim < 2 or psd_n.ndim < 3:
        raise ValueError(f"rtf must be (..., freq, channel) and psd_n (..., freq, channel, "
                         f"channel), got {tuple(rtf.shape)} and {tuple(psd_n.shape)}")
    if not (rtf.is_complex() and psd_n.is_complex()):
        raise TypeError(f"rtf and psd_n must be complex, got {rtf.dtype} and {psd_n.dtype}")
    if rtf.shape != psd_n.shape[:-1] or psd_n.shape[-1] != psd_n.shape[-2]:
        raise ValueError(f"psd_n must be rtf's shape plus a square channel dim, got "
                         f"{tuple(rtf.shape)} and {tuple(psd_n.shape)}")
    if diagonal_loading:
        psd_n = _load_diagonal(psd_n, diag_eps)
    num = torch.linalg.solve(psd_n, rtf.unsqueeze(-1)).squeeze(-1)
    den = (rtf.conj() * num).sum(-1)
    weights = num / (den.real.unsqueeze(-1) + eps)
    if reference_channel is None:
        return weights
    if isinstance(reference_channel, int):
        scale = rtf[..., reference_channel].conj()
    elif isinstance(reference_channel, Tensor):
        scale = (rtf.conj() * reference_channel.to(psd_n.dtype)[..., None, :]).sum(-1)
    else:
        raise TypeError(f"reference_channel must be an int, a Tensor or None, "
                        f"got {type(reference_channel)}")
    return weights * scale.unsqueeze(-1)


def rtf_evd(psd_s: Tensor) -> Tensor:
    """Relative transfer function ``[..., freq, channel]``: the principal eigenvector of psd_s."""
    if not psd_s.is_complex():
        raise TypeError(f"psd_s must be complex, got {psd_s.dtype}")
    if psd_s.shape[-1] != psd_s.shape[-2]:
        raise ValueError(f"psd_s must be square in the last two dims, got {tuple(psd_s.shape)}")
    return torch.linalg.eigh(psd_s).eigenvectors[..., -1]


def rtf_power(psd_s: Tensor, psd_n: Tensor, reference_channel: int | Tensor, n_iter: int = 3,
              diagonal_loading: bool = True, diag_eps: float = 1e-7) -> Tensor:
    """Relative transfer function ``[..., freq, channel]`` by ``n_iter`` power iterations of
    ``Phi_n^-1 Phi_s`` from its reference column, mapped back through the last PSD."""
    _check_psds(psd_s, psd_n)
    if n_iter <= 0:
        raise ValueError(f"n_iter must be positive, got {n_iter}")
    if diagonal_loading:
        psd_n = _load_diagonal(psd_n, diag_eps)
    phi = torch.linalg.solve(psd_n, psd_s)
    vec = _pick_reference(phi, reference_channel, psd_n.dtype).unsqueeze(-1)
    for _ in range(n_iter - 2):
        vec = phi @ vec
    return ((psd_s if n_iter >= 2 else psd_n) @ vec).squeeze(-1)


def apply_beamforming(beamform_weights: Tensor, specgram: Tensor) -> Tensor:
    """Beamformed spectrogram ``[..., freq, time]``: ``sum_c conj(w[f, c]) X[c, f, t]``."""
    if beamform_weights.shape[:-2] != specgram.shape[:-3]:
        raise ValueError(f"beamform_weights (..., freq, channel) and specgram (..., channel, "
                         f"freq, time) must share leading dims, got "
                         f"{tuple(beamform_weights.shape)} and {tuple(specgram.shape)}")
    if not (beamform_weights.is_complex() and specgram.is_complex()):
        raise TypeError(f"beamform_weights and specgram must be complex, got "
                        f"{beamform_weights.dtype} and {specgram.dtype}")
    weights = beamform_weights.conj().transpose(-1, -2).unsqueeze(-1)   # (..., C, F, 1)
    return (weights * specgram).sum(-3)


def frechet_distance(mu_x, sigma_x, mu_y, sigma_y):
    """Frechet distance between Gaussians N(mu_x, sigma_x) and N(mu_y, sigma_y):
    ``|mu_x - mu_y|^2 + tr(sigma_x + sigma_y - 2 (sigma_x sigma_y)^(1/2))``."""
    if mu_x.ndim != 1:
        raise ValueError(f"mu_x must be one-dimensional, got {mu_x.ndim} dims")
    if sigma_x.ndim != 2:
        raise ValueError(f"sigma_x must be two-dimensional, got {sigma_x.ndim} dims")
    if sigma_x.shape[0] != sigma_x.shape[1] or sigma_x.shape[0] != mu_x.shape[0]:
        raise ValueError(f"sigma_x must be ({mu_x.shape[0]}, {mu_x.shape[0]}), "
                         f"got {tuple(sigma_x.shape)}")
    if mu_x.shape != mu_y.shape or sigma_x.shape != sigma_y.shape:
        raise ValueError("mu_x/mu_y and sigma_x/sigma_y must have the same shapes, got "
                         f"{tuple(mu_x.shape)}, {tuple(mu_y.shape)}, {tuple(sigma_x.shape)}, "
                         f"{tuple(sigma_y.shape)}")
    spread = sigma_x.trace() + sigma_y.trace()
    # tr(sqrt(Sx Sy)) is the sum of the square roots of the eigenvalues of Sx Sy
    root = torch.linalg.eigvals(sigma_x @ sigma_y).sqrt().real.sum()
    return (mu_x - mu_y).square().sum() + spread - 2 * root
