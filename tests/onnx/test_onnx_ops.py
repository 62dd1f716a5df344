"""Each supported ONNX op, in the attribute and input forms of the opsets it changed in, built
with onnx.helper: the imported graph's outputs equal onnxruntime's, and its input gradients equal
onnxruntime's central differences (for the ops with gradients)."""

from __future__ import annotations

import numpy as np
import pytest

from wire.executor import Executor
from wire.limits import Limits
from wire.messages import Request
from wire.onnx import import_model

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(0)


def _f(*shape, positive=False):
    a = RNG.standard_normal(shape).astype(np.float32)
    return np.abs(a) + 0.5 if positive else a


def _i(*values):
    return np.array(values, dtype=np.int64)


def node(op, inputs, outputs=("y",), **attrs):
    return helper.make_node(op, list(inputs), list(outputs), name=f"the_{op.lower()}_{outputs[0]}", **attrs)


# name: (opset, nodes, graph inputs {name: array}, initializers {name: array}, outputs)
CASES = {
    "gemm_trans_alpha_beta": (
        13,
        [node("Gemm", "abc", transA=1, transB=1, alpha=0.5, beta=2.0)],
        {"a": _f(3, 2), "b": _f(4, 3)},
        {"c": _f(4)},
        "y",
    ),
    "matmul_batched": (13, [node("MatMul", "ab")], {"a": _f(2, 3, 4), "b": _f(4, 5)}, {}, "y"),
    "add_sub_mul_div_pow": (
        13,
        [
            node("Add", "ab", ["s"]),
            node("Sub", ["s", "b"], ["d"]),
            node("Mul", ["d", "a"], ["m"]),
            node("Div", ["m", "c"], ["q"]),
            node("Pow", ["c", "e"], ["p"]),
            node("Add", ["q", "p"], ["y"]),
        ],
        {"a": _f(2, 3), "b": _f(3), "c": _f(2, 1, positive=True)},
        {"e": np.array(1.5, np.float32)},
        "y",
    ),
    "unary_chain": (
        13,
        [
            node("Neg", "a", ["n"]),
            node("Abs", ["n"], ["b"]),
            node("Sqrt", ["b"], ["s"]),
            node("Reciprocal", ["s"], ["r"]),
            node("Log", ["r"], ["l"]),
            node("Exp", ["l"], ["e"]),
            node("Erf", ["e"], ["y"]),
        ],
        {"a": _f(2, 3, positive=True)},
        {},
        "y",
    ),
    "activations": (
        20,
        [
            node("Relu", "a", ["r"]),
            node("LeakyRelu", "a", ["l"], alpha=0.2),
            node("Elu", "a", ["e"], alpha=0.5),
            node("Sigmoid", "a", ["s"]),
            node("Tanh", "a", ["t"]),
            node("Gelu", "a", ["g"]),
            node("Gelu", "a", ["h"], approximate="tanh"),
            node("Sum", ["r", "l", "e", "s", "t", "g", "h"]),
        ],
        {"a": _f(3, 4)},
        {},
        "y",
    ),
    "softmax_logsoftmax": (
        13,
        [node("Softmax", "a", ["s"], axis=1), node("LogSoftmax", "a", ["l"]), node("Mul", ["s", "l"])],
        {"a": _f(2, 3, 4)},
        {},
        "y",
    ),
    "reducesum_axes_input": (
        13,
        [node("ReduceSum", ["a", "axes"], keepdims=0)],
        {"a": _f(2, 3, 4)},
        {"axes": _i(0, -1)},
        "y",
    ),
    "reducemean_axes_attr": (17, [node("ReduceMean", "a", axes=[1])], {"a": _f(2, 3, 4)}, {}, "y"),
    "reducemean_axes_input": (
        18,
        [node("ReduceMean", ["a", "axes"], keepdims=0)],
        {"a": _f(2, 3, 4)},
        {"axes": _i(2)},
        "y",
    ),
    "reducemax_min": (
        18,
        [node("ReduceMax", ["a", "axes"], ["m"]), node("ReduceMin", ["a"], ["n"], keepdims=0), node("Add", ["m", "n"])],
        {"a": _f(2, 3)},
        {"axes": _i(1)},
        "y",
    ),
    "reducemin_attr_opset13": (13, [node("ReduceMin", "a", axes=[0], keepdims=1)], {"a": _f(3, 2)}, {}, "y"),
    "reshape_zero_and_minus_one": (13, [node("Reshape", ["a", "s"])], {"a": _f(2, 3, 4)}, {"s": _i(0, -1)}, "y"),
    "flatten_axes": (
        13,
        [
            node("Flatten", "a", ["f0"], axis=0),
            node("Flatten", "a", ["f2"], axis=2),
            node("Flatten", "a", ["f3"], axis=-1),
            node("Flatten", "a", ["y"]),
        ],
        {"a": _f(2, 3, 2, 2)},
        {},
        ["f0", "f2", "f3", "y"],
    ),
    "transpose_squeeze_unsqueeze": (
        13,
        [
            node("Transpose", "a", ["t"], perm=[2, 0, 1]),
            node("Unsqueeze", ["t", "u"], ["v"]),
            node("Squeeze", ["v", "q"], ["y"]),
        ],
        {"a": _f(2, 3, 4)},
        {"u": _i(-1, 1), "q": _i(1)},
        "y",
    ),
    "concat_split": (
        13,
        [
            node("Concat", "ab", ["c"], axis=-1),
            node("Split", ["c", "sizes"], ["p", "q"], axis=1),
            node("Mul", ["p", "q"]),
        ],
        {"a": _f(2, 3), "b": _f(2, 1)},
        {"sizes": _i(2, 2)},
        "y",
    ),
    "split_num_outputs": (
        18,
        [node("Split", ["a"], ["p", "q", "r"], axis=0, num_outputs=3), node("Sum", ["p", "q", "r"])],
        {"a": _f(7, 2)},
        {},
        "y",
    ),
    "slice_negative_step": (
        13,
        [node("Slice", ["a", "st", "en", "ax", "sp"])],
        {"a": _f(3, 5)},
        {"st": _i(-1, 1), "en": _i(-(2**63), 100), "ax": _i(1, 0), "sp": _i(-2, 1)},
        "y",
    ),
    "gather_scalar_and_array": (
        13,
        [
            node("Gather", ["a", "k"], ["g"], axis=1),
            node("Gather", ["a", "idx"], ["h"], axis=0),
            node("ReduceSum", ["h"], ["s"], keepdims=0),
            node("Add", ["g", "s"]),
        ],
        {"a": _f(3, 4)},
        {"k": np.array(-1, np.int64), "idx": _i(2, 0, 2)},
        "y",
    ),
    "expand_bidirectional": (13, [node("Expand", ["a", "s"])], {"a": _f(3, 1)}, {"s": _i(2, 1, 4)}, "y"),
    "where_compare": (
        13,
        [
            node("Greater", "ab", ["g"]),
            node("Less", "ab", ["l"]),
            node("Equal", ["g", "l"], ["e"]),
            node("Where", ["g", "a", "b"], ["w"]),
            node("Where", ["e", "w", "b"]),
        ],
        {"a": _f(2, 3), "b": _f(2, 3)},
        {},
        "y",
    ),
    "clip_inputs": (
        13,
        [node("Clip", ["a", "lo", "hi"], ["c"]), node("Clip", ["c", "", "hi2"])],
        {"a": _f(3, 4)},
        {"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32), "hi2": np.array(0.6, np.float32)},
        "y",
    ),
    "cast_constant_identity_dropout": (
        13,
        [
            helper.make_node(
                "Constant", [], ["k"], value=numpy_helper.from_array(np.array([2.0, 3.0, 4.0], np.float32))
            ),
            node("Cast", "a", ["d"], to=TensorProto.DOUBLE),
            node("Cast", ["d"], ["f"], to=TensorProto.FLOAT),
            node("Identity", ["f"], ["i"]),
            node("Dropout", ["i", "ratio"], ["o"]),
            node("Mul", ["o", "k"]),
        ],
        {"a": _f(2, 3)},
        {"ratio": np.array(0.3, np.float32)},
        "y",
    ),
    "cast_to_int": (13, [node("Cast", "a", ["y"], to=TensorProto.INT64)], {"a": _f(2, 3) * 4}, {}, "y"),
    "batch_norm": (
        15,
        [node("BatchNormalization", ["a", "s", "b", "m", "v"], epsilon=1e-3)],
        {"a": _f(2, 3, 4)},
        {"s": _f(3), "b": _f(3), "m": _f(3), "v": _f(3, positive=True)},
        "y",
    ),
    "layer_norm": (
        17,
        [node("LayerNormalization", ["a", "s", "b"], axis=1)],
        {"a": _f(2, 3, 4)},
        {"s": _f(3, 4), "b": _f(3, 4)},
        "y",
    ),
    "layer_norm_no_bias": (
        17,
        [node("LayerNormalization", ["a", "s"], epsilon=1e-3)],
        {"a": _f(2, 4)},
        {"s": _f(4)},
        "y",
    ),
    "conv1d_asymmetric_pads": (
        13,
        [node("Conv", ["a", "w", "b"], pads=[1, 2], strides=[2])],
        {"a": _f(2, 3, 9)},
        {"w": _f(4, 3, 3), "b": _f(4)},
        "y",
    ),
    "conv2d_same_upper_stride": (
        13,
        [node("Conv", ["a", "w"], auto_pad="SAME_UPPER", strides=[2, 2])],
        {"a": _f(1, 2, 7, 6)},
        {"w": _f(3, 2, 3, 2)},
        "y",
    ),
    "conv2d_dilations_groups": (
        13,
        [node("Conv", ["a", "w"], pads=[2, 1, 2, 1], dilations=[2, 1], group=2)],
        {"a": _f(1, 4, 6, 5)},
        {"w": _f(6, 2, 3, 3)},
        "y",
    ),
    "maxpool_pads_ceil": (
        13,
        [node("MaxPool", "a", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)],
        {"a": _f(1, 2, 6, 7)},
        {},
        "y",
    ),
    "maxpool1d": (13, [node("MaxPool", "a", kernel_shape=[2])], {"a": _f(2, 3, 8)}, {}, "y"),
    "averagepool_count_include_pad": (
        13,
        [node("AveragePool", "a", kernel_shape=[2, 3], pads=[1, 1, 1, 1], count_include_pad=1)],
        {"a": _f(1, 2, 5, 5)},
        {},
        "y",
    ),
    "averagepool_exclude_pad": (
        13,
        [node("AveragePool", "a", kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])],
        {"a": _f(1, 2, 5, 5)},
        {},
        "y",
    ),
    "global_average_pool": (13, [node("GlobalAveragePool", "a")], {"a": _f(2, 3, 4, 5)}, {}, "y"),
    "shape_constantofshape_folded": (
        15,
        [
            node("Shape", "a", ["s"], start=1),
            helper.make_node(
                "ConstantOfShape", ["s"], ["c"], value=numpy_helper.from_array(np.array([0.5], np.float32))
            ),
            node("Mul", ["a", "c"]),
        ],
        {"a": _f(2, 3, 4)},
        {},
        "y",
    ),
    "global_max_pool": (13, [node("GlobalMaxPool", "a")], {"a": _f(2, 3, 4, 5)}, {}, "y"),
    "max_min_sin_cos_sign": (
        13,
        [
            node("Max", "abc", ["m"]),
            node("Min", "ab", ["n"]),
            node("Sin", "m", ["s"]),
            node("Cos", "n", ["k"]),
            node("Sign", "c", ["g"]),
            node("LessOrEqual", "ab", ["le"]),
            node("GreaterOrEqual", "ab", ["ge"]),
            node("Where", ["le", "s", "k"], ["w"]),
            node("Where", ["ge", "w", "g"]),
        ],
        {"a": _f(2, 3), "b": _f(2, 3), "c": _f(3)},
        {},
        "y",
    ),
    "pad_constant": (
        13,
        [node("Pad", ["a", "pads"])],
        {"a": _f(1, 2, 3, 3)},
        {"pads": _i(0, 0, 1, 0, 0, 0, 2, 1)},
        "y",
    ),
}
NO_GRADIENT = {"cast_to_int"}


