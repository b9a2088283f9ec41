"""`ember bench zoo --suite hf`: HuggingFace `transformers` models under eager, Inductor, Ember.

Every model is built from a small config with random weights (nothing is downloaded), with
its default attention implementation and, where it takes one, an attention mask with padding
zeros. Each runs inference in float32 and in AMP (bfloat16 autocast on CPU); the models with
``train=True`` also run one training step (forward, loss, backward, SGD update) in float32.
The measurement (correctness against eager, compile time, round-robin timing) is the zoo's
(:mod:`ember.tools.bench.zoo`); this module is the model table and the report.

``transformers`` is a benchmark/test dependency (requirements-test.txt), not one of ember's.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ember.tools.bench import zoo, zoo_suite
from ember.tools.bench.harness import BenchResult

# (mode, precision) cases; the training step runs in float32 only
INFERENCE_CASES = (("inference", "float32"), ("inference", "amp"))
TRAINING_CASE = ("training", "float32")
# Largest |compiled - eager| relative to the tensor's largest |eager| value (the zoo's rule,
# with the same float64 RMS fallback: zoo._accurate). AMP compares with eager under the same
# autocast: bfloat16 keeps 8 bits of mantissa (relative step 2^-8 = 3.9e-3), and a fused
# kernel that keeps intermediates in float32 where eager rounds each op to bfloat16 differs by
# a few steps after a dozen layers, hence 5e-2.
TOLERANCE = {("float32", "inference"): 1e-3, ("float32", "training"): 5e-3,
             ("amp", "inference"): 5e-2}

BATCH, SEQ, VOCAB = 2, 16, 128  # quick: same batch, SEQ 8


@dataclass
class HFModel:
    family: str
    build: Callable[[bool], zoo.Workload]
    train: bool = False


def _no_dropout(config) -> None:
    """Zero every dropout / stochastic-depth / SpecAugment probability (recursively), so a
    training step is deterministic and comparable with eager."""
    for key, value in list(vars(config).items()):
        if hasattr(value, "to_dict") and hasattr(value, "model_type"):
            _no_dropout(value)
        elif isinstance(value, float) and ("drop" in key or key.startswith("mask_time_prob")
                                           or key.startswith("mask_feature_prob")):
            setattr(config, key, 0.0)


def _tokens(quick: bool, vocab: int = VOCAB):
    seq = 8 if quick else SEQ
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (BATCH, seq), generator=g)
    mask = torch.ones(BATCH, seq, dtype=torch.long)
    mask[1, seq - seq // 4:] = 0  # the second sequence is padded
    return ids, mask


def _first(out) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    return out[0] if not isinstance(out, dict) else next(iter(out.values()))


_PROJECTIONS: dict[tuple, torch.Tensor] = {}


def _loss(out) -> torch.Tensor:
    """Mean of the model's first output (logits or last hidden state) times fixed random
    weights: a loss whose gradients do not vanish behind a final LayerNorm (a mean square of
    a normalised output is nearly constant, leaving gradients of rounding noise)."""
    t = _first(out).float()
    key = (tuple(t.shape), str(t.device))
    if key not in _PROJECTIONS:
        g = torch.Generator().manual_seed(1)
        _PROJECTIONS[key] = torch.randn(t.shape, generator=g).to(t.device)
    return (t * _PROJECTIONS[key]).mean()


class _Call(torch.nn.Module):
    """Wraps an HF model so its keyword inputs become a positional call the zoo can time."""

    def __init__(self, model: torch.nn.Module, names: tuple[str, ...], **fixed) -> None:
        super().__init__()
        self.model, self.names, self.fixed = model, names, fixed

    def forward(self, *args):
        return self.model(**dict(zip(self.names, args)), **self.fixed)


def _work(cls_name: str, config_name: str, inputs: dict, **cfg) -> zoo.Workload:
    import transformers

    config = getattr(transformers, config_name)(**cfg)
    _no_dropout(config)
    model = getattr(transformers, cls_name)(config)
    fixed = {"return_dict": True}
    if "use_cache" in vars(config) or hasattr(config, "use_cache"):
        fixed["use_cache"] = False
    names = tuple(inputs)
    return zoo.Workload(_Call(model, names, **fixed), tuple(inputs.values()), _loss)


# Small shared sizes: hidden 64, 2 layers, 4 heads, FFN 128, vocabulary 128.
_IDS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)  # inside the small vocabulary
_TXT = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=128, max_position_embeddings=64)


def _encoder(cls_name, config_name, **cfg):
    def build(quick):
        ids, mask = _tokens(quick)
        return _work(cls_name, config_name, {"input_ids": ids, "attention_mask": mask},
                     **{**_TXT, **_IDS, **cfg})
    return build


def _decoder(cls_name, config_name, **cfg):
    return _encoder(cls_name, config_name, **cfg)


def _seq2seq(cls_name, config_name, **cfg):
    def build(quick):
        ids, mask = _tokens(quick)
        dec = ids[:, : ids.shape[1] // 2].clone()
        return _work(cls_name, config_name, {"input_ids": ids, "attention_mask": mask,
                                             "decoder_input_ids": dec}, **{**_IDS, **cfg})
    return build


def _image(cls_name, config_name, size=32, **cfg):
    def build(quick):
        g = torch.Generator().manual_seed(0)
        pixels = torch.randn(BATCH, 3, size, size, generator=g)
        return _work(cls_name, config_name, {"pixel_values": pixels}, image_size=size, **cfg)
    return build


_LLAMA_LIKE = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, intermediate_size=128, max_position_embeddings=64)
_BART = dict(vocab_size=VOCAB, d_model=64, encoder_layers=2, decoder_layers=2,
             encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
             decoder_ffn_dim=128, max_position_embeddings=64)
_VIT = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            patch_size=8)


def _whisper(quick):
    g = torch.Generator().manual_seed(0)
    frames = 32  # max_source_positions * 2 (two convolutions, the second with stride 2)
    feats = torch.randn(BATCH, 16, frames, generator=g)
    dec = torch.randint(3, VOCAB, (BATCH, 6), generator=g)
    return _work("WhisperModel", "WhisperConfig",
                 {"input_features": feats, "decoder_input_ids": dec},
                 vocab_size=VOCAB, num_mel_bins=16, d_model=64, encoder_layers=2,
                 decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                 encoder_ffn_dim=128, decoder_ffn_dim=128, max_source_positions=16,
                 max_target_positions=16, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                 decoder_start_token_id=1)


def _wav2vec2(cls_name, config_name):
    def build(quick):
        g = torch.Generator().manual_seed(0)
        n = 1600 if quick else 4000
        audio = torch.randn(BATCH, n, generator=g)
        mask = torch.ones(BATCH, n, dtype=torch.long)
        mask[1, n - n // 4:] = 0
        return _work(cls_name, config_name, {"input_values": audio, "attention_mask": mask},
                     hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=128, conv_dim=(32, 32, 32), conv_stride=(5, 4, 2),
                     conv_kernel=(10, 4, 2), num_conv_pos_embeddings=16,
                     num_conv_pos_embedding_groups=4, vocab_size=32,
                     feat_extract_norm="layer", do_stable_layer_norm=True)
    return build


def _clip(quick):
    ids, mask = _tokens(quick)
    g = torch.Generator().manual_seed(0)
    pixels = torch.randn(BATCH, 3, 32, 32, generator=g)
    from transformers import CLIPTextConfig, CLIPVisionConfig

    text = CLIPTextConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
                          num_attention_heads=4, intermediate_size=128,
                          max_position_embeddings=64, projection_dim=32, **_IDS).to_dict()
    vision = CLIPVisionConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                              intermediate_size=128, image_size=32, patch_size=8,
                              projection_dim=32).to_dict()
    return _work("CLIPModel", "CLIPConfig", {"input_ids": ids, "attention_mask": mask,
                                             "pixel_values": pixels},
                 text_config=text, vision_config=vision, projection_dim=32)


MODELS: dict[str, HFModel] = {
    # encoders
    "bert": HFModel("encoder", _encoder("BertForSequenceClassification", "BertConfig"), True),
    "roberta": HFModel("encoder", _encoder("RobertaForMaskedLM", "RobertaConfig",
                                           pad_token_id=1)),
    "distilbert": HFModel("encoder", _encoder("DistilBertModel", "DistilBertConfig",
                                              vocab_size=VOCAB, dim=64, n_layers=2, n_heads=4,
                                              hidden_dim=128), True),
    "albert": HFModel("encoder", _encoder("AlbertModel", "AlbertConfig", embedding_size=32)),
    "electra": HFModel("encoder", _encoder("ElectraForPreTraining", "ElectraConfig",
                                           embedding_size=32), True),
    "deberta_v2": HFModel("encoder", _encoder("DebertaV2Model", "DebertaV2Config",
                                              max_relative_positions=32,
                                              position_buckets=16), True),
    "xlm_roberta": HFModel("encoder", _encoder("XLMRobertaModel", "XLMRobertaConfig",
                                               pad_token_id=1)),
    # decoders
    "gpt2": HFModel("decoder", _decoder("GPT2LMHeadModel", "GPT2Config", vocab_size=VOCAB,
                                        n_embd=64, n_layer=2, n_head=4, n_positions=64), True),
    "gpt_neo": HFModel("decoder", _decoder("GPTNeoForCausalLM", "GPTNeoConfig",
                                           vocab_size=VOCAB, hidden_size=64, num_layers=2,
                                           num_heads=4, attention_types=[[["global", "local"], 1]],
                                           window_size=8, max_position_embeddings=64), True),
    "opt": HFModel("decoder", _decoder("OPTForCausalLM", "OPTConfig", vocab_size=VOCAB,
                                       hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                       ffn_dim=128, word_embed_proj_dim=64,
                                       max_position_embeddings=64)),
    "llama": HFModel("decoder", _decoder("LlamaForCausalLM", "LlamaConfig", **_LLAMA_LIKE),
                     True),
    "mistral": HFModel("decoder", _decoder("MistralForCausalLM", "MistralConfig",
                                           sliding_window=8, **_LLAMA_LIKE)),
    "qwen2": HFModel("decoder", _decoder("Qwen2ForCausalLM", "Qwen2Config", **_LLAMA_LIKE),
                     True),
    "phi": HFModel("decoder", _decoder("PhiForCausalLM", "PhiConfig", **_LLAMA_LIKE)),
    "gemma": HFModel("decoder", _decoder("GemmaForCausalLM", "GemmaConfig", head_dim=16,
                                         **_LLAMA_LIKE)),
    # encoder-decoders
    "t5": HFModel("encoder-decoder", _seq2seq("T5ForConditionalGeneration", "T5Config",
                                              vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128,
                                              num_layers=2, num_heads=4,
                                              decoder_start_token_id=0), True),
    "bart": HFModel("encoder-decoder", _seq2seq("BartForConditionalGeneration", "BartConfig",
                                                **_BART), True),
    "marian": HFModel("encoder-decoder", _seq2seq("MarianMTModel", "MarianConfig",
                                                  decoder_vocab_size=VOCAB, pad_token_id=0,
                                                  decoder_start_token_id=0, **_BART)),
    # audio
    "whisper": HFModel("audio", _whisper, True),
    "wav2vec2": HFModel("audio", _wav2vec2("Wav2Vec2ForCTC", "Wav2Vec2Config"), True),
    "hubert": HFModel("audio", _wav2vec2("HubertModel", "HubertConfig")),
    # vision
    "vit": HFModel("vision", _image("ViTForImageClassification", "ViTConfig", num_labels=10,
                                    **_VIT), True),
    "deit": HFModel("vision", _image("DeiTModel", "DeiTConfig", **_VIT)),
    "swin": HFModel("vision", _image("SwinModel", "SwinConfig", embed_dim=16, depths=[1, 1],
                                     num_heads=[2, 4], window_size=4, patch_size=4), True),
    "convnext": HFModel("vision", _image("ConvNextForImageClassification", "ConvNextConfig",
                                         num_channels=3, num_stages=2, hidden_sizes=[16, 32],
                                         depths=[1, 1], num_labels=10), True),
    "segformer": HFModel("vision", _image("SegformerForSemanticSegmentation",
                                          "SegformerConfig", size=64, num_encoder_blocks=2,
                                          depths=[1, 1], sr_ratios=[2, 1],
                                          hidden_sizes=[16, 32], num_attention_heads=[1, 2],
                                          patch_sizes=[7, 3], strides=[4, 2],
                                          decoder_hidden_size=32, num_labels=5), True),
    "mobilevit": HFModel("vision", _image("MobileViTModel", "MobileViTConfig", size=64,
                                          hidden_sizes=[32, 40, 48],
                                          neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64])),
    "resnet": HFModel("vision", _image("ResNetModel", "ResNetConfig", embedding_size=16,
                                       hidden_sizes=[16, 32], depths=[1, 1])),
    "clip": HFModel("multimodal", _clip, True),
}
QUICK_MODELS = ("bert", "gpt2")


def cases(name: str) -> list[tuple[str, str]]:
    """The (mode, precision) runs of model ``name``."""
    return list(INFERENCE_CASES) + ([TRAINING_CASE] if MODELS[name].train else [])


def run(quick: bool = False, models: str | None = None,
        store: str | None = None) -> BenchResult:
    """Every HF model (quick: two) x inference float32/AMP (+ a float32 training step);
    ``store``: a folder keeping each model's rows (see :mod:`ember.tools.bench.zoo_store`)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    names = (models or os.environ.get("EMBER_ZOO_MODELS") or "").split(",")
    names = [n for n in names if n] or list(QUICK_MODELS if quick else MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        raise ValueError(f"unknown hf zoo model(s) {unknown}; known: {list(MODELS)}")
    entries = {n: zoo_suite.Entry(MODELS[n].family, MODELS[n].build, cases(n)) for n in names}
    parts = zoo_suite.run("hf", entries, names, quick, device,
                          lambda precision, mode: TOLERANCE[(precision, mode)], store)
    backends = zoo.BACKENDS
    columns = zoo_suite.columns(backends)
    rows = [row for p in parts for row in p.rows]
    errors = [e for p in parts for e in p.errors]
    passed, speedups = zoo_suite.tally(columns, rows, backends)
    total = len(rows)
    notes = []
    for b in backends:
        notes.append(zoo.suite_summary(b, passed[b], total, speedups))
    notes.append(f"device {device}; AMP = torch.autocast({device!r}, bfloat16 on CPU); training "
                 "= forward + loss (mean of the first output times fixed random weights) + "
                 "backward + SGD step, "
                 "dropout off; " + zoo.accuracy_rule(TOLERANCE))
    notes.append("models: transformers " + _version() + ", small configs (2 layers, hidden "
                 "64), random weights, default attention implementation, attention masks "
                 "with padding where the model takes one: " + ", ".join(names))
    notes.append("speedup = eager median / backend median (round-robin, same process); ember "
                 "vs inductor = Inductor median / Ember median; compile s = first call; ember "
                 "graph breaks / eager ops = Dynamo graph breaks and ATen ops Ember left to "
                 "eager inside its graphs during that first call")
    notes += zoo_suite.store_notes(entries, names, parts, store)
    notes += [f"error: {e}" for e in errors]
    title = ("HF model zoo (transformers): eager vs Inductor vs Ember, inference float32 and "
             f"AMP, a training step ({'quick' if quick else 'small configs'})")
    return BenchResult("zoo-hf", title, columns, rows, notes)


def _version() -> str:
    try:
        import transformers
    except ImportError:
        return "(not installed)"
    return transformers.__version__
