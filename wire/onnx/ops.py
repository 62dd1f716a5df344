"""The ONNX ops gradserve serves, each as the graph-format nodes that compute it.

One small function per op family: `convert(cx, inputs, attrs)` gets the node's input Values
(None for an absent optional input) and its attributes, writes nodes through `cx` (see
`wire.onnx.importer.Context`) and returns one entry per ONNX output: a node id, a Value, or
None for an output nothing may read. Attributes and inputs follow every opset from 13 on (axes
as an attribute or an input, Split's num_outputs, Clip's bounds as inputs...). Compositions are
those of `engine.nn.functional` (GELU, LayerNorm, BatchNorm), so values and gradients match it.
"""

from __future__ import annotations

import functools
import math

import numpy

from wire.onnx.reader import dtype_of, tensor_array
from wire.onnx.values import Dim, Value, static_value

ENGINE_DTYPES = {"float16", "float32", "float64", "int32", "int64", "bool"}


# --------------------------------------------------------------------------- elementwise

UNARY = {
    "Neg": "neg",
    "Sqrt": "sqrt",
    "Exp": "exp",
    "Log": "log",
    "Abs": "abs",
    "Relu": "relu",
    "Sigmoid": "sigmoid",
    "Tanh": "tanh",
    "Erf": "erf",
    "Sin": "sin",
    "Cos": "cos",
    "Sign": "sign",
    "Not": "bitwise_not",
}
BINARY = {
    "Add": "add",
    "Sub": "sub",
    "Mul": "mul",
    "Div": "div",
    "Pow": "pow",
    "Equal": "eq",
    "Less": "lt",
    "Greater": "gt",
    "LessOrEqual": "le",
    "GreaterOrEqual": "ge",
    **{"And": "bitwise_and", "Or": "bitwise_or", "Xor": "bitwise_xor"},
}


def _text(attrs, name, default):
    value = attrs.get(name, default)
    return value.decode() if isinstance(value, bytes) else value


def _unary(op):
    return lambda cx, inputs, attrs: [cx.op(op, inputs[:1])]


def _binary(op):
    return lambda cx, inputs, attrs: [cx.op(op, inputs[:2])]


def _variadic(op):
    def convert(cx, inputs, attrs):
        out = inputs[0]
        for other in inputs[1:]:
            out = cx.op(op, [out, other])
        return [out]

    return convert


def reciprocal(cx, inputs, attrs):
    return [cx.op("div", [cx.scalar(1.0), inputs[0]])]


def identity(cx, inputs, attrs):
    return [inputs[0]]


def where(cx, inputs, attrs):
    return [cx.op("where", inputs)]


def leaky_relu(cx, inputs, attrs):
    x = inputs[0]
    alpha = attrs.get("alpha", 0.01)
    return [cx.op("where", [cx.op("gt", [x, cx.scalar(0)]), x, cx.op("mul", [x, cx.scalar(alpha)])])]


def elu(cx, inputs, attrs):
    x = inputs[0]
    negative = cx.op("mul", [cx.op("expm1", [cx.op("clamp", [x], max=0.0)]), cx.scalar(attrs.get("alpha", 1.0))])
    return [cx.op("where", [cx.op("gt", [x, cx.scalar(0)]), x, negative])]


def softplus(cx, inputs, attrs, x=None):
    """log(1 + exp(x)), x itself above 20 as torch.nn.functional.softplus (and no overflow)."""
    x = x or inputs[0]
    soft = cx.op("log1p", [cx.op("exp", [cx.op("clamp", [x], max=20.0)])])
    return [cx.op("where", [cx.op("gt", [x, cx.scalar(20.0)]), x, soft])]


def mish(cx, inputs, attrs):
    return [cx.op("mul", [inputs[0], cx.op("tanh", softplus(cx, inputs, attrs))])]


def hard_sigmoid(cx, inputs, attrs, alpha=0.2, beta=0.5):
    scaled = cx.op("mul", [inputs[0], cx.scalar(attrs.get("alpha", alpha))])
    return [cx.op("clamp", [cx.op("add", [scaled, cx.scalar(attrs.get("beta", beta))])], min=0.0, max=1.0)]


def hard_swish(cx, inputs, attrs):
    return [cx.op("mul", [inputs[0], hard_sigmoid(cx, inputs, {}, 1 / 6, 0.5)[0]])]


def prelu(cx, inputs, attrs):
    x, slope = inputs[:2]
    return [cx.op("where", [cx.op("gt", [x, cx.scalar(0)]), x, cx.op("mul", [x, slope])])]


def gelu(cx, inputs, attrs):
    x = inputs[0]
    approximate = attrs.get("approximate", b"none")
    half = cx.op("mul", [x, cx.scalar(0.5)])
    if approximate in (b"none", "none"):
        inner = cx.op("erf", [cx.op("mul", [x, cx.scalar(math.sqrt(0.5))])])
    elif approximate in (b"tanh", "tanh"):
        cube = cx.op("mul", [cx.op("mul", [cx.op("mul", [x, x]), x]), cx.scalar(0.044715)])
        inner = cx.op("tanh", [cx.op("mul", [cx.op("add", [x, cube]), cx.scalar(math.sqrt(2.0 / math.pi))])])
    else:
        cx.fail(f"approximate {approximate!r} is not supported (none or tanh)", "approximate")
    return [cx.op("mul", [half, cx.op("add", [inner, cx.scalar(1)])])]


def clip(cx, inputs, attrs):
    x, low, high = (inputs + [None, None])[:3]
    bounds = {}
    out = x
    for name, bound, op in (("min", low, "maximum"), ("max", high, "minimum")):
        if bound is None:
            continue
        if bound.known:
            bounds[name] = float(bound.static.reshape(()))
        else:
            out = cx.op(op, [out, bound])
    return [cx.op("clamp", [out], **bounds) if bounds else out]


def cast(cx, inputs, attrs):
    dtype = dtype_of(attrs["to"], "Cast's 'to'")
    if dtype.name not in ENGINE_DTYPES:
        cx.fail(f"Cast to {dtype.name} is not supported (only {', '.join(sorted(ENGINE_DTYPES))})", "to")
    return [cx.op("cast", inputs[:1], dtype=dtype.name)]


def dropout(cx, inputs, attrs):
    training = inputs[2] if len(inputs) > 2 else None
    if training is not None and (not training.known or bool(training.static.reshape(()))):
        cx.fail("Dropout in training mode is not supported (inference only)", "training_mode")
    x = inputs[0]
    mask = None
    if cx.wanted(1):
        if x.shape is None or None in x.shape:
            cx.fail("Dropout's mask output needs a static shape", "output")
        mask = static_value(numpy.ones(x.shape, dtype=bool))
    return [x, mask]


