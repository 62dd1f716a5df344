"""Malformed and hostile ONNX models: each is refused before anything runs, with an error naming
the problem (and the ONNX node and op type where one is at fault); in-process and through a live
server, which keeps serving with its memory bounded."""

from __future__ import annotations

import base64
import time

import httpx
import pytest

from tests.service.service_testkit import running_server
from wire.errors import GraphError
from wire.onnx import OnnxLimits, import_model

pytest.importorskip("onnx")
from tests.onnx import hostile_models as hostile  # noqa: E402

# (model, status, words of the error, its node, its field)
CASES = {
    "truncated": (hostile.truncated, 400, "protobuf is truncated or malformed", None, "model"),
    "huge_dims": (hostile.huge_dims, 413, "declares dims [1000000, 1000000]", "w", "dims"),
    "external_data": (hostile.external_data, 422, "refers to external data", "w", "external_data"),
    "cycle": (
        hostile.cycle,
        422,
        "ONNX node 'first' (Relu): input 'b' is not defined by any earlier node",
        "first",
        "input",
    ),
    "unknown_op": (hostile.unknown_op, 422, "ONNX node '#1' (FancyNewOp): this op is not supported", "#1", "op"),
    "old_opset": (hostile.old_opset, 422, "opset 9 is out of the supported range 13..", None, "model.opset_import"),
    "dynamic_reshape": (
        hostile.dynamic_reshape,
        422,
        "ONNX node 'reshape_by_value' (Reshape): a dynamic shape that cannot be resolved",
        "reshape_by_value",
        "shape",
    ),
    "many_nodes": (hostile.many_nodes, 413, "more than 10000 nodes (max_onnx_nodes)", None, "model.graph.node"),
}
KINDS = {400: "malformed", 413: "too_large", 422: "invalid"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_refused_in_process_naming_the_problem(case):
    build, status, words, node, field = CASES[case]
    with pytest.raises(GraphError) as caught:
        import_model(build(), OnnxLimits(max_bytes=64 * 2**20))
    assert words in str(caught.value)
    assert (caught.value.kind, caught.value.node, caught.value.field) == (KINDS[status], node, field)


def test_model_bytes_are_bounded_before_parsing():
    with pytest.raises(GraphError, match=r"over the limit of 1000 \(max_onnx_model_bytes\)") as caught:
        import_model(hostile.many_nodes(100), OnnxLimits(max_bytes=1000))
    assert caught.value.kind == "too_large"


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def test_the_server_refuses_each_and_keeps_serving(tmp_path):
    with running_server(
        tmp_path / "server.log", max_onnx_model_bytes=32 * 2**20, max_body_bytes=64 * 2**20, max_request_bytes=2**30
    ) as server:
        url = f"{server.base_url}/v2/repository/models"
        tiny = base64.b64encode(hostile.tiny().SerializeToString()).decode()
        assert httpx.post(f"{url}/tiny/load", json={"parameters": {"file:1/model.onnx": tiny}}).status_code == 200
        before = _rss_kib(server.proc.pid)
        answers = {}
        for case in sorted(CASES) + ["huge_input"]:
            data = hostile.huge_input() if case == "huge_input" else CASES[case][0]()
            body = {"parameters": {"config": "{}", "file:1/model.onnx": base64.b64encode(data).decode()}}
            start = time.perf_counter()
            answer = httpx.post(f"{url}/{case}/load", json=body, timeout=60)
            answers[case] = (answer.status_code, answer.json(), time.perf_counter() - start)
        for case, (_build, status, words, node, field) in CASES.items():
            code, body, seconds = answers[case]
            field = "parameters.file:1/model.onnx" if field == "model" else field  # the request's name for it
            assert (code, body["node"], body["field"]) == (status, node, field), (case, body)
            assert words in body["error"]
            assert seconds < 5, (case, seconds)
        code, body, _ = answers["huge_input"]
        assert (
            code == 413 and body["node"] == "y" and "(exp)" in body["error"] and "max_request_bytes" in body["error"]
        ), body
        grown = _rss_kib(server.proc.pid) - before
        assert grown < 100 * 1024, f"RSS grew by {grown} KiB"
        x = {"name": "x", "shape": [3], "datatype": "FP32", "data": [-1.0, 2.0, 3.0]}
        answer = httpx.post(f"{server.base_url}/v2/models/tiny/infer", json={"inputs": [x], "outputs": [{"name": "y"}]})
        assert answer.status_code == 200 and answer.json()["outputs"][0]["data"] == [0.0, 4.0, 9.0]
        index = httpx.post(f"{server.base_url}/v2/repository/index").json()
        assert [m["name"] for m in index] == ["tiny"]
