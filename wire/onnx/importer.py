"""An ONNX model as a graph of the graph format (`wire.graph`), and what it publishes.

`import_model(data, limits)` reads the model within bounds (`wire.onnx.reader`), infers every
value's shape with ONNX's shape inference (a dimension without a number, a dynamic batch, stays
None), then converts node by node (`wire.onnx.ops`), computing at import what is known then
(`wire.onnx.fold`). Graph inputs become input nodes (floating ones require grad). Integer
initializers become constants; floating ones are held by the model, not written into the graph's
JSON (a weight as JSON text is 6x its bytes and 9x slower to load): each is an input node that
the model fills into every request (`Imported.parameters`), one that requires grad with
`parameter_gradients`, so its gradient can be asked for like an input's. Small ones are also
folded at import where an op needs them known (Clip's bounds, inference BatchNormalization).
Everything downstream (validation, budgets, plans, execution, gradients) is the graph format's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy

from wire.codec import datatype_of
from wire.errors import GraphError
from wire.onnx.fold import BINARY as FOLD_BINARY
from wire.onnx.fold import FOLD_MAX, FOLDS, UNARY, fold
from wire.onnx.ops import CONVERTERS, filled
from wire.onnx.reader import (
    DTYPES,
    OnnxLimits,
    dtype_of,
    label,
    node_error,
    onnx_module,
    read_model,
    shown,
    tensor_array,
)
from wire.onnx.values import Builder, Dim, Value, static_value, unknown

FOLDABLE = set(FOLDS) | set(UNARY) | set(FOLD_BINARY)


@dataclass(frozen=True)
class TensorInfo:
    name: str
    datatype: str
    shape: tuple  # -1 where known only when running


@dataclass
class Imported:
    graph: dict
    parameters: dict  # input node -> array: the floating initializers the model holds (and fills in)
    inputs: tuple  # TensorInfo of each graph input
    outputs: tuple  # TensorInfo of each graph output
    opset: int


def _dims(type_proto):
    """(shape with None for unknown dims, or None for an unknown rank; element type)."""
    tensor = type_proto.tensor_type
    if not tensor.HasField("shape"):
        return None, tensor.elem_type
    return tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim), tensor.elem_type


SHAPE_ONLY = 1024  # elements: a larger initializer (a weight) goes to ONNX's inference as its type alone


def _infer_shapes(model, onnx):
    # The graph with ONNX's inferred types, of a copy of the model whose weights are typed graph
    # inputs: the inference reads no weight's values, and serializing them in and out of it was most
    # of a large model's import (0.13 of 0.14 s at 16 MiB). Without onnx's data propagation: it
    # computes the values of shape-like tensors with no bound (a 200-byte model asking for a Range of
    # 3e9, or a Concat doubled 30 times, had the server killed for memory at load); each node's
    # inference from the importer's folded values stands for it.
    graph, listed, helper = model.graph, {value.name for value in model.graph.input}, onnx.helper
    weights = {t.name: t for t in graph.initializer if math.prod(t.dims) > SHAPE_ONLY}
    typed = [helper.make_tensor_value_info(n, t.data_type, t.dims) for n, t in weights.items() if n not in listed]
    kept = [t for t in graph.initializer if t.name not in weights]
    light = helper.make_graph(graph.node, "g", [*graph.input, *typed], graph.output, kept, None, graph.value_info)
    try:
        light = onnx.ModelProto(ir_version=model.ir_version, opset_import=model.opset_import, graph=light)
        return onnx.shape_inference.infer_shapes(light, check_type=False, strict_mode=False).graph
    except Exception:  # noqa: BLE001 - shape inference is a help: the converters say what they miss
        return graph


class Context:
    """What a converter sees of the node it converts: its Values' ids, its known inputs, its errors."""

    def __init__(self, builder, node, index, info, used, opset):
        self.builder, self.node, self.index = builder, node, index
        self.label = label(node, index)
        self.info, self.used, self.opset = info, used, opset
        self.fold_max = FOLD_MAX
        self.out_shapes: dict = {}  # output index -> shape, where the converter knows better than ONNX
        self.out_dims: dict = {}  # output index -> its dims' Dims (a Reshape's), where ONNX cannot tell

    def fail(self, message: str, field: str = "op"):
        raise node_error(self.node, self.index, message, field)

    def id(self, value) -> str:
        if isinstance(value, str):
            return value
        if value.node is None and value.held is not None:
            value.node = self.builder.held_input(value)
        if value.node is None and value.fill is not None and value.dims is not None:
            value.node = filled(self, value)
        if value.node is None:
            if not value.known:
                self.fail(
                    "a dynamic shape that cannot be resolved: a value known only when running is used as a tensor",
                    "input",
                )
            value.node = self.builder.constant(value.static)
        return value.node

    def op(self, op: str, inputs, **attrs) -> str:
        return self.builder.op(op, [self.id(v) for v in inputs], attrs)

    def scalar(self, value) -> str:
        return self.builder.scalar(value)

    def constant(self, array) -> str:
        return self.builder.constant(array)

    def ints(self, value, what: str, partial: bool = False) -> list:
        if value is None or value.static is None or (value.param and not partial):
            self.fail(f"input {what} must be known at import (a constant, or computed from static shapes)", what)
        values = [None if unknown(v) else int(v) for v in value.static.reshape(-1).tolist()]
        if None in values and not partial:
            self.fail(f"a dynamic shape that cannot be resolved: {what} {values} is known only when running", what)
        return values

    def rank(self, value) -> int:
        if value.rank is None:
            self.fail("the rank of an input is not known at import (export with shapes)", "input")
        return value.rank

    def shape_of(self, value) -> tuple:
        self.rank(value)
        return value.shape

    def resolve(self, dims: list, field: str) -> list:
        """A target shape with at most one dimension known only when running (written -1)."""
        out_shape = self.info.get(self.node.output[0], (None, None))[0]
        if dims.count(None) > 1 and out_shape is not None and len(out_shape) == len(dims):
            dims = [o if d is None else d for d, o in zip(dims, out_shape)]
        if dims.count(None) > 1:
            self.fail(
                f"a dynamic shape that cannot be resolved: {['?' if d is None else d for d in dims]} has more than "
                "one dimension known only when running",
                field,
            )
        return [-1 if d is None else d for d in dims]

    def reshaped(self, value, shape):
        if value.foldable and value.known:
            return static_value(value.static.reshape(shape))
        return self.op("reshape", [value], shape=shape)

    def wanted(self, index: int) -> bool:
        outputs = self.node.output
        return index < len(outputs) and outputs[index] != "" and outputs[index] in self.used


