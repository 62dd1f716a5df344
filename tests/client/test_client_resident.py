"""Remote training with resident parameters (issue 24 item 3): a client optimizer on a live server keeps
its parameters there, so a step sends its batch and the update only; losses and parameters equal the
engine's and PyTorch's step by step; sessions are isolated; expiry, budgets and a lost server are
clear errors."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace

import httpx
import numpy
import pytest
from client_testkit import free_port

import client
import client.optim.resident
import engine
from client.residents import ResidentLost

ROOT = Path(__file__).resolve().parents[2]

DIMS = (16, 40, 20, 3)  # batch, in, hidden, out
RNG = numpy.random.default_rng(7)
W1 = RNG.standard_normal((DIMS[1], DIMS[2]))
W2 = RNG.standard_normal((DIMS[2], DIMS[3]))
BATCHES = [(RNG.standard_normal((DIMS[0], DIMS[1])), RNG.standard_normal((DIMS[0], DIMS[3]))) for _ in range(5)]
OPTIMIZERS = [
    ("SGD", {"lr": 1e-3, "momentum": 0.9, "weight_decay": 1e-2}),
    ("Adam", {"lr": 1e-2, "betas": (0.8, 0.99)}),
]


def train(lib, name, options, tensor, params=None):
    """Losses of the seed net (relu MLP) trained on BATCHES by `lib.optim.<name>`; and its parameters."""
    w1, w2 = params or (tensor(W1.copy(), requires_grad=True), tensor(W2.copy(), requires_grad=True))
    resident = {"resident": True} if lib is client else {}  # opt-in: the client's optimizers keep PyTorch's semantics
    optimizer = getattr(lib.optim, name)([w1, w2], **options, **resident)
    losses = []
    for x, y in BATCHES:
        optimizer.zero_grad()
        loss = (tensor(x).mm(w1).clamp(min=0).mm(w2) - tensor(y)).pow(2).sum()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, (w1, w2)


class Bytes:
    """Request and answer body bytes of a session, counted at its transport and at the connection its steps
    left in flight go on (`client.pipeline`)."""

    def __init__(self, session):
        self.up = self.down = self.requests = 0
        transport = session._transport
        original = transport.request

        def request(method, path, content=None, headers=None):
            response = original(method, path, content, headers)
            self.up += len(content or b"")
            self.down += len(response.content)
            self.requests += 1
            return response

        transport.request = request
        if session._pipeline is not None:
            submit = session._pipeline.submit

            def submitted(method, path, content=None, headers=None):
                self.up += len(content or b"")
                self.requests += 1
                future = submit(method, path, content, headers)
                future.add_done_callback(lambda f: setattr(self, "down", self.down + len(f.result().content)))
                return future

            session._pipeline.submit = submitted


@pytest.mark.parametrize(("name", "options"), OPTIMIZERS)
def test_a_remote_loop_equals_the_engine_and_pytorch_step_by_step(server, name, options):
    torch = pytest.importorskip("torch")
    with client.connect(server.url) as session:
        losses, (w1, w2) = train(client, name, options, client.tensor)
        assert session._residents.params  # the parameters were kept resident
        remote = numpy.array(losses), w1.detach().numpy(), w2.detach().numpy()
    expected = train(engine, name, options, engine.tensor)
    oracle = train(torch, name, options, lambda a, requires_grad=False: torch.tensor(a, requires_grad=requires_grad))
    for reference in (expected, oracle):
        ref_losses, ref_params = reference
        numpy.testing.assert_allclose(remote[0], ref_losses, rtol=1e-10)
        for got, want in zip(remote[1:], ref_params):
            numpy.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-10, atol=1e-12)


def test_embedded_training_is_unchanged(server):
    with client.connect() as session:
        losses, _ = train(client, *OPTIMIZERS[0], client.tensor)
        assert not getattr(session, "_residents", None)
    numpy.testing.assert_allclose(losses, train(engine, *OPTIMIZERS[0], engine.tensor)[0], rtol=1e-12)


def test_a_step_sends_only_its_batch(server):
    x, y = BATCHES[0]
    batch_bytes = x.nbytes + y.nbytes
    param_bytes = W1.nbytes + W2.nbytes

    def step_bytes(resident):
        with client.connect(server.url) as session:
            w1, w2 = client.tensor(W1.copy(), requires_grad=True), client.tensor(W2.copy(), requires_grad=True)
            optimizer = client.optim.SGD([w1, w2], lr=1e-3, momentum=0.9, resident=resident)
            tx, ty = client.tensor(x), client.tensor(y)

            def step():
                optimizer.zero_grad()
                (tx.mm(w1).clamp(min=0).mm(w2) - ty).pow(2).sum().backward()
                optimizer.step()

            step()
            count = Bytes(session)
            for _ in range(3):
                step()
        return count.up / 3, count.down / 3, count.requests / 3  # (closing waits for the last step's answer)

    up, down, requests = step_bytes(True)
    old_up, old_down, _ = step_bytes(False)
    assert requests == 1  # the deferred backward goes with the update: one request per step
    assert batch_bytes <= up < batch_bytes + 3000  # the batch (under MIN_HELD_BYTES: sent) and a small header
    assert down < 1000  # the loss, nothing else
    assert old_up > up + param_bytes and old_down > down + param_bytes  # parameters went both ways before


BIG = RNG.standard_normal((128, DIMS[1])), RNG.standard_normal((128, DIMS[3]))  # x over MIN_HELD_BYTES


@pytest.mark.parametrize(
    "change",
    [
        "nothing",
        "a new tensor",
        "an in-place op",
        "an in-place op of a copy",
        "the NumPy array behind it",
        "its .data",
        "-0.0 for 0.0",
    ],
)
def test_an_unchanged_batch_is_held_on_the_server_and_a_changed_one_is_sent_again(server, change):
    """The same batch Variable read again is sent once more, then held (read by handle) while its bytes are
    unchanged; any change (however made, with or without a version bump) is sent again, and the losses and
    parameters equal the engine's step by step."""
    from client.residents import MIN_HELD_BYTES

    assert BIG[0].nbytes >= MIN_HELD_BYTES > BIG[1].nbytes

    def run(lib, count=None):
        w1, w2 = lib.tensor(W1.copy(), requires_grad=True), lib.tensor(W2.copy(), requires_grad=True)
        resident = {"resident": True} if lib is client else {}
        optimizer = lib.optim.SGD([w1, w2], lr=1e-4, momentum=0.9, **resident)
        x_array = BIG[0].copy()
        x, y = (
            lib.from_numpy(x_array) if change != "an in-place op of a copy" else lib.tensor(x_array),
            lib.tensor(BIG[1]),
        )
        losses, ups = [], []
        for i in range(6):
            if i == 4 and change == "a new tensor":
                x = lib.tensor(BIG[0] * 0.5)
            elif i == 4 and change in ("an in-place op", "an in-place op of a copy"):
                x.mul_(0.5)
            elif i == 4 and change == "the NumPy array behind it":
                x_array[3:5] *= 0.5  # no version bump
            elif i == 4 and change == "its .data":
                x.data[0, 1] = 2.0
            elif change == "-0.0 for 0.0":
                x_array[0, 0] = 0.0 if i < 4 else -0.0  # -0.0 == 0.0, but 1 / x tells them apart
            before = count.up if count else 0
            optimizer.zero_grad()
            loss = ((x.mm(w1).clamp(min=0) + 1e-3 * x[:, :1].reciprocal().clamp(-1, 1)).mm(w2) - y).pow(2).sum()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            ups.append((count.up if count else 0) - before)
        return losses, [w.detach().numpy() for w in (w1, w2)], ups

    with client.connect(server.url) as session:
        count = Bytes(session)
        losses, params, ups = run(client, count)
    with numpy.errstate(divide="ignore"):  # (1 / 0.0 and 1 / -0.0, clamped)
        want_losses, want_params, _ = run(engine)
    numpy.testing.assert_allclose(losses, want_losses, rtol=1e-12)
    for got, want in zip(params, want_params):
        numpy.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    x_bytes = BIG[0].nbytes
    assert ups[0] > x_bytes and ups[1] > x_bytes  # sent, then sent to be held
    assert ups[2] < x_bytes / 4 and ups[3] < x_bytes / 4  # held: not sent
    if change == "nothing":
        assert ups[4] < x_bytes / 4 and ups[5] < x_bytes / 4
    elif change in ("a new tensor", "an in-place op of a copy"):  # (the op's result reads a snapshot: a new Variable)
        assert ups[4] > x_bytes and ups[5] > x_bytes  # a new Variable: sent, then sent to be held
    else:  # (an in-place op of a from_numpy() Variable is written into its array, as PyTorch's)
        assert ups[4] > x_bytes and ups[5] < x_bytes / 4  # changed: sent (and held) again


