"""Emformer, RNNT, beam search, Tacotron2, HDemucs and Squim against torchaudio 2.9 (#22).

Runs in `.venv-peers-audio`. For each family: parameter count, state_dict names and shapes
equal torchaudio's, weights load strictly both ways, and eval-mode outputs agree on small
random inputs with torchaudio's seeded weights. Published configurations are compared on the
meta device (structure only). Each test names the API it covers (``compares``).
"""

from __future__ import annotations

import pytest

torchaudio = pytest.importorskip("torchaudio")

import torch  # noqa: E402
import torchaudio.models as TAM  # noqa: E402

import ember.audio.models as EM  # noqa: E402

torch.set_num_threads(1)


def layout(model: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def twin(build, seed: int = 0):
    """torchaudio's model with seeded weights and ours with those weights, both in eval."""
    torch.manual_seed(seed)
    theirs = build(TAM).eval()
    ours = build(EM).eval()
    assert layout(ours) == layout(theirs)
    assert (sum(p.numel() for p in ours.parameters())
            == sum(p.numel() for p in theirs.parameters()))
    ours.load_state_dict(theirs.state_dict(), strict=True)
    theirs.load_state_dict(ours.state_dict(), strict=True)
    return ours, theirs


def close(a, b, rtol=1e-5, atol=1e-6):
    """Tensors, or nested lists / tuples of them, agree elementwise."""
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            close(x, y, rtol, atol)
    elif isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol)
    else:
        assert a == b


def same_structure_on_meta(build) -> None:
    """Published configurations: same layout and parameter count, without allocating."""
    with torch.device("meta"):
        theirs, ours = build(TAM), build(EM)
    assert layout(ours) == layout(theirs)
    assert (sum(p.numel() for p in ours.parameters())
            == sum(p.numel() for p in theirs.parameters()))


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------ Emformer

@pytest.mark.parametrize("memory", [0, 2])
def test_emformer_forward_and_streaming_infer(memory):
    def build(M):
        return M.Emformer(16, 2, 32, 2, 4, dropout=0.1, activation="gelu",
                          left_context_length=3, right_context_length=2,
                          max_memory_size=memory, tanh_on_mem=bool(memory))
    ours, theirs = twin(build)
    x, lengths = rand(3, 14, 16, seed=1), torch.tensor([12, 9, 5])
    with torch.no_grad():
        close(ours(x, lengths), theirs(x, lengths))
        s_ours = s_theirs = None
        for step in range(3):  # states carry over segment to segment, batch item 2 shorter
            seg, seg_len = rand(3, 6, 16, seed=10 + step), torch.tensor([6, 6, 4])
            o, lo, s_ours = ours.infer(seg, seg_len, s_ours)
            t, lt, s_theirs = theirs.infer(seg, seg_len, s_theirs)
            close((o, lo, s_ours), (t, lt, s_theirs))


test_emformer_forward_and_streaming_infer.compares = ("models:Emformer",)


# ------------------------------------------------------------------ RNNT and beam search

RNNT_SMALL = dict(
    input_dim=8, encoding_dim=16, num_symbols=7, segment_length=4, right_context_length=2,
    time_reduction_input_dim=6, time_reduction_stride=2, transformer_num_heads=2,
    transformer_ffn_dim=24, transformer_num_layers=2, transformer_dropout=0.1,
    transformer_activation="gelu", transformer_left_context_length=3,
    transformer_max_memory_size=1, transformer_weight_init_scale_strategy="depthwise",
    transformer_tanh_on_mem=True, symbol_embedding_dim=12, num_lstm_layers=2,
    lstm_layer_norm=True, lstm_layer_norm_epsilon=1e-3, lstm_dropout=0.3)


def small_rnnt(M):
    return M.emformer_rnnt_model(**RNNT_SMALL)


def test_rnnt_forward_transcribe_predict_join():
    ours, theirs = twin(small_rnnt)
    x, lengths = rand(2, 22, 8, seed=2), torch.tensor([20, 14])
    targets, target_lengths = torch.randint(0, 7, (2, 5)), torch.tensor([5, 3])
    with torch.no_grad():
        close(ours(x, lengths, targets, target_lengths),
              theirs(x, lengths, targets, target_lengths))
        enc = ours.transcribe(x, lengths)
        close(enc, theirs.transcribe(x, lengths))
        pred = ours.predict(targets, target_lengths, None)
        close(pred, theirs.predict(targets, target_lengths, None))
        close(ours.join(enc[0], enc[1], pred[0], pred[1]),
              theirs.join(enc[0], enc[1], pred[0], pred[1]))
        seg = rand(2, 6, 8, seed=3)
        close(ours.transcribe_streaming(seg, torch.tensor([6, 6]), None),
              theirs.transcribe_streaming(seg, torch.tensor([6, 6]), None))