def import_model(data: bytes, limits: OnnxLimits | None = None, parameter_gradients: bool = False) -> Imported:
    """The graph of an ONNX model's bytes; GraphError (422, or 413/400 for bounds and bytes) names
    the ONNX node (its name, or #index) and op type at fault."""
    limits = limits or OnnxLimits()
    onnx = onnx_module()
    model, opset = read_model(data, limits)
    graph = _infer_shapes(model, onnx)  # its inputs list the weights too, as initializers skip
    info = {v.name: _dims(v.type) for v in (*graph.input, *graph.value_info, *graph.output)}
    initializers = {t.name for t in model.graph.initializer}
    used = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    builder = Builder(reserved=[*(i.name for i in graph.input), *initializers])
    builder.reserve_outputs(o.name for o in graph.output)
    builder.max_nodes = limits.max_graph_nodes
    fed = {value.name for value in graph.input} - initializers
    for value in (*graph.input, *graph.value_info, *graph.output):
        dims = value.type.tensor_type.shape.dim
        builder.symbols[value.name] = tuple(d.dim_param if d.HasField("dim_param") else d.dim_value for d in dims)
        if value.name in fed:
            free = {i: d.dim_param or f"{value.name}#{i}" for i, d in enumerate(dims) if not d.HasField("dim_value")}
            builder.sources |= {name: (value.name, i, len(dims)) for i, name in free.items()}
    builder.dims = {name: Dim(1, (name,)) for name in builder.sources}
    env = {}
    for tensor in model.graph.initializer:
        array = tensor_array(tensor, f"initializer {shown(tensor.name)}", tensor.name)
        if array.dtype.kind == "f":
            env[tensor.name] = Value(
                array.shape, array.dtype, static=array, param=parameter_gradients, held=tensor.name
            )
        else:
            env[tensor.name] = static_value(array)
    inputs = []
    for value in graph.input:
        if value.name in initializers:
            continue
        shape, elem = _dims(value.type)
        dtype = dtype_of(elem, f"graph input {shown(value.name)}", value.name)
        static_shape = shape if shape is not None and None not in shape else None
        builder.input(value.name, dtype.kind == "f", static_shape, dtype)
        named = [str(n or f"{value.name}#{i}") for i, n in enumerate(builder.symbols[value.name])]
        dims = None if shape is None else tuple(builder.dims[n] if d is None else d for d, n in zip(shape, named))
        env[value.name] = Value(shape, dtype, node=value.name, dims=dims)
        inputs.append(TensorInfo(value.name, datatype_of(dtype), _published(shape)))
    for index, node in enumerate(graph.node):
        _convert(builder, env, node, index, info, used, opset)
    outputs = []
    for out in graph.output:
        value = env[out.name]
        if value.node is None and value.held is not None:
            builder.op("clone", [builder.held_input(value)], node_id=out.name)
        elif value.node is None:
            builder.constant(value.static if value.known else _unresolved(out.name), node_id=out.name)
        elif value.node != out.name:
            builder.op("clone", [value.node], node_id=out.name)
        shape, elem = _dims(out.type)
        dtype = value.dtype if value.dtype is not None else dtype_of(elem, f"graph output {shown(out.name)}")
        if shape is not None and value.shape is not None and len(shape) == len(value.shape):
            shape = tuple(c if d is None else d for d, c in zip(shape, value.shape))  # a dim the exporter left named
        outputs.append(TensorInfo(out.name, datatype_of(dtype), _published(shape or value.shape)))
    nodes = builder.nodes
    return Imported(
        {"version": 1, "nodes": nodes, "outputs": [o.name for o in graph.output]},
        builder.held,
        tuple(inputs),
        tuple(outputs),
        opset,
    )