def test_reading_a_parameter_fetches_it_and_a_consumed_gradient_says_why(remote):
    losses, (w1, w2) = train(client, *OPTIMIZERS[0], client.tensor)
    expected = train(engine, *OPTIMIZERS[0], engine.tensor)[1]
    assert w1._data is None  # on the server only, until read
    numpy.testing.assert_allclose(w2.detach().numpy(), expected[1].detach().numpy(), rtol=1e-10)
    shown = str(w1)  # printing fetches too
    assert w1._value.array is not None and shown.startswith("tensor([[") and "requires_grad=True" in shown
    with pytest.raises(RuntimeError, match="read .grad before step"):
        w1.grad.numpy()


def test_gradients_read_before_the_step_are_sent_and_the_step_still_matches(remote):
    w1, w2 = client.tensor(W1.copy(), requires_grad=True), client.tensor(W2.copy(), requires_grad=True)
    e1, e2 = engine.tensor(W1.copy(), requires_grad=True), engine.tensor(W2.copy(), requires_grad=True)
    optimizers = client.optim.Adam([w1, w2], lr=0.01, resident=True), engine.optim.Adam([e1, e2], lr=0.01)
    for x, y in BATCHES[:3]:
        for lib, (a, b), opt in ((client, (w1, w2), optimizers[0]), (engine, (e1, e2), optimizers[1])):
            opt.zero_grad()
            for _ in range(2):  # two backwards accumulate: the client holds the gradients, then steps with them
                (lib.tensor(x).mm(a).clamp(min=0).mm(b) - lib.tensor(y)).pow(2).sum().backward()
        numpy.testing.assert_allclose(w1.grad.numpy(), e1.grad.numpy(), rtol=1e-10)
        for opt in optimizers:
            opt.step()
    numpy.testing.assert_allclose(w1.detach().numpy(), e1.detach().numpy(), rtol=1e-10)
    numpy.testing.assert_allclose(w2.detach().numpy(), e2.detach().numpy(), rtol=1e-10)


