"""Emformer, RNNT, beam search, Tacotron2, HDemucs, Squim: counts, shapes, streaming, errors.

torchaudio is not installed here; expected parameter counts are derived layer by layer from
torchaudio's model sources and checked against the totals torchaudio reports for its builders
(tests/peers/audio/test_models_more_parity.py compares the models themselves).
"""

import pytest
import torch
from torch import nn

import ember.core
from ember.audio.models import (
    RNNT,
    Emformer,
    HDemucs,
    RNNTBeamSearch,
    SquimObjective,
    SquimSubjective,
    Tacotron2,
    emformer_rnnt_base,
    emformer_rnnt_model,
    hdemucs_high,
    hdemucs_low,
    hdemucs_medium,
    squim_objective_base,
    squim_objective_model,
    squim_subjective_base,
    squim_subjective_model,
)

torch.set_num_threads(1)


def conv(c_in, c_out, k, bias=True, groups=1):
    return c_out * (c_in // groups) * k + (c_out if bias else 0)


def lstm_cell(n_in, h):
    return 4 * h * (n_in + h) + 2 * 4 * h


def linear(n_in, n_out, bias=True):
    return n_in * n_out + (n_out if bias else 0)


def norm(c):
    return 2 * c


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def on_meta(build):
    with torch.device("meta"):
        return build()


# ------------------------------------------------------------------ Emformer / RNNT

def emformer_layer(d, f):
    attention = linear(d, 2 * d) + linear(d, d) + linear(d, d)   # key/value, query, out
    return attention + norm(d) + linear(d, f) + linear(f, d) + 2 * norm(d)


def test_emformer_rnnt_base_parameter_count():
    n_sym, d = 4097, 512
    transcriber = (linear(80, 128, bias=False) + 20 * emformer_layer(d, 2048)
                   + linear(d, 1024) + norm(1024))
    lstm = 2 * linear(512, 4 * 512, bias=False) + norm(512) + norm(4 * 512)
    predictor = n_sym * 512 + norm(512) + 3 * lstm + linear(512, 1024) + norm(1024)
    expected = transcriber + predictor + linear(1024, n_sym)
    assert expected == 76_738_049            # torchaudio's emformer_rnnt_base(4097)
    assert n_params(on_meta(lambda: emformer_rnnt_base(4097))) == expected
    emformer = on_meta(lambda: Emformer(512, 8, 2048, 20, 4))
    assert n_params(emformer) == 20 * emformer_layer(512, 2048)


@pytest.mark.parametrize("memory", [0, 2])
def test_emformer_streaming_equals_whole_utterance(memory):
    # with the left context covering the past, segment-by-segment infer reproduces forward
    torch.manual_seed(0)
    model = Emformer(16, 2, 32, 2, 4, left_context_length=8, right_context_length=2,
                     max_memory_size=memory).eval()
    x = torch.randn(1, 14, 16)
    with torch.no_grad():
        whole, lengths = model(x, torch.tensor([12]))
        state, parts = None, []
        for i in range(3):
            out, out_lengths, state = model.infer(x[:, 4 * i: 4 * i + 6], torch.tensor([6]),
                                                  state)
            parts.append(out)
    assert whole.shape == (1, 12, 16) and lengths.tolist() == [12]
    assert out_lengths.tolist() == [4] and len(state) == 2
    torch.testing.assert_close(torch.cat(parts, 1), whole, rtol=1e-5, atol=1e-5)


def test_emformer_bad_input():
    model = Emformer(16, 2, 32, 1, 4, right_context_length=2)
    with pytest.raises(ValueError, match="segment_length"):
        model.infer(torch.randn(1, 5, 16), torch.tensor([5]))
    with pytest.raises(ValueError, match="lengths"):
        model(torch.randn(2, 10, 16), torch.tensor([10]))
    with pytest.raises(ValueError, match="activation"):
        Emformer(16, 2, 32, 1, 4, activation="tanh")
    with pytest.raises(ValueError, match="divisible"):
        Emformer(16, 3, 32, 1, 4)
    with pytest.raises(ValueError, match="weight_init_scale_strategy"):
        Emformer(16, 2, 32, 1, 4, weight_init_scale_strategy="xavier")


def small_rnnt() -> RNNT:
    return emformer_rnnt_model(
        input_dim=8, encoding_dim=16, num_symbols=7, segment_length=4, right_context_length=2,
        time_reduction_input_dim=6, time_reduction_stride=2, transformer_num_heads=2,
        transformer_ffn_dim=24, transformer_num_layers=2, transformer_dropout=0.0,
        transformer_activation="relu", transformer_left_context_length=3,
        transformer_max_memory_size=0, transformer_weight_init_scale_strategy="depthwise",
        transformer_tanh_on_mem=False, symbol_embedding_dim=12, num_lstm_layers=2,
        lstm_layer_norm=True, lstm_layer_norm_epsilon=1e-3, lstm_dropout=0.0)


def test_rnnt_shapes_and_predictor_state():
    torch.manual_seed(0)
    model = small_rnnt().eval()
    x, lengths = torch.randn(2, 22, 8), torch.tensor([20, 14])
    targets = torch.randint(0, 7, (2, 5))
    with torch.no_grad():
        logits, src_len, tgt_len, state = model(x, lengths, targets, torch.tensor([5, 3]))
        assert logits.shape == (2, 10, 5, 7)             # time reduced by the stride 2
        assert src_len.tolist() == [10, 7] and tgt_len.tolist() == [5, 3]
        assert len(state) == 2 and state[0][0].shape == (2, 12)
        # predicting in two calls with the carried state equals one call
        whole, _, _ = model.predict(targets, torch.tensor([5, 5]), None)
        first, _, mid = model.predict(targets[:, :2], torch.tensor([2, 2]), None)
        rest, _, _ = model.predict(targets[:, 2:], torch.tensor([3, 3]), mid)
        torch.testing.assert_close(torch.cat([first, rest], 1), whole)
    with pytest.raises(ValueError, match="targets"):
        model.predict(targets[0], torch.tensor([5]), None)


def test_beam_search_hypotheses():
    torch.manual_seed(0)
    model = small_rnnt().eval()
    search = RNNTBeamSearch(model, blank=6)
    with torch.no_grad():
        hypos = search(torch.randn(20, 8), torch.tensor(20), 3)
        assert len(hypos) == 3
        keys = [h[3] / (len(h[0]) + 1) for h in hypos]
        assert keys == sorted(keys, reverse=True)     # best first by the default sort key
        assert all(h[0][0] == 6 for h in hypos)       # every hypothesis starts at the blank
        assert len({str(h[0]) for h in hypos}) == 3   # merged: no token sequence twice
        streamed, state = search.infer(torch.randn(6, 8), torch.tensor(6), 2)
        assert len(streamed) == 2 and len(state) == 2
    with pytest.raises(ValueError, match="input"):
        search(torch.randn(2, 20, 8), torch.tensor(20), 3)
    with pytest.raises(ValueError, match="length"):
        search(torch.randn(20, 8), torch.tensor([20, 20]), 3)


# ------------------------------------------------------------------ Tacotron2

def test_tacotron2_parameter_count():
    # torchaudio Tacotron2() defaults: 80 mels, 148 symbols, 512-d encoder, 1024-d LSTMs
    encoder = 3 * (conv(512, 512, 5) + norm(512)) + 2 * lstm_cell(512, 256)
    attention = (linear(1024, 128, bias=False) + linear(512, 128, bias=False)
                 + linear(128, 1, bias=False) + conv(2, 32, 31, bias=False)
                 + linear(32, 128, bias=False))
    decoder = (linear(80, 256, bias=False) + linear(256, 256, bias=False)     # prenet
               + lstm_cell(256 + 512, 1024) + attention + lstm_cell(1024 + 512, 1024)
               + linear(1536, 80) + linear(1536, 1))
    postnet = (conv(80, 512, 5) + norm(512) + 3 * (conv(512, 512, 5) + norm(512))
               + conv(512, 80, 5) + norm(80))
    expected = 148 * 512 + encoder + decoder + postnet
    assert expected == 28_193_153
    assert n_params(on_meta(Tacotron2)) == expected


def small_tacotron2(**kw) -> Tacotron2:
    torch.manual_seed(0)
    return Tacotron2(n_mels=10, n_symbol=20, symbol_embedding_dim=16, encoder_embedding_dim=16,
                     encoder_kernel_size=3, decoder_rnn_dim=24, decoder_max_step=12,
                     attention_rnn_dim=20, attention_hidden_dim=8, attention_location_n_filter=4,
                     attention_location_kernel_size=5, prenet_dim=12, postnet_n_convolution=3,
                     postnet_kernel_size=3, postnet_embedding_dim=14, **kw).eval()


def test_tacotron2_teacher_forced_shapes_and_padding():
    model = small_tacotron2(mask_padding=True)
    tokens, token_lengths = torch.randint(0, 20, (2, 7)), torch.tensor([7, 5])
    with torch.no_grad():
        mel, post, gates, align = model(tokens, token_lengths, torch.randn(2, 10, 8),
                                        torch.tensor([8, 6]))
    assert mel.shape == post.shape == (2, 10, 8)
    assert gates.shape == (2, 8) and align.shape == (2, 8, 7)
    assert (mel[1, :, 6:] == 0).all() and (post[1, :, 6:] == 0).all()
    assert (gates[1, 6:] == 1e3).all() and (gates[1, :6] != 1e3).all()
    assert (align[1, :, 5:] == 0).all()                   # no attention on padded tokens
    torch.testing.assert_close(align.sum(-1), torch.ones(2, 8))


def test_tacotron2_infer_stops_at_the_gate():
    tokens, lengths = torch.randint(0, 20, (2, 7)), torch.tensor([7, 4])
    model = small_tacotron2(gate_threshold=0.5)
    with torch.no_grad():
        model.decoder.gate_layer.bias.fill_(100.0)        # every gate fires at once
        mel, mel_lengths, align = model.infer(tokens, lengths)
        assert mel.shape == (2, 10, 1) and mel_lengths.tolist() == [1, 1]
        assert align.shape == (2, 1, 7)
        model.decoder.gate_layer.bias.fill_(-100.0)       # none fires: runs to the cap
        with pytest.warns(UserWarning, match="decoder_max_step"):
            mel, mel_lengths, _ = model.infer(tokens, lengths)
        assert mel.shape == (2, 10, 12) and mel_lengths.tolist() == [12, 12]
        # the prenet's dropout stays on in eval mode, so two syntheses differ
        with pytest.warns(UserWarning, match="decoder_max_step"):
            assert not torch.allclose(mel, model.infer(tokens, lengths)[0])


def test_tacotron2_bad_input():
    model = small_tacotron2(n_frames_per_step=2)
    tokens = torch.randint(0, 20, (2, 7))
    with pytest.raises(ValueError, match="sorted"):
        model.infer(tokens, torch.tensor([5, 7]))
    with pytest.raises(ValueError, match="multiple of n_frames_per_step"):
        model(tokens, torch.tensor([7, 5]), torch.randn(2, 10, 7), torch.tensor([7, 5]))
    with pytest.raises(ValueError, match="n_mels"):
        model(tokens, torch.tensor([7, 5]), torch.randn(2, 8, 8), torch.tensor([8, 6]))
    with pytest.raises(ValueError, match="tokens"):
        model.infer(tokens[0])
    with pytest.raises(ValueError, match="odd"):
        Tacotron2(encoder_kernel_size=4)


# ------------------------------------------------------------------ HDemucs

MUSDB = ["drums", "bass", "other", "vocals"]


@pytest.mark.parametrize("build, expected", [
    (hdemucs_low, 20_040_296), (hdemucs_medium, 78_908_488), (hdemucs_high, 83_639_368)])
def test_hdemucs_builder_parameter_counts(build, expected):
    # torchaudio 2.9's builders with the four MUSDB sources report these counts
    assert n_params(on_meta(lambda: build(MUSDB))) == expected


def small_hdemucs(**kw) -> HDemucs:
    torch.manual_seed(0)
    config = dict(audio_channels=2, channels=8, nfft=64, depth=4, norm_starts=2,
                  dconv_comp=2, dconv_lstm=1, dconv_attn=1)
    return HDemucs(["drums", "bass"], **{**config, **kw}).eval()


def test_hdemucs_shapes_scale_and_batch_independence():
    model = small_hdemucs()
    x = torch.randn(2, 2, 1000)
    with torch.no_grad():
        out = model(x)
        assert out.shape == (2, 2, 2, 1000)
        # inputs are normalised and outputs rescaled, so separation commutes with gain
        torch.testing.assert_close(model(3 * x), 3 * out, rtol=1e-3, atol=1e-4)
        # GroupNorm and the statistics are per item: a batch separates as its items
        torch.testing.assert_close(model(x[1:]), out[1:], rtol=1e-4, atol=1e-5)
        mono = small_hdemucs(audio_channels=1)
        assert mono(torch.randn(1, 1, 333)).shape == (1, 2, 1, 333)


def test_hdemucs_bad_input():
    model = small_hdemucs()
    with pytest.raises(ValueError, match="audio_channels"):
        model(torch.randn(1, 1, 1000))
    with pytest.raises(ValueError, match="audio_channels"):
        model(torch.randn(2, 1000))
    with pytest.raises(ValueError, match="too short"):
        model(torch.randn(1, 2, 20))
    with pytest.raises(ValueError, match="sources"):
        HDemucs([])
    with pytest.raises(ValueError, match="nfft"):
        HDemucs(MUSDB, nfft=1022)


# ------------------------------------------------------------------ Squim

def test_squim_builder_parameter_counts():
    # torchaudio 2.9's squim_objective_base() and squim_subjective_base() (wav2vec2_base inside)
    assert n_params(on_meta(squim_objective_base)) == 7_387_658
    subjective = on_meta(squim_subjective_base)
    ssl = n_params(subjective.ssl_model)
    assert ssl == 94_370_944                               # wav2vec2_base()
    assert n_params(subjective) - ssl == linear(768, 32) + linear(64, 1) + linear(64, 5)
    assert n_params(subjective) == 94_395_942


def small_squim_objective() -> SquimObjective:
    torch.manual_seed(0)
    return squim_objective_model(feat_dim=16, win_len=8, d_model=16, nhead=2, hidden_dim=12,
                                 num_blocks=1, rnn_type="LSTM", chunk_size=7).eval()


def test_squim_objective_scores_and_ranges():
    model = small_squim_objective()
    speech = torch.randn(3, 500)
    with torch.no_grad():
        stoi, pesq, si_sdr = model(speech)
        assert stoi.shape == pesq.shape == si_sdr.shape == (3,)
        assert ((stoi > 0) & (stoi < 1)).all()
        assert ((pesq > 1.0) & (pesq < 4.65)).all()        # the wide-band PESQ range
        # speech is RMS-normalised first: the scores ignore the gain
        for a, b in zip(model(0.01 * speech), (stoi, pesq, si_sdr)):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="batch, time"):
        model(speech[0])
    with pytest.raises(ValueError, match="rnn_type"):
        squim_objective_model(16, 8, 16, 2, 12, 1, "Transformer", 7)


