"""Fixtures shared by every test package (our suites and the peer suites alike)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def one_thread():
    """torch on one thread for the test (timings and float summation orders that do not
    depend on the machine's core count), restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