def _seed_loss(lib, tensor, w1, w2, batch):
    x, y = batch
    return (tensor(x).mm(w1).clamp(min=0).mm(w2) - tensor(y)).pow(2).sum()


def hold_answers(session):
    """The answers to the steps a session leaves in flight are handed to it only once the Event it returns is
    set (the requests go at once); the list it returns gets the Futures of the server's answers, in order."""
    release, answers = threading.Event(), []
    submit = session._pipeline.submit

    def held(*args):
        sent, handed = submit(*args), Future()
        answers.append(sent)

        def hand_over():
            error = sent.exception()
            assert release.wait(60)
            handed.set_exception(error) if error is not None else handed.set_result(sent.result())

        threading.Thread(target=hand_over, daemon=True).start()
        return handed

    session._pipeline.submit = held
    return release, answers


def test_a_step_does_not_wait_for_its_answer_and_what_reads_it_does(server):
    """step() returns once its request is sent; the next step's recording goes on meanwhile; reading the
    loss (or anything else the answer carries) waits for it and is right."""
    with client.connect(server.url) as session:
        w1, w2 = client.tensor(W1.copy(), requires_grad=True), client.tensor(W2.copy(), requires_grad=True)
        optimizer = client.optim.SGD([w1, w2], lr=1e-3, resident=True)
        optimizer.zero_grad()
        first = _seed_loss(client, client.tensor, w1, w2, BATCHES[0])
        first.backward()
        optimizer.step()  # the first step uploads the parameters: it waits for its answer
        losses = [first.item()]
        release, _ = hold_answers(session)
        for batch in BATCHES[1:4]:
            optimizer.zero_grad()
            loss = _seed_loss(client, client.tensor, w1, w2, batch)
            loss.backward()
            optimizer.step()
            if len(losses) == 1:
                assert len(session._in_flight) == 1  # the step returned before its answer came
            release.set()
            losses.append(loss.item())  # waits for the answer: the loss is the server's
    e1, e2 = engine.tensor(W1.copy(), requires_grad=True), engine.tensor(W2.copy(), requires_grad=True)
    reference = engine.optim.SGD([e1, e2], lr=1e-3)
    for batch, got in zip(BATCHES[:4], losses, strict=True):
        reference.zero_grad()
        loss = _seed_loss(engine, engine.tensor, e1, e2, batch)
        loss.backward()
        reference.step()
        numpy.testing.assert_allclose(got, loss.item(), rtol=1e-12)


