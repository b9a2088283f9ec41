"""ember.audio.models.wav2vec2: torchaudio's parameter counts, shapes, lengths masking, errors,
and the tiny model under ember.core.compile, aot_compile and torch.export."""

from __future__ import annotations

import shutil

import pytest
import torch

import ember.audio.models.wav2vec2 as W
from ember.audio.models.wav2vec2.pretrain import compute_mask_indices

pytestmark = pytest.mark.usefixtures("one_thread")

# torchaudio 2.9.1's counts (sum of parameter sizes), the published model sizes
PARAMETERS = {
    "wav2vec2_base": 94_370_944,
    "wav2vec2_large": 315_427_968,
    "wav2vec2_large_lv60k": 315_437_696,
    "wav2vec2_xlsr_300m": 315_437_696,
    "wav2vec2_xlsr_1b": 962_496_128,
    "wav2vec2_xlsr_2b": 2_159_257_728,
    "hubert_base": 94_370_944,
    "hubert_large": 315_434_112,
    "hubert_xlarge": 962_492_544,
    "hubert_pretrain_base": 94_594_176,
    "hubert_pretrain_large": 316_606_336,
    "hubert_pretrain_xlarge": 964_317_568,
    "wavlm_base": 94_381_168,
    "wavlm_large": 315_452_096,
}
CONV = [(32, 10, 5), (32, 3, 2), (32, 2, 2)]


def tiny(mode="layer_norm", layer_norm_first=True, aux=None, wavlm=False):
    torch.manual_seed(0)
    common = dict(extractor_mode=mode, extractor_conv_layer_config=CONV,
                  extractor_conv_bias=True, encoder_embed_dim=48,
                  encoder_projection_dropout=0.1, encoder_pos_conv_kernel=8,
                  encoder_pos_conv_groups=4, encoder_num_layers=2, encoder_num_heads=4,
                  encoder_attention_dropout=0.1, encoder_ff_interm_features=96,
                  encoder_ff_interm_dropout=0.1, encoder_dropout=0.1,
                  encoder_layer_norm_first=layer_norm_first, encoder_layer_drop=0.1,
                  aux_num_out=aux)
    if wavlm:
        return W.wavlm_model(**common, encoder_num_buckets=16, encoder_max_distance=32).eval()
    return W.wav2vec2_model(**common).eval()


def frames(n):
    for _, kernel, stride in CONV:
        n = (n - kernel) // stride + 1
    return n


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_parameter_counts(name):
    with torch.device("meta"):
        model = getattr(W, name)()
    assert sum(p.numel() for p in model.parameters()) == PARAMETERS[name]


def test_shapes_lengths_and_aux_head():
    model = tiny(aux=7)
    x = torch.randn(3, 1000)
    with torch.no_grad():
        out, lengths = model(x, torch.tensor([1000, 700, 8]))
        plain, none = model(x)
    assert out.shape == plain.shape == (3, frames(1000), 7) and none is None
    assert lengths.tolist() == [frames(1000), frames(700), 0]


