"""Every public transform and model: ``torch.export``, ``ember.core.compile`` and
``ember.core.aot_compile`` + ``aot_load`` each give eager's outputs (#22).

The cases are enumerated from ``ember.audio.transforms.__all__`` and
``ember.audio.models.__all__``: a public name with no case, no ``COVERED_BY`` entry and no
``NOT_A_MODULE`` entry fails ``test_every_public_name_has_a_case``, so a new transform or
model cannot be skipped silently. What does not work is listed in ``EXPECTED_FAILURES`` with
its reason; such a check must raise the listed error (a clear one), so a case that starts
working fails too, and the table has to be updated.

Random transforms (masking, GriffinLim's random start, SpeedPerturbation) are compared
seeded: eager and the compiled / exported / packaged module run from the same seed, for two
seeds that are not the trace's, and the two eager results must differ. A module that had
baked the trace's random draws into constants, or dropped the randomness, fails.

Small configurations and inputs keep a case to a few seconds; ``aot`` builds a C++ package,
so only a few of those run in the fast set, the rest are ``slow`` (``make test-all``).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from torch import nn
from torch.utils import _pytree as pytree

import ember.audio.models as M
import ember.audio.transforms as T
import ember.core
from ember.core.compiler import pipeline

pytestmark = pytest.mark.usefixtures("one_thread")

CHECKS = ("export", "ember", "aot")
TRACE_SEED, SEEDS = 0, (1, 2)


@dataclass
class Case:
    build: Callable[[], nn.Module]
    inputs: Callable[[], tuple]
    random: bool = False       # compared seeded, for two seeds (see the module docstring)
    fast: tuple = ("export",)  # the checks `make test` runs; the others are marked slow
    rtol: float = 1e-4
    atol: float = 1e-5
    warm: bool = False         # one eager call before tracing (a lazy module)
    # checks whose random draws differ from eager's (ember decomposes dropout into
    # rand_like < p, as Inductor does; eager's kernel draws otherwise): compared by structure
    # (shapes, dtypes), reproducibility from a seed, and dependence on the seed
    own_draws: tuple = ()


def _g(seed=0):
    return torch.Generator().manual_seed(seed)


def _wav(n=1600, c=1, seed=0):
    return (torch.randn(c, n, generator=_g(seed)) * 0.3,)


def _spec(f=65, t=12, c=1, seed=0):
    return (torch.rand(c, f, t, generator=_g(seed)),)


def _cspec(f=33, t=9, c=1, seed=0):
    return torch.randn(c, f, t, generator=_g(seed), dtype=torch.cfloat)


def _psds():
    spec = _cspec(c=3)
    mask = torch.rand(33, 9, generator=_g(1))
    psd_s = T.PSD()(spec, mask)
    psd_n = T.PSD()(spec, 1 - mask) + 0.1 * torch.eye(3, dtype=torch.cfloat)
    return spec, mask, psd_s, psd_n


def _ref(c=3, i=0):
    # a one-hot reference channel tensor: packages take tensors, not Python ints
    ref = torch.zeros(c)
    ref[i] = 1
    return ref


TRANSFORMS: dict[str, Case] = {
    "AddNoise": Case(T.AddNoise, lambda: (*_wav(), _wav(seed=1)[0], torch.tensor([10.0]))),
    "AmplitudeToDB": Case(T.AmplitudeToDB, _spec, fast=("export", "ember")),
    "ComputeDeltas": Case(T.ComputeDeltas, _spec),
    "Convolve": Case(T.Convolve, lambda: (*_wav(400), _wav(30, seed=1)[0]), atol=1e-4),
    "Deemphasis": Case(T.Deemphasis, lambda: _wav(400)),
    "FFTConvolve": Case(T.FFTConvolve, lambda: (*_wav(400), _wav(30, seed=1)[0]), atol=1e-4),
    "Fade": Case(lambda: T.Fade(100, 200), _wav),
    "FrequencyMasking": Case(lambda: T.FrequencyMasking(20), _spec, random=True,
                             fast=("export", "ember")),
    "GriffinLim": Case(lambda: T.GriffinLim(n_fft=64, n_iter=3), lambda: _spec(33, 12),
                       random=True, atol=1e-4, rtol=1e-3),
    "InverseMelScale": Case(lambda: T.InverseMelScale(33, n_mels=16), lambda: _spec(16, 8),
                            atol=1e-4),
    "InverseSpectrogram": Case(lambda: T.InverseSpectrogram(n_fft=64), lambda: (_cspec(),)),
    "LFCC": Case(lambda: T.LFCC(8000, n_filter=32, n_lfcc=13, speckwargs={"n_fft": 64}), _wav,
                 atol=1e-4),
    # 0.4 s at least (its gating blocks); the traced IIR filters unroll one step per block
    "Loudness": Case(lambda: T.Loudness(4000), lambda: _wav(1600), fast=()),
    "MFCC": Case(lambda: T.MFCC(8000, n_mfcc=13, melkwargs={"n_fft": 64, "n_mels": 16}), _wav,
                 atol=1e-4),
    # complex128 inside, and linalg.solve's error check under with_effects
    "MVDR": Case(T.MVDR, lambda: (_psds()[0], _psds()[1], 1 - _psds()[1]), atol=1e-4,
                 fast=CHECKS),
    "MelScale": Case(lambda: T.MelScale(16, 8000, n_stft=65), _spec),
    "MelSpectrogram": Case(lambda: T.MelSpectrogram(8000, n_fft=64, n_mels=16), _wav,
                           fast=CHECKS, atol=1e-4),
    "MuLawDecoding": Case(T.MuLawDecoding,
                          lambda: (torch.randint(0, 256, (1, 400), generator=_g()),)),
    "MuLawEncoding": Case(T.MuLawEncoding, lambda: _wav(400)),
    "PSD": Case(T.PSD, lambda: _psds()[:2]),
    # an octave: the resampling ratio is 2:1 (a ratio like 2^(2/12) in lowest terms makes a
    # many-phase kernel, minutes to compile)
    "PitchShift": Case(lambda: T.PitchShift(8000, 12, n_fft=64), _wav, warm=True, atol=1e-4,
                       fast=()),
    "Preemphasis": Case(T.Preemphasis, lambda: _wav(400)),
    "RNNTLoss": Case(T.RNNTLoss, lambda: (
        torch.randn(2, 6, 4, 5, generator=_g()), torch.tensor([[1, 2, 3], [4, 1, 0]],
                                                               dtype=torch.int32),
        torch.tensor([6, 5], dtype=torch.int32), torch.tensor([3, 2], dtype=torch.int32))),
    "RTFMVDR": Case(T.RTFMVDR, lambda: (_psds()[0], _psds()[2][..., 0], _psds()[3], _ref()),
                    atol=1e-4),
    "Resample": Case(lambda: T.Resample(16000, 12000), _wav, fast=("export", "ember")),
    "SlidingWindowCmn": Case(lambda: T.SlidingWindowCmn(cmn_window=20, min_cmn_window=5),
                             lambda: (torch.randn(1, 40, 13, generator=_g()),)),
    "SoudenMVDR": Case(T.SoudenMVDR, lambda: (_psds()[0], *_psds()[2:], _ref()), atol=1e-4,
                       fast=("export", "ember")),
    "SpecAugment": Case(lambda: T.SpecAugment(2, 5, 2, 10), lambda: _spec(c=2), random=True),
    "SpectralCentroid": Case(lambda: T.SpectralCentroid(8000, n_fft=64), _wav, atol=1e-3),
    "Spectrogram": Case(lambda: T.Spectrogram(n_fft=64), _wav, atol=1e-4),
    "Speed": Case(lambda: T.Speed(8000, 1.25), lambda: (*_wav(), torch.tensor([1600, 1000]))),
    "SpeedPerturbation": Case(lambda: T.SpeedPerturbation(8000, [0.8, 1.0, 1.25]),
                              lambda: (*_wav(), torch.tensor([1600, 1000])), random=True),
    "TimeMasking": Case(lambda: T.TimeMasking(6), _spec, random=True),
    "TimeStretch": Case(lambda: T.TimeStretch(n_freq=33, fixed_rate=1.3),
                        lambda: (_cspec(),), atol=1e-4),
    "Vad": Case(lambda: T.Vad(8000), lambda: _wav(4000)),
    "Vol": Case(lambda: T.Vol(0.5), _wav, fast=("export", "ember")),
}


# ------------------------------------------------------------------ models (tiny configs)

def _seeded(build):
    def make():
        torch.manual_seed(0)
        return build().eval()
    return make


W2V_CONV = [(8, 10, 5), (8, 3, 2)]
W2V = dict(extractor_mode="layer_norm", extractor_conv_layer_config=W2V_CONV,
           extractor_conv_bias=True, encoder_embed_dim=16, encoder_projection_dropout=0.0,
           encoder_pos_conv_kernel=4, encoder_pos_conv_groups=2, encoder_num_layers=1,
           encoder_num_heads=2, encoder_attention_dropout=0.0, encoder_ff_interm_features=24,
           encoder_ff_interm_dropout=0.0, encoder_dropout=0.0, encoder_layer_norm_first=True,
           encoder_layer_drop=0.0)


def _rnnt():
    return M.emformer_rnnt_model(
        input_dim=8, encoding_dim=16, num_symbols=7, segment_length=4, right_context_length=2,
        time_reduction_input_dim=6, time_reduction_stride=2, transformer_num_heads=2,
        transformer_ffn_dim=24, transformer_num_layers=1, transformer_dropout=0.0,
        transformer_activation="relu", transformer_left_context_length=3,
        transformer_max_memory_size=0, transformer_weight_init_scale_strategy="depthwise",
        transformer_tanh_on_mem=False, symbol_embedding_dim=12, num_lstm_layers=1,
        lstm_layer_norm=True, lstm_layer_norm_epsilon=1e-3, lstm_dropout=0.0)


def _hubert():
    return M.hubert_pretrain_model(
        **{k: v for k, v in W2V.items()},
        mask_prob=0.5, mask_selection="static", mask_other=0.0, mask_length=2,
        no_mask_overlap=False, mask_min_space=1, mask_channel_prob=0.0,
        mask_channel_selection="static", mask_channel_other=0.0, mask_channel_length=4,
        no_mask_channel_overlap=False, mask_channel_min_space=1, skip_masked=False,
        skip_nomask=False, num_classes=11, final_dim=8, feature_grad_mult=None)


def _squim_subjective():
    from ember.audio.models.squim.subjective import Predictor

    return M.SquimSubjective(M.wav2vec2_model(**W2V, aux_num_out=None), nn.Linear(16, 6),
                             Predictor(12, 5))


def _tacotron2():
    return M.Tacotron2(n_mels=10, n_symbol=20, symbol_embedding_dim=16,
                       encoder_embedding_dim=16, encoder_kernel_size=3, decoder_rnn_dim=24,
                       decoder_max_step=12, attention_rnn_dim=20, attention_hidden_dim=8,
                       attention_location_n_filter=4, attention_location_kernel_size=5,
                       prenet_dim=12, postnet_n_convolution=3, postnet_kernel_size=3,
                       postnet_embedding_dim=14)


def _hdemucs():
    return M.HDemucs(["drums", "bass"], audio_channels=2, channels=8, nfft=64, depth=4,
                     norm_starts=2, dconv_comp=2, dconv_lstm=1, dconv_attn=1)


MODELS: dict[str, Case] = {
    "Wav2Letter": Case(_seeded(lambda: M.Wav2Letter(10, "mfcc", 13)),
                       lambda: (torch.randn(1, 13, 40, generator=_g()),), fast=(), atol=1e-4),
    "WaveRNN": Case(_seeded(lambda: M.WaveRNN([2, 2], 16, 4, n_res_block=1, n_rnn=16, n_fc=16,
                                              n_freq=10, n_hidden=8, n_output=8)),
                    lambda: (torch.randn(1, 1, 20, generator=_g()),
                             torch.randn(1, 1, 10, 9, generator=_g(1))), atol=1e-4,
                    fast=("export", "ember")),
    "ConvTasNet": Case(_seeded(lambda: M.ConvTasNet(2, 8, 16, 3, 8, 16, 2, 2)),
                       lambda: (torch.randn(1, 1, 400, generator=_g()),), atol=1e-4),
    "DeepSpeech": Case(_seeded(lambda: M.DeepSpeech(20, 32, 5)),
                       lambda: (torch.randn(1, 1, 10, 20, generator=_g()),), atol=1e-4),
    "Conformer": Case(_seeded(lambda: M.Conformer(16, 2, 32, 1, 3)),
                      lambda: (torch.randn(2, 10, 16, generator=_g()), torch.tensor([10, 7])),
                      atol=1e-4),
    "Emformer": Case(_seeded(lambda: M.Emformer(16, 2, 32, 1, 4, left_context_length=3,
                                                right_context_length=2, max_memory_size=2)),
                     lambda: (torch.randn(2, 14, 16, generator=_g()), torch.tensor([12, 9])),
                     atol=1e-4),
    "emformer_rnnt_model": Case(_seeded(_rnnt), lambda: (
        torch.randn(2, 22, 8, generator=_g()), torch.tensor([20, 14]),
        torch.randint(0, 7, (2, 5), generator=_g()), torch.tensor([5, 3])), atol=1e-4),
    "RNNTBeamSearch": Case(_seeded(lambda: M.RNNTBeamSearch(_rnnt(), blank=6)),
                           lambda: (torch.randn(12, 8, generator=_g()), torch.tensor(12), 2),
                           fast=()),
    "Tacotron2": Case(_seeded(_tacotron2), lambda: (
        torch.randint(0, 20, (2, 7), generator=_g()), torch.tensor([7, 5]),
        torch.randn(2, 10, 8, generator=_g()), torch.tensor([8, 6])), fast=(), atol=1e-4,
        random=True, own_draws=("ember",)),  # its prenet's dropout stays on in eval
    "HDemucs": Case(_seeded(_hdemucs), lambda: (torch.randn(1, 2, 512, generator=_g()),),
                    fast=(), atol=1e-4),
    "squim_objective_model": Case(_seeded(lambda: M.squim_objective_model(
        feat_dim=16, win_len=8, d_model=16, nhead=2, hidden_dim=12, num_blocks=1,
        rnn_type="LSTM", chunk_size=7)), lambda: (torch.randn(2, 300, generator=_g()),),
        fast=(), atol=1e-4),
    "SquimSubjective": Case(_seeded(_squim_subjective), lambda: (
        torch.randn(2, 500, generator=_g()), torch.randn(2, 300, generator=_g(1))),
        fast=(), atol=1e-4),
    "wav2vec2_model": Case(_seeded(lambda: M.wav2vec2_model(**W2V, aux_num_out=5)),
                           lambda: (torch.randn(2, 400, generator=_g()),
                                    torch.tensor([400, 300])), atol=1e-4),
    "wavlm_model": Case(_seeded(lambda: M.wavlm_model(**W2V, aux_num_out=None,
                                                      encoder_num_buckets=8,
                                                      encoder_max_distance=16)),
                        lambda: (torch.randn(2, 400, generator=_g()),
                                 torch.tensor([400, 300])), fast=(), atol=1e-4),
    "hubert_pretrain_model": Case(_seeded(_hubert), lambda: (
        torch.randn(2, 400, generator=_g()), torch.randint(0, 11, (2, 39), generator=_g()),
        torch.tensor([400, 300])), random=True, fast=(), atol=1e-4),
}

# public names whose export / compile path is exactly another case's: a class built by a
# case's builder, or a builder that only fills in a bigger configuration of a case's class
# (too big for a test: hundreds of MB to GB of weights, minutes per compile)
_BIG = "the same architecture as {} with a bigger configuration ({}); too big for a test"
COVERED_BY: dict[str, tuple[str, str]] = {
    "Wav2Vec2Model": ("wav2vec2_model", "the class wav2vec2_model builds"),
    "HuBERTPretrainModel": ("hubert_pretrain_model", "the class hubert_pretrain_model builds"),
    "RNNT": ("emformer_rnnt_model", "the class emformer_rnnt_model builds"),
    "SquimObjective": ("squim_objective_model", "the class squim_objective_model builds"),
    "emformer_rnnt_base": ("emformer_rnnt_model", _BIG.format("emformer_rnnt_model", "76M")),
    "hdemucs_low": ("HDemucs", _BIG.format("HDemucs", "20M")),
    "hdemucs_medium": ("HDemucs", _BIG.format("HDemucs", "79M")),
    "hdemucs_high": ("HDemucs", _BIG.format("HDemucs", "84M")),
    "squim_objective_base": ("squim_objective_model",
                             _BIG.format("squim_objective_model", "7M")),
    "squim_subjective_model": ("SquimSubjective",
                               _BIG.format("SquimSubjective", "a wav2vec2_base / wavlm_base "
                                           "inside, 94M")),
    "squim_subjective_base": ("SquimSubjective", _BIG.format("SquimSubjective", "94M")),
    **{name: ("wav2vec2_model", _BIG.format("wav2vec2_model", size)) for name, size in [
        ("wav2vec2_base", "95M"), ("wav2vec2_large", "317M"), ("wav2vec2_large_lv60k", "317M"),
        ("wav2vec2_xlsr_300m", "315M"), ("wav2vec2_xlsr_1b", "965M"),
        ("wav2vec2_xlsr_2b", "2.2B"), ("hubert_base", "95M"), ("hubert_large", "316M"),
        ("hubert_xlarge", "964M")]},
    **{name: ("wavlm_model", _BIG.format("wavlm_model", size)) for name, size in [
        ("wavlm_base", "95M"), ("wavlm_large", "316M")]},
    **{name: ("hubert_pretrain_model", _BIG.format("hubert_pretrain_model", size))
       for name, size in [("hubert_pretrain_base", "95M"), ("hubert_pretrain_large", "317M"),
                          ("hubert_pretrain_xlarge", "965M")]},
}

NOT_A_MODULE = {"Hypothesis": "a typing alias (the tuple RNNTBeamSearch returns)"}


@dataclass(frozen=True)
class Failure:
    exc: type
    match: str   # a regex the message must contain: the error has to say why
    reason: str


def _data_dependent(name: str, reason: str) -> dict:
    """torch.export (and so aot_compile, which exports first) cannot trace ``name``: its
    output shape or its control flow depends on tensor values. ember.core.compile runs it
    (a graph break there, eager's answer)."""
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    from ember.core.aot import AOTExportError

    return {(name, "export"): Failure(GuardOnDataDependentSymNode, "data-dependent", reason),
            (name, "aot"): Failure(AOTExportError, "torch.export could not capture the "
                                   "model: GuardOnDataDependentSymNode", reason)}


def _refused(name: str, reason: str) -> dict:
    """``name`` refuses torch.export itself, saying why (a data-dependent output shape)."""
    from ember.core.aot import AOTExportError

    match = f"{name} cannot be exported with torch.export"
    return {(name, "export"): Failure(RuntimeError, match, reason),
            (name, "aot"): Failure(AOTExportError, match, reason)}


EXPECTED_FAILURES: dict[tuple[str, str], Failure] = {
    **_refused("Vad", "the trimmed length depends on the signal (docs/audio.md)"),
    **_refused("SpeedPerturbation", "the factor is drawn per call, and the output length "
               "follows it"),
    **_data_dependent("RNNTBeamSearch", "a search: how many steps and hypotheses depends "
                      "on the scores"),
    **_data_dependent("Tacotron2", "its encoder checks the token lengths are sorted and "
                      "packs the sequences by them (pack_padded_sequence)"),
    **_data_dependent("hubert_pretrain_model", "the number of masked spans is drawn per "
                      "call (compute_mask_indices) and the logits keep the masked frames"),
}

CASES = {**TRANSFORMS, **MODELS}


# ------------------------------------------------------------------ the checks

def _close(got, want, case: Case):
    torch.testing.assert_close(got, want, rtol=case.rtol, atol=case.atol, equal_nan=True)


def _run(fn, args, seed):
    if seed is not None:
        torch.manual_seed(seed)
    with torch.no_grad():
        return fn(*args)


def _compiled(check: str, module: nn.Module, args: tuple, path) -> Callable:
    torch.manual_seed(TRACE_SEED)
    if check == "export":
        return torch.export.export(module, args).module()
    if check == "ember":
        torch._dynamo.reset()
        return ember.core.compile(module)
    package = ember.core.aot_compile(module, args, path=str(path / "model.pt2"))
    return ember.core.aot_load(package)


class GraphFellBack(AssertionError):
    """ember.core.compile ran a captured graph in eager ATen (right, but not compiled)."""


def _check(name: str, check: str, path) -> None:
    case = CASES[name]
    module, args = case.build(), case.inputs()
    if case.warm:
        _run(module, args, TRACE_SEED)
    seeds = SEEDS if case.random else (None,)
    fallbacks = pipeline.stats["graphs_fallback"]
    with torch.no_grad():
        fn = _compiled(check, module, args, path)
    if case.random:
        # the draws must matter, or a seeded comparison could not catch baked-in draws
        a, b = (_run(case.build(), args, s) for s in SEEDS)
        with pytest.raises(AssertionError):
            _close(a, b, case)
    if check in case.own_draws:
        got, again, other = (_run(fn, args, s) for s in (SEEDS[0], SEEDS[0], SEEDS[1]))
        want = _run(case.build(), args, SEEDS[0])
        flat_got, spec_got = pytree.tree_flatten(got)
        flat_want, spec_want = pytree.tree_flatten(want)
        assert spec_got == spec_want
        assert [(t.shape, t.dtype) for t in flat_got] == [(t.shape, t.dtype) for t in flat_want]
        _close(got, again, case)
        with pytest.raises(AssertionError):
            _close(got, other, case)
        seeds = ()
    for seed in seeds:
        want = _run(case.build() if case.random else module, args, seed)
        _close(_run(fn, args, seed), want, case)
    if pipeline.stats["graphs_fallback"] != fallbacks:
        raise GraphFellBack(f"{name}: a captured graph runs in eager ATen (EMBER_LOGS=fallback "
                            f"says why)")


def _params():
    for name, case in CASES.items():
        for check in CHECKS:
            marks = [] if check in case.fast else [pytest.mark.slow]
            yield pytest.param(name, check, id=f"{name}-{check}", marks=marks)


@pytest.mark.parametrize("name, check", list(_params()))
def test_export_compile_aot(name, check, tmp_path):
    failure = EXPECTED_FAILURES.get((name, check))
    if failure is None:
        _check(name, check, tmp_path)
        return
    with pytest.raises(failure.exc, match=failure.match):
        _check(name, check, tmp_path)


def test_every_public_name_has_a_case():
    transforms = set(T.__all__)
    models = set(M.__all__)
    assert transforms == set(TRANSFORMS), (
        f"transforms without a case: {sorted(transforms - set(TRANSFORMS))}; "
        f"cases that are not public transforms: {sorted(set(TRANSFORMS) - transforms)}")
    for name in transforms:
        assert inspect.isclass(getattr(T, name)) and issubclass(getattr(T, name), nn.Module)
    named = set(MODELS) | set(COVERED_BY) | set(NOT_A_MODULE)
    assert models == named, (f"models without a case: {sorted(models - named)}; "
                             f"names that are not public models: {sorted(named - models)}")
    assert not set(MODELS) & set(COVERED_BY) and not set(NOT_A_MODULE) & set(COVERED_BY)
    for name, (target, reason) in COVERED_BY.items():
        assert target in MODELS and reason, name
    for name in NOT_A_MODULE:
        assert not (inspect.isclass(getattr(M, name)) and issubclass(getattr(M, name),
                                                                     nn.Module))


def test_expected_failures_name_real_cases():
    for (name, check), failure in EXPECTED_FAILURES.items():
        assert name in CASES and check in CHECKS, (name, check)
        assert issubclass(failure.exc, BaseException) and failure.reason
        re.compile(failure.match)