@pytest.mark.parametrize("noticed_by", ["loss.item()", "next step", "reading a parameter"])
def test_a_step_that_fails_on_the_server_raises_at_the_next_call_and_nothing_is_lost(server, noticed_by):
    """An update the server refuses (422, naming its field) is raised by whatever needs the answer next;
    the refused step changes nothing, the steps before and after it apply once each, the server serves on."""
    with client.connect(server.url) as session:
        w1, w2 = client.tensor(W1.copy(), requires_grad=True), client.tensor(W2.copy(), requires_grad=True)
        optimizer = client.optim.SGD([w1, w2], lr=1e-3, momentum=0.9, resident=True)

        def backward(batch):
            optimizer.zero_grad()
            loss = _seed_loss(client, client.tensor, w1, w2, batch)
            loss.backward()
            return loss

        backward(BATCHES[0])
        optimizer.step()
        optimizer.param_groups[0]["lr"] = -1.0  # the server refuses this step's update
        refused_loss = backward(BATCHES[1])
        optimizer.step()  # sent: the refusal comes back with the next call that needs the answer
        optimizer.param_groups[0]["lr"] = 1e-3
        backward(BATCHES[2])  # recorded meanwhile (a deferred backward needs no answer)
        with pytest.raises(client.errors.ServerError) as refused:
            if noticed_by == "loss.item()":
                refused_loss.item()
            elif noticed_by == "next step":
                concurrent.futures.wait([future for _, future in session._in_flight])  # (its answer is in)
                optimizer.step()
            else:
                w2.detach().numpy()
        assert refused.value.status == 422 and refused.value.field == "update.groups[0]"
        assert "Invalid learning rate" in str(refused.value)
        optimizer.step()  # the last backward was kept: it applies now, once
        got = w1.detach().numpy(), w2.detach().numpy()
        assert session.healthz()["status"] == "ok"
    e1, e2 = engine.tensor(W1.copy(), requires_grad=True), engine.tensor(W2.copy(), requires_grad=True)
    reference = engine.optim.SGD([e1, e2], lr=1e-3, momentum=0.9)
    for batch in (BATCHES[0], BATCHES[2]):  # the refused step applied nothing
        reference.zero_grad()
        _seed_loss(engine, engine.tensor, e1, e2, batch).backward()
        reference.step()
    numpy.testing.assert_allclose(got[0], e1.detach().numpy(), rtol=1e-10)
    numpy.testing.assert_allclose(got[1], e2.detach().numpy(), rtol=1e-10)


