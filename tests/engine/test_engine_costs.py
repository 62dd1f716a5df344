"""Shapes and costs from shapes alone (issue 11): the indexing rules are symbolic (they agree with
NumPy and allocate nothing), each op's cost comes from its registry declaration, huge integers
and too many dimensions in attributes are refused, and the backward walk can be interrupted."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import engine
from engine import costs, interrupt, shapes
from engine.attrs import AttrError, check
from engine.indexing import to_key
from engine.registry import OPS

I = np.array([0, 2, 1])
J = np.array([[1], [0]])
M = np.array([[True, False, True, True, False, False, True]] * 6)

INDEX_CASES = [
    ((4, 5), (1,), []),
    ((4, 5), (-4, {"slice": [None, None, -2]}), []),
    ((4, 5), ({"slice": [None, None, 2]}, {"slice": [1, 40, None]}), []),
    ((4, 5), (None, "...", -1), []),
    ((4, 5), ("...",), []),
    ((5, 6, 7), ({"tensor": 0},), [I]),
    ((5, 6, 7), ({"tensor": 0}, {"slice": [None, None, None]}, {"tensor": 1}), [J, I]),
    ((5, 6, 7), (1, {"tensor": 0}), [J]),
    ((5, 6, 7), ({"tensor": 0}, 1), [I]),
    ((5, 6, 7), ("...", {"tensor": 0}), [I]),
    ((5, 6, 7), ({"slice": [None, None, None]}, {"tensor": 0}, {"tensor": 1}), [I, I]),
    ((5, 6, 7), ({"tensor": 0}, None, {"tensor": 1}), [I, I]),
    ((5, 6, 7), (0, {"slice": [1, 3, None]}, {"tensor": 0}), [J]),
    ((5, 6, 7), (None, None, {"tensor": 0}, {"slice": [None, None, 3]}), [J]),
]


@pytest.mark.parametrize(("shape", "spec", "arrays"), INDEX_CASES)
def test_index_rule_agrees_with_numpy(shape, spec, arrays):
    spec = check("index", spec, "index")
    expected = np.zeros(shape)[to_key(spec, arrays)].shape
    got = shapes.index_result(shape, spec, [a.shape for a in arrays], [a.dtype for a in arrays])
    assert type(got) is tuple and got == expected


@pytest.mark.parametrize("where", [0, 1])
def test_a_mask_result_is_bounded_by_the_mask_size(where):
    spec = check("index", ({"slice": [None, None, None]},) * where + ({"tensor": 0},), "index")
    shape = (6, 6, 7) if where else (6, 7, 3)
    mask = np.ones(shape[where : where + 2], bool)
    mask[0, :3] = False
    got = shapes.index_result(shape, spec, [mask.shape], [mask.dtype])
    actual = np.zeros(shape)[to_key(spec, [mask])].shape
    assert isinstance(got, shapes.Bounded) and len(got) == len(actual)
    assert got[where] == mask.size > actual[where]


@pytest.mark.parametrize(
    ("shape", "spec", "arrays", "words"),
    [
        ((4, 5), (4,), [], "out of bounds"),
        ((4, 5), (0, 0, 0), [], "too many indices"),
        ((4, 5), ({"tensor": 0},), [np.ones((3, 5), bool)], "does not match"),
        ((4, 5), ({"tensor": 0}, {"tensor": 1}), [np.zeros(3, int), np.zeros(2, int)], "cannot be broadcast"),
        ((4, 5), ("...", "..."), [], "single ellipsis"),
    ],
)
def test_index_rule_refuses_what_numpy_refuses(shape, spec, arrays, words):
    with pytest.raises(IndexError):
        np.zeros(shape)[to_key(check("index", spec, "index"), arrays)]
    with pytest.raises(shapes.ShapeError, match=words):
        shapes.index_result(shape, check("index", spec, "index"), [a.shape for a in arrays], [a.dtype for a in arrays])


@pytest.mark.parametrize("op", ["getitem", "setitem", "index_add"])
def test_indexing_rules_allocate_nothing_of_the_result_size(op):
    big = (30000, 30000)
    index = np.zeros(30000, np.int64)
    spec = {"index": ({"tensor": 0},)}
    if op == "getitem":
        args = ([big, index.shape], [np.float64, np.int64], spec)
    elif op == "setitem":
        args = ([big, (), index.shape], [np.float64, np.float64, np.int64], spec)
    else:
        args = ([(30000, 30000), index.shape], [np.float64, np.int64], {**spec, "shape": big})
    tracemalloc.start()
    try:
        shape, _ = OPS[op].infer(*args)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert tuple(shape) == big and peak < 2**20


def test_every_op_declares_a_cost_from_shapes():
    for name, op in OPS.items():
        sample = op.samples[0] if op.samples else None
        if sample is None or sample.make is not None:
            continue
        attrs = op.check_attrs(sample.attrs)  # as every caller passes them: checked, with their defaults
        out_shape, _ = op.infer(list(sample.shapes), [np.float64] * len(sample.shapes), attrs)
        elements, work = op.cost(list(sample.shapes), out_shape, attrs)
        assert elements == costs.numel(out_shape), name
        assert work >= costs.ELEMENT_OP * max([elements, *map(costs.numel, sample.shapes)]), name


def test_matrix_products_count_their_flops():
    elements, work = OPS["mm"].cost([(300, 400), (400, 500)], (300, 500), {})
    assert elements == 300 * 500 and work == 2 * 300 * 400 * 500 + costs.ELEMENT_OP * 400 * 500
    _, batched = OPS["matmul"].cost([(7, 30, 40), (40, 50)], (7, 30, 50), {})
    assert batched == 2 * 7 * 30 * 40 * 50 + costs.ELEMENT_OP * 7 * 30 * 50
    _, elementwise = OPS["add"].cost([(30, 1), (1, 50)], (30, 50), {})
    assert elementwise == costs.ELEMENT_OP * 1500


@pytest.mark.parametrize(
    ("op", "attrs", "words"),
    [
        ("getitem", {"index": (2**63,)}, "64-bit"),
        ("getitem", {"index": (-(2**63) - 1,)}, "64-bit"),
        ("getitem", {"index": ({"slice": [0, 2**64, None]},)}, "64-bit"),
        ("reshape", {"shape": [1] * 65}, "65 dimensions"),
        ("expand", {"shape": [2**63]}, "64-bit"),
        ("sum", {"dim": 2**70}, "64-bit"),
    ],
)
def test_attributes_out_of_range_are_refused(op, attrs, words):
    with pytest.raises(AttrError, match=words):
        OPS[op].check_attrs(attrs)


def test_reshape_of_huge_dimensions_is_a_shape_error_not_an_overflow():
    with pytest.raises(shapes.ShapeError):
        shapes.reshape([(4,)], [np.float64], {"shape": [2**40, 2**40, 0]})
    with pytest.raises(shapes.ShapeError):
        shapes.reshape([(0,)], [np.float64], {"shape": [2**62, 2**62, -1]})


def test_the_interrupt_hook_stops_a_backward_walk_at_the_next_node():
    x = engine.Variable(np.ones(3), requires_grad=True)
    y = x
    for _ in range(50):
        y = y * 1.5
    calls = []

    def check():
        calls.append(1)
        if len(calls) == 10:
            raise KeyboardInterrupt("stop")

    previous = interrupt.set_hook(check)
    try:
        with pytest.raises(KeyboardInterrupt):
            engine.grad(y.sum(), [x])
    finally:
        interrupt.set_hook(previous)
    assert len(calls) == 10 and interrupt.current() is previous
    assert engine.grad((x * 2).sum(), [x])[0].shape == (3,)