test_rnnt_forward_transcribe_predict_join.compares = ("models:RNNT",
                                                      "models:emformer_rnnt_model")


def test_emformer_rnnt_base_structure():
    same_structure_on_meta(lambda M: M.emformer_rnnt_base(num_symbols=4097))


test_emformer_rnnt_base_structure.compares = ("models:emformer_rnnt_base",)


def tokens(hypos):
    return [h[0] for h in hypos]


@pytest.mark.parametrize("beam_width", [1, 3])
def test_rnnt_beam_search_hypotheses(beam_width):
    ours, theirs = twin(small_rnnt)
    ours_bs, theirs_bs = EM.RNNTBeamSearch(ours, 6), TAM.RNNTBeamSearch(theirs, 6)
    x = rand(20, 8, seed=4)
    with torch.no_grad():
        a, b = ours_bs(x, torch.tensor(20), beam_width), theirs_bs(x, torch.tensor(20),
                                                                   beam_width)
        assert tokens(a) == tokens(b)
        close([h[3] for h in a], [h[3] for h in b])
        h_ours = h_theirs = s_ours = s_theirs = None
        for step in range(3):
            seg = rand(6, 8, seed=20 + step)
            h_ours, s_ours = ours_bs.infer(seg, torch.tensor(6), beam_width, s_ours, h_ours)
            h_theirs, s_theirs = theirs_bs.infer(seg, torch.tensor(6), beam_width, s_theirs,
                                                 h_theirs)
            assert tokens(h_ours) == tokens(h_theirs)
            close(s_ours, s_theirs)
    assert max(len(t) for t in tokens(h_ours)) > 2   # the search emitted symbols


test_rnnt_beam_search_hypotheses.compares = ("models:RNNTBeamSearch", "models:Hypothesis")


# ------------------------------------------------------------------ Tacotron2

def small_tacotron2(mask_padding=False, n_frames_per_step=1, gate_threshold=0.5):
    def build(M):
        return M.Tacotron2(
            mask_padding=mask_padding, n_mels=10, n_symbol=20,
            n_frames_per_step=n_frames_per_step, symbol_embedding_dim=16,
            encoder_embedding_dim=16, encoder_kernel_size=3, decoder_rnn_dim=24,
            decoder_max_step=12, attention_rnn_dim=20, attention_hidden_dim=8,
            attention_location_n_filter=4, attention_location_kernel_size=5, prenet_dim=12,
            postnet_n_convolution=3, postnet_kernel_size=3, postnet_embedding_dim=14,
            gate_threshold=gate_threshold)
    return build


def randomise_batchnorm_stats(model):
    g = torch.Generator().manual_seed(5)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm1d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g))
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)


def seeded(fn, *args, seed=1):
    """The prenet's dropout stays on in eval: both models draw from the same seed."""
    torch.manual_seed(seed)
    return fn(*args)


@pytest.mark.parametrize("mask_padding", [False, True])
def test_tacotron2_teacher_forced(mask_padding):
    ours, theirs = twin(small_tacotron2(mask_padding))
    randomise_batchnorm_stats(theirs)
    ours.load_state_dict(theirs.state_dict())
    tokens, token_lengths = torch.randint(0, 20, (2, 7)), torch.tensor([7, 5])
    mel, mel_lengths = rand(2, 10, 8, seed=6), torch.tensor([8, 6])
    with torch.no_grad():
        close(seeded(ours, tokens, token_lengths, mel, mel_lengths),
              seeded(theirs, tokens, token_lengths, mel, mel_lengths))


test_tacotron2_teacher_forced.compares = ("models:Tacotron2",)


@pytest.mark.filterwarnings("ignore:.*max")
@pytest.mark.parametrize("n_frames_per_step", [1, 2])
@pytest.mark.parametrize("gate_threshold", [0.3, 0.5, 0.7])
def test_tacotron2_infer(gate_threshold, n_frames_per_step):
    ours, theirs = twin(small_tacotron2(n_frames_per_step=n_frames_per_step,
                                        gate_threshold=gate_threshold))
    tokens, lengths = torch.randint(0, 20, (3, 7)), torch.tensor([7, 6, 3])
    with torch.no_grad():
        close(seeded(ours.infer, tokens, lengths), seeded(theirs.infer, tokens, lengths))
        close(seeded(ours.infer, tokens[:1]), seeded(theirs.infer, tokens[:1]))


