"""Property-based fuzzing: valid graphs compute what the engine computes; invalid ones get a 4xx.

Valid graphs are built from the registry itself: each op's `samples` give compatible input
shapes and attributes, and random unary ops are chained after them. Invalid requests are valid
ones with one mutation. Every request goes through the ASGI app; the oracle is `Executor`
run in-process on the same request (the service wraps exactly that).
"""

from __future__ import annotations

import json
import os

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.registry import OPS
from service.errors import STATUS
from wire import codec
from wire.errors import GraphError
from wire.executor import Executor
from wire.graph import SPECIAL_OPS, SUBGRAPH_OPS
from wire.handler import read_body
from wire.limits import Limits
from wire.messages import decode_request

from .conftest import (
    HEADER_LENGTH,
    assert_error,
    assert_same,
    binary_body,
    decode_response,
    json_tensor,
    record_figure,
    simple_request,
    spell,
)

EXAMPLES = int(os.environ.get("RELIABILITY_FUZZ_EXAMPLES", "100"))  # raise it for a long soak run
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=False,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
COUNTS = {"valid": 0, "invalid": 0, "executor_invalid": 0}

SAMPLED = [(name, s) for name, op in OPS.items() for s in op.samples if s.make is None and s.shapes and op.infer]
UNARY_FLOAT = [
    n for n in ("neg", "exp", "tanh", "sigmoid", "sin", "cos", "abs", "relu", "clone", "sqrt", "log") if n in OPS
]


def _jsonable(value):
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, float) and not np.isfinite(value):  # strict JSON: spelled like tensor data
        return spell([value])[0]
    return value


@st.composite
def valid_requests(draw):
    """(request header dict, {input name: array}) of a random valid graph."""
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    nodes, arrays, outputs = [], {}, []
    for k in range(draw(st.integers(1, 3))):
        name, sample = draw(st.sampled_from(SAMPLED))
        ins = []
        for j, shape in enumerate(sample.shapes):
            iid = f"in{k}_{j}"
            arrays[iid] = rng.uniform(sample.low, sample.high, size=shape).astype(dtype)
            nodes.append(
                {
                    "id": iid,
                    "op": "input",
                    "requires_grad": True,
                    "shape": list(shape),
                    "dtype": "FP32" if dtype == np.float32 else "FP64",
                }
            )
            ins.append(iid)
        node = {"id": f"op{k}", "op": name, "inputs": ins}
        if sample.attrs:
            node["attrs"] = _jsonable(sample.attrs)
        nodes.append(node)
        prev = node["id"]
        if OPS[name].differentiable:
            for u, unary in enumerate(draw(st.lists(st.sampled_from(UNARY_FLOAT), max_size=3))):
                nodes.append({"id": f"u{k}_{u}", "op": unary, "inputs": [prev]})
                prev = f"u{k}_{u}"
        nodes.append({"id": f"s{k}", "op": "sum", "inputs": [prev]})
        outputs.append(f"s{k}" if draw(st.booleans()) else prev)
    header = {"graph": {"version": 1, "nodes": nodes, "outputs": outputs}, "id": draw(st.integers(0, 10**6))}
    return header, arrays


def oracle(endpoint, header, arrays):
    """('ok', Result) or ('error', status) from running the request on an in-process Executor."""
    full = dict(header)
    full["inputs"] = [json_tensor(n, a) for n, a in arrays.items()]
    try:
        request = decode_request(orjson.loads(orjson.dumps(full)), None, Limits())
        executor = Executor(Limits())
        with np.errstate(all="ignore"):  # IEEE results are answers, as at the server
            return "ok", getattr(executor, endpoint)(request)
    except (GraphError, codec.TensorError) as err:
        return "error", STATUS[err.kind]


def post(client, endpoint, header, arrays, binary_in, binary_out):
    header = json.loads(json.dumps(header))
    if binary_out:
        header.setdefault("parameters", {})["binary_data_output"] = True
    if binary_in:
        body, headers = binary_body(header, arrays)
        return client.post(f"/{endpoint}", content=body, headers=headers)
    header["inputs"] = [json_tensor(n, a) for n, a in arrays.items()]
    return client.post(
        f"/{endpoint}", content=json.dumps(header).encode(), headers={"Content-Type": "application/json"}
    )


def assert_serving(client):
    response = client.post("/forward", json=simple_request())
    assert response.status_code == 200, response.text[:300]
    assert decode_response(response)["outputs"]["s"] == pytest.approx(6.0)