# --------------------------------------------------------------------------- linear algebra


def matmul(cx, inputs, attrs):
    return [cx.op("matmul", inputs[:2])]


def einsum(cx, inputs, attrs):
    return [cx.op("einsum", inputs, equation=_text(attrs, "equation", "").replace(" ", ""))]


def trilu(cx, inputs, attrs):
    diagonal = cx.ints(inputs[1], "k")[0] if len(inputs) > 1 and inputs[1] is not None else 0
    return [cx.op("triu" if attrs.get("upper", 1) else "tril", inputs[:1], diagonal=diagonal)]


def gemm(cx, inputs, attrs):
    a, b = inputs[:2]
    c = inputs[2] if len(inputs) > 2 else None
    if attrs.get("transA", 0):
        a = cx.op("t", [a])
    if attrs.get("transB", 0):
        b = cx.op("t", [b])
    out = cx.op("mm", [a, b])
    if attrs.get("alpha", 1.0) != 1.0:
        out = cx.op("mul", [out, cx.scalar(attrs["alpha"])])
    if c is not None:
        if attrs.get("beta", 1.0) != 1.0:
            c = cx.op("mul", [c, cx.scalar(attrs["beta"])])
        out = cx.op("add", [out, c])
    return [out]


# --------------------------------------------------------------------------- reductions, softmax

REDUCTIONS = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "amax", "ReduceMin": "amin", "ReduceProd": "prod"}
REDUCTIONS |= {"ReduceLogSumExp": "logsumexp", "ReduceL2": "norm"}


def _reduction(op):
    def convert(cx, inputs, attrs):
        if len(inputs) > 1 and inputs[1] is not None:
            axes = cx.ints(inputs[1], "axes")
        else:
            axes = attrs.get("axes")
        keepdim = bool(attrs.get("keepdims", 1))
        if not axes:
            if attrs.get("noop_with_empty_axes", 0):
                return [inputs[0]]
            axes = list(range(cx.rank(inputs[0]))) if op == "logsumexp" else None
        return [cx.op(op, inputs[:1], dim=None if axes is None else list(axes), keepdim=keepdim)]

    return convert


def cumsum(cx, inputs, attrs):
    if attrs.get("exclusive", 0) or attrs.get("reverse", 0):
        cx.fail("CumSum's exclusive and reverse are not supported", "attrs")
    return [cx.op("cumsum", inputs[:1], dim=cx.ints(inputs[1], "axis")[0])]


def arg_extreme(op):
    def convert(cx, inputs, attrs):
        if attrs.get("select_last_index", 0):
            cx.fail("select_last_index is not supported", "select_last_index")
        return [cx.op(op, inputs[:1], dim=attrs.get("axis", 0), keepdim=bool(attrs.get("keepdims", 1)))]

    return convert


def top_k(cx, inputs, attrs):
    """Values and indices of the k largest (or smallest): a stable argsort, as ONNX breaks ties by index."""
    axis, largest = attrs.get("axis", -1), bool(attrs.get("largest", 1))
    order = cx.op("argsort", inputs[:1], dim=axis, descending=largest, stable=True)
    index = cx.op(
        "getitem", [order], index=_spec(axis % cx.rank(inputs[0]), {"slice": [0, cx.ints(inputs[1], "K")[0], None]})
    )
    return [cx.op("gather", [inputs[0], index], dim=axis), index]


def nll_loss(cx, inputs, attrs, log_prob=None):
    """-log_prob[n, label[n], ...] (times weight[label]), labels equal to ignore_index left out, reduced."""
    log_prob, labels = log_prob or inputs[0], inputs[1]
    weight, target = (inputs[2] if len(inputs) > 2 else None), labels
    if "ignore_index" in attrs:
        kept = cx.op("ne", [labels, cx.scalar(attrs["ignore_index"])])
        target = cx.op("where", [kept, labels, cx.scalar(0)])
        mask = cx.op("cast", [kept], dtype=(inputs[0].dtype or numpy.dtype("float32")).name)
    picked = cx.op("gather", [log_prob, cx.op("unsqueeze", [target], dim=1)], dim=1)
    loss = cx.op("neg", [cx.op("squeeze", [picked], dim=[1])])
    scale = weight and cx.op("getitem", [weight, target], index=[{"tensor": 0}])
    if "ignore_index" in attrs:
        scale = mask if scale is None else cx.op("mul", [scale, mask])
    loss = loss if scale is None else cx.op("mul", [loss, scale])
    reduction = _text(attrs, "reduction", "mean")
    if reduction == "none":
        return [loss]
    total = cx.op("sum", [loss])
    if reduction == "sum":
        return [total]
    return [cx.op("div", [total, cx.op("sum", [scale])]) if scale else cx.op("mean", [loss])]


def softmax_cross_entropy(cx, inputs, attrs):
    log_prob = cx.op("log_softmax", inputs[:1], dim=1)
    return [nll_loss(cx, inputs, attrs, log_prob)[0], log_prob]


def _softmax(op):
    return lambda cx, inputs, attrs: [cx.op(op, inputs[:1], dim=attrs.get("axis", -1))]


# --------------------------------------------------------------------------- shapes


def shape(cx, inputs, attrs):
    dims = _sizes(inputs[0]) if cx.rank(inputs[0]) is not None else ()
    start, end = attrs.get("start", 0), attrs.get("end")
    return [static_value(numpy.array(list(dims[start:end]), dtype=object), numpy.dtype(numpy.int64))]


def _sizes(x) -> list:
    """x's dims: an int where known at import, else its Dim where the importer knows it, else None."""
    return [d if d is not None or x.dims is None else x.dims[i] for i, d in enumerate(x.shape)]


def _times(a, b):
    return a.times(b) if isinstance(a, Dim) else b.times(a) if isinstance(b, Dim) else a * b


def _over(a, b):
    if isinstance(a, Dim):
        return a.over(b)
    return None if isinstance(b, Dim) or b == 0 or a % b else a // b


def constant(cx, inputs, attrs):
    if "value" in attrs:
        return [static_value(tensor_array(attrs["value"], "Constant's value", cx.label))]
    for name, dtype in (("value_float", numpy.float32), ("value_int", numpy.int64)):
        if name in attrs:
            return [static_value(numpy.array(attrs[name], dtype=dtype))]
    for name, dtype in (("value_floats", numpy.float32), ("value_ints", numpy.int64)):
        if name in attrs:
            return [static_value(numpy.array(list(attrs[name]), dtype=dtype))]
    cx.fail("only tensor, float(s) and int(s) values are supported", "value")


