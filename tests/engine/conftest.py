"""Fixtures of the engine tests: every test starts on the CPU backend with grad mode on."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # engine_testkit lives here (also under --import-mode=importlib)
    sys.path.insert(0, HERE)

import engine  # noqa: E402
from engine import backend  # noqa: E402


@pytest.fixture(autouse=True)
def _clean_engine_state():
    """Run each test on NumPy with grad mode on, and put both back whatever the test did."""
    device = backend.device
    backend.use("cpu")
    engine.set_grad_enabled(True)
    try:
        yield
    finally:
        engine.set_grad_enabled(True)
        backend.use(device)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