def _published(shape) -> tuple:
    return (-1,) if shape is None else tuple(-1 if d is None else d for d in shape)


def _unresolved(name):
    raise GraphError(f"graph output {shown(name)} is a shape known only when running", node=name, field="output")


def _convert(builder, env, node, index, info, used, opset):
    onnx = onnx_module()
    builder.where = label(node, index)
    cx = Context(builder, node, index, info, used, opset)
    inputs = [env[name] if name else None for name in node.input]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    mark = len(builder.nodes)
    dtypes = [_dtype(info.get(name, (None, 0))[1]) for name in node.output]
    try:
        results = None
        if node.op_type in FOLDABLE and all(v is None or _foldable(v) for v in inputs) and any(inputs):
            arrays = fold(node.op_type, [None if v is None else v.static for v in inputs], attrs, dtypes)
            if arrays is not None:
                results = [static_value(_typed(a, d), d) for a, d in zip(arrays, dtypes)]
        if results is None:
            converter = CONVERTERS.get(node.op_type)
            if converter is None:
                cx.fail("this op is not supported (docs/onnx.md lists the supported ones)")
            results = converter(cx, inputs, attrs)
    except GraphError:
        raise
    except (KeyError, IndexError, ValueError, TypeError, AttributeError) as err:
        raise node_error(node, index, f"cannot convert it: {type(err).__name__}: {err}", "attrs") from None
    inferred = None
    for i, name in enumerate(node.output):
        if not name:
            continue
        result = results[i] if i < len(results) else None
        if isinstance(result, str):
            shape, elem = info.get(name, (None, 0))
            dims = cx.out_dims.get(i)
            if i in cx.out_shapes:
                shape = tuple(cx.out_shapes[i])
            elif shape is None or None in shape or elem == 0:
                named = _sourced(shape, builder.symbols.get(name), builder.dims) if elem else None
                if named is None:  # this node's inference from the folded values
                    inferred = inferred or _node_types(onnx, node, inputs, opset)
                    known, known_elem, named = inferred.get(name, (None, 0, None))
                    if known is not None and (shape is None or known.count(None) < shape.count(None)):
                        shape = known
                    elem = elem or known_elem
                dims = dims or named
            if builder.rename(result, name, mark):  # a graph output is the node that computes it: no clone
                result = name
            dims = dims if shape is not None and dims is not None and len(dims) == len(shape) else None
            result = Value(shape, _dtype(elem), node=result, dims=dims)
        if result is None:
            if name in used:
                raise node_error(node, index, f"output {shown(name)} is not supported", "output")
            continue
        env[name] = result