@FUZZ
@given(
    case=valid_requests(),
    endpoint=st.sampled_from(["forward", "backward"]),
    binary_in=st.booleans(),
    binary_out=st.booleans(),
)
def test_valid_graphs_match_the_engine(module_client, case, endpoint, binary_in, binary_out):
    header, arrays = case
    if endpoint == "backward":  # implied gradients need scalar outputs: keep the sums only
        header["graph"]["outputs"] = [
            n["id"] for n in header["graph"]["nodes"] if n["id"][:1] == "s" and n["op"] == "sum"
        ]
    kind, expected = oracle(endpoint, header, arrays)
    response = post(module_client, endpoint, header, arrays, binary_in, binary_out)
    COUNTS["valid"] += 1
    if kind == "error":
        assert_error(response, {expected})
        return
    got = decode_response(response)
    assert got["id"] == header["id"]
    assert set(got["outputs"]) == set(expected.outputs)
    for name, array in expected.outputs.items():
        assert_same(got["outputs"][name], array)
    if endpoint == "backward":
        assert set(got["grads"]) == set(expected.grads)
        for name, array in expected.grads.items():
            assert_same(got["grads"][name], array)
    record_figure("fuzz_valid_requests", COUNTS["valid"])


# --------------------------------------------------------------------------------------------
# invalid requests: one mutation of a valid one

BAD_OP_NAMES = st.one_of(
    st.sampled_from(
        [
            "__class__",
            "os.system",
            "eval",
            "__import__",
            "exec",
            "Variable",
            "__init__",
            "subprocess.Popen",
            "mm ",
            "ADD",
            "",
        ]
    ),
    st.text(max_size=12).filter(lambda s: s not in OPS and s not in SPECIAL_OPS and s not in SUBGRAPH_OPS),
)
WEIRD = st.one_of(
    st.text(max_size=5),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.lists(st.text(max_size=3), min_size=1, max_size=3),
    st.just(None),
    st.floats(allow_nan=False),
)


@st.composite
def mutated(draw):
    """(body bytes, headers, must_fail) of an invalid request; must_fail is False when a mutation can
    be harmless (then the engine is the oracle)."""
    header, arrays = draw(valid_requests())
    header["inputs"] = [json_tensor(n, a) for n, a in arrays.items()]
    nodes = header["graph"]["nodes"]
    computed = [n for n in nodes if n["op"] != "input"]
    kind = draw(
        st.sampled_from(
            [
                "op_name",
                "arity",
                "attr_type",
                "attr_unknown",
                "dangling",
                "duplicate",
                "data_short",
                "data_type",
                "datatype",
                "huge_shape",
                "negative_dim",
                "not_json",
                "truncated_binary",
                "lying_length",
                "random_json",
                "node_type",
                "missing_input",
                "extra_input",
                "shape_mismatch",
                "unknown_key",
                "version",
                "outputs",
            ]
        )
    )
    must_fail = True
    if kind == "op_name":
        draw(st.sampled_from(computed))["op"] = draw(BAD_OP_NAMES)
    elif kind == "arity":
        node = draw(st.sampled_from(computed))
        if OPS[node["op"]].variadic or draw(st.booleans()):
            node["inputs"] = []
        else:
            node["inputs"] = node["inputs"] + node["inputs"][:1] + [nodes[0]["id"]]
    elif kind == "attr_type":
        node = draw(st.sampled_from(computed))
        attrs = list(OPS[node["op"]].attrs)
        if attrs:
            node.setdefault("attrs", {})[draw(st.sampled_from(attrs))] = draw(WEIRD)
            must_fail = False  # None/floats can be valid for optional attrs
        else:
            node["attrs"] = {"bogus": draw(WEIRD)}
    elif kind == "attr_unknown":
        draw(st.sampled_from(computed)).setdefault("attrs", {})["no_such_attr_zz"] = 1
    elif kind == "dangling":
        node = draw(st.sampled_from(computed))
        node["inputs"] = (node.get("inputs") or []) + ["never_defined"]
        node["inputs"] = (
            node["inputs"][1:] if len(node["inputs"]) > 1 and not OPS[node["op"]].variadic else node["inputs"]
        )
    elif kind == "duplicate":
        node = draw(st.sampled_from(computed))
        node["id"] = nodes[0]["id"]
    elif kind == "data_short":
        tensor = draw(st.sampled_from(header["inputs"]))
        tensor["data"] = tensor["data"][:-1] if tensor["data"] else [1.0]
    elif kind == "data_type":
        draw(st.sampled_from(header["inputs"]))["data"] = draw(
            st.one_of(st.just({"a": 1}), st.just([[1, 2], [3]]), st.just(["x"]), st.just([None]))
        )
    elif kind == "datatype":
        draw(st.sampled_from(header["inputs"]))["datatype"] = draw(
            st.sampled_from(["FP128", "float", "", "BF17", None, 3])
        )
    elif kind == "huge_shape":
        draw(st.sampled_from(header["inputs"]))["shape"] = draw(
            st.sampled_from([[2**40, 2**40], [2**62, 2**62, 2**62], [10**30], [2**31, 2**31, 0, 2**40]])
        )
        must_fail = False  # a zero dim makes it tiny, though it still mismatches the data
    elif kind == "negative_dim":
        draw(st.sampled_from(header["inputs"]))["shape"] = [-1, 3]
    elif kind == "node_type":
        nodes[draw(st.integers(0, len(nodes) - 1))] = draw(st.one_of(st.just([]), st.just("x"), st.integers()))
    elif kind == "missing_input":
        header["inputs"] = header["inputs"][1:]
    elif kind == "extra_input":
        header["inputs"].append(json_tensor("zz_extra", np.zeros(2, np.float32)))
    elif kind == "shape_mismatch":
        tensor = draw(st.sampled_from(header["inputs"]))
        tensor["shape"], tensor["data"] = [len(tensor["data"]) + 1], tensor["data"] + [0.0]
    elif kind == "unknown_key":
        header[draw(st.sampled_from(["graphs", "input", "__proto__", "zz"]))] = 1
    elif kind == "version":
        header["graph"]["version"] = draw(st.sampled_from([0, 2, "1", None, 1.5]))
    elif kind == "outputs":
        header["graph"]["outputs"] = draw(st.sampled_from([[], ["nope"], "s0", None, [1]]))
    if kind == "not_json":
        raw = draw(
            st.one_of(st.binary(max_size=64), st.just(b"{"), st.just(b"\xff\xfe"), st.just(b"[1, 2"), st.just(b"NaN"))
        )
        return raw, {"Content-Type": "application/json"}, True, kind
    if kind == "random_json":
        value = draw(
            st.recursive(
                st.none() | st.booleans() | st.integers() | st.text(max_size=4),
                lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
                max_leaves=8,
            )
        )
        return json.dumps(value).encode(), {"Content-Type": "application/json"}, True, kind
    if kind in ("truncated_binary", "lying_length"):
        del header["inputs"]
        body, headers = binary_body(header, arrays)
        if kind == "truncated_binary":
            body = body[: -draw(st.integers(1, 4))]
        else:
            headers[HEADER_LENGTH] = str(len(body) + draw(st.integers(1, 10**6)))
        return body, headers, True, kind
    return json.dumps(header).encode(), {"Content-Type": "application/json"}, must_fail, kind


