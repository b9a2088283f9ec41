"""decode -> transforms -> resnet18 under ember.core.compile: one graph, no break."""

import io

import numpy as np
import pytest
import torch
from PIL import Image

import ember.core
import ember.vision.transforms as T
from ember.vision import io as vio
from ember.vision import models

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


@pytest.fixture(scope="module", autouse=True)
def _cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("EMBER_CACHE_DIR", str(tmp_path_factory.mktemp("ember_cache")))
    yield
    mp.undo()


def _decoded_batch(n: int = 3, h: int = 80, w: int = 96) -> torch.Tensor:
    rng = np.random.default_rng(0)
    encoded = []
    for _ in range(n):
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buffer, "JPEG")
        encoded.append(torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8))
    return torch.stack(vio.decode_jpeg(encoded))


def test_training_pipeline_and_resnet18_capture_as_one_graph():
    pipe = T.Compose([T.RandomResizedCrop(64, per_sample=True),
                      T.RandomHorizontalFlip(per_sample=True),
                      T.ToDtype(torch.float32, scale=True),
                      T.ColorJitter(0.4, 0.4, 0.4, 0.1, per_sample=True), T.Normalize(MEAN, STD)])
    model = models.resnet18(num_classes=10).eval()
    explanation = ember.core.explain(lambda x: model(pipe(x)), _decoded_batch())
    assert len(explanation.graphs) == 1
    assert explanation.graph_breaks == []


def test_compiled_pipeline_matches_eager():
    torch.manual_seed(0)
    images = _decoded_batch()
    model = models.resnet18(num_classes=10).eval()
    fixed = T.Compose([T.Resize(72), T.CenterCrop(64), T.ToDtype(torch.float32, scale=True),
                       T.Normalize(MEAN, STD)])
    step = lambda x: model(fixed(x))
    with torch.no_grad():
        torch.testing.assert_close(ember.core.compile(step)(images), step(images),
                                   atol=1e-4, rtol=1e-4)
    # random geometry: the same seed draws the same crops and flips compiled and eager
    rand = T.Compose([T.RandomResizedCrop(64, per_sample=True),
                      T.RandomHorizontalFlip(per_sample=True)])
    compiled = ember.core.compile(lambda x: rand(x))
    torch.manual_seed(3)
    expected = rand(images)
    torch.manual_seed(3)
    out = compiled(images)
    assert out.dtype == torch.uint8 and out.shape == expected.shape
    assert (out.int() - expected.int()).abs().max() <= 1  # resize rounding: one level at most
