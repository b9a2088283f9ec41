"""`ember bench data --quick` runs and reports every loader on the same workload; the JPEG
workload's batch-level pipeline ends with exactly the batches of torch's per-sample Dataset."""

import torch
from torch.utils.data import default_collate

from ember.data import DataLoader2, MultiProcessingReadingService
from ember.data.datapipes.iter import IterableWrapper
from ember.tools.bench import registry
from ember.tools.bench.data import JpegBatch, Jpegs


def test_quick_bench_reports_all_loaders():
    result = registry.run("data", quick=True)
    assert result.name == "data" and result.rows
    for row in result.rows:
        assert row[1] in (0, 2)
        assert all(isinstance(v, float) and v > 0 for v in row[2:6])


def test_jpeg_batches_equal_torch_per_sample_batches():
    ds = Jpegs(40)
    batches = [list(range(i, min(i + 16, 40))) for i in range(0, 40, 16)]
    want = [default_collate([ds[i] for i in b]) for b in batches]
    assert all(torch.equal(JpegBatch.normalize(JpegBatch(ds)(b)), w)
               for b, w in zip(batches, want))
    # Inside workers the images are decoded one by one: same batches.
    dp = IterableWrapper(range(40), deepcopy=False).sharding_filter().batch(16).map(JpegBatch(ds))
    dl = DataLoader2(dp, reading_service=MultiProcessingReadingService(1, timeout=30))
    got = [JpegBatch.normalize(b) for b in dl]
    dl.shutdown()
    assert len(got) == 3 and all(torch.equal(g, w) for g, w in zip(got, want))