def test_squim_subjective_reference_alignment_and_errors():
    from ember.audio.models.squim.subjective import Predictor
    from ember.audio.models.wav2vec2 import wav2vec2_model

    torch.manual_seed(0)
    ssl = wav2vec2_model(
        extractor_mode="group_norm", extractor_conv_layer_config=[(8, 10, 5), (8, 3, 2)],
        extractor_conv_bias=False, encoder_embed_dim=16, encoder_projection_dropout=0.0,
        encoder_pos_conv_kernel=4, encoder_pos_conv_groups=2, encoder_num_layers=1,
        encoder_num_heads=2, encoder_attention_dropout=0.0, encoder_ff_interm_features=24,
        encoder_ff_interm_dropout=0.0, encoder_dropout=0.0, encoder_layer_norm_first=False,
        encoder_layer_drop=0.0, aux_num_out=None)
    model = SquimSubjective(ssl, nn.Linear(16, 6), Predictor(12, 5)).eval()
    speech, reference = torch.randn(2, 700), torch.randn(2, 300)
    with torch.no_grad():
        mos = model(speech, reference)
        assert mos.shape == (2,) and ((mos >= 1) & (mos <= 5)).all()
        # a short reference is repeated up to the speech's length, a long one cut
        torch.testing.assert_close(model(speech, reference.repeat(1, 3)[:, :700]), mos)
        torch.testing.assert_close(model(speech, torch.cat([reference.repeat(1, 3),
                                                             reference], 1)), mos)
    with pytest.raises(ValueError, match="batch"):
        model(speech, reference[:1])
    with pytest.raises(ValueError, match="ssl_type"):
        squim_subjective_model("resnet50", 768, 32, 5)


@pytest.mark.slow
def test_compiled_emformer_matches_eager():
    torch.manual_seed(0)
    model = Emformer(16, 2, 32, 2, 4, left_context_length=3, right_context_length=2,
                     max_memory_size=2).eval()
    x, lengths = torch.randn(2, 14, 16), torch.tensor([12, 9])
    with torch.no_grad():
        expected, _ = model(x, lengths)
        got, _ = ember.core.compile(model, dynamic=False)(x, lengths)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_compiled_hdemucs_matches_eager():
    model = small_hdemucs()
    x = torch.randn(1, 2, 1024)
    with torch.no_grad():
        expected = model(x)
        got = ember.core.compile(model, dynamic=False)(x)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
