"""Every registered benchmark runs in --quick mode and returns a well-formed table.

io, arrow, data, transforms, opinfo (two ops) and conv together take well under a minute on 2
cores and stay in the fast set; the ones that compile models (compile, zoo) or spawn heavy
peers (audio, attention) are marked slow.
"""

import math

import pytest
import torch

from ember.tools.bench import BENCHMARKS, run

FAST = {"io", "arrow", "data", "transforms", "opinfo", "conv"}
SLOW = {"audio", "attention", "compile", "zoo", "optim", "aot", "detection"}
CUDA = {"attention-gpu"}  # rows only where a CUDA device is present


def test_every_registered_benchmark_has_a_quick_test():
    assert set(BENCHMARKS) == FAST | SLOW | CUDA, "add new benchmarks to FAST, SLOW or CUDA here"


def _check(name: str) -> None:
    result = run(name, quick=True)
    assert result.name == name
    assert result.rows, f"{name} returned no rows"
    for row in result.rows:
        assert len(row) == len(result.columns), (name, row)
    ratios = result.ratio_columns()
    assert ratios, f"{name} has no numeric speed-up/ratio column for the chart"
    for col in ratios:
        i = result.columns.index(col)
        assert all(math.isfinite(r[i]) and r[i] > 0 for r in result.rows), (name, col)
    assert len(result.case_labels()) == len(result.rows)


@pytest.mark.parametrize("name", sorted(FAST))
def test_quick_run(name):
    _check(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SLOW))
def test_quick_run_slow(name):
    _check(name)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", sorted(CUDA))
def test_quick_run_cuda(name):
    _check(name)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the run without a CUDA device")
@pytest.mark.parametrize("name", sorted(CUDA))
def test_cuda_benchmark_without_a_device_says_so(name):
    result = run(name, quick=True)
    assert not result.rows and any("no CUDA device" in n for n in result.notes)