def test_a_step_sent_after_one_that_failed_is_refused_by_the_server_and_dropped(server):
    """Step 2 is refused (422); step 3, sent before step 2's answer came, must follow it ("after"): the server
    refuses it too (409, naming update.after), so it is never applied on the values step 2 left. The next call
    that needs an answer raises step 2's error, saying the step after it was not applied; the backward recorded
    meanwhile is kept and applies once; the parameters are those of steps 1 and 4 only."""
    with client.connect(server.url) as session:
        w1, w2 = client.tensor(W1.copy(), requires_grad=True), client.tensor(W2.copy(), requires_grad=True)
        optimizer = client.optim.SGD([w1, w2], lr=1e-3, momentum=0.9, resident=True)
        batches = iter(BATCHES)

        def step(lr=1e-3):
            optimizer.param_groups[0]["lr"] = lr
            optimizer.zero_grad()
            _seed_loss(client, client.tensor, w1, w2, next(batches)).backward()
            optimizer.step()

        step()  # uploads the parameters: answered before it returns
        release, answers = hold_answers(session)
        step(lr=-1.0)  # refused by the server
        step()  # sent before that answer is handed over: two steps in flight
        assert len(session._in_flight) == 2
        optimizer.zero_grad()
        _seed_loss(client, client.tensor, w1, w2, next(batches)).backward()
        release.set()
        with pytest.raises(client.errors.ServerError) as refused:
            optimizer.step()
        assert refused.value.status == 422 and "Invalid learning rate" in str(refused.value)
        assert "the 1 optimizer step(s) sent after it were not applied" in refused.value.__notes__[0]
        answer = answers[1].result()  # the server's to step 3
        assert answer.status == 409 and answer.json()["field"] == "update.after"
        assert "must follow step" in answer.json()["error"] and not session._in_flight
        optimizer.step()  # the last backward was kept: it applies now, once
        got = w1.detach().numpy(), w2.detach().numpy()
    e1, e2 = engine.tensor(W1.copy(), requires_grad=True), engine.tensor(W2.copy(), requires_grad=True)
    reference = engine.optim.SGD([e1, e2], lr=1e-3, momentum=0.9)
    for batch in (BATCHES[0], BATCHES[3]):
        reference.zero_grad()
        _seed_loss(engine, engine.tensor, e1, e2, batch).backward()
        reference.step()
    numpy.testing.assert_allclose(got[0], e1.detach().numpy(), rtol=1e-12)
    numpy.testing.assert_allclose(got[1], e2.detach().numpy(), rtol=1e-12)


def _sgd_loop(lib, session, w1, w2, optimizer, steps):
    """`steps` seed-net steps, nothing read meanwhile (the steps stay in flight); the losses, read after."""
    losses = []
    for i in range(steps):
        optimizer.zero_grad()
        loss = _seed_loss(lib, lib.tensor, w1, w2, BATCHES[i % len(BATCHES)])
        loss.backward()
        optimizer.step()
        losses.append(loss)
        if session is not None:
            assert len(session._in_flight) <= client.optim.resident.PIPELINE_DEPTH
    return [loss.item() for loss in losses]


def _engine_loop(steps, lr):
    e1, e2 = engine.tensor(W1.copy(), requires_grad=True), engine.tensor(W2.copy(), requires_grad=True)
    losses = _sgd_loop(engine, None, e1, e2, engine.optim.SGD([e1, e2], lr=lr, momentum=0.9), steps)
    return losses, e1.detach().numpy(), e2.detach().numpy()


@pytest.mark.parametrize("depth", [1, 2])
def test_steps_left_in_flight_give_the_sequential_loops_values(server, monkeypatch, depth):
    """With one step in flight or two, the losses and parameters are the engine's sequential loop's."""
    monkeypatch.setattr(client.optim.resident, "PIPELINE_DEPTH", depth)
    with client.connect(server.url) as session:
        w1, w2 = client.tensor(W1.copy(), requires_grad=True), client.tensor(W2.copy(), requires_grad=True)
        optimizer = client.optim.SGD([w1, w2], lr=1e-4, momentum=0.9, resident=True)
        losses = _sgd_loop(client, session, w1, w2, optimizer, 12)
        got = w1.detach().numpy(), w2.detach().numpy()
    want = _engine_loop(12, 1e-4)
    numpy.testing.assert_allclose(losses, want[0], rtol=1e-12)
    for g, w in zip(got, want[1:]):
        numpy.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)


