"""The class names of grad_fn nodes, PyTorch's (torch 2.13's): what `print(y.grad_fn)`,
`type(y.grad_fn).__name__` and `y.grad_fn.name()` show, on the engine and the client alike.

A primitive's node class is named when the op is declared (`static`): PyTorch's name where it is not
the op's (`mm` MmBackward0, `cast` ToCopyBackward0), else the op's in CamelCase with the suffix 0
(`exp` ExpBackward0). Where PyTorch's name depends on the call (`x.sum()` SumBackward0, `x.sum(1)`
SumBackward1; `x ** 2` PowBackward0, `x ** y` PowBackward1, `2 ** x` PowBackward2; `x[0]`
SelectBackward0, `x[1:]` SliceBackward0), `BY_CALL` has a rule of the call's attributes, which inputs
need a gradient and (while the node holds them) the inputs' shapes: the engine's node reads it when its
name is asked (`name` is then a property; nothing is paid when a node is made), the client's when it records.

A composite op, or a `torch.nn.functional` function, that PyTorch runs as one node of its own
(`softmax` SoftmaxBackward0, `cross_entropy` NllLossBackward0) gives its result's node that name:
`renamed` swaps the node's class for a subclass of that name, which behaves the same.

A reflected operator with a Python number on its left names its node as PyTorch's (`reflected`: `2 - x`
RsubBackward1, `2 / x` MulBackward0, `2 ** x` PowBackward2).

Where PyTorch's name depends on what the engine doesn't see, the common case's is given: a `reshape`
that copies (PyTorch's UnsafeViewBackward0) is ViewBackward0; `x ** t` with `t` a 0-d tensor that
requires no grad is PowBackward0 (PyTorch's PowBackward1); once a backward has freed a node's inputs,
matmul's is MmBackward0; `type(...).__name__` of a node named by its call is the op's (SumBackward0,
MatmulBackward0), its `name()` and repr the call's.
"""

from __future__ import annotations

import functools

from engine.node import NodeName

# a primitive's or a registry composite's name where it is not `<Op>Backward0`
STATIC = {
    "mm": "MmBackward0",
    "cast": "ToCopyBackward0",
    "setitem": "CopySlices",
    "copy_slices": "CopySlices",  # a view's base changed in place (engine.views)
    "div_rounded": "DivBackward2",
    **dict.fromkeys(("scatter_amax", "scatter_amin", "scatter_prod"), "ScatterReduceBackward0"),
    "pinv": "LinalgPinvBackward0",
    "sum_to": "SumBackward1",
    "reshape": "ViewBackward0",
    "flatten": "ViewBackward0",
    "einsum": "ViewBackward0",
    "inv": "LinalgInvExBackward0",
    "det": "LinalgDetBackward0",
    "logabsdet": "LinalgSlogdetBackward0",
    "cholesky": "LinalgCholeskyExBackward0",
    "norm": "LinalgVectorNormBackward0",
    "clamp": "ClampBackward1",
    "log1p": "Log1PBackward0",
    "im2col": "Im2ColBackward0",
    "col2im": "Col2ImBackward0",
    "fft_r2c": "FftR2CBackward0",
    "fft_c2r": "FftC2RBackward0",
    "t": "TBackward0",
    **dict.fromkeys(("conv1d", "conv2d", "conv3d"), "ConvolutionBackward0"),
    **dict.fromkeys(("max_pool1d", "avg_pool1d"), "SqueezeBackward1"),
    "max_pool2d": "MaxPool2DWithIndicesBackward0",
    "max_pool3d": "MaxPool3DWithIndicesBackward0",
    "avg_pool2d": "AvgPool2DBackward0",
    "avg_pool3d": "AvgPool3DBackward0",
    "adaptive_avg_pool2d": "AdaptiveAvgPool2DBackward0",
}


# torch.* functions that the engine composes of other ops where PyTorch runs one node of their own: the surface
# names their result's node `static`'s name of the function (`addmm` AddmmBackward0, `square` PowBackward0)
# (sort, topk, cummax, cummin, kthvalue, mode, take and masked_scatter name theirs where they are composed: a name
# that depends on the call, SortBackward1 for stable=True)
COMPOSED = frozenset(
    "addmm addmv addr baddbmm addbmm addcmul addcdiv rsqrt reciprocal square repeat flip fliplr flipud roll rot90 trace "
    "frac logit hypot logaddexp logaddexp2 sinc dist rad2deg deg2rad nan_to_num clamp_min clamp_max".split()
)
STATIC.update(square="PowBackward0", fliplr="FlipBackward0", flipud="FlipBackward0", rad2deg="Rad2DegBackward0")
STATIC.update(deg2rad="Deg2RadBackward0")


def named_composed(functions: dict) -> dict:
    """`functions` with those of `COMPOSED` naming their result's node as PyTorch's (`renamed`)."""
    return {name: _named(f, static(name)) if name in COMPOSED else f for name, f in functions.items()}


def _named(function, name):
    @functools.wraps(function)
    def call(*args, **kwargs):
        return renamed(function(*args, **kwargs), name, [getattr(v, "grad_fn", None) for v in args])

    return call


def static(op_name: str) -> str:
    """The class name of `op_name`'s nodes: `exp` -> `ExpBackward0`, `mm` -> `MmBackward0`."""
    return STATIC.get(op_name) or "".join(part.capitalize() for part in op_name.split("_")) + "Backward0"


def _overload(base):
    """A reduction's rule: PyTorch's `<base>Backward0` over all elements, `<base>Backward1` over `dim`."""
    return lambda attrs, grads, shapes: f"{base}Backward{0 if attrs.get('dim') is None else 1}"