@pytest.mark.parametrize("wavlm", [False, True])
def test_padded_waveform_matches_it_alone(wavlm):
    model = tiny(wavlm=wavlm)
    short = torch.randn(1, 640)
    batch = torch.cat([torch.randn(1, 1000),
                       torch.cat([short, 5 * torch.randn(1, 360)], dim=1)])
    with torch.no_grad():
        alone, _ = model(short)
        padded, lengths = model(batch, torch.tensor([1000, 640]))
        unmasked, _ = model(batch)
    assert lengths[1] == alone.shape[1]
    torch.testing.assert_close(padded[1, :alone.shape[1]], alone[0], rtol=1e-4, atol=1e-5)
    # without lengths the padding's noise reaches the valid frames
    assert not torch.allclose(unmasked[1, :alone.shape[1]], alone[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("layer_norm_first", [False, True])
def test_extract_features(layer_norm_first):
    model = tiny("group_norm", layer_norm_first)
    x = torch.randn(2, 900)
    with torch.no_grad():
        layers, lengths = model.extract_features(x, torch.tensor([900, 500]))
        first, _ = model.extract_features(x, num_layers=1)
        out, _ = model(x, torch.tensor([900, 500]))
    assert len(layers) == 2 and len(first) == 1 and lengths.tolist() == [frames(900),
                                                                       frames(500)]
    last = layers[-1]
    if layer_norm_first:  # pre-norm layers end with the transformer's own LayerNorm
        last = model.encoder.transformer.layer_norm(last)
    torch.testing.assert_close(out, last)
    with pytest.raises(ValueError, match="num_layers"):
        model.extract_features(x, num_layers=3)


def test_training_mode_uses_dropout_and_layer_drop():
    model = tiny().train()
    x = torch.randn(2, 800)
    assert not torch.equal(model(x)[0], model(x)[0])


def test_bad_input_is_rejected():
    model = tiny()
    with pytest.raises(ValueError, match="waveforms"):
        model(torch.randn(2, 1, 800))
    with pytest.raises(ValueError, match="lengths"):
        model(torch.randn(2, 800), torch.tensor([800]))
    with pytest.raises(ValueError, match="extractor_mode"):
        W.wav2vec2_model("batch_norm", CONV, False, 48, 0, 8, 4, 1, 4, 0, 96, 0, 0, False, 0,
                         None)
    with pytest.raises(ValueError, match="divisible"):
        W.wav2vec2_model("group_norm", CONV, False, 48, 0, 8, 4, 1, 5, 0, 96, 0, 0, False, 0,
                         None)
    with pytest.raises(ValueError, match="feature_grad_mult"):
        W.hubert_pretrain_base(feature_grad_mult=1.5)


def test_state_dict_round_trip_and_weight_norm_keys():
    model = tiny()
    keys = set(model.state_dict())
    assert "encoder.transformer.pos_conv_embed.conv.parametrizations.weight.original0" in keys
    assert "feature_extractor.conv_layers.0.layer_norm.weight" in keys
    other = tiny()
    other.load_state_dict(model.state_dict(), strict=True)
    x = torch.randn(1, 700)
    with torch.no_grad():
        torch.testing.assert_close(other(x)[0], model(x)[0])


def test_mask_indices_cover_each_row_equally():
    torch.manual_seed(0)
    padding = torch.zeros(3, 200, dtype=torch.bool)
    padding[1, 120:] = True
    mask = compute_mask_indices((3, 200), padding, 0.5, 10, min_masks=2)
    counts = mask.sum(1)
    assert counts.min() == counts.max() > 0
    assert not mask[1, 120:].any()
    spread = compute_mask_indices((2, 300), None, 0.3, 5, no_overlap=True, min_space=1)
    assert spread.sum(1).min() == spread.sum(1).max() > 0
    with pytest.raises(ValueError, match="selection"):
        compute_mask_indices((2, 50), None, 0.5, 5, mask_type="gamma")


def test_hubert_pretrain_logits():
    torch.manual_seed(0)
    model = W.hubert_pretrain_model(
        "group_norm", CONV, False, 48, 0.0, 8, 4, 2, 4, 0.0, 96, 0.0, 0.0, False, 0.0,
        mask_prob=0.5, mask_selection="static", mask_other=0.0, mask_length=3,
        no_mask_overlap=False, mask_min_space=1, mask_channel_prob=0.2,
        mask_channel_selection="static", mask_channel_other=0.0, mask_channel_length=4,
        no_mask_channel_overlap=False, mask_channel_min_space=1, skip_masked=False,
        skip_nomask=False, num_classes=11, final_dim=16, feature_grad_mult=0.1).eval()
    x = torch.randn(2, 1600)
    n = frames(1600)
    labels = torch.randint(0, 11, (2, n))
    logit_m, logit_u, pen = model(x, labels, torch.tensor([1600, 1200]))
    valid = n + frames(1200)
    assert logit_m.shape[1] == logit_u.shape[1] == 12
    assert logit_m.shape[0] + logit_u.shape[0] == valid and logit_m.shape[0] > 0
    assert pen.ndim == 0 and pen > 0
    # the target's own column is finite; a negative equal to the target is -inf
    assert torch.isfinite(logit_m[:, 0]).all()
    assert (torch.isinf(logit_m[:, 1:]).sum(1) == 1).all()
    logit_m.sum().backward()
    assert model.wav2vec2.feature_extractor.conv_layers[0].conv.weight.grad is not None
    with pytest.raises(ValueError, match="labels"):
        model(x, labels[:, :-1])


def test_exports_with_torch_export():
    model = tiny()
    x, lengths = torch.randn(2, 900), torch.tensor([900, 600])
    exported = torch.export.export(model, (x, lengths))
    got, got_len = exported.module()(x, lengths)
    with torch.no_grad():
        want, want_len = model(x, lengths)
    torch.testing.assert_close(got, want)
    assert torch.equal(got_len, want_len)


@pytest.mark.slow
@pytest.mark.parametrize("wavlm", [False, True])
def test_compiled_matches_eager(wavlm):
    import ember.core

    model = tiny(wavlm=wavlm)
    x, lengths = torch.randn(2, 900), torch.tensor([900, 600])
    with torch.no_grad():
        want, _ = model(x, lengths)
        got, _ = ember.core.compile(model)(x, lengths)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_aot_package_matches_eager(tmp_path):
    from ember.core import aot

    model = tiny()
    x, lengths = torch.randn(2, 900), torch.tensor([900, 600])
    path = aot.aot_compile(model, (x, lengths), path=str(tmp_path / "w2v.pt2"))
    loaded = aot.aot_load(path)
    with torch.no_grad():
        want, want_len = model(x, lengths)
    got = loaded(x, lengths)
    torch.testing.assert_close(got[0], want, rtol=1e-4, atol=1e-4)
    assert torch.equal(got[1], want_len)