def test_two_sessions_leaving_steps_in_flight_do_not_interfere(server):
    """Two sessions step in turn, each with steps in flight numbered 1, 2, ... (the server keeps each
    session's last step apart): each trains as the engine does alone."""
    with contextlib.ExitStack() as sessions:
        runs = []
        for lr in (1e-4, 3e-4):
            session = sessions.enter_context(client.connect(server.url))  # (the current session from now on)
            w1, w2 = client.tensor(W1.copy(), requires_grad=True), client.tensor(W2.copy(), requires_grad=True)
            runs.append((session, w1, w2, client.optim.SGD([w1, w2], lr=lr, momentum=0.9, resident=True), []))
        for i in range(8):
            for session, w1, w2, optimizer, losses in runs:
                optimizer.zero_grad()
                loss = _seed_loss(client, client.tensor, w1, w2, BATCHES[i % len(BATCHES)])
                session.backward(loss)
                optimizer.step()
                losses.append(loss)
        got = [([float(s.fetch(loss)) for loss in losses], *s.fetch(w1, w2)) for s, w1, w2, _, losses in runs]
    for (losses, g1, g2), lr in zip(got, (1e-4, 3e-4)):
        want = _engine_loop(8, lr)
        numpy.testing.assert_allclose(losses, want[0], rtol=1e-12)
        numpy.testing.assert_allclose(g1, want[1], rtol=1e-12, atol=1e-14)
        numpy.testing.assert_allclose(g2, want[2], rtol=1e-12, atol=1e-14)


EXITS_WITH_A_STEP_IN_FLIGHT = """
import numpy, client
rng = numpy.random.default_rng(0)
w = client.tensor(rng.standard_normal((4, 3)), requires_grad=True)
optimizer = client.optim.SGD([w], lr=1e-3, resident=True)
for lr in (1e-3, -1.0):  # the second step's update is refused by the server
    optimizer.param_groups[0]["lr"] = lr
    optimizer.zero_grad()
    (client.tensor(rng.standard_normal((2, 4))).mm(w) ** 2).sum().backward()
    optimizer.step()
print("steps sent")
"""