def _model(opset, nodes, inputs, initializers, outputs):
    outputs = [outputs] if isinstance(outputs, str) else outputs
    info = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in inputs.items()
    ]
    inits = [numpy_helper.from_array(a, n) for n, a in initializers.items()]
    graph = helper.make_graph(
        nodes, "case", info, [helper.make_empty_tensor_value_info(n) for n in outputs], initializer=inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    for out in model.graph.output:  # the outputs' types, as an exporter writes them
        out.type.CopyFrom(inferred[out.name].type)
    return model.SerializeToString(), outputs


def _onnxruntime(data, inputs):
    session = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, inputs)))


@pytest.mark.parametrize("case", sorted(CASES))
def test_op_matches_onnxruntime(case):
    opset, nodes, inputs, initializers, outputs = CASES[case]
    data, names = _model(opset, nodes, inputs, initializers, outputs)
    expected = _onnxruntime(data, inputs)
    imported = import_model(data)
    executor = Executor(Limits())
    held = {**inputs, **imported.parameters}  # the floating initializers, held by the model
    result = executor.forward(Request(graph=imported.graph, inputs=held))
    for name in names:
        assert result.outputs[name].dtype == expected[name].dtype, name
        np.testing.assert_allclose(result.outputs[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)
    if case in NO_GRADIENT:
        return
    seeds = {n: RNG.standard_normal(expected[n].shape).astype(np.float32) for n in names}
    grads = executor.backward(Request(graph=imported.graph, inputs=held, grad_outputs=seeds, wrt=list(inputs))).grads
    for name in inputs:
        np.testing.assert_allclose(
            grads[name], _central_differences(data, inputs, name, seeds), rtol=2e-2, atol=2e-2, err_msg=name
        )


def _central_differences(data, inputs, name, seeds, eps=1e-3):
    """d(sum of outputs * seeds)/d inputs[name], by onnxruntime in float64 accumulation."""
    session = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    out_names = [o.name for o in session.get_outputs()]

    def loss(values):
        outs = session.run(None, {**inputs, name: values.astype(np.float32)})
        return sum(float((o.astype(np.float64) * seeds[n]).sum()) for n, o in zip(out_names, outs))

    base = inputs[name].astype(np.float64)
    grad = np.zeros_like(base)
    for index in np.ndindex(base.shape):
        up, down = base.copy(), base.copy()
        up[index] += eps
        down[index] -= eps
        grad[index] = (loss(up) - loss(down)) / (2 * eps)
    return grad