def test_tacotron2_default_structure():
    same_structure_on_meta(lambda M: M.Tacotron2())
    same_structure_on_meta(lambda M: M.Tacotron2(n_symbol=96, n_frames_per_step=3))


# ------------------------------------------------------------------ HDemucs

# nfft 64: one strided frequency layer, the merging layer, then two time-only layers; the
# BLSTM and local attention run from layer 1, where 4096 samples give 256 frames (> the BLSTM's
# 200-step window, so its overlapping windows run too)
HDEMUCS_SMALL = dict(audio_channels=2, channels=8, nfft=64, depth=4, norm_starts=2,
                     dconv_comp=2, dconv_lstm=1, dconv_attn=1)


@pytest.mark.parametrize("frames", [4096, 4000, 300, 25])   # 25: shorter than the padding
def test_hdemucs_separates_identically(frames):
    ours, theirs = twin(lambda M: M.HDemucs(["drums", "bass"], **HDEMUCS_SMALL))
    mixture = rand(2, 2, frames, seed=7)
    with torch.no_grad():
        close(ours(mixture), theirs(mixture), rtol=1e-5, atol=1e-5)


test_hdemucs_separates_identically.compares = ("models:HDemucs",)


@pytest.mark.parametrize("name", ["hdemucs_low", "hdemucs_medium", "hdemucs_high"])
def test_hdemucs_builders_structure(name):
    same_structure_on_meta(lambda M: getattr(M, name)(["drums", "bass", "other", "vocals"]))


test_hdemucs_builders_structure.compares = ("models:hdemucs_low", "models:hdemucs_medium",
                                            "models:hdemucs_high")


# ------------------------------------------------------------------ Squim

@pytest.mark.parametrize("rnn_type", ["LSTM", "GRU"])
def test_squim_objective_scores(rnn_type):
    ours, theirs = twin(lambda M: M.squim_objective_model(
        feat_dim=16, win_len=8, d_model=16, nhead=2, hidden_dim=12, num_blocks=2,
        rnn_type=rnn_type, chunk_size=7))
    for frames in (400, 333):    # chunking pads differently
        speech = rand(2, frames, seed=8)
        with torch.no_grad():
            close(ours(speech), theirs(speech))


test_squim_objective_scores.compares = ("models:SquimObjective", "models:squim_objective_model")


TINY_WAV2VEC2 = dict(
    extractor_mode="group_norm", extractor_conv_layer_config=[(8, 10, 5), (8, 3, 2)],
    extractor_conv_bias=False, encoder_embed_dim=16, encoder_projection_dropout=0.0,
    encoder_pos_conv_kernel=4, encoder_pos_conv_groups=2, encoder_num_layers=2,
    encoder_num_heads=2, encoder_attention_dropout=0.0, encoder_ff_interm_features=24,
    encoder_ff_interm_dropout=0.0, encoder_dropout=0.0, encoder_layer_norm_first=False,
    encoder_layer_drop=0.0, aux_num_out=None)


def test_squim_subjective_scores():
    from torchaudio.models.squim.subjective import Predictor as TheirPredictor

    from ember.audio.models.squim.subjective import Predictor
    from ember.audio.models.wav2vec2 import wav2vec2_model

    def build(M):
        if M is TAM:
            ssl, predictor = TAM.wav2vec2_model(**TINY_WAV2VEC2), TheirPredictor(12, 5)
        else:
            ssl, predictor = wav2vec2_model(**TINY_WAV2VEC2), Predictor(12, 5)
        return M.SquimSubjective(ssl, torch.nn.Linear(16, 6), predictor)

    ours, theirs = twin(build)
    speech = rand(2, 800, seed=9)
    for reference in (rand(2, 300, seed=10), rand(2, 1000, seed=11)):  # repeated, then cut
        with torch.no_grad():
            close(ours(speech, reference), theirs(speech, reference))


test_squim_subjective_scores.compares = ("models:SquimSubjective",)


def test_squim_builders_structure():
    same_structure_on_meta(lambda M: M.squim_objective_base())
    same_structure_on_meta(lambda M: M.squim_subjective_base())
    same_structure_on_meta(lambda M: M.squim_subjective_model(
        ssl_type="wavlm_base", feat_dim=768, proj_dim=16, att_dim=3))


test_squim_builders_structure.compares = ("models:squim_objective_base",
                                          "models:squim_subjective_base",
                                          "models:squim_subjective_model")
