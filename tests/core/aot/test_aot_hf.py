"""HuggingFace ``transformers`` models (small configs, random weights, padded attention
masks) exported into ahead-of-time packages, against eager. The fast test runs the models
that once did not package; the slow one every model of ``ember bench zoo --suite hf``."""

import shutil

import pytest
import torch

pytest.importorskip("transformers")

from ember.core import aot
from ember.tools.bench import zoo, zoo_hf

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

# swin: a convolution then attention whose traced layout a second propagation does not give
# (the channels-last rewrite raised undoing itself); segformer: interpolation to a size
FAST = ["swin", "segformer"]


def _package_matches_eager(name: str, tmp_path) -> None:
    torch.manual_seed(0)
    work = zoo_hf.MODELS[name].build(True)
    model = work.model.eval()
    with torch.no_grad():
        want = model(*work.args)
    path = aot.aot_compile(model, tuple(work.args), path=str(tmp_path / f"{name}.pt2"))
    got = aot.aot_load(path)(*work.args)
    assert zoo._rel_error(got, want) < 1e-4, (name, zoo._rel_error(got, want))


@pytest.mark.parametrize("name", FAST)
def test_hf_model_package_matches_eager(name, tmp_path):
    _package_matches_eager(name, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in zoo_hf.MODELS if n not in FAST])
def test_every_hf_model_package_matches_eager(name, tmp_path):
    _package_matches_eager(name, tmp_path)


@pytest.mark.parametrize("name", ["bert", "llama"])
def test_dynamic_batch_and_sequence_package_matches_eager(name, tmp_path):
    """One package serves every (batch, sequence) in range, batch 1 included: its token rows
    cut from wider tensors keep their row stride (the package read the sequence length from
    that stride and indexed past the embedding table)."""
    torch.manual_seed(0)
    work = zoo_hf.MODELS[name].build(True)
    model = work.model.eval()
    seq = ({0: torch.export.Dim("batch", min=1, max=16),
            1: torch.export.Dim("seq", min=2, max=24)},) * len(work.args)
    path = aot.aot_compile(model, tuple(work.args), dynamic_shapes=(seq,),
                           path=str(tmp_path / f"{name}.pt2"))
    run = aot.aot_load(path)
    for batch, length in [(1, 5), (3, 17), (1, 24)]:
        args = [a.repeat(4, 4)[:batch, :length].clone() for a in work.args]
        with torch.no_grad():
            want = model(*args)
        assert zoo._rel_error(run(*args), want) < 1e-4, (batch, length)
