"""What the executor pays once per graph (the plan cache, the per-signature checks) never lets a
request through that the full checks would refuse; binary bodies are read aligned; the compute
pool hands over results, errors and timeouts."""

from __future__ import annotations

import asyncio
import copy

import numpy as np
import orjson
import pytest
from service_testkit import (
    EXAMPLE,
    HEADER_LENGTH,
    assert_error,
    assert_still_serves,
    example,
)

from service.compute import ComputePool
from service.errors import STATUS, ApiError
from wire import codec
from wire.errors import GraphError, RequestError
from wire.executor import Executor
from wire.limits import Limits
from wire.messages import decode_request

X = {"name": "x", "shape": [2, 3], "datatype": "FP32", "data": [1, 2, 3, 4, 5, 6]}
W = {"name": "w", "shape": [3, 1], "datatype": "FP32", "data": [0.1, 0.2, 0.3]}


def _declared_example():
    """The example with its inputs' shapes and dtypes declared in the graph."""
    body = copy.deepcopy(EXAMPLE)
    nodes = body["graph"]["nodes"]
    nodes[0].update(shape=[2, 3], dtype="FP32")
    nodes[1].update(shape=[3, 1], dtype="FP32")
    return body


def _run(executor, body, kind="backward"):
    request = decode_request(orjson.loads(orjson.dumps(body)), None, executor.limits)
    return getattr(executor, kind)(request)


def test_cached_plan_still_rejects_an_input_of_another_declared_shape(api):
    body = _declared_example()
    assert api.post("/backward", json=body).status_code == 200
    wrong = {**body, "inputs": [{**X, "shape": [3, 2]}, W]}
    assert_error(api.post("/backward", json=wrong), 422, "'x'", "[2, 3]", "[3, 2]", node="x", field="shape")
    assert api.post("/backward", json=body).status_code == 200


def test_cached_plan_still_rejects_an_input_of_another_declared_dtype(api):
    body = _declared_example()
    assert api.post("/backward", json=body).status_code == 200
    wrong = {**body, "inputs": [X, {**W, "datatype": "FP64"}]}
    assert_error(api.post("/backward", json=wrong), 422, "'w'", "float32", "float64", node="w", field="dtype")


def test_cached_plan_still_checks_names_and_inferred_shapes(api):
    assert api.post("/forward", json=EXAMPLE).status_code == 200
    assert_error(api.post("/forward", json=example(inputs=[X])), 422, "'w'", node="w", field="inputs")
    assert_error(
        api.post("/forward", json=example(inputs=[X, W, {**W, "name": "v"}])), 422, "'v'", node="v", field="inputs"
    )
    assert_error(
        api.post("/forward", json=example(inputs=[X, {**W, "shape": [1, 3]}])),
        422,
        "'h'",
        "mm",
        node="h",
        field="inputs",
    )
    assert_still_serves(api)


def test_cached_plan_still_enforces_the_element_limit_for_larger_inputs():
    executor = Executor(Limits(max_tensor_elements=64))
    small = example(inputs=[X, W])
    assert _run(executor, small).grads["w"].shape == (3, 1)
    wide = copy.deepcopy(EXAMPLE)
    wide["inputs"] = [{**X, "shape": [16, 1], "data": [1.0] * 16}, {**W, "shape": [1, 16], "data": [1.0] * 16}]
    with pytest.raises(RequestError) as err:
        _run(executor, wide)
    assert STATUS[err.value.kind] == 413 and err.value.node == "h" and executor.plans.hits == 1
    assert _run(executor, small).grads["w"].shape == (3, 1)


def test_structurally_different_graphs_never_share_a_plan():
    executor = Executor()
    three = copy.deepcopy(EXAMPLE)
    three["graph"]["nodes"][4]["attrs"]["value"] = 3.0
    added = copy.deepcopy(EXAMPLE)
    added["graph"]["nodes"][5]["op"] = "add"
    results = [float(_run(executor, body, "forward").outputs["loss"]) for body in (EXAMPLE, three, added, EXAMPLE)]
    assert results[0] == results[3]
    assert len(set(results[:3])) == 3
    assert executor.plans.misses == 3 and executor.plans.hits == 1


