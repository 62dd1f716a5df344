"""The character-level MLP with a manual backward (`tests/backprop_program.py`) prints what PyTorch prints,
on the engine, the embedded client and the client against a live server: every loss, and for each of 26
tensors that the hand-written gradient equals autograd's."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

import client
import engine
from tests import backprop_program


@pytest.fixture(params=["engine", "embedded", "remote"])
def torch_like(request):
    """The module a program imports as `torch`, with its `nn.functional`."""
    if request.param == "engine":
        yield engine, engine.nn.functional
        return
    url = request.getfixturevalue("server").url if request.param == "remote" else None
    with client.connect(url):
        yield client, client.nn.functional


def run(torch, functional) -> tuple[list[str], np.ndarray]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        embeddings = backprop_program.backprop_ninja(torch, functional)
    return out.getvalue().splitlines(), embeddings


def test_manual_backward_prints_what_torch_prints(torch_like):
    torch = pytest.importorskip("torch")
    got, got_embeddings = run(*torch_like)
    want, want_embeddings = run(backprop_program.same_draws(torch, engine), torch.nn.functional)
    assert len(want) == 1 + 1 + 26 + 1 + 1 + 3
    assert all("approximate: True" in line for line in want if "|" in line)
    assert got == want
    np.testing.assert_allclose(got_embeddings, want_embeddings, rtol=1e-4, atol=1e-5)
