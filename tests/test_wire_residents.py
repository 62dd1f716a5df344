"""Resident arrays in the protocol (`wire.residents`, `wire.resident_update`): uploaded once, read by
handle, updated in place by an optimizer step after the backward, fetched; scoped to a session,
bounded by bytes and age, with errors that name the handle or the bound."""

from __future__ import annotations

import time

import numpy
import pytest

from wire.errors import GraphError
from wire.executor import Executor
from wire.handler import handle, read_body, run_arrays
from wire.limits import Limits
from wire.messages import decode_request, decode_result, encode_request

SESSION = "a" * 32
OTHER = "b" * 32
GRAPH = {
    "version": "1.1",
    "nodes": [
        {"id": "x", "op": "input"},
        {"id": "y", "op": "input"},
        {"id": "w", "op": "input", "requires_grad": True, "resident": "w1"},
        {"id": "b", "op": "input", "requires_grad": True, "resident": "b1"},
        {"id": "h", "op": "matmul", "inputs": ["x", "w"]},
        {"id": "z", "op": "add", "inputs": ["h", "b"]},
        {"id": "t", "op": "tanh", "inputs": ["z"]},
        {"id": "d", "op": "sub", "inputs": ["t", "y"]},
        {"id": "s", "op": "mul", "inputs": ["d", "d"]},
        {"id": "l", "op": "mean", "inputs": ["s"]},
    ],
    "outputs": ["l"],
}
RNG = numpy.random.default_rng(0)
W0, B0 = RNG.normal(size=(4, 3)), RNG.normal(size=(3,))
BATCHES = [(RNG.normal(size=(5, 4)), RNG.normal(size=(5, 3))) for _ in range(4)]


def step(executor, update, session=SESSION, upload=(), fetch=None, batch=BATCHES[0]):
    header = {"graph": GRAPH, "wrt": ["w", "b"], "session": session, "update": update}
    if fetch:
        header["fetch"] = fetch
    return run_arrays(executor, "/backward", header, [("x", batch[0]), ("y", batch[1])], upload=upload)


def refused(call, *args, **kwargs) -> GraphError:
    with pytest.raises(GraphError) as caught:
        call(*args, **kwargs)
    return caught.value


@pytest.mark.parametrize(
    ("name", "options", "torch_options"),
    [
        ("sgd", {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.01}, {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.01}),
        ("adam", {"lr": 0.01, "betas": [0.8, 0.99]}, {"lr": 0.01, "betas": (0.8, 0.99)}),
        ("adamw", {"lr": 0.01}, {"lr": 0.01}),
    ],
)
def test_a_resident_training_loop_matches_pytorch_step_by_step(name, options, torch_options):
    torch = pytest.importorskip("torch")
    executor = Executor()
    update = {"optimizer": name, "groups": [{"handles": ["w1", "b1"], **options}]}
    w, b = (torch.tensor(a, requires_grad=True) for a in (W0, B0))
    reference = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[name]
    optimizer = reference([w, b], **torch_options)
    for i, batch in enumerate(BATCHES):
        upload = [("w1", W0), ("b1", B0)] if i == 0 else ()
        result = step(executor, update, upload=upload, batch=batch, fetch=["w1", "b1"])
        optimizer.zero_grad()
        loss = (torch.tanh(torch.tensor(batch[0]) @ w + b) - torch.tensor(batch[1])).pow(2).mean()
        loss.backward()
        optimizer.step()
        assert result.outputs["l"] == pytest.approx(loss.item(), rel=1e-12)
        assert result.grads == {}  # the updated parameters' gradients stay on the server
        numpy.testing.assert_allclose(result.fetched["w1"], w.detach().numpy(), rtol=1e-12)
        numpy.testing.assert_allclose(result.fetched["b1"], b.detach().numpy(), rtol=1e-12)
    state_bytes = {"sgd": 1, "adam": 2, "adamw": 2}[name] * (W0.nbytes + B0.nbytes)
    assert executor.residents.nbytes >= W0.nbytes + B0.nbytes + state_bytes


def test_the_binary_body_carries_uploads_and_fetched_arrays():
    executor = Executor()
    header = {"graph": GRAPH, "wrt": ["w", "b"], "session": SESSION, "fetch": ["b1"]}
    inputs = [("x", BATCHES[0][0]), ("y", BATCHES[0][1])]
    body, length = encode_request(header, inputs, upload=[("w1", W0), ("b1", B0)])
    parts, out_length, _ = handle(executor, "/backward", body, length)
    result = decode_result(*read_body(b"".join(parts), out_length), 2**30)
    assert set(result.grads) == {"w", "b"}  # no update: the gradients come back
    numpy.testing.assert_array_equal(result.fetched["b1"], B0)
    again, length = encode_request({**header, "fetch": ["w1"]}, inputs)  # the arrays stay: only the batch goes up
    assert len(again) < len(body) - W0.nbytes - B0.nbytes + 200
    parts, out_length, _ = handle(executor, "/backward", again, length)
    assert decode_result(*read_body(b"".join(parts), out_length), 2**30).outputs["l"].shape == ()