def test_equal_graphs_share_a_plan_whatever_their_key_order():
    executor = Executor()
    _run(executor, EXAMPLE)
    reordered = copy.deepcopy(EXAMPLE)
    reordered["graph"] = {key: reordered["graph"][key] for key in reversed(list(reordered["graph"]))}
    reordered["graph"]["nodes"] = [dict(reversed(list(node.items()))) for node in reordered["graph"]["nodes"]]
    _run(executor, reordered)
    assert executor.plans.hits == 1 and len(executor.plans) == 1


def test_a_signature_that_failed_is_never_cached_as_checked():
    executor = Executor()
    body = _declared_example()
    wrong = {**body, "inputs": [{**X, "shape": [3, 2]}, W]}
    for _ in range(2):
        with pytest.raises(GraphError) as err:
            _run(executor, wrong)
        assert err.value.node == "x" and err.value.field == "shape"


def test_binary_header_is_padded_so_buffers_start_aligned():
    buffers = []
    header = {"inputs": [codec.encode_binary("x", np.arange(3, dtype=np.float64), buffers)], "id": "odd"}
    for pad in range(9):
        header["id"] = "o" * pad
        parts, length = codec.body_parts(header, buffers)
        assert length % codec.ALIGNMENT == 0 and len(parts[0]) == length
        assert orjson.loads(parts[0])["id"] == header["id"]


@pytest.mark.parametrize("shift", range(8))
def test_unaligned_binary_tensor_is_decoded_exactly_and_aligned(shift):
    x = np.linspace(-1, 1, 12).reshape(3, 4)
    head = orjson.dumps(
        {"inputs": [{"name": "x", "shape": [3, 4], "datatype": "FP64", "parameters": {"binary_data_size": x.nbytes}}]}
    )
    head += b" " * ((shift - len(head)) % 8)
    body = head + x.tobytes()
    _, tail = codec.split_body(body, len(head))
    ((name, array),) = codec.decode_tensors(orjson.loads(head)["inputs"], "inputs", tail, 0, 100)[0]
    assert name == "x" and array.flags.aligned and array.flags.c_contiguous
    np.testing.assert_array_equal(array, x)


def test_unaligned_binary_request_is_answered_correctly(api):
    x = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    w = np.array([[0.1], [0.2], [0.3]], np.float32)
    header = {
        "graph": EXAMPLE["graph"],
        "inputs": [
            {"name": "x", "shape": [2, 3], "datatype": "FP32", "parameters": {"binary_data_size": x.nbytes}},
            {"name": "w", "shape": [3, 1], "datatype": "FP32", "parameters": {"binary_data_size": w.nbytes}},
        ],
    }
    head = orjson.dumps(header)
    head += b" " * ((1 - len(head)) % 4)
    response = api.post(
        "/backward",
        content=head + x.tobytes() + w.tobytes(),
        headers={HEADER_LENGTH: str(len(head)), "Content-Type": "application/octet-stream"},
    )
    assert response.status_code == 200, response.text
    grads = {g["name"]: g for g in response.json()["grads"]}
    assert grads["w"]["data"] == pytest.approx([10.0, 14.0, 18.0])


def _pool_run(pool, fn, *args, **kwargs):
    async def main():
        try:
            return await pool.run(fn, *args, **kwargs)
        finally:
            pool.shutdown()

    return asyncio.run(main())


def test_pool_returns_the_result_and_frees_its_slot():
    pool = ComputePool(1, 10.0)
    assert _pool_run(pool, lambda a, b: a + b, 2, 3) == 5
    assert pool.in_flight == 0


def test_pool_raises_the_computations_own_error_even_a_timeout_error():
    def fail():
        raise TimeoutError("the computation's own")

    pool = ComputePool(1, 10.0)
    with pytest.raises(TimeoutError, match="own"):
        _pool_run(pool, fail)
    assert pool.in_flight == 0 and pool.timed_out == 0


def test_pool_timeout_is_503_and_the_late_result_goes_to_on_abandon():
    import threading

    release, abandoned = threading.Event(), []
    pool = ComputePool(1, 0.05)

    def slow():
        release.wait(10)
        return "late"

    async def main():
        with pytest.raises(ApiError) as err:
            await pool.run(slow, on_abandon=abandoned.append)
        assert err.value.status == 503 and pool.timed_out == 1 and pool.in_flight == 1
        release.set()
        for _ in range(500):
            if abandoned:
                break
            await asyncio.sleep(0.01)
        pool.shutdown()

    asyncio.run(main())
    assert abandoned == ["late"] and pool.in_flight == 0
