"""`wire.handler.run_arrays` given the layout of an earlier request of the same header: made and admitted
as that one was only while the header, and its arrays' names, dtypes and shapes, are that one's."""

from __future__ import annotations

import numpy as np
import pytest

import wire.handler
from wire.errors import GraphError
from wire.executor import Executor
from wire.handler import run_arrays
from wire.limits import Limits

GRAPH = {
    "version": 1,
    "nodes": [{"id": "x", "op": "input", "requires_grad": True}, {"id": "s", "op": "sum", "inputs": ["x"]}],
    "outputs": ["s"],
}


@pytest.fixture
def decodes(monkeypatch):
    count = []
    decode = wire.handler.decode_request
    monkeypatch.setattr(wire.handler, "decode_request", lambda *a, **k: count.append(1) or decode(*a, **k))
    return count


def test_a_repeat_of_the_same_header_and_arrays_is_not_decoded_again(decodes):
    executor, header = Executor(), {"graph": GRAPH}
    result = run_arrays(executor, "/backward", header, [("x", np.ones((2, 3)))])
    for step in range(4):
        x = np.full((2, 3), float(step))
        result = run_arrays(executor, "/backward", header, [("x", x)], layout=result.layout)
        assert result.outputs["s"] == x.sum()
        np.testing.assert_array_equal(result.grads["x"], np.ones_like(x))
    assert len(decodes) == 1


def test_another_header_or_other_arrays_are_decoded_and_checked_again(decodes):
    executor = Executor(Limits(max_tensor_elements=10))
    layout = run_arrays(executor, "/backward", {"graph": GRAPH}, [("x", np.ones((2, 3)))]).layout
    other = run_arrays(executor, "/forward", {"graph": GRAPH, "id": "other"}, [("x", np.ones((2, 3)))], layout=layout)
    assert other.id == "other"  # (the first one's fields were not taken for it)
    assert run_arrays(executor, "/backward", {"graph": GRAPH}, [("x", np.ones(3))], layout=layout).grads["x"].shape == (
        3,
    )
    with pytest.raises(GraphError, match="elements"):  # over max_tensor_elements: refused as a first request
        run_arrays(executor, "/backward", {"graph": GRAPH}, [("x", np.ones((4, 4)))], layout=layout)
    with pytest.raises(GraphError):  # named otherwise
        run_arrays(executor, "/backward", {"graph": GRAPH}, [("y", np.ones((2, 3)))], layout=layout)
    assert len(decodes) == 5
