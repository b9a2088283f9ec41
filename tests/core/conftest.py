"""Fixtures shared by the ember.core test packages (compiler, nn)."""

from __future__ import annotations

import logging

import pytest

from ember.core import set_logs


@pytest.fixture
def output_code():
    """The messages of ``ember.output_code`` (generated C++ and wrappers) during the test."""
    msgs = []

    class H(logging.Handler):
        def emit(self, record):
            msgs.append(record.getMessage())
    h = H()
    set_logs(output_code=True)
    logging.getLogger("ember.output_code").addHandler(h)
    yield msgs
    logging.getLogger("ember.output_code").removeHandler(h)
    set_logs(output_code=None)