def _scalar(grads, shapes, i) -> bool:
    """Whether input i is (as far as can be seen) a Python number: 0-d, needing no gradient."""
    return not grads[i] and (shapes is None or shapes[i] == ())


def _pow(attrs, grads, shapes):
    return "PowBackward0" if _scalar(grads, shapes, 1) else "PowBackward1"


def _other(base):
    """fmod's, remainder's: `<base>Backward0` by a number, `<base>Backward1` by a tensor."""
    return lambda attrs, grads, shapes: f"{base}Backward{0 if _scalar(grads, shapes, 1) else 1}"


def _matmul(attrs, grads, shapes):
    if shapes is None:
        return "MmBackward0"
    ranks = tuple(map(len, shapes))
    return {(1, 1): "DotBackward0", (2, 2): "MmBackward0", (2, 1): "MvBackward0", (1, 2): "SqueezeBackward4"}.get(
        ranks, "UnsafeViewBackward0"
    )


_INDEXED = {int: "SelectBackward0", type(None): "UnsqueezeBackward0", dict: "SliceBackward0"}


def _getitem(attrs, grads, shapes):
    """x[0] SelectBackward0, x[1:] SliceBackward0, x[None] UnsqueezeBackward0, x[idx] IndexBackward0: by
    the last index that does something (PyTorch applies them in order; `:` and `...` do nothing)."""
    index = attrs["index"]
    if not all(type(i) in _INDEXED or type(i) is str for i in index) or any(
        type(i) is dict and "slice" not in i for i in index
    ):
        return "IndexBackward0"  # an index tensor, list or mask
    acting = [i for i in index if type(i) is not str and i != {"slice": [None, None, None]}] or index
    return _INDEXED.get(type(acting[-1]), "IndexBackward0") if acting else "AliasBackward0"


def _setitem(attrs, grads, shapes):
    """x[idx] = v IndexPutBackward0 where index arrays are all its index does (beside `:` and `...`), x[...] = v
    FillBackward3 (v 0-d) or CopyBackwards, else CopySlices (x[0] = v, x[0, idx] = v: PyTorch writes into a view)."""
    arrays = [type(i) is dict and "slice" not in i for i in attrs["index"]]
    rest = [i for i, a in zip(attrs["index"], arrays) if not a and type(i) is not str and i != {"slice": [None] * 3}]
    if not any(arrays) and not rest and shapes is not None:
        return "CopyBackwards" if shapes[1] else "FillBackward3"
    return "IndexPutBackward0" if any(arrays) and not rest else "CopySlices"


BY_CALL = {
    "setitem": _setitem,
    "sum": _overload("Sum"),
    "mean": _overload("Mean"),
    "prod": _overload("Prod"),
    "round": lambda attrs, grads, shapes: f"RoundBackward{1 if attrs.get('decimals') else 0}",
    "pow": _pow,
    "fmod": _other("Fmod"),
    "remainder": _other("Remainder"),
    "matmul": _matmul,
    "getitem": _getitem,
    "squeeze": lambda attrs, grads, shapes: (
        "SqueezeBackward" + ("0" if attrs["dim"] is None else "1" if isinstance(attrs["dim"], int) else "2")
    ),
}


def call_name(op_name: str, attrs, grads, shapes) -> str:
    """The name of a node of `op_name` called with `attrs`, `grads[i]` whether input i needs a gradient,
    `shapes` the inputs' shapes (None when no longer known)."""
    rule = BY_CALL.get(op_name)
    return NodeName(static(op_name) if rule is None else rule(attrs, grads, shapes))


# a reflected operator's name where its left operand is a Python number: PyTorch's `2 - x` is rsub, `2 / x`
# the reciprocal times 2, `2 ** x` pow's third overload
REFLECTED = {"sub": "RsubBackward1", "div": "MulBackward0", "pow": "PowBackward2"}


def reflected(operator, op_name: str):
    """`operator(self, other)` (`2 - x` calls x.__rsub__(2)) naming its node as PyTorch's (`REFLECTED`)."""
    name = REFLECTED.get(op_name)
    if name is None:
        return operator

    def named(self, other):
        out = operator(self, other)
        return renamed(out, name, (self.grad_fn,)) if type(other) is int or type(other) is float else out

    return named


_RENAMED: dict = {}  # (node class, name) -> its subclass of that name


def renamed(out, name: str, before=()):
    """`out`, its grad_fn named `name` (a subclass of the node's class, so it behaves the same) when the
    node is this call's: not one of `before`, the inputs' nodes before it (a function that returned an
    input, or a view sharing its node, keeps the input's). A tuple's first item is renamed."""
    first = out[0] if isinstance(out, tuple) else out
    node = getattr(first, "grad_fn", None)
    if node is not None:
        for b in before:  # (a loop: `any` of a generator is two frames more)
            if node is b:
                return out
        swap(node, name)
    return out


def swap(node, name: str) -> None:
    """Make `node` an instance of its class's subclass named `name` (made once per class and name)."""
    cls = type(node)
    if cls.__name__ != name or "name" in cls.__dict__ and not isinstance(cls.__dict__["name"], str):
        sub = _RENAMED.get((cls, name))
        if sub is None:
            sub = _RENAMED[(cls, name)] = type(name, (cls,), {"__slots__": (), "__module__": cls.__module__})
        node.__class__ = sub


def by_call(op_name: str) -> property:
    """The `name` of an engine node of `op_name` whose PyTorch name depends on the call (`BY_CALL`)."""
    rule = BY_CALL[op_name]

    def name(node):
        saved = node.saved
        shapes = None if saved is None or any(v is None for v in saved) else [v.shape for v in saved]
        return NodeName(rule(node.attrs, [e is not None for e in node.edges], shapes))

    return property(name)