def test_sessions_cannot_read_update_or_fetch_each_others_arrays():
    executor = Executor()
    run_arrays(executor, "/forward", {"session": SESSION}, upload=[("w1", W0), ("b1", B0)])
    update = {"optimizer": "sgd", "groups": [{"handles": ["w1", "b1"], "lr": 0.1}]}
    for call in (
        lambda: step(executor, update, session=OTHER),
        lambda: run_arrays(executor, "/forward", {"session": OTHER, "fetch": ["w1"]}),
    ):
        err = refused(call)
        assert err.kind == "not_found" and "'w1'" in str(err) and "upload it again" in str(err)
    # the same session id under another scope (the service sets it from the API key) is another session too
    request = decode_request({"session": SESSION, "fetch": ["w1"]}, None, executor.limits)
    request.scope = "another key"
    assert refused(lambda: executor.run(executor.admit(request, "forward"))).kind == "not_found"
    fetched = run_arrays(executor, "/forward", {"session": SESSION, "fetch": ["w1"]}).fetched
    numpy.testing.assert_array_equal(fetched["w1"], W0)


def test_unused_arrays_expire_and_the_error_says_so():
    executor = Executor(Limits(resident_ttl_s=0.05))
    run_arrays(executor, "/forward", {"session": SESSION}, upload=[("w1", W0)])
    time.sleep(0.1)
    err = refused(run_arrays, executor, "/forward", {"session": SESSION, "fetch": ["w1"]})
    assert err.kind == "not_found" and "expired" in str(err) and "resident_ttl_s" in str(err)
    assert executor.residents.nbytes == 0


def test_byte_bounds_refuse_with_413_naming_the_bound():
    executor = Executor(Limits(max_session_resident_bytes=W0.nbytes + B0.nbytes, max_resident_bytes=10**6))
    run_arrays(executor, "/forward", {"session": SESSION}, upload=[("w1", W0), ("b1", B0)])
    err = refused(run_arrays, executor, "/forward", {"session": SESSION}, upload=[("more", W0)])
    assert err.kind == "too_large" and "max_session_resident_bytes" in str(err)
    # momentum buffers are charged too: the first step's state does not fit this session's bound
    update = {"optimizer": "sgd", "groups": [{"handles": ["w1", "b1"], "lr": 0.1, "momentum": 0.9}]}
    err = refused(step, executor, update)
    assert err.kind == "too_large" and "max_session_resident_bytes" in str(err)
    tight = Executor(Limits(max_resident_bytes=W0.nbytes))
    err = refused(run_arrays, tight, "/forward", {"session": SESSION}, upload=[("w1", W0), ("b1", B0)])
    assert err.kind == "too_large" and "max_resident_bytes" in str(err)


def test_bad_resident_requests_name_the_handle_or_field():
    executor = Executor()
    update = {"optimizer": "sgd", "groups": [{"handles": ["w1", "b1"], "lr": 0.1}]}
    err = refused(step, executor, update)  # nothing uploaded
    assert err.kind == "not_found" and err.node in ("w1", "b1")
    run_arrays(executor, "/forward", {"session": SESSION}, upload=[("w1", W0), ("b1", B0)])
    err = refused(run_arrays, executor, "/forward", {"session": SESSION}, upload=[("w1", W0.astype("float32"))])
    assert err.kind == "invalid" and err.node == "w1" and "free it first" in str(err)
    err = refused(run_arrays, executor, "/forward", {"session": SESSION}, upload=[("w1", W0[:2])])
    assert err.kind == "invalid" and err.field == "upload"
    err = refused(step, executor, {"optimizer": "sgd", "groups": [{"handles": ["w1", "zz"], "lr": 0.1}]})
    assert err.node == "zz" and err.field == "update"
    err = refused(step, executor, {"optimizer": "lbfgs", "groups": [{"handles": ["w1"]}]})
    assert err.field == "update.optimizer"
    err = refused(step, executor, {"optimizer": "sgd", "groups": [{"handles": ["w1"], "lr": -1}]})
    assert err.field == "update.groups[0]" and "learning rate" in str(err)
    err = refused(step, executor, update, session="short")
    assert err.field == "session"
    err = refused(run_arrays, executor, "/forward", {"graph": GRAPH}, [("x", BATCHES[0][0]), ("y", BATCHES[0][1])])
    assert err.field == "session"
    forward = {"graph": GRAPH, "session": SESSION, "update": update}
    err = refused(run_arrays, executor, "/forward", forward, [("x", BATCHES[0][0]), ("y", BATCHES[0][1])])
    assert err.field == "update"