HELD_FOLD_MAX = 16  # a held initializer is folded into a constant only when this small (a scalar, an eps)


def _foldable(value) -> bool:
    """Whether an op on `value` is computed at import: a known value, not a parameter, small, and
    for a held initializer (a weight) tiny, so that weights stay held and out of the graph's JSON."""
    return value.foldable and value.static.size <= (HELD_FOLD_MAX if value.held else FOLD_MAX)


def _sourced(shape, symbols, named: dict):
    # The Dims of a shape whose every unknown dim the model's inference named after a graph input's
    # dim (`named`: a batch, no node's own inference can tell more and it cost as much as the rest of
    # a small model's import), else None. `symbols` are the dims of the type `shape` was read from.
    if shape is None or symbols is None or any(d is None and s not in named for d, s in zip(shape, symbols)):
        return None
    return tuple(None if d is not None else named[s] for d, s in zip(shape, symbols))


def _node_types(onnx, node, inputs, opset) -> dict:
    """{output: (shape, element type, Dims)} by ONNX's inference of this one node, from the Values of
    its inputs (the whole model's inference cannot see past a shape it computed as data); a dim known
    only when running is given as its Dim's name, which ONNX carries to the outputs' dims it equals."""
    helper = onnx.helper
    types, data, named = {}, {}, {}
    for name, value in zip(node.input, inputs):
        if value is None or value.dtype is None or value.shape is None:
            continue
        elem = helper.np_dtype_to_tensor_dtype(value.dtype)
        dims = value.dims or (None,) * len(value.shape)
        named |= {repr(v): v for v in dims if isinstance(v, Dim)}
        shape = [d if d is not None else repr(v) if isinstance(v, Dim) else "?" for d, v in zip(value.shape, dims)]
        types[name] = helper.make_tensor_type_proto(elem, shape)
        if value.known and value.static.size <= FOLD_MAX:
            data[name] = onnx.numpy_helper.from_array(numpy.asarray(value.static, dtype=value.dtype), name)
    try:
        schema = onnx.defs.get_schema(node.op_type, opset)
        out = onnx.shape_inference.infer_node_outputs(schema, node, types, input_data=data)
    except Exception:  # noqa: BLE001 - a help only, as the model's inference
        return {}
    return {name: (*_dims(t), _named(t, named)) for name, t in out.items()}


def _named(type_proto, named: dict):
    """The Dims of a type's dims that ONNX names after an input's Dim (others are unknown)."""
    if not type_proto.tensor_type.HasField("shape"):
        return None
    return tuple(named.get(d.dim_param) for d in type_proto.tensor_type.shape.dim)


def _dtype(elem):
    return DTYPES.get(elem)


def _typed(array, dtype):
    """A folded array in the dtype ONNX gives its output (NumPy may have promoted it)."""
    array = numpy.asarray(array)
    if dtype is None or array.dtype == object or array.dtype == dtype:
        return array
    return array.astype(dtype)


__all__ = ["Imported", "OnnxLimits", "TensorInfo", "import_model", "tensor_array"]