def constant_of_shape(cx, inputs, attrs):
    dims = cx.ints(inputs[0], "shape", partial=True)
    fill = tensor_array(attrs["value"], "value", cx.label) if "value" in attrs else numpy.zeros(1, numpy.float32)
    if None in dims:  # an RNN's zero initial state of a dynamic batch (see `_state`), a mask of [seq, seq]
        named = tuple(v if isinstance(v, Dim) else None for v in inputs[0].static.reshape(-1).tolist())
        return [Value(tuple(dims), fill.dtype, fill=fill.reshape(-1)[0], dims=named)]
    if math.prod(dims) <= cx.fold_max:
        return [static_value(numpy.full(dims, fill.reshape(-1)[0], dtype=fill.dtype))]
    return [cx.op("expand", [cx.constant(fill.reshape(()))], shape=list(dims))]


def reshape(cx, inputs, attrs):
    x, target = inputs[:2]
    if target.static is None:
        cx.fail("a dynamic shape that cannot be resolved: the target shape is computed from values", "shape")
    dims = cx.ints(target, "shape", partial=True)  # Python ints: an initializer's are numpy's
    shape, sizes = x.shape or (), _sizes(x) if x.shape is not None else []
    wanted = [int(v) if isinstance(v, (int, numpy.integer)) else v for v in target.static.reshape(-1).tolist()]
    for i, d in enumerate(dims):
        if d == 0 and not attrs.get("allowzero", 0):
            dims[i], wanted[i] = (shape[i], sizes[i]) if i < len(shape) else (None, None)
        elif d == -1:
            dims[i] = None
    out = _target(sizes, wanted)
    if out is not None:
        cx.out_dims[0] = tuple(d if isinstance(d, Dim) else None for d in out)
        if sum(isinstance(d, Dim) for d in out) > 1:
            return [_regroup(cx, x, sizes, out)]
        dims = [None if isinstance(d, Dim) else d for d in out]  # [0, 2, -1] of [batch, 4, 6, 6]: [-1, 2, 72]
    resolved = cx.resolve(dims, "shape")
    cx.out_shapes[0] = [None if d == -1 else d for d in resolved]
    return [cx.op("reshape", [x], shape=resolved)]


def _target(sizes: list, wanted: list):
    """A Reshape's target as ints and Dims (its -1 computed), or None where a size is not known."""
    if None in sizes or None in wanted:
        return None
    rest = [d for d in wanted if not isinstance(d, int) or d != -1]
    if len(rest) < len(wanted) - 1:
        return None
    size = _over(functools.reduce(_times, sizes, 1), functools.reduce(_times, rest, 1))
    return None if size is None else [size if isinstance(d, int) and d == -1 else d for d in wanted]


def _regroup(cx, x, sizes: list, out: list) -> str:
    """A Reshape whose target has two or more dims known only when running (attention's [batch, seq,
    heads, dim]): as runs of input dims whose product is that of a run of output dims, each run
    flattened into one dim, then split into its output dims (`_unflatten`); size-1 dims squeezed first."""
    ins, outs = [d for d in sizes if d != 1], [d for d in out if d != 1]
    groups, i, j = [], 0, 0
    try:
        while i < len(ins):
            first, p, q = (i, j), ins[i], outs[j]
            while p != q:
                more = p > q if isinstance(p, int) and isinstance(q, int) else _over(p, q) is not None
                j, i = (j + 1, i) if more else (j, i + 1)
                q, p = (_times(q, outs[j]), p) if more else (q, _times(p, ins[i]))
            groups.append((ins[first[0] : i + 1], outs[first[1] : j + 1]))
            i, j = i + 1, j + 1
    except IndexError:
        j = -1
    if j != len(outs):
        cx.fail(f"a dynamic shape that cannot be resolved: no run of dims of {sizes} makes those of {out}", "shape")
    t = cx.op("squeeze", [x], dim=[k for k, d in enumerate(sizes) if d == 1]) if 1 in sizes else cx.id(x)
    axis = 0
    for group_in, group_out in groups:
        if len(group_in) > 1:
            t = cx.op("flatten", [t], start_dim=axis, end_dim=axis + len(group_in) - 1)
        t = _unflatten(cx, t, axis, group_out) if len(group_out) > 1 else t
        axis += len(group_out)
    for k in (k for k, d in enumerate(out) if d == 1):
        t = cx.op("unsqueeze", [t], dim=k)
    cx.out_shapes[0] = [d if isinstance(d, int) else None for d in out]
    return t


def _unflatten(cx, t: str, axis: int, sizes: list) -> str:
    """t's dim `axis` split into `sizes`: t indexed there by arange(n) in that shape, a constant, or
    where a size is a Dim, made at run time from ones of that shape (`_ones`)."""
    if not any(isinstance(d, Dim) for d in sizes):
        index = cx.constant(numpy.arange(math.prod(sizes), dtype=numpy.int64).reshape(sizes))
    else:  # sum over the dims r of (position along r) * (product of the sizes after r), from ones of that shape
        ones, index = _ones(cx, sizes), None
        for r in range(len(sizes)):
            at = cx.op("sub", [cx.op("cumsum", [ones], dim=r), cx.scalar(1)])
            after = list(range(r + 1, len(sizes)))
            at = cx.op("mul", [at, cx.op("sum", [ones], dim=after, keepdim=True)]) if after else at
            index = at if index is None else cx.op("add", [index, at])
    return cx.op("getitem", [t, index], index=[{"slice": [None, None, None]}] * axis + [{"tensor": 0}])


def _ones(cx, sizes: list) -> str:
    """int64 ones of shape `sizes` (ints, and Dims of graph inputs' dims) made at run time: a product of
    ones along each factor (a constant's, or a line of the input giving that size), factors flattened."""
    factors = [
        [d] if isinstance(d, int) else [d.coef, *d.names] if d.coef != 1 or not d.names else list(d.names)
        for d in sizes
    ]
    flat = [f for fs in factors for f in fs]
    out = None
    for k, f in enumerate(flat):
        place = [1] * k + [-1] + [1] * (len(flat) - k - 1)
        if isinstance(f, int):
            part = cx.constant(numpy.ones(f, numpy.int64).reshape([f if p == -1 else 1 for p in place]))
        else:  # every Dim is a product of graph inputs' dims (`Builder.sources`)
            source, at, rank = cx.builder.sources[f]
            line = cx.op("getitem", [source], index=[0] * at + [{"slice": [None, None, None]}] + [0] * (rank - at - 1))
            ones = cx.op("cast", [cx.op("bitwise_not", [cx.op("lt", [line, line])])], dtype="int64")
            part = cx.op("reshape", [ones], shape=place)
        out = part if out is None else cx.op("mul", [out, part])
    start = len(flat)
    for fs in reversed(factors):
        start -= len(fs)
        out = cx.op("flatten", [out], start_dim=start, end_dim=start + len(fs) - 1) if len(fs) > 1 else out
    return out


