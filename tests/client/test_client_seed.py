"""The seed programs through the client, embedded and against a live server, checked against
the engine run directly; the remote runs must really go over HTTP (the server's metrics)."""

from __future__ import annotations

import numpy as np
import pytest
from client_testkit import (
    autograd_basics,
    doubling_loop,
    grad_with_grad_outputs,
    my_relu,
    square_plus,
    two_layer_net,
)

import client
import engine

STEPS = 20


@pytest.mark.parametrize("factor, expected", [(2, 3.0), (3, 4.5)])
def test_autograd_basics(session, factor, expected):
    x, y, z, out = autograd_basics(client, factor)
    np.testing.assert_allclose(x.grad.data, np.full((2, 2), expected))
    assert out.item() == pytest.approx(9 * factor)
    assert isinstance(x.grad, client.Variable) and isinstance(x.grad.data, np.ndarray)
    assert (type(y.grad_fn).__name__, type(z.grad_fn).__name__, type(out.grad_fn).__name__) == (
        "AddBackward0",
        "MulBackward0",
        "MeanBackward0",
    )
    assert x.grad_fn is None and x.is_leaf and not y.is_leaf
    assert repr(out) == repr(autograd_basics(engine, factor)[3])


def test_doubling_loop_and_non_scalar_backward(session):
    start = np.random.default_rng(1).standard_normal(3).astype(np.float32)
    x, y = doubling_loop(client, start)
    ex, ey = doubling_loop(engine, start)
    np.testing.assert_allclose(y.data, ey.data, rtol=1e-6)
    np.testing.assert_allclose(x.grad.data, ex.grad.data, rtol=1e-6)
    k = np.log2(np.abs(y.data / start)).round()[0]
    np.testing.assert_allclose(x.grad.data, np.array([0.1, 1.0, 0.0001], np.float32) * 2**k, rtol=1e-6)


def test_grad_with_grad_outputs(session):
    rng = np.random.default_rng(2)
    xs, ys, zs = rng.standard_normal((3, 4)), rng.standard_normal((4, 5)), rng.uniform(0.5, 2, 5)
    got = grad_with_grad_outputs(client, xs, ys, zs)
    want = grad_with_grad_outputs(engine, xs, ys, zs)
    for g_set, w_set in zip(got, want):
        assert len(g_set) == 3
        for g, w in zip(g_set, w_set):
            assert g.shape == w.shape and g.grad_fn is None
            np.testing.assert_allclose(g.data, w.data, rtol=1e-12)
    np.testing.assert_allclose(got[0][2].data, np.full(5, 3.0))  # d(sum(x@y + z))/dz: 3 rows


def test_square_plus(session):
    rng = np.random.default_rng(3)
    xs, ys = rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((2, 3)).astype(np.float32)
    x, y, z = square_plus(client, xs, ys)
    np.testing.assert_allclose(x.grad.data, 2 * xs, rtol=1e-6)
    np.testing.assert_allclose(y.grad.data, np.full((2, 3), 3.0))
    np.testing.assert_allclose(z.data, xs**2 + 3 * ys, rtol=1e-6)


@pytest.fixture(scope="module")
def engine_losses():
    return two_layer_net(engine, STEPS)[0], two_layer_net(engine, STEPS, relu=my_relu(engine).apply)[0]


def test_two_layer_nets_match_the_engine(session, mode, engine_losses, request):
    server = request.getfixturevalue("server") if mode == "remote" else None
    before = server.requests("/backward") if server else None
    forward_before = server.requests("/forward") if server else None
    clamp_losses, w1, w2 = two_layer_net(client, STEPS)
    relu_losses, _, _ = two_layer_net(client, STEPS, relu=my_relu(client).apply)
    engine_clamp, engine_relu = engine_losses
    np.testing.assert_allclose(clamp_losses, engine_clamp, rtol=1e-5)
    np.testing.assert_allclose(relu_losses, engine_relu, rtol=1e-5)
    np.testing.assert_allclose(clamp_losses, relu_losses, rtol=1e-5)
    assert clamp_losses[-1] < clamp_losses[0]
    if server is not None:  # the remote run went over HTTP: one /backward per backward() call
        assert server.requests("/backward") - before == 2 * STEPS
        assert server.requests("/forward") - forward_before == 2 * STEPS


def test_two_layer_net_binary_and_json_agree(server):
    results = []
    for binary in (True, False):
        with client.connect(server.url, binary=binary):
            losses, w1, w2 = two_layer_net(client, 3)
            results.append((losses, w1.data.copy(), w2.data.copy()))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])
    np.testing.assert_array_equal(results[0][2], results[1][2])


def test_example_script_runs_embedded_and_remote(server):
    import subprocess
    import sys

    from client_testkit import ROOT

    for env_url in (None, server.url):
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
        if env_url:
            env["GRADSERVE_URL"] = env_url
        done = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "two_layer_net.py"), "--steps", "3"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        lines = done.stdout.split("\n")
        assert [line.split()[0] for line in lines if line] == ["0", "1", "2"]
        assert float(lines[0].split()[1]) == pytest.approx(two_layer_net(engine, 1)[0][0], rel=1e-5)
        assert (env_url or "embedded") in done.stderr