def test_a_step_after_one_the_session_has_not_applied_is_refused_with_409_naming_update_after():
    """`"after": k` refuses a step unless step k is the last the session applied: a step k that failed or has
    not arrived leaves the parameters as they were; checked when the step reads its inputs and again when it
    is applied (another update between the two refuses it); other sessions keep their own last step."""
    executor = Executor()
    sgd = {"optimizer": "sgd", "groups": [{"handles": ["w1", "b1"], "lr": 0.1}]}
    for session in (SESSION, OTHER):
        step(executor, {**sgd, "step": 1}, session=session, upload=[("w1", W0), ("b1", B0)])
    before = executor.residents.fetch((None, SESSION), ["w1", "b1"])
    bad = {"optimizer": "sgd", "groups": [{"handles": ["w1", "b1"], "lr": -1}], "step": 2, "after": 1}
    assert refused(step, executor, bad).field == "update.groups[0]"  # step 2 fails
    err = refused(step, executor, {**sgd, "step": 3, "after": 2})
    assert err.kind == "conflict" and err.field == "update.after"
    assert "must follow step 2" in str(err) and "nothing was applied" in str(err)
    after = executor.residents.fetch((None, SESSION), ["w1", "b1"])
    assert all(numpy.array_equal(before[h], after[h]) for h in before)
    step(executor, {**sgd, "step": 4, "after": 1})  # what step 1 left: applied
    step(executor, {**sgd, "step": 2, "after": 1}, session=OTHER)  # the other session's own count
    request = decode_request(
        {"graph": GRAPH, "wrt": ["w", "b"], "session": SESSION, "update": {**sgd, "step": 5, "after": 4}},
        None,
        executor.limits,
    )
    request.inputs = {"x": BATCHES[1][0], "y": BATCHES[1][1]}
    ticket = executor.admit(request, "backward")  # its inputs read after step 4
    step(executor, {**sgd, "step": 6, "after": 4})  # applied meanwhile
    err = refused(executor.run, ticket)
    assert err.kind == "conflict" and err.field == "update.after" and "must follow step 4" in str(err)
    for value in (-1, "2", 1.5, True):
        assert refused(step, executor, {**sgd, "after": value}).field == "update.after"
        assert refused(step, executor, {**sgd, "step": value}).field == "update.step"


def test_free_drops_arrays_and_their_bytes():
    executor = Executor()
    run_arrays(executor, "/forward", {"session": SESSION}, upload=[("w1", W0), ("b1", B0)])
    assert executor.residents.nbytes == W0.nbytes + B0.nbytes
    run_arrays(executor, "/forward", {"session": SESSION, "free": ["w1", "b1", "never"]})
    assert executor.residents.nbytes == 0 and len(executor.residents) == 0
    assert refused(run_arrays, executor, "/forward", {"session": SESSION, "fetch": ["w1"]}).kind == "not_found"


def test_an_output_that_is_a_resident_is_answered_before_its_update():
    executor = Executor()
    graph = {
        "version": "1.1",
        "nodes": [
            {"id": "w", "op": "input", "requires_grad": True, "resident": "w1"},
            {"id": "l", "op": "sum", "inputs": ["w"]},
        ],
        "outputs": ["w", "l"],
    }
    header = {
        "graph": graph,
        "wrt": ["w"],
        "session": SESSION,
        "update": {"optimizer": "sgd", "groups": [{"handles": ["w1"], "lr": 1.0}]},
    }
    result = run_arrays(executor, "/backward", header, grad_outputs=[("w", 0 * W0)], upload=[("w1", W0)])
    numpy.testing.assert_array_equal(result.outputs["w"], W0)
    fetched = run_arrays(executor, "/forward", {"session": SESSION, "fetch": ["w1"]}).fetched["w1"]
    numpy.testing.assert_array_equal(fetched, W0 - 1.0)


def _sum_step(executor, lr=1.0, outputs=("l",), upload=()):
    """A step of loss sum(w): every element of resident w1 goes down by `lr` (an SGD update)."""
    graph = {
        "version": "1.1",
        "nodes": [
            {"id": "w", "op": "input", "requires_grad": True, "resident": "w1"},
            {"id": "l", "op": "sum", "inputs": ["w"]},
        ],
        "outputs": list(outputs),
    }
    header = {
        "graph": graph,
        "wrt": ["w"],
        "session": SESSION,
        "update": {"optimizer": "sgd", "groups": [{"handles": ["w1"], "lr": lr}]},
    }
    seeds = [(name, numpy.zeros(()) if name == "l" else numpy.zeros((64, 64))) for name in outputs if name != "l"]
    return run_arrays(executor, "/backward", header, grad_outputs=seeds, upload=upload)


