"""HuggingFace ``transformers`` models (small configs, random weights, default attention with
a padded attention mask) through Ember against eager. The fast test runs a handful in strict
mode (no eager fallback allowed); the slow one every model of ``ember bench zoo --suite hf``.
"""

import copy

import pytest
import torch

pytest.importorskip("transformers")

from ember.core import compile as ember_compile
from ember.core.compiler import capture
from ember.tools.bench import zoo, zoo_hf

# Encoder with a padding mask, causal decoders (GPT-2's own attention, Llama's GQA + RoPE),
# an encoder-decoder with relative position buckets, a vision transformer and audio (Whisper:
# convolutions + `repeat`).
FAST = ["bert", "gpt2", "llama", "t5", "vit", "whisper"]


def _run(name: str, mode: str, strict: bool):
    torch.manual_seed(0)
    work = zoo_hf.MODELS[name].build(True)
    work.model.train(mode == "training")
    initial = copy.deepcopy(work.model.state_dict())
    ref = zoo._step(work, work.model, mode, "float32", "cpu")()
    model = copy.deepcopy(work.model)
    model.load_state_dict(initial)
    torch._dynamo.reset()
    rec = capture.start_recording()
    try:
        compiled = ember_compile(model, options={"strict": True} if strict else None)
        out = zoo._step(work, compiled, mode, "float32", "cpu")()
    finally:
        capture.stop_recording()
        torch._dynamo.reset()
    return work, initial, out, ref, rec


@pytest.mark.parametrize("name", FAST)
def test_hf_model_inference_matches_eager(name):
    work, _, out, ref, rec = _run(name, "inference", strict=True)
    assert rec["fallback_ops"] == []
    assert zoo._rel_error(out, ref) < 1e-4


def test_hf_decoder_training_step_matches_eager():
    # Llama's backward slices (rotary embedding) need slice_scatter
    work, initial, out, ref, rec = _run("llama", "training", strict=True)
    assert rec["fallback_ops"] == []
    assert zoo._rel_error(out, ref) < 1e-3


def test_attention_masks_have_padding():
    ids, mask = zoo_hf._tokens(True)
    assert (mask == 0).any() and (mask == 1).any()
    work = zoo_hf.MODELS["bert"].build(True)
    assert "attention_mask" in work.model.names


@pytest.mark.slow
@pytest.mark.parametrize("name", list(zoo_hf.MODELS))
def test_every_hf_model_matches_eager(name):
    for mode in ["inference"] + (["training"] if zoo_hf.MODELS[name].train else []):
        work, initial, out, ref, _ = _run(name, mode, strict=False)
        ref64 = zoo._float64_reference(work, initial, mode, "cpu")
        assert zoo._accurate(out, ref, ref64, zoo_hf.TOLERANCE[("float32", mode)]), \
            (name, mode, zoo._rel_error(out, ref))
