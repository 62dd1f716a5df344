"""wire.codec against arbitrary tensor objects: every failure is a TensorError naming a field
(a 4xx on the wire), never another exception (a 500)."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wire import codec
from wire.errors import TensorError

MAX_ELEMENTS = 1 << 16
DIMS = st.one_of(
    st.integers(0, 4),
    st.integers(0, 2**70),
    st.sampled_from([2**31, 2**32, 2**63 - 1, 2**63, 2**64]),
    st.integers(-3, -1),
    st.booleans(),
    st.floats(allow_nan=True),
    st.text(max_size=2),
    st.none(),
)
SHAPES = st.one_of(
    st.lists(DIMS, max_size=6),
    st.lists(st.integers(0, 2), min_size=60, max_size=70),
    DIMS,
    st.dictionaries(st.text(max_size=2), DIMS, max_size=2),
)
LEAVES = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.sampled_from(["NaN", "Infinity", "-Infinity", "nan", "1"]),
)
DATA = st.recursive(
    LEAVES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=2), inner, max_size=2),
    max_leaves=24,
)
PARAMETERS = st.one_of(
    st.none(),
    st.just({}),
    st.fixed_dictionaries(
        {
            "binary_data_size": st.one_of(
                st.integers(-2, 2**66), st.sampled_from([0, 4, 8, 16]), st.booleans(), st.floats(), st.text(max_size=2)
            )
        }
    ),
)


@st.composite
def tensor_objects(draw):
    obj = {}
    if draw(st.booleans()) or draw(st.booleans()):
        obj["name"] = draw(st.one_of(st.just("x"), st.text(max_size=3), st.integers()))
    obj["shape"] = draw(SHAPES)
    obj["datatype"] = draw(st.one_of(st.sampled_from(list(codec.DATATYPES)), st.text(max_size=4)))
    if draw(st.booleans()):
        obj["data"] = draw(DATA)
    parameters = draw(PARAMETERS)
    if parameters is not None:
        obj["parameters"] = parameters
    return obj


@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    objs=st.lists(st.one_of(tensor_objects(), DATA), max_size=3), tail=st.binary(max_size=64), offset=st.integers(0, 8)
)
def test_decoding_any_tensor_object_fails_only_with_a_tensor_error(objs, tail, offset):
    try:
        tensors, end = codec.decode_tensors(objs, "inputs", tail, offset, MAX_ELEMENTS)
    except TensorError as err:
        assert str(err) and err.field, err
        return
    for (name, array), obj in zip(tensors, objs):
        assert name == obj["name"]
        assert array.shape == tuple(obj["shape"]) and array.size <= MAX_ELEMENTS
    assert end == offset or offset < end <= len(tail)


@pytest.mark.parametrize(
    ("shape", "field", "kind"),
    [
        ([0, 2**63], "inputs[0].shape", "too_large"),
        ([0, 2**64, 3], "inputs[0].shape", "too_large"),
        ([2**63, 0], "inputs[0].shape", "too_large"),
        ([0, MAX_ELEMENTS + 1], "inputs[0].shape", "too_large"),
        ([1] * (codec.MAX_DIMS + 1), "inputs[0].shape", "invalid"),
    ],
)
def test_absurd_shapes_are_refused_before_numpy_sees_them(shape, field, kind):
    for obj in (
        {"name": "x", "shape": shape, "datatype": "FP32", "data": []},
        {"name": "x", "shape": shape, "datatype": "FP32", "parameters": {"binary_data_size": 0}},
    ):
        with pytest.raises(TensorError) as info:
            codec.decode_tensors([obj], "inputs", b"", 0, MAX_ELEMENTS)
        assert (info.value.field, info.value.kind) == (field, kind)


def test_empty_tensors_with_sane_dimensions_and_64_dimensions_still_decode():
    ((_, empty),) = codec.decode_tensors(
        [{"name": "e", "shape": [0, 7], "datatype": "FP64", "data": []}], "inputs", None, 0, MAX_ELEMENTS
    )[0]
    assert empty.shape == (0, 7)
    shape = [1] * codec.MAX_DIMS
    ((_, deep),) = codec.decode_tensors(
        [{"name": "d", "shape": shape, "datatype": "FP32", "data": [2.5]}], "inputs", None, 0, MAX_ELEMENTS
    )[0]
    assert deep.shape == tuple(shape) and deep.item() == 2.5


def test_a_tensor_with_both_data_and_binary_data_size_is_refused():
    obj = {"name": "x", "shape": [1], "datatype": "FP32", "data": [1.0], "parameters": {"binary_data_size": 4}}
    with pytest.raises(TensorError) as info:
        codec.decode_tensors([obj], "inputs", np.float32(2.0).tobytes(), 0, MAX_ELEMENTS)
    assert (info.value.field, info.value.kind) == ("inputs[0].data", "invalid")
    assert "both" in str(info.value)


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(
        st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32), st.sampled_from([np.nan, np.inf, -np.inf])),
        min_size=1,
        max_size=50,
    ),
    datatype=st.sampled_from(["FP16", "FP32", "FP64"]),
    chunk=st.sampled_from([1, 3, 7, 1 << 17]),
)
def test_non_finite_json_answers_round_trip_exactly(values, datatype, chunk):
    with np.errstate(over="ignore"):  # floats past FP16's range become infinities: more cases, not fewer
        array = np.asarray(values, dtype=codec.DATATYPES[datatype])
    original = codec._CHUNK
    codec._CHUNK = chunk  # small chunks: the respelling crosses chunk boundaries and mixes kinds per chunk
    try:
        obj = codec.encode_json("y", array)
        text = codec.dumps({"outputs": [obj]})
    finally:
        codec._CHUNK = original
    decoded = orjson.loads(text)["outputs"][0]
    assert b"null" not in text
    ((_, back),) = codec.decode_tensors([decoded], "outputs", None, 0, MAX_ELEMENTS)[0]
    np.testing.assert_array_equal(back, array)
    assert back.dtype == array.dtype


@pytest.mark.parametrize("datatype", ["BOOL", "UINT8", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64"])
@pytest.mark.parametrize("size", [0, 1, 3, 4, 10])
def test_json_answers_written_in_chunks_round_trip(datatype, size, monkeypatch):
    monkeypatch.setattr(codec, "_CHUNK", 3)
    array = (np.arange(size) % 5 - 2).astype(codec.DATATYPES[datatype]).reshape(size, 1)
    decoded = orjson.loads(codec.dumps(codec.encode_json("y", array)))
    ((_, back),) = codec.decode_tensors([decoded], "outputs", None, 0, MAX_ELEMENTS)[0]
    np.testing.assert_array_equal(back, array)


FLAT_LEAVES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**63), 2**63 - 1),
    st.booleans(),
    st.none(),
    st.sampled_from(["NaN", "Infinity", "-Infinity", "1"]),
)


def _outcome(obj):
    try:
        return codec.decode_json(obj, "inputs[0]", MAX_ELEMENTS)[1]
    except TensorError as err:
        return err.field


@settings(max_examples=400, deadline=None)
@given(
    values=st.lists(FLAT_LEAVES, max_size=12),
    datatype=st.sampled_from(["FP16", "FP32", "FP64", "INT8", "INT32", "INT64", "UINT8", "BOOL"]),
)
def test_a_flat_data_list_reads_as_the_same_list_nested_does(values, datatype):
    """A flat list of numbers is packed by array.array (`codec._flat`); a nested one takes the general
    path: both give the same array, or both refuse the tensor's data."""
    n = len(values)
    with np.errstate(over="ignore"):  # floats past FP16's range become infinities on both paths
        flat = _outcome({"name": "x", "shape": [n], "datatype": datatype, "data": values})
        nested = _outcome({"name": "x", "shape": [1, n], "datatype": datatype, "data": [values]})
    if isinstance(flat, str) or isinstance(nested, str):
        assert flat == nested == "inputs[0].data"
        return
    assert flat.dtype == nested.dtype and flat.shape == (n,)
    np.testing.assert_array_equal(flat, nested.reshape(n))