def filled(cx, value) -> str:
    """A constant of a shape known only when running (ConstantOfShape of [seq, seq], a causal mask's)."""
    sizes = _sizes(value)
    if None in sizes:
        cx.fail("a dynamic shape that cannot be resolved: a value known only when running is used as a tensor", "input")
    ones = _ones(cx, sizes)
    fill = numpy.asarray(value.fill).item()
    out = ones if fill == 1 else cx.op("mul", [ones, cx.scalar(fill)])
    return cx.op("cast", [out], dtype=value.dtype.name)


def flatten(cx, inputs, attrs):
    x = inputs[0]
    rank, sizes = cx.rank(x), _sizes(x)
    axis = attrs.get("axis", 1)
    axis = axis + rank if axis < 0 else axis
    if None not in sizes:  # ONNX's inference cannot tell which size a product of dynamic dims is
        cx.out_dims[0] = tuple(functools.reduce(_times, part, 1) for part in (sizes[:axis], sizes[axis:]))
    if axis == 0:
        return [cx.op("unsqueeze", [cx.op("flatten", [x])], dim=0)]
    out = cx.op("flatten", [x], start_dim=0, end_dim=axis - 1) if axis > 1 else x
    if axis == rank:
        return [cx.op("unsqueeze", [out], dim=-1)]
    return [cx.op("flatten", [out], start_dim=1) if rank - axis > 1 else out]


def transpose(cx, inputs, attrs):
    perm = attrs.get("perm") or list(reversed(range(cx.rank(inputs[0]))))
    return [cx.op("permute", inputs[:1], dims=list(perm))]


def squeeze(cx, inputs, attrs):
    x = inputs[0]
    axes = cx.ints(inputs[1], "axes") if len(inputs) > 1 and inputs[1] is not None else attrs.get("axes")
    if axes is None:
        dims = cx.shape_of(x)
        if None in dims:
            cx.fail("Squeeze without axes needs a static shape", "axes")
        axes = [i for i, d in enumerate(dims) if d == 1]
    return [cx.op("squeeze", [x], dim=list(axes))]


def unsqueeze(cx, inputs, attrs):
    x = inputs[0]
    axes = cx.ints(inputs[1], "axes") if len(inputs) > 1 and inputs[1] is not None else attrs["axes"]
    rank = cx.rank(x) + len(axes)
    out = x
    for axis in sorted(a + rank if a < 0 else a for a in axes):
        out = cx.op("unsqueeze", [out], dim=axis)
    return [out]


def concat(cx, inputs, attrs):
    return [cx.op("cat", [v for v in inputs if v is not None], dim=attrs["axis"])]


def _spec(axis: int, item) -> list:
    return [{"slice": [None, None, None]}] * axis + [item]


