"""Fixtures of the ONNX tests: the three test models exported once per session. Every test here
needs onnx; those that export or compare need torch and onnxruntime too (they skip without them)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def exported():
    """{name: (module, example input, ONNX bytes)}."""
    pytest.importorskip("torch")
    from tests.onnx.onnx_testkit import export, models

    return {name: (module, example, export(module, example)) for name, (module, example) in models().items()}


@pytest.fixture
def needs_conv():
    """The LeNet model needs the engine's conv and pool ops (engine/ops, branch conv)."""
    from engine.registry import OPS

    missing = [op for op in ("conv2d", "max_pool2d", "avg_pool2d") if op not in OPS]
    if missing:
        pytest.skip(f"the engine has no {', '.join(missing)} op yet")
