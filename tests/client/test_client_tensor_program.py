"""A tensor program doing its own backprop (issue 13.3): embedded it is computed at once on the
engine (no request); against a server each value the program reads is one /forward whose graph
starts from the values already fetched, so requests don't grow with the program's history."""

from __future__ import annotations

import numpy as np
from client_testkit import Recorder

import client
import engine
from benchmarks.programs import two_layer_net_tensor

DIMS = (8, 20, 6, 3)


def losses(module, steps=6):
    step = two_layer_net_tensor(module, dims=DIMS)
    return [step() for _ in range(steps)]


def test_same_losses_as_the_engine_and_the_requests_it_takes(mode, recorder):
    got = losses(client)
    np.testing.assert_allclose(got, losses(engine), rtol=1e-5)
    assert got[-1] < got[0]
    if mode == "embedded":
        assert recorder.calls == []  # nothing needed a graph: every op ran on the engine at once
        return
    assert recorder.paths() == ["/forward"] * len(got)  # one per loss.item()
    sizes = [len(header["graph"]["nodes"]) for _, _, header in recorder.calls]
    # the weights' update history is not resent (each fetch brought the held values back): from
    # the second step on, every request carries one step's graph, the same size
    assert sizes[-1] <= sizes[1] and len(set(sizes[2:])) == 1, sizes


def test_fetched_values_cut_the_history(remote):
    recorder = Recorder(remote)
    w = client.tensor(np.ones(3))
    for _ in range(5):
        w = w * 2 + 1
    kept = w * 3  # recorded after w, not part of the graph that computes w
    assert (w.sum() + 0).item() == 3 * 63.0
    assert recorder.paths() == ["/forward"]
    assert kept._value.array is None and w._value.array is not None  # w is held by a Variable: it came back too
    np.testing.assert_allclose(kept.numpy(), np.full(3, 189.0))
    ops = [node["op"] for node in recorder.calls[1][2]["graph"]["nodes"]]
    assert sorted(ops) == ["constant", "input", "mul"], ops  # w went as an input, not as its history