def split(cx, inputs, attrs):
    x = inputs[0]
    rank = cx.rank(x)
    axis = attrs.get("axis", 0)
    axis = axis + rank if axis < 0 else axis
    count = len(cx.node.output)
    if len(inputs) > 1 and inputs[1] is not None:
        sizes = cx.ints(inputs[1], "split")
    else:
        size = cx.shape_of(x)[axis]
        if size is None:
            cx.fail("an equal Split of a dimension known only when running is not supported", "axis")
        chunk = -(-size // count)
        sizes = [min(chunk, size - chunk * i) for i in range(count)]
    outs, start = [], 0
    for n in sizes:
        outs.append(cx.op("getitem", [x], index=_spec(axis, {"slice": [start, start + n, None]})))
        start += n
    return outs


def slice_(cx, inputs, attrs):
    x = inputs[0]
    rank = cx.rank(x)
    starts, ends = cx.ints(inputs[1], "starts"), cx.ints(inputs[2], "ends", partial=True)
    axes = cx.ints(inputs[3], "axes") if len(inputs) > 3 and inputs[3] is not None else range(len(starts))
    steps = cx.ints(inputs[4], "steps") if len(inputs) > 4 and inputs[4] is not None else [1] * len(starts)
    axes, named = [a + rank if a < 0 else a for a in axes], inputs[2].static.reshape(-1).tolist()
    dynamic = {a: named[k] for k, a in enumerate(axes) if ends[k] is None}  # x[:, :seq]: a position table's rows
    if any(ends[k] is None and (not isinstance(named[k], Dim) or starts[k] or steps[k] != 1) for k in range(len(axes))):
        cx.fail(f"a dynamic shape that cannot be resolved: ends {ends} is known only when running", "ends")
    dims = list(x.shape)
    for start, end, axis, step in zip(starts, ends, axes, steps):
        dims[axis] = (
            None if dims[axis] is None or end is None else len(range(*slice(start, end, step).indices(dims[axis])))
        )
    if x.fill is not None and not dynamic:  # a slice of known dims of a constant of a shape known only when running
        return [Value(tuple(dims), x.dtype, fill=x.fill, dims=x.dims)]
    index = [{"slice": [None, None, None]}] * rank
    for start, end, axis, step in zip(starts, ends, axes, steps):
        index[axis] = {"slice": [start, end, step]}
    out = cx.op("getitem", [x], index=index)
    for axis, dim in dynamic.items():  # the first `dim` entries, by an arange made at run time
        if _sizes(x)[axis] != dim:
            out = cx.op(
                "getitem", [out, _arange(cx, dim)], index=[{"slice": [None, None, None]}] * axis + [{"tensor": 0}]
            )
    cx.out_shapes[0], cx.out_dims[0] = dims, tuple(dynamic.get(a, x.dims and x.dims[a]) for a in range(rank))
    return [out]


def _arange(cx, dim) -> str:
    """int64 0, 1, ..., dim - 1 for a size known only when running (a Dim)."""
    return cx.op("sub", [cx.op("cumsum", [_ones(cx, [dim])], dim=0), cx.scalar(1)])


def range_(cx, inputs, attrs):
    """torch.arange(seq) of a length known only when running (a known Range is folded at import)."""
    start, limit, delta = inputs
    if not (start.known and delta.known and limit.static is not None and limit.static.size == 1):
        cx.fail("Range's start and delta must be known at import", "input")
    first, step, count = start.static.item(), delta.static.item(), limit.static.reshape(-1)[0]
    if first != 0 or step != 1 or not isinstance(count, Dim):
        cx.fail("a Range of a length known only when running must count from 0 by 1", "input")
    cx.out_dims[0] = (count,)
    return [cx.op("cast", [_arange(cx, count)], dtype=start.dtype.name)]


def gather(cx, inputs, attrs):
    x, indices = inputs[:2]
    axis = attrs.get("axis", 0)
    axis = axis + cx.rank(x) if axis < 0 else axis
    if indices.known and indices.static.ndim == 0:
        return [cx.op("getitem", [x], index=_spec(axis, int(indices.static)))]
    return [cx.op("getitem", [x, indices], index=_spec(axis, {"tensor": 0}))]


def tile(cx, inputs, attrs):
    """x [a, b] tiled [r, s]: x viewed [1, a, 1, b], expanded to [r, a, s, b], viewed [r * a, s * b]."""
    x, repeats = inputs[0], cx.ints(inputs[1], "repeats")
    dims = cx.shape_of(x)
    if sum(d is None for d in dims) > 1 or any(d is None and r != 1 for d, r in zip(dims, repeats)):
        cx.fail(
            "Tile of more than one dimension known only when running, or repeating one, is not supported", "repeats"
        )
    pairs = [(r, -1 if d is None else d) for r, d in zip(repeats, dims)]
    view = cx.op("reshape", [x], shape=[v for r, d in pairs for v in (1, d)])
    tiled = cx.op("expand", [view], shape=[v for r, d in pairs for v in (r, d)])
    return [cx.op("reshape", [tiled], shape=[-1 if d == -1 else r * d for r, d in pairs])]


def depth_to_space(cx, inputs, attrs):
    """[N, C * b * b, H, W] -> [N, C, H * b, W * b] (F.pixel_shuffle: CRD; DCR: the block dims first)."""
    b, (_, channels, height, width) = attrs["blocksize"], cx.shape_of(inputs[0])
    if None in (channels, height, width):
        cx.fail("DepthToSpace needs the channels and spatial dims known at import", "input")
    crd = _text(attrs, "mode", "DCR") == "CRD"
    split = [-1, channels // b**2, b, b, height, width] if crd else [-1, b, b, channels // b**2, height, width]
    moved = cx.op(
        "permute", [cx.op("reshape", inputs[:1], shape=split)], dims=[0, 1, 4, 2, 5, 3] if crd else [0, 3, 4, 1, 5, 2]
    )
    return [cx.op("reshape", [moved], shape=[-1, channels // b**2, height * b, width * b])]


def expand(cx, inputs, attrs):
    x, target = inputs[:2]
    dims = cx.ints(target, "shape", partial=True)
    rank = cx.rank(x)
    if x.known and x.static.size == 1 and None in dims:  # a constant of a shape known only when running
        shape = numpy.broadcast_shapes(x.shape, tuple(1 if d is None else d for d in dims))
        dims = [1] * (len(shape) - len(dims)) + list(dims)
        named = tuple(v if isinstance(v, Dim) else None for v in target.static.reshape(-1).tolist())
        dims = tuple(None if d is None else s for d, s in zip(dims, shape))
        return [Value(dims, x.dtype, fill=x.static.item(), dims=(None,) * (len(dims) - len(named)) + named)]
    named = target.static.reshape(-1).tolist()
    dims, named = ([None] * (rank - len(dims)) + list(d) for d in (dims, named))  # ONNX broadcasts both ways
    lead = len(dims) - rank
    out, runtime = [], [1] * len(dims)
    for i, d in enumerate(dims):
        if d is None and (i < lead or x.shape[i - lead] == 1):  # a size-1 dim to a request's (a cls token to the batch)
            if not isinstance(named[i], Dim):
                cx.fail("Expand to a size known only when running that no graph input's dims make", "shape")
            runtime[i] = named[i]
            out.append(1 if i < lead else -1)
        else:
            out.append(-1 if i >= lead and (d is None or d == 1) else d)
    result = cx.op("expand", [x], shape=out)
    if runtime != [1] * len(dims):  # times ones of those sizes, made at run time
        ones = cx.op("cast", [_ones(cx, runtime)], dtype=(x.dtype or numpy.dtype("float32")).name)
        result = cx.op("bitwise_and" if x.dtype == bool else "mul", [result, ones])
    return [result]


# --------------------------------------------------------------------------- recurrent


def _state(cx, value, direction):
    """A direction's initial state: None for zeros (absent, or a zero fill of a dynamic batch)."""
    if value is None or (value.fill is not None and value.fill == 0):
        return None
    return cx.op("getitem", [value], index=[direction])


def _add(cx, a, b):
    return b if a is None else a if b is None else cx.op("add", [a, b])


def _gate(cx, value, i, size):
    return cx.op("getitem", [value], index=["...", {"slice": [i * size, (i + 1) * size, None]}])


def _lstm_step(cx, proj, hidden, state, size):
    """ONNX's LSTM (gates i, o, f, c): c' = f * c + i * tanh(g_c), h' = o * tanh(c')."""
    gates = _add(cx, proj, hidden)
    i, o, f = (cx.op("sigmoid", [_gate(cx, gates, k, size)]) for k in range(3))
    cell = cx.op("mul", [i, cx.op("tanh", [_gate(cx, gates, 3, size)])])
    cell = cell if state["c"] is None else cx.op("add", [cx.op("mul", [f, state["c"]]), cell])
    state["c"], state["h"] = cell, cx.op("mul", [o, cx.op("tanh", [cell])])


def _gru_step(cx, proj, hidden, state, size):
    """ONNX's GRU with linear_before_reset (gates z, r, h): h' = (1 - z) * n + z * h."""
    z, r = (
        cx.op("sigmoid", [_add(cx, _gate(cx, proj, k, size), hidden and _gate(cx, hidden, k, size))]) for k in range(2)
    )
    reset = hidden and cx.op("mul", [r, _gate(cx, hidden, 2, size)])
    new = cx.op("tanh", [_add(cx, _gate(cx, proj, 2, size), reset)])
    out = cx.op("mul", [cx.op("sub", [cx.scalar(1.0), z]), new])
    state["h"] = out if state["h"] is None else cx.op("add", [out, cx.op("mul", [z, state["h"]])])


def _recurrent(step, count):
    """LSTM or GRU unrolled over a sequence length known at import, one direction after the other."""

    def convert(cx, inputs, attrs):
        x, w, r, b, lengths, h0, c0, peepholes = (inputs + [None] * 8)[:8]
        direction = _text(attrs, "direction", "forward")
        defaults = ["Sigmoid", "Tanh", "Tanh"][: count - 1] * (2 if direction == "bidirectional" else 1)
        activations = [a.decode() if isinstance(a, bytes) else a for a in attrs.pop("activations", defaults)]
        unsupported = {"clip", "layout", "input_forget"} & {k for k, v in attrs.items() if v}
        unsupported |= {"activations"} if activations != defaults else set()
        if unsupported or lengths or peepholes or attrs.get("linear_before_reset", count == 4) != 1:
            cx.fail("only torch.nn's LSTM and GRU are supported (no sequence_lens, layout, clip...)", "attrs")
        steps, size = cx.shape_of(x)[0], attrs["hidden_size"]
        if steps is None:
            cx.fail("the sequence length must be known at import (a dynamic batch is fine)", "input")
        if len(cx.builder.nodes) + 30 * steps * (1 + (direction == "bidirectional")) > cx.builder.max_nodes:
            cx.fail(f"unrolled over {steps} steps, the graph would have more than max_nodes {cx.builder.max_nodes}")
        ys, finals = [], {"h": [], "c": []}
        for d, reverse in enumerate([direction == "reverse"] if direction != "bidirectional" else [False, True]):
            proj = cx.op("matmul", [x, cx.op("t", [cx.op("getitem", [w], index=[d])])])
            bias = b and cx.op("getitem", [b], index=[d])
            proj = _add(cx, proj, bias and cx.op("getitem", [bias], index=[{"slice": [0, count * size, None]}]))
            recurrent = bias and cx.op("getitem", [bias], index=[{"slice": [count * size, None, None]}])
            weight = cx.op("t", [cx.op("getitem", [r], index=[d])])
            state, outs = {"h": _state(cx, h0, d), "c": _state(cx, c0, d)}, [None] * steps
            for t in reversed(range(steps)) if reverse else range(steps):
                hidden = _add(cx, state["h"] and cx.op("matmul", [state["h"], weight]), recurrent)
                step(cx, cx.op("getitem", [proj], index=[t]), hidden, state, size)
                outs[t] = state["h"]
            ys.append(cx.op("stack", outs, dim=0))
            finals["h"].append(state["h"])
            finals["c"].append(state["c"])
        y_c = cx.op("stack", finals["c"], dim=0) if count == 4 and cx.wanted(2) else None
        return [cx.op("stack", ys, dim=1), cx.op("stack", finals["h"], dim=0), y_c]

    return convert


# --------------------------------------------------------------------------- normalisation


def _channel_shaped(cx, value, rank):
    """A per-channel vector shaped [C, 1, ...] to broadcast against an NC... input."""
    return cx.reshaped(value, [-1] + [1] * (rank - 2))


def batch_norm(cx, inputs, attrs):
    if attrs.get("training_mode", 0) or any(cx.wanted(i) for i in range(1, len(cx.node.output))):
        cx.fail("BatchNormalization in training mode is not supported (inference only)", "training_mode")
    x, scale, bias, mean, var = inputs[:5]
    rank = cx.rank(x)
    eps = attrs.get("epsilon", 1e-5)
    if not any(v.param for v in (scale, bias, mean, var)) and all(v.known for v in (scale, bias, mean, var)):
        factor = scale.static / numpy.sqrt(var.static + numpy.asarray(eps, var.static.dtype))
        shift = bias.static - mean.static * factor
        shaped = [static_value(a.reshape([-1] + [1] * (rank - 2))) for a in (factor, shift)]
        return [cx.op("add", [cx.op("mul", [x, shaped[0]]), shaped[1]])]
    centred = cx.op("sub", [x, _channel_shaped(cx, mean, rank)])
    std = cx.op("sqrt", [cx.op("add", [_channel_shaped(cx, var, rank), cx.scalar(eps)])])
    scaled = cx.op("mul", [cx.op("div", [centred, std]), _channel_shaped(cx, scale, rank)])
    return [cx.op("add", [scaled, _channel_shaped(cx, bias, rank)])]


def instance_norm(cx, inputs, attrs):
    x, scale, bias = inputs[:3]
    rank = cx.rank(x)
    normed = _normalized(cx, x, list(range(2, rank)), attrs.get("epsilon", 1e-5))
    return [cx.op("add", [cx.op("mul", [normed, _channel_shaped(cx, scale, rank)]), _channel_shaped(cx, bias, rank)])]


def _normalized(cx, x, dims, eps):
    centred = cx.op("sub", [x, cx.op("mean", [x], dim=dims, keepdim=True)])
    var = cx.op("mean", [cx.op("mul", [centred, centred])], dim=dims, keepdim=True)
    return cx.op("div", [centred, cx.op("sqrt", [cx.op("add", [var, cx.scalar(eps)])])])


def layer_norm(cx, inputs, attrs):
    if any(cx.wanted(i) for i in range(1, len(cx.node.output))):
        cx.fail("LayerNormalization's Mean and InvStdDev outputs are not supported", "output")
    x, scale = inputs[:2]
    bias = inputs[2] if len(inputs) > 2 else None
    rank = cx.rank(x)
    axis = attrs.get("axis", -1)
    dims = list(range(axis + rank if axis < 0 else axis, rank))
    out = cx.op("mul", [_normalized(cx, x, dims, attrs.get("epsilon", 1e-5)), scale])
    return [cx.op("add", [out, bias]) if bias is not None else out]


# --------------------------------------------------------------------------- convolution and pooling


def _spatial(cx, x, count_from: str):
    rank = cx.rank(x)
    if rank not in (3, 4):
        cx.fail(f"only 1-D and 2-D {count_from} are supported (input rank {rank})", "input")
    return rank - 2


def _pads(cx, attrs, x, kernel, strides, dilations):
    """(symmetric padding per spatial dim, extra (before, after) per dim or None) from pads/auto_pad."""
    n = len(kernel)
    auto = attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        sizes = cx.shape_of(x)[2:]
        if None in sizes:
            cx.fail(f"auto_pad {auto} needs the spatial dims known at import", "auto_pad")
        pairs = []
        for size, k, s, d in zip(sizes, kernel, strides, dilations):
            total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
            small, large = total // 2, total - total // 2
            pairs.append((small, large) if auto == "SAME_UPPER" else (large, small))
    elif auto == "VALID":
        pairs = [(0, 0)] * n
    elif auto == "NOTSET":
        pads = list(attrs.get("pads", [0] * 2 * n))
        pairs = list(zip(pads[:n], pads[n:]))
    else:
        cx.fail(f"auto_pad {auto} is not supported", "auto_pad")
    symmetric = [min(before, after) for before, after in pairs]
    extra = [(before - m, after - m) for (before, after), m in zip(pairs, symmetric)]
    return symmetric, (extra if any(a or b for a, b in extra) else None)


def _zero_pad(cx, x, extra):
    """x with zeros added before and after its spatial dims (an asymmetric padding's excess)."""
    rank = cx.rank(x)
    out = x
    for i, (before, after) in enumerate(extra):
        axis = 2 + i
        parts = []
        for amount in (before, after):
            if amount:
                edge = cx.op("getitem", [out], index=_spec(axis, {"slice": [0, 1, None]}))
                zero = cx.op("mul", [edge, cx.scalar(0)])
                parts.append(cx.op("expand", [zero], shape=[-1] * axis + [amount] + [-1] * (rank - axis - 1)))
            else:
                parts.append(None)
        pieces = [p for p in (parts[0], out, parts[1]) if p is not None]
        out = cx.op("cat", pieces, dim=axis)
    return out


def conv(cx, inputs, attrs):
    x, w = inputs[:2]
    bias = inputs[2] if len(inputs) > 2 else None
    n = _spatial(cx, x, "convolutions")
    kernel = list(attrs.get("kernel_shape") or cx.shape_of(w)[2:])
    strides = list(attrs.get("strides", [1] * n))
    dilations = list(attrs.get("dilations", [1] * n))
    padding, extra = _pads(cx, attrs, x, kernel, strides, dilations)
    if extra:
        x = _zero_pad(cx, x, extra)
    args = [x, w] + ([bias] if bias is not None else [])
    return [cx.op(f"conv{n}d", args, stride=strides, padding=padding, dilation=dilations, groups=attrs.get("group", 1))]


def conv_transpose(cx, inputs, attrs):
    """col2im of the weight's transpose times the input, as engine.nn.functional.conv_transpose2d."""
    x, w = inputs[:2]
    bias = inputs[2] if len(inputs) > 2 else None
    n = _spatial(cx, x, "transposed convolutions")
    in_channels, per_group, *kernel = cx.shape_of(w)
    groups, sizes = attrs.get("group", 1), cx.shape_of(x)[2:]
    if None in sizes or "output_shape" in attrs or attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        cx.fail("ConvTranspose needs static spatial dims, explicit pads and no output_shape", "attrs")
    strides, dilations = list(attrs.get("strides", [1] * n)), list(attrs.get("dilations", [1] * n))
    pads, extra = list(attrs.get("pads", [0] * 2 * n)), list(attrs.get("output_padding", [0] * n))
    if pads[:n] != pads[n:]:
        cx.fail("asymmetric pads of a ConvTranspose are not supported", "pads")
    out = [
        (i - 1) * s - 2 * p + d * (k - 1) + e + 1
        for i, s, p, d, k, e in zip(sizes, strides, pads, dilations, kernel, extra)
    ]
    rows, taps, length = in_channels // groups, math.prod(kernel), math.prod(sizes)
    weight = cx.op("transpose", [cx.op("reshape", [w], shape=[groups, rows, per_group * taps])], dim0=1, dim1=2)
    cols = cx.op("matmul", [weight, cx.op("reshape", [x], shape=[-1, groups, rows, length])])
    cols = cx.op("reshape", [cols], shape=[-1, groups * per_group * taps, length])
    options = {"output_size": out, "kernel_size": kernel, "dilation": dilations, "padding": pads[:n], "stride": strides}
    result = cx.op("col2im", [cols], **options)
    return [cx.op("add", [result, _channel_shaped(cx, bias, n + 2)]) if bias is not None else result]


def _pool(kind):
    def convert(cx, inputs, attrs):
        x = inputs[0]
        n = _spatial(cx, x, "pools")
        if cx.wanted(1):
            cx.fail("MaxPool's Indices output is not supported", "output")
        kernel = list(attrs["kernel_shape"])
        strides = list(attrs.get("strides", [1] * n))
        dilations = list(attrs.get("dilations", [1] * n))
        padding, extra = _pads(cx, attrs, x, kernel, strides, dilations)
        if extra:
            cx.fail("asymmetric pads of a pool are not supported", "pads")
        options = {
            "kernel_size": kernel,
            "stride": strides,
            "padding": padding,
            "ceil_mode": bool(attrs.get("ceil_mode", 0)),
        }
        if kind == "max":
            if dilations != [1] * n:
                options["dilation"] = dilations
        else:
            if dilations != [1] * n:
                cx.fail("AveragePool with dilations is not supported", "dilations")
            options["count_include_pad"] = bool(attrs.get("count_include_pad", 0))
        return [cx.op(f"{kind}_pool{n}d", [x], **options)]

    return convert


def _global_pool(op):
    def convert(cx, inputs, attrs):
        rank = cx.rank(inputs[0])
        return [cx.op(op, inputs[:1], dim=list(range(2, rank)), keepdim=True)]

    return convert


def _resize_matrix(cx, attrs, size, out, scale):
    """[out, size]: each output position's weights on the input's (nearest or linear), ONNX's coordinates."""
    mode = _text(attrs, "coordinate_transformation_mode", "half_pixel")
    nearest = _text(attrs, "nearest_mode", "round_prefer_floor")
    i = numpy.arange(out, dtype=numpy.float64)
    origin = {
        "half_pixel": (i + 0.5) / scale - 0.5,
        "pytorch_half_pixel": (i + 0.5) / scale - 0.5 if out > 1 else 0 * i,
        "align_corners": i * (size - 1) / max(out - 1, 1),
        "asymmetric": i / scale,
        "tf_half_pixel_for_nn": (i + 0.5) / scale,
    }.get(mode)
    rounding = {"floor": numpy.floor, "ceil": numpy.ceil, "round_prefer_ceil": lambda v: numpy.floor(v + 0.5)}
    rounding["round_prefer_floor"] = lambda v: numpy.ceil(v - 0.5)
    if origin is None or nearest not in rounding:
        cx.fail(f"Resize's coordinate_transformation_mode {mode} or nearest_mode {nearest} is not supported", "attrs")
    matrix = numpy.zeros((out, size))
    if _text(attrs, "mode", "nearest") == "nearest":
        matrix[numpy.arange(out), numpy.clip(rounding[nearest](origin), 0, size - 1).astype(int)] = 1
        return matrix
    origin = numpy.clip(origin, 0, size - 1)
    low = numpy.floor(origin).astype(int)
    numpy.add.at(matrix, (numpy.arange(out), low), 1 - (origin - low))
    numpy.add.at(matrix, (numpy.arange(out), numpy.minimum(low + 1, size - 1)), origin - low)
    return matrix


RESIZE_MAX = 2**20  # elements of one dim's interpolation matrix (a constant of the graph): 1024 to 1024


def resize(cx, inputs, attrs):
    """Nearest or (bi)linear Resize of the last one or two dims: a product with each dim's interpolation matrix."""
    x, _, scales, sizes = (inputs + [None] * 4)[:4]
    dims = cx.shape_of(x)
    if _text(attrs, "mode", "nearest") not in ("nearest", "linear") or attrs.get("antialias") or attrs.get("axes"):
        cx.fail("only nearest and linear Resize are supported (no antialias, axes)", "mode")
    if sizes is not None:
        outs = cx.ints(sizes, "sizes", partial=True)
        factors = [o / d if o is not None and d else 1.0 for o, d in zip(outs, dims)]
        moved = {a for a, (o, d) in enumerate(zip(sizes.static.reshape(-1).tolist(), _sizes(x))) if o != d}
    else:
        factors = [float(v) for v in scales.static.reshape(-1)] if scales is not None and scales.known else []
        outs = [None if d is None else math.floor(d * f) for d, f in zip(dims, factors)]
        moved = {a for a, f in enumerate(factors) if f != 1.0}
    # a dim known only when running is changed where its scale is not 1 (or its size not its own Dim)
    changed = [a for a, (d, o) in enumerate(zip(dims, outs)) if o != d or (d is None and a in moved)]
    if any(dims[a] is not None and outs[a] is not None and dims[a] * outs[a] > RESIZE_MAX for a in changed):
        cx.fail(f"a Resize of more than {RESIZE_MAX} input-output pairs in one dim is not supported", "scales")
    if not factors or any(a < len(dims) - 2 or dims[a] is None for a in changed):
        cx.fail("Resize needs known scales or sizes, changing only the last two dims (known at import)", "scales")
    out = x
    for a in changed:
        matrix = _resize_matrix(cx, attrs, dims[a], outs[a], factors[a]).astype(x.dtype)
        last = a == len(dims) - 1
        out = cx.op("matmul", [out, cx.constant(matrix.T)] if last else [cx.constant(matrix), out])
    return [out]


def pad(cx, inputs, attrs):
    x, mode = inputs[0], _text(attrs, "mode", "constant")
    if mode not in ("constant", "reflect", "edge"):
        cx.fail(f"Pad mode {mode!r} is not supported (constant, reflect, edge)", "mode")
    rank = cx.rank(x)
    pads = cx.ints(inputs[1], "pads")
    value = inputs[2] if len(inputs) > 2 else None
    if value is not None and (not value.known or float(value.static.reshape(-1)[0]) != 0.0):
        cx.fail("Pad with a constant other than 0 is not supported", "constant_value")
    axes = cx.ints(inputs[3], "axes") if len(inputs) > 3 and inputs[3] is not None else list(range(rank))
    half = len(axes)
    extra = [(0, 0)] * rank
    for i, axis in enumerate(axes):
        extra[axis + rank if axis < 0 else axis] = (pads[i], pads[half + i])
    if any(a < 0 or b < 0 for a, b in extra):
        cx.fail("negative pads are not supported", "pads")
    if extra[:2] != [(0, 0), (0, 0)]:
        cx.fail("Pad of the first two dims is not supported (only the spatial ones of an NC... tensor)", "pads")
    if mode == "constant":
        return [_zero_pad(cx, x, extra[2:])]
    for axis, ((before, after), size) in enumerate(zip(extra, cx.shape_of(x))):  # reflect, edge: gathers
        if before or after:
            if (
                size is None
                or (mode == "reflect" and max(before, after) >= size)
                or size + before + after > cx.fold_max
            ):
                cx.fail(
                    f"Pad {mode} needs each padded dim known, over its pads and padded to {cx.fold_max} at most", "pads"
                )
            index = numpy.arange(-before, size + after)
            index = numpy.abs(index) if mode == "reflect" else numpy.clip(index, 0, size - 1)
            index = size - 1 - numpy.abs(size - 1 - index) if mode == "reflect" else index
            x = cx.op("getitem", [x, cx.constant(index)], index=_spec(axis, {"tensor": 0}))
    return [x]


CONVERTERS = {
    **{name: _unary(op) for name, op in UNARY.items()},
    **{name: _binary(op) for name, op in BINARY.items()},
    "Max": _variadic("maximum"),
    "Min": _variadic("minimum"),
    "Sum": _variadic("add"),
    "Reciprocal": reciprocal,
    "Identity": identity,
    "Where": where,
    "LeakyRelu": leaky_relu,
    "Elu": elu,
    "Softplus": softplus,
    "Mish": mish,
    "HardSigmoid": hard_sigmoid,
    "HardSwish": hard_swish,
    "PRelu": prelu,
    "ArgMax": arg_extreme("argmax"),
    "ArgMin": arg_extreme("argmin"),
    "Tile": tile,
    "DepthToSpace": depth_to_space,
    "TopK": top_k,
    "NegativeLogLikelihoodLoss": nll_loss,
    "SoftmaxCrossEntropyLoss": softmax_cross_entropy,
    "CumSum": cumsum,
    "InstanceNormalization": instance_norm,
    "Gelu": gelu,
    "Clip": clip,
    "Cast": cast,
    "Dropout": dropout,
    "MatMul": matmul,
    "Gemm": gemm,
    "Einsum": einsum,
    "Trilu": trilu,
    **{name: _reduction(op) for name, op in REDUCTIONS.items()},
    "Softmax": _softmax("softmax"),
    "LogSoftmax": _softmax("log_softmax"),
    "Shape": shape,
    "Constant": constant,
    "ConstantOfShape": constant_of_shape,
    "Reshape": reshape,
    "Flatten": flatten,
    "Transpose": transpose,
    "Squeeze": squeeze,
    "Unsqueeze": unsqueeze,
    "Concat": concat,
    "Split": split,
    "Slice": slice_,
    "Range": range_,
    "Gather": gather,
    "Expand": expand,
    "LSTM": _recurrent(_lstm_step, 4),
    "GRU": _recurrent(_gru_step, 3),
    "BatchNormalization": batch_norm,
    "LayerNormalization": layer_norm,
    "Conv": conv,
    "ConvTranspose": conv_transpose,
    "MaxPool": _pool("max"),
    "AveragePool": _pool("avg"),
    "GlobalAveragePool": _global_pool("mean"),
    "GlobalMaxPool": _global_pool("amax"),
    "Pad": pad,
    "Resize": resize,
}