def test_sgd_steps_a_resident_in_place_unless_something_reads_it():
    import weakref

    executor = Executor()
    _sum_step(executor, upload=[("w1", numpy.zeros((64, 64)))])
    key = next(iter(executor.residents._sessions))
    stored = weakref.ref(executor.residents.get(key, "w1").array)  # (a weak reference: it holds nothing)
    _sum_step(executor)
    assert executor.residents.get(key, "w1").array is stored()  # nothing read it: stepped in place (no copy)
    numpy.testing.assert_array_equal(stored(), -2.0)
    held = executor.residents.view(key, "w1")  # as a request running on another thread holds it
    answer = _sum_step(executor, outputs=("l", "w"))  # and an output that is the resident
    numpy.testing.assert_array_equal(held, -2.0)  # what they read is kept: the step went to a copy
    numpy.testing.assert_array_equal(answer.outputs["w"], -2.0)
    assert executor.residents.get(key, "w1").array is not stored()
    numpy.testing.assert_array_equal(executor.residents.get(key, "w1").array, -3.0)
    del held, answer
    stored = weakref.ref(executor.residents.get(key, "w1").array)
    _sum_step(executor)
    assert executor.residents.get(key, "w1").array is stored()  # once let go, in place again
    numpy.testing.assert_array_equal(stored(), -4.0)


def test_concurrent_readers_never_see_a_step_half_written():
    """Readers on other threads take views while updates step the array: each view is one whole step's
    value (all elements equal) and stays it while held."""
    import threading

    executor = Executor()
    _sum_step(executor, upload=[("w1", numpy.zeros((64, 64)))])
    key = next(iter(executor.residents._sessions))
    stop, torn = threading.Event(), []

    def read():
        while not stop.is_set():
            view = executor.residents.view(key, "w1")
            first = float(view.flat[0])
            time.sleep(0)
            if not (view == first).all():
                torn.append(first)

    readers = [threading.Thread(target=read) for _ in range(2)]
    for reader in readers:
        reader.start()
    try:
        for _ in range(200):
            _sum_step(executor)
    finally:
        stop.set()
        for reader in readers:
            reader.join()
    assert torn == []
    numpy.testing.assert_array_equal(executor.residents.fetch(key, ["w1"])["w1"], -201.0)


def test_numbered_binary_steps_are_decoded_by_their_layout_with_their_own_step_and_after(monkeypatch):
    """A resident step's header differs from the last one's only in its update's step and after: from the
    third such step on it is decoded from the layout its header minus those numbers keeps (no JSON parse),
    with its own numbers, which the server still checks (409); a resident re-uploaded with another shape is
    admitted for its new shape."""
    from wire import handler

    sgd = {"optimizer": "sgd", "groups": [{"handles": ["w1", "b1"], "lr": 0.1}]}

    def body(number, after, x=BATCHES[0][0], upload=()):
        header = {"graph": GRAPH, "wrt": ["w", "b"], "session": SESSION, "update": {**sgd, "step": number}}
        header["update"] |= {"after": after} if after is not None else {}
        return encode_request(header, [("x", x), ("y", BATCHES[0][1])], upload=upload)

    def loss(executor, number, after, **kwargs):
        parts, length, _ = handle(executor, "/backward", *body(number, after, **kwargs))
        header, tail = read_body(b"".join(bytes(p) for p in parts), length)
        return float(decode_result(header, tail, 10**6).outputs["l"])

    executor, full = Executor(), Executor()
    for e in (executor, full):
        loss(e, 1, None, upload=[("w1", W0), ("b1", B0)])
        loss(e, 2, 1)
    expected = [loss(full, n, n - 1) for n in range(3, 12)]
    decode = handler.decode_request
    monkeypatch.setattr(handler, "decode_request", lambda *a: pytest.fail("decoded in full"))
    assert [loss(executor, n, n - 1) for n in range(3, 12)] == expected  # (one digit, then two)
    err = refused(loss, executor, 13, 12)
    assert err.kind == "conflict" and err.field == "update.after" and "must follow step 12" in str(err)
    assert loss(executor, 12, 11) == loss(full, 12, 11)
    monkeypatch.setattr(handler, "decode_request", decode)
    executor.residents.free((None, SESSION), ["w1"])
    loss(executor, 13, 12, x=numpy.ones((5, 2)), upload=[("w1", numpy.ones((2, 3)))])  # w1 now 2x3
    assert refused(loss, executor, 14, 13).field == "inputs"  # (x 5x4: the kept admission was w1 4x3's)
    assert loss(executor, 14, 13, x=numpy.ones((5, 2))) > 0