def _engine_verdict(body):
    """The status the protocol gives `body` (None: it runs), read as the service reads it: a body
    that is not JSON to orjson (e.g. `json.dumps`'s bare NaN) is malformed."""
    try:
        request = decode_request(read_body(body, None)[0], None, Limits())
        Executor(Limits()).forward(request)
        return None
    except (GraphError, codec.TensorError) as err:
        return STATUS[err.kind]


@FUZZ
@given(case=mutated())
def test_invalid_requests_get_a_4xx_and_the_server_keeps_serving(module_client, case):
    body, headers, must_fail, kind = case
    response = module_client.post("/forward", content=body, headers=headers)
    COUNTS["invalid"] += 1
    if not must_fail and _engine_verdict(body) is None:
        assert response.status_code == 200, f"{kind}: {response.status_code} {response.text[:300]}"
    else:
        assert_error(response)
    assert_serving(module_client)
    record_figure("fuzz_invalid_requests", COUNTS["invalid"])


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    body=st.recursive(
        st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=6),
        lambda c: (
            st.lists(c, max_size=4)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "graph",
                        "inputs",
                        "nodes",
                        "outputs",
                        "id",
                        "op",
                        "shape",
                        "data",
                        "datatype",
                        "name",
                        "version",
                        "attrs",
                        "parameters",
                        "wrt",
                        "tape",
                        "grad_outputs",
                    ]
                ),
                c,
                max_size=5,
            )
        ),
        max_leaves=20,
    )
)
def test_executor_rejects_garbage_with_graph_or_tensor_errors(body):
    """Straight to the engine: garbage raises GraphError/TensorError (a status), never anything else."""
    executor = Executor(Limits())
    COUNTS["executor_invalid"] += 1
    for method in (executor.forward, executor.backward):
        try:
            method(decode_request(body, None, executor.limits))
        except (GraphError, codec.TensorError) as err:
            assert 400 <= STATUS[err.kind] < 500
            assert str(err)
    record_figure("fuzz_executor_garbage", COUNTS["executor_invalid"])
