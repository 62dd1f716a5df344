"""A served worker answers a repeat of the last binary request by its program straight from the body
(`wire.handler.repeat`): over a real server, its answers are the full pipeline's, and a body that keeps the
repeat's headers and length but says something else in its JSON header is read and refused as that header must be."""

from __future__ import annotations

import numpy as np

from tests.service.service_testkit import assert_error, binary_body, binary_tensor, decode_response

GRAPH = {
    "version": 1,
    "nodes": [{"id": "x", "op": "input", "requires_grad": True}, {"id": "y", "op": "mul", "inputs": ["x", "x"]}],
    "outputs": ["y"],
}


def _request(x):
    buffers = []
    header = {"graph": GRAPH, "inputs": [binary_tensor("x", x, buffers)], "parameters": {"binary_data_output": True}}
    return binary_body(header, buffers)


def test_repeats_answer_as_the_first_and_a_same_length_header_saying_more_is_refused(http):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    body, headers = _request(x)
    ran = []
    for i in range(8):  # the engine, the recording, its check, then the program (interpreted or generated)
        xi = x + i
        body, headers = _request(xi)
        answer = http.post("/forward", content=body, headers=headers)
        assert answer.status_code == 200, answer.text
        np.testing.assert_array_equal(decode_response(answer)["outputs"]["y"], xi * xi)
        ran.append(answer.headers["x-gradserve-executor"])
    assert ran[-1] in ("interpreted", "compiled")
    wider = body.replace(b'"shape":[2,3]', b'"shape":[3,3]', 1)  # same headers and length: 9 elements in 24 bytes?
    assert len(wider) == len(body) and wider != body
    assert_error(http.post("/forward", content=wider, headers=headers), 422, "binary_data_size 24 does not match")
    again = http.post("/forward", content=body, headers=headers)
    np.testing.assert_array_equal(decode_response(again)["outputs"]["y"], (x + 7) ** 2)
