"""ember.audio.models.wav2vec2 against torchaudio 2.9's Wav2Vec2 family (issue #22).

Runs in `.venv-peers-audio`. Every builder: same signature, parameter count, state_dict keys
and shapes (built on the meta device), strict loading both ways. Base-size models: the same
eval outputs on random waveforms, with and without lengths, within 1e-5 of the output's scale.
"""

from __future__ import annotations

import inspect

import pytest

torchaudio = pytest.importorskip("torchaudio")

import torch  # noqa: E402
import torchaudio.models as TAM  # noqa: E402
from torchaudio.models.wav2vec2 import components as ta_components  # noqa: E402

import ember.audio.models.wav2vec2 as EW  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

BUILDERS = ["wav2vec2_base", "wav2vec2_large", "wav2vec2_large_lv60k", "wav2vec2_xlsr_300m",
            "wav2vec2_xlsr_1b", "wav2vec2_xlsr_2b", "hubert_base", "hubert_large",
            "hubert_xlarge", "hubert_pretrain_base", "hubert_pretrain_large",
            "hubert_pretrain_xlarge", "wavlm_base", "wavlm_large"]
RTOL = 1e-5


def _close(got, want):
    assert got.shape == want.shape
    finite = torch.isfinite(want)
    assert torch.equal(got[~finite], want[~finite])  # HuBERT's logits hold -inf
    scale = want[finite].abs().max().item()
    err = (got[finite] - want[finite]).abs().max().item()
    assert err <= RTOL * scale, f"max error {err} at scale {scale}"


@pytest.mark.parametrize("name", BUILDERS + ["wav2vec2_model", "wavlm_model",
                                             "hubert_pretrain_model"])
def test_builder_signature(name):
    assert (inspect.signature(getattr(EW, name)).parameters.keys()
            == inspect.signature(getattr(TAM, name)).parameters.keys())
    ours = {k: p.default for k, p in inspect.signature(getattr(EW, name)).parameters.items()}
    theirs = {k: p.default for k, p in inspect.signature(getattr(TAM, name)).parameters.items()}
    assert ours == theirs


@pytest.mark.parametrize("name", BUILDERS)
def test_builder_layout_on_meta(name, monkeypatch):
    # torchaudio's pre-training init copies weights through the CPU, which meta cannot do
    monkeypatch.setattr(ta_components, "_init_transformer_params", lambda module: None)
    with torch.device("meta"):
        ours, theirs = getattr(EW, name)(), getattr(TAM, name)()
    assert (sum(p.numel() for p in ours.parameters())
            == sum(p.numel() for p in theirs.parameters()))
    mine = {k: tuple(v.shape) for k, v in ours.state_dict().items()}
    assert mine == {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
    ours.load_state_dict(theirs.state_dict(), strict=True, assign=True)
    theirs.load_state_dict(ours.state_dict(), strict=True, assign=True)


def _pair(name, *args, **kw):
    torch.manual_seed(0)
    theirs = getattr(TAM, name)(*args, **kw).eval()
    ours = getattr(EW, name)(*args, **kw).eval()
    ours.load_state_dict(theirs.state_dict(), strict=True)
    theirs.load_state_dict(ours.state_dict(), strict=True)
    return ours, theirs


WAVES = (torch.rand(2, 6400, generator=torch.Generator().manual_seed(1)) * 1.6 - 0.8)
LENGTHS = torch.tensor([6400, 4100])


@pytest.mark.parametrize("name", ["wav2vec2_base", "hubert_base"])
def test_base_outputs_match(name):
    ours, theirs = _pair(name, aux_num_out=32)
    with torch.no_grad():
        for lengths in (None, LENGTHS):
            got, got_len = ours(WAVES, lengths)
            want, want_len = theirs(WAVES, lengths)
            _close(got, want)
            assert (got_len is None and want_len is None) or torch.equal(got_len, want_len)
        got, _ = ours.extract_features(WAVES, LENGTHS, num_layers=3)
        want, _ = theirs.extract_features(WAVES, LENGTHS, num_layers=3)
        assert len(got) == len(want) == 3
        for g, w in zip(got, want):
            _close(g, w)


def test_pre_norm_layer_norm_extractor_matches():
    config = ("layer_norm", [(64, 10, 5), (64, 3, 2), (64, 2, 2)], True, 96, 0.1, 16, 4, 3, 4,
              0.1, 192, 0.1, 0.1, True, 0.1, None)
    ours, theirs = _pair("wav2vec2_model", *config)
    with torch.no_grad():
        for lengths in (None, LENGTHS):
            _close(ours(WAVES, lengths)[0], theirs(WAVES, lengths)[0])


def _torchaudio_wavlm_masked(model, waves, lengths):
    """torchaudio's WavLM layers driven with their own key_padding_mask argument."""
    feats, frames = model.feature_extractor(waves, lengths)
    x, _ = model.encoder._preprocess(feats, frames)
    padding = torch.arange(x.shape[1])[None, :] >= frames[:, None]
    transformer = model.encoder.transformer
    x, bias = transformer._preprocess(x), None
    for layer in transformer.layers:
        x, bias = layer(x, None, position_bias=bias, key_padding_mask=padding)
    return transformer.layer_norm(x) if not transformer.layer_norm_first else x


def test_wavlm_base_outputs_match():
    ours, theirs = _pair("wavlm_base")
    with torch.no_grad():
        _close(ours(WAVES)[0], theirs(WAVES)[0])
        # torchaudio's model asserts on lengths; its layers take a key padding mask
        with pytest.raises(AssertionError):
            theirs(WAVES, LENGTHS)
        _close(ours(WAVES, LENGTHS)[0], _torchaudio_wavlm_masked(theirs, WAVES, LENGTHS))


def test_hubert_pretrain_outputs_match():
    ours, theirs = _pair("hubert_pretrain_base", mask_channel_prob=0.1)
    labels = torch.randint(0, 100, (2, 19), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        for lengths in (None, LENGTHS):
            torch.manual_seed(5)
            got = ours(WAVES, labels, lengths)
            torch.manual_seed(5)
            want = theirs(WAVES, labels, lengths)
            for g, w in zip(got, want):
                _close(g, w)


test_builder_signature.compares = tuple(f"models:{n}" for n in BUILDERS) + (
    "models:wav2vec2_model", "models:wavlm_model", "models:hubert_pretrain_model")
test_base_outputs_match.compares = ("models:Wav2Vec2Model",)
test_hubert_pretrain_outputs_match.compares = ("models:HuBERTPretrainModel",)