def test_a_program_that_exits_with_a_refused_step_in_flight_is_told_on_stderr(server):
    """The default session (`$GRADSERVE_URL`) is never closed: a step still in flight at exit is waited
    for, and the server's refusal is written to stderr with its message and field, not dropped."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADSERVE_")}
    env.update(GRADSERVE_URL=server.url, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", EXITS_WITH_A_STEP_IN_FLIGHT], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and "steps sent" in done.stdout, done.stderr
    assert "the optimizer step left in flight at exit failed" in done.stderr
    assert "Invalid learning rate" in done.stderr and "update.groups[0]" in done.stderr


def test_two_sessions_cannot_read_or_update_each_others_handles(server):
    with client.connect(server.url) as first:
        train(client, *OPTIMIZERS[0], client.tensor)
        handle = next(iter(first._residents.params.values())).handle
        with client.connect(server.url) as second:
            for header in (
                {"session": second.session_id, "fetch": [handle]},
                {"session": second.session_id, "free": [handle], "fetch": [handle]},
            ):
                with pytest.raises(client.errors.NotFoundError, match=f"'{handle}'"):
                    second.send("/forward", header)
        fetched = first.send("/forward", {"session": first.session_id, "fetch": [handle]})
        assert fetched.body["fetched"][0]["name"] == handle


def test_a_session_over_its_byte_budget_is_413_naming_it(make_server):
    srv = make_server(GRADSERVE_MAX_SESSION_RESIDENT_BYTES=str(W1.nbytes))
    with client.connect(srv.url):
        with pytest.raises(client.errors.ServerError, match="max_session_resident_bytes") as caught:
            train(client, *OPTIMIZERS[0], client.tensor)
        assert caught.value.status == 413


def test_a_batch_over_the_session_byte_budget_is_sent_inline_again(make_server):
    """A session whose byte bound fits its parameters (and momentum) but not its batch too trains as it did
    before batches were held: the refused upload (413) is sent again with the batch inline, applied once, and
    the session holds no batch from then on (each later step sends it, in one request)."""
    x_bytes = BIG[0].nbytes
    assert 2 * (W1.nbytes + W2.nbytes) < x_bytes  # the parameters and their momentum fit; with the batch, not
    srv = make_server(GRADSERVE_MAX_SESSION_RESIDENT_BYTES=str(x_bytes))

    def run(lib, count=None):
        w1, w2 = lib.tensor(W1.copy(), requires_grad=True), lib.tensor(W2.copy(), requires_grad=True)
        optimizer = lib.optim.SGD([w1, w2], lr=1e-4, momentum=0.9, **({"resident": True} if count else {}))
        x, y = lib.tensor(BIG[0]), lib.tensor(BIG[1])
        losses, ups = [], []
        for _ in range(5):
            before = (count.up, count.requests) if count else (0, 0)
            optimizer.zero_grad()
            loss = (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            ups.append((count.up - before[0], count.requests - before[1]) if count else None)
        return losses, [w.detach().numpy() for w in (w1, w2)], ups

    with client.connect(srv.url) as session:
        losses, params, ups = run(client, Bytes(session))
        assert session._residents.params and not session._residents.held
    want_losses, want_params, _ = run(engine)
    numpy.testing.assert_allclose(losses, want_losses, rtol=1e-12)
    for got, want in zip(params, want_params):
        numpy.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert ups[1][1] == 2  # the second step's upload to hold the batch was refused, then sent inline
    for up, requests in ups[2:]:
        assert x_bytes < up < 2 * x_bytes and requests == 1  # the batch inline, in the step's one request


def test_expired_or_lost_parameters_are_a_clear_error(make_server):
    srv = make_server(GRADSERVE_RESIDENT_TTL_S="0.3")
    with client.connect(srv.url):
        w1, w2 = client.tensor(W1.copy(), requires_grad=True), client.tensor(W2.copy(), requires_grad=True)
        optimizer = client.optim.SGD([w1, w2], lr=1e-3, resident=True)
        x, y = (client.tensor(a) for a in BATCHES[0])
        (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum().backward()
        optimizer.step()
        time.sleep(0.6)
        with pytest.raises(ResidentLost, match="expired.*set them again") as caught:
            w1.detach().numpy()
        assert caught.value.status == 404
        w1.data, w2.data = W1.copy(), W2.copy()  # set again: uploaded with the next request
        numpy.testing.assert_array_equal(w1.detach().numpy(), W1)
        optimizer.zero_grad()
        (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum().backward()
        optimizer.step()
        assert not numpy.array_equal(w1.detach().numpy(), W1)


def test_a_server_restart_is_a_clear_error_and_setting_the_parameters_again_recovers(make_server):
    srv = make_server()
    port = int(srv.url.rsplit(":", 1)[1])
    with client.connect(srv.url):
        losses, (w1, w2) = train(client, *OPTIMIZERS[0], client.tensor)
        srv.proc.send_signal(signal.SIGTERM)
        srv.proc.wait(timeout=20)
        make_server(port=port)  # the same address, a fresh server: it holds nothing of the session
        with pytest.raises(ResidentLost, match="restarted.*set them again"):
            w2.detach().numpy()
        w1.data, w2.data = W1.copy(), W2.copy()
        again, _ = train(client, *OPTIMIZERS[0], client.tensor, params=(w1, w2))
        assert again == pytest.approx(losses, rel=1e-12)  # the same run from the same start


# --- servers of their own (settings differ from the shared one) ------------------------------------------


@pytest.fixture
def make_server(tmp_path):
    started = []

    def start(port=None, **settings):
        port = port or free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("GRADSERVE_")}
        env.update(GRADSERVE_HOST="127.0.0.1", GRADSERVE_PORT=str(port), GRADSERVE_LOG_LEVEL="warning", **settings)
        env["PYTHONPATH"] = str(ROOT)
        log = tmp_path / f"server{len(started)}.log"
        with log.open("w") as sink:
            proc = subprocess.Popen([sys.executable, "-m", "service"], cwd=ROOT, env=env, stdout=sink, stderr=sink)
        started.append(proc)
        srv = SimpleNamespace(proc=proc, url=f"http://127.0.0.1:{port}", text=lambda log=log: log.read_text()[-4000:])
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{srv.url}/healthz", timeout=1).status_code == 200:
                    return srv
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"the server did not come up:\n{srv.text()}")
            time.sleep(0.05)

    yield start
    for proc in started:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
