"""Models: parameter counts equal torchaudio's, shapes, masks, inference.

torchaudio is not installed, so the expected counts are computed here layer by layer from
the layer lists of torchaudio's model sources (src/torchaudio/models/*.py): a Conv1d has
``out * in / groups * k (+ out)`` parameters, a Linear ``out * in + out``, a GRU
``3 * (h * in + h * h + 2h)``, an RNN ``h * in + h * h + 2h`` per direction, LayerNorm /
BatchNorm / GroupNorm ``2 * channels`` (running stats are buffers), PReLU 1.
"""

import pytest
import torch
from torch import nn

from ember.audio.models import Conformer, ConvTasNet, DeepSpeech, Wav2Letter, WaveRNN


def conv(c_in, c_out, k, bias=True, groups=1):
    return c_out * (c_in // groups) * k + (c_out if bias else 0)


def linear(n_in, n_out):
    return n_in * n_out + n_out


def norm(c):
    return 2 * c


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_wav2letter_parameter_count():
    # torchaudio Wav2Letter(num_classes=40, input_type="waveform", num_features=1)
    expected = (conv(1, 250, 250)                      # waveform front-end
                + conv(250, 250, 48)                   # first acoustic layer
                + 7 * conv(250, 250, 7)
                + conv(250, 2000, 32) + conv(2000, 2000, 1) + conv(2000, 40, 1))
    assert expected == 26_211_290
    assert n_params(Wav2Letter()) == expected
    # mfcc input drops the front-end and takes num_features channels
    assert n_params(Wav2Letter(input_type="mfcc", num_features=13)) == (
        expected - conv(1, 250, 250) - conv(250, 250, 48) + conv(13, 250, 48))


def test_wav2letter_forward():
    out = Wav2Letter(num_classes=10)(torch.randn(2, 1, 16000))
    assert out.shape[:2] == (2, 10)
    torch.testing.assert_close(out.exp().sum(1), torch.ones(2, out.shape[-1]))
    with pytest.raises(ValueError, match="input_type"):
        Wav2Letter(input_type="spectrogram")


def test_wavernn_parameter_count():
    # torchaudio WaveRNN(upsample_scales=[5, 5, 8], n_classes=512, hop_length=200), defaults
    # n_res_block=10, n_rnn=512, n_fc=512, kernel_size=5, n_freq=n_hidden=n_output=128
    melresnet = (conv(128, 128, 5, bias=False) + norm(128)
                 + 10 * (2 * conv(128, 128, 1, bias=False) + 2 * norm(128))
                 + conv(128, 128, 1))
    upsample_convs = sum(2 * s + 1 for s in (5, 5, 8))   # Conv2d(1, 1, (1, 2s+1)), no bias
    n_aux = 128 // 4

    def gru(n_in, h):
        return 3 * (h * n_in + h * h + 2 * h)

    expected = (melresnet + upsample_convs + linear(128 + n_aux + 1, 512)
                + gru(512, 512) + gru(512 + n_aux, 512)
                + linear(512 + n_aux, 512) + linear(512 + n_aux, 512) + linear(512, 512))
    assert expected == 4_536_231
    assert n_params(WaveRNN([5, 5, 8], 512, 200)) == expected


def test_wavernn_forward_and_infer():
    torch.manual_seed(0)
    model = WaveRNN([2, 2], n_classes=16, hop_length=4, n_res_block=2, n_rnn=32, n_fc=32,
                    n_freq=20, n_hidden=16, n_output=16).eval()
    n_time = 9
    spec = torch.randn(2, 1, 20, n_time)
    wav = torch.randn(2, 1, (n_time - 5 + 1) * 4)
    assert model(wav, spec).shape == (2, 1, (n_time - 4) * 4, 16)
    out, lengths = model.infer(spec[:, 0], torch.tensor([9, 7]))
    assert out.shape == (2, 1, n_time * 4)
    assert lengths.tolist() == [36, 28]
    levels = 2 * torch.arange(16) / 15.0 - 1
    assert torch.isin(out.flatten(), levels).all()  # samples are quantisation levels
    with pytest.raises(ValueError, match="hop_length"):
        WaveRNN([5, 5], n_classes=256, hop_length=200)


def test_conv_tasnet_parameter_count():
    # torchaudio ConvTasNet() defaults: 2 sources, L=16, N=512, P=3, B=Sc=128, H=512, X=8, R=3
    block = (conv(128, 512, 1) + 1 + norm(512) + conv(512, 512, 3, groups=512) + 1 + norm(512)
             + conv(512, 128, 1))                                   # skip_out
    residual = conv(512, 128, 1)                                    # not in the last block
    expected = (conv(1, 512, 16, bias=False)                        # encoder
                + norm(512) + conv(512, 128, 1)                     # input norm and conv
                + 24 * block + 23 * residual
                + 1 + conv(128, 512 * 2, 1)                         # output PReLU and conv
                + 512 * 1 * 16)                                     # decoder ConvTranspose1d
    assert expected == 4_984_881
    assert n_params(ConvTasNet()) == expected


def test_conv_tasnet_forward_keeps_length():
    model = ConvTasNet(num_sources=3, enc_kernel_size=8, enc_num_feats=16, msk_num_feats=8,
                       msk_num_hidden_feats=16, msk_num_layers=2, msk_num_stacks=2)
    for frames in (800, 803):
        assert model(torch.randn(2, 1, frames)).shape == (2, 3, frames)
    with pytest.raises(ValueError, match="input"):
        model(torch.randn(2, 2, 100))


def test_conformer_parameter_count():
    # torchaudio docstring configuration: Conformer(80, 4, 128, 4, 31)
    d, f, k = 80, 128, 31
    ffn = norm(d) + linear(d, f) + linear(f, d)
    attention = norm(d) + (3 * d * d + 3 * d) + linear(d, d)        # MultiheadAttention
    conv_module = (norm(d) + conv(d, 2 * d, 1) + conv(d, d, k, groups=d) + norm(d)
                   + conv(d, d, 1))
    layer = 2 * ffn + attention + conv_module + norm(d)
    assert 4 * layer == 361_024
    model = Conformer(input_dim=d, num_heads=4, ffn_dim=f, num_layers=4,
                      depthwise_conv_kernel_size=k)
    assert n_params(model) == 4 * layer
    gn = Conformer(d, 4, f, 1, k, use_group_norm=True)
    assert n_params(gn) == layer


def test_conformer_attention_equals_torch_multihead_attention():
    torch.manual_seed(0)
    model = Conformer(input_dim=32, num_heads=4, ffn_dim=64, num_layers=1,
                      depthwise_conv_kernel_size=7).eval()
    attn = model.conformer_layers[0].self_attn
    ref = nn.MultiheadAttention(32, 4).eval()
    ref.load_state_dict(attn.state_dict())  # same parameter names and shapes
    x = torch.randn(10, 3, 32)
    pad = torch.zeros(3, 10, dtype=torch.bool)
    pad[1, 6:] = True
    expected, _ = ref(x, x, x, key_padding_mask=pad, need_weights=False)
    torch.testing.assert_close(attn(x, pad), expected, atol=1e-5, rtol=1e-5)


def test_conformer_padding_does_not_leak():
    torch.manual_seed(0)
    model = Conformer(input_dim=16, num_heads=2, ffn_dim=32, num_layers=1,
                      depthwise_conv_kernel_size=3).eval()  # BatchNorm: per-frame in eval
    x = torch.randn(2, 12, 16)
    lengths = torch.tensor([12, 7])
    out, out_lengths = model(x, lengths)
    assert out.shape == x.shape and torch.equal(out_lengths, lengths)
    # attention never looks at padded frames: changing them leaves the valid frames of item 1
    # unchanged except the last, which the depthwise conv (kernel 3) sees across the edge
    x2 = x.clone()
    x2[1, 7:] = torch.randn(5, 16)
    out2, _ = model(x2, lengths)
    torch.testing.assert_close(out2[1, :6], out[1, :6])
    assert not torch.allclose(out2[1, 6], out[1, 6])
    with pytest.raises(ValueError, match="odd"):
        Conformer(16, 2, 32, 1, 4)


def test_deepspeech_parameter_count_and_forward():
    # torchaudio DeepSpeech(n_feature=128) with defaults n_hidden=2048, n_class=40
    h = 2048
    rnn_direction = h * h + h * h + 2 * h
    expected = (linear(128, h) + 3 * linear(h, h)                   # fc1, fc2, fc3, fc4
                + 2 * rnn_direction + linear(h, 40))
    assert expected == 29_720_616
    assert n_params(DeepSpeech(128)) == expected
    model = DeepSpeech(n_feature=20, n_hidden=32, n_class=5)
    out = model(torch.randn(3, 1, 50, 20))
    assert out.shape == (3, 50, 5)
    torch.testing.assert_close(out.exp().sum(-1), torch.ones(3, 50))
