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
    headers = [header for _, _, header in recorder.calls]
    graphs = [header["graph"] for header in headers if "graph" in header]
    # the weights' update history is not resent (each fetch brought the held values back): from
    # the third step on, every request is the same one step's graph, so once it has been sent
    # it goes by the plan id the server gave it
    assert len(graphs) == 3 and len(graphs[2]["nodes"]) <= len(graphs[1]["nodes"]), [len(g["nodes"]) for g in graphs]
    by_id = headers[3:]
    assert by_id and all("graph" not in header for header in by_id), by_id
    assert len({header["plan"] for header in by_id}) == 1


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
