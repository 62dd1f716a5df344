"""The Variable surface, declared once: every method, operator, property, factory and
PyTorch spelling that the engine's eager `engine.variable.Variable` and the client's lazy
`client.variable.Variable` share.

What differs between the two is said by a `Side`: how an op is applied (computed now, or
recorded), the grad mode, `backward`, and the few ops with a spelling of their own (`x[key]`).
`install(side)` puts the surface on the side's Variable class and returns the module-level
names (`add`, `max`, `zeros`, `FloatTensor`...) for the package's namespace. The registry ops'
methods are real `def`s of a class both Variables inherit (`engine.surface_methods`, generated
by `python -m engine.stubgen`), each calling the side's op function that `install` leaves on the
class as `_ops`; an op method not generated yet is set on the class here, as the rest of the surface is. The methods are
written against a small interface that both Variable classes provide (see `engine.variable`).

Where a name comes from:
- op functions and methods: the registry (`OpDef.methods`), through `registry.make_function`;
- operators: `OPERATORS` below (the bindings table);
- everything else: the functions in this file, `engine.modern` (today's PyTorch spellings: aliases,
  `.to()`, `dot`...), `engine.inplace` (`w -= lr * w.grad`, `x.add_(y)`), `engine.dtypes` and
  `engine.devices` (`torch.float32`, `torch.device`, `torch.cuda`), `engine.sampling` (random functions and
  fills, with `engine.random.Generator`), and `engine.compat` (PyTorch 0.3 spellings).

A change of surface is made once and both sides have it: a new method or in-place operator
(`__isub__` written against `_assign_recorded`/`_assign_values`), a conversion (`item`,
`tolist`, `numpy` are here), a module-level name such as a dtype constant (add it to what
`install` returns), a constructor or constructor keyword (`engine.factory.Constructors`), an
op under a new name (its `OpDef.methods`, or a function here). What stays per side is in
`Side`: how an op is applied, and storage (the Variable classes themselves).
"""

from __future__ import annotations

import builtins
import functools
import math
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from engine import (
    backend,
    compat,
    dtypes,
    grad_fn_names,
    inplace,
    modern,
    promotion,
    shapes,
    tensor_math,
    tensor_more,
    tensor_ops,
    tensor_selection,
    tensor_shaping,
    views,
)
from engine.autograd import watch_of
from engine.devices import Placement
from engine.factory import Constructors
from engine.grad_mode import INFERENCE_FLAG, INFERENCE_INPLACE, INFERENCE_MADE
from engine.mixed_precision import CAST, cast_operator, casting
from engine.modern import numpy_keywords
from engine.node import FORWARD as DUAL_LEVELS
from engine.ops import indexing as indexing_op
from engine.printing import format_tensor
from engine.registry import OPS, make_function
from engine.sampling import Sampling
from engine.surface_methods import METHOD_OPS, SurfaceMethods
from engine.surface_types import MaxMin
from engine.tensor_data import plain
from engine.user_warnings import reversing, warn
from engine.variable import NUMPY_OF_GRAD, SCALAR_OF_GRAD
from engine.views import base_of

if TYPE_CHECKING:
    from collections.abc import Iterator

    from engine.surface_types import ArrayLike, NDArray, Operand, V, VariableSurface

FORWARD, REFLECTED, UNARY = "forward", "reflected", "unary"

# The bindings table: operator -> (registry op, how its operands are passed).
OPERATORS = {
    "__add__": ("add", FORWARD),
    "__radd__": ("add", FORWARD),  # `2 + x` is add(x, 2), as PyTorch records it (see grad_fn.next_functions)
    "__sub__": ("sub", FORWARD),
    "__rsub__": ("sub", REFLECTED),
    "__mul__": ("mul", FORWARD),
    "__rmul__": ("mul", FORWARD),  # `2 * x` is mul(x, 2), likewise
    "__truediv__": ("div", FORWARD),
    "__rtruediv__": ("div", REFLECTED),
    "__floordiv__": ("floor_divide", FORWARD),
    "__rfloordiv__": ("floor_divide", REFLECTED),
    "__mod__": ("remainder", FORWARD),
    "__rmod__": ("remainder", REFLECTED),
    "__pow__": ("pow", FORWARD),
    "__rpow__": ("pow", REFLECTED),
    "__matmul__": ("matmul", FORWARD),
    "__rmatmul__": ("matmul", REFLECTED),
    "__neg__": ("neg", UNARY),
    "__abs__": ("abs", UNARY),
    "__lt__": ("lt", FORWARD),
    "__le__": ("le", FORWARD),
    "__gt__": ("gt", FORWARD),
    "__ge__": ("ge", FORWARD),
    "__eq__": ("eq", FORWARD),
    "__ne__": ("ne", FORWARD),
    "__and__": ("bitwise_and", FORWARD),
    "__rand__": ("bitwise_and", FORWARD),
    "__or__": ("bitwise_or", FORWARD),
    "__ror__": ("bitwise_or", FORWARD),
    "__xor__": ("bitwise_xor", FORWARD),
    "__rxor__": ("bitwise_xor", FORWARD),
    "__invert__": ("bitwise_not", UNARY),
    "__lshift__": ("bitwise_left_shift", FORWARD),
    "__rlshift__": ("bitwise_left_shift", REFLECTED),
    "__rshift__": ("bitwise_right_shift", FORWARD),
    "__rrshift__": ("bitwise_right_shift", REFLECTED),
}

LEAF_INPLACE = inplace.LEAF_INPLACE
NON_LEAF_FLAG = (
    "you can only change requires_grad flags of leaf variables. If you want to use a computed variable "
    "in a subgraph that doesn't require differentiation use var_no_grad = var.detach()."
)


class NoValue(RuntimeError):
    """A Variable that stands for no value yet (one being traced): what its repr says instead."""


class Side:
    """What one Variable implementation gives the surface.

    variable: the class to install on. coerce(inputs) and run(op) -> (inputs, attrs) -> result:
    how an op function applies its op. operator(op, kind, function): an operator's method
    (default: a call of the op's function). grad_mode: `engine.grad_mode.GradMode`. backward(outputs,
    grad_outputs, retain_graph, create_graph). to_array(data, dtype): a value for the class's
    constructor. functions: ops whose function is the side's own (e.g. {"getitem": ...}).
    properties: a faster equivalent of a property here (e.g. {"T": ...}).
    """

    def __init__(self, variable, coerce, run, grad_mode, backward, to_array, functions=None, properties=None):
        self.variable = variable
        self.coerce = coerce
        self.run = run
        self.grad_mode = grad_mode
        self.backward = backward
        self.to_array = to_array
        self.functions = dict(functions or {})
        self.properties = dict(properties or {})

    def operator(self, op, kind, function):
        if kind == UNARY:
            return lambda self: function(self)
        if kind == REFLECTED:
            return grad_fn_names.reflected(lambda self, other: function(other, self), op.name)
        return lambda self, other: function(self, other)


DIM_ARG = "Specify the reduction dim with the 'dim' argument."


def extreme(name, reduce, arg, pairwise, gather):
    """PyTorch's `max` (or `min`) from its reduction, arg-reduction, elementwise and gather ops."""

    def fn(x, dim=None, keepdim=False, **aliases):
        if aliases:
            dim, keepdim = numpy_keywords(name, dim, keepdim, aliases)
        if dim is not None and not isinstance(dim, int):
            return pairwise(x, dim)
        if not math.prod(x.shape):  # (PyTorch's refusals, before the reduction's)
            if dim is None:
                raise shapes.ShapeMismatch(
                    f"{name}(): Expected reduction dim to be specified for input.numel() == 0. {DIM_ARG}"
                )
            if not x.shape[dim]:
                raise IndexError(f"{name}(): Expected reduction dim {dim % x.ndim} to have non-zero size.")
        if dim is None:  # PyTorch's node names: max() is MaxBackward1, max(dim)'s values MaxBackward0
            return grad_fn_names.renamed(reduce(x), all_of, (x.grad_fn,))
        index = arg(x, dim, keepdim=True)  # (the values gathered at it: all of a tie's gradient goes there, as PyTorch)
        values, index = gather(x, index, dim=dim), index if keepdim or not x.ndim else index.squeeze(dim)
        values = values if keepdim or not x.ndim else values.squeeze(dim)
        return MaxMin(grad_fn_names.renamed(values, by_dim, (x.grad_fn,)), index)

    all_of, by_dim = f"{name.capitalize()}Backward1", f"{name.capitalize()}Backward0"

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (
        f"PyTorch's {name}: {name}(x) reduces everything, {name}(x, dim) returns (values, indices), "
        f"{name}(x, y) is elementwise."
    )
    return fn


# --- methods written against the interface ----------------------------------------------------


def __init__(self, data: ArrayLike, requires_grad: bool = False, **pytorch03: Any) -> None:
    if pytorch03:
        compat.accept_volatile(pytorch03)
    self._store(data)
    if requires_grad:
        self.requires_grad = True


def _host(v):
    return backend.to_numpy(v._array())


GRAD_MODES: dict = {}  # each side's Variable class -> its grad mode (`install`; no class attribute: see its note)


def _set_requires_grad(self, flag):
    if self._node is not None:  # (PyTorch's setter refuses True too, in fewer words; `requires_grad_(True)` doesn't)
        raise RuntimeError(NON_LEAF_FLAG[: NON_LEAF_FLAG.index(" If")] if flag else NON_LEAF_FLAG)
    if flag and self.dtype.kind != "f":
        raise RuntimeError(
            "Only Tensors of floating point and complex dtype can require gradients"
        )  # (PyTorch's words)
    if flag and INFERENCE_MADE:
        side = next(cls for cls in type(self).__mro__ if cls in GRAD_MODES)
        GRAD_MODES[side].refuse_inference(self, INFERENCE_FLAG)
    self._store_requires_grad(bool(flag))


def _views_first(key) -> bool:
    """Whether PyTorch's `x[key] = v` takes a view of x first (an int, None or a slice but `:`): a leaf's refusal
    then names a view of it."""
    keys = key if isinstance(key, tuple) else (key,)
    return any(
        k is None or isinstance(k, int) and not isinstance(k, bool) or isinstance(k, slice) and k != slice(None)
        for k in keys
    )


def requires_grad_(self: V, requires_grad: bool = True) -> V:
    if requires_grad and self.dtype.kind != "f":  # (PyTorch's words here differ from the setter's)
        raise RuntimeError("only Tensors of floating point dtype can require gradients")
    if self.is_leaf or not requires_grad:  # (a non-leaf requires grad already: True is no change, as PyTorch)
        self.requires_grad = requires_grad
    return self


def retain_grad(self) -> None:
    """Keep this non-leaf's gradient in `.grad` after backward (a no-op on leaves)."""
    node = self._node
    if node is None:
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        return
    watch_of(self).retains = True


class RemovableHandle:
    """What `register_hook` returns: `remove()` (or leaving its `with`) takes the hook off."""

    next_id = 0

    def __init__(self, hooks: dict):
        self.hooks, self.id = hooks, RemovableHandle.next_id
        RemovableHandle.next_id += 1

    def remove(self) -> None:
        self.hooks.pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def _hook(self, hook, post) -> RemovableHandle:
    if not self.requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    if post and self._node is not None:
        raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf tensors")
    hooks = watch_of(self).post if post else watch_of(self).hooks
    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    return handle


def register_hook(self, hook: Any) -> RemovableHandle:
    """PyTorch's tensor hook: `hook(grad)` runs when this Variable's gradient is computed; what it returns (if
    not None) replaces the gradient: in `.grad`, in grad()'s result and in what the walk sends on."""
    return _hook(self, hook, False)


def register_post_accumulate_grad_hook(self, hook: Any) -> RemovableHandle:
    """`hook(leaf)` runs after a backward accumulated this leaf's `.grad`."""
    return _hook(self, hook, True)


def grad_fn(self) -> Any:
    """The node that computed this Variable (None for a leaf; one node for a Function's outputs)."""
    node = self._node
    if node is not None and node.name == "NoGradView":  # (engine.views.stale)
        raise RuntimeError(views.STALE)
    return node if node is None else node.owner or node


def output_nr(self) -> int:
    """Which output of its grad_fn this Variable is (0 for a leaf)."""
    return 0 if self._node is None else self._node.output_nr


def is_leaf(self) -> bool:
    return self._node is None


def _base(self) -> Any:
    """The root base this Variable is a view of (PyTorch's; see engine.views), else None."""
    return base_of(self)


def _is_view(self) -> bool:
    return base_of(self) is not None


def retains_grad(self) -> bool:
    watch = None if self._node is None else watch_of(self, make=False)
    return watch is not None and watch.retains


NON_LEAF_GRAD = (
    "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its .grad attribute won't be "
    "populated during autograd.backward(). If you indeed want the .grad field to be populated for a non-leaf Tensor, "
    "use .retain_grad() on the non-leaf Tensor. If you access the non-leaf Tensor by mistake, make sure you access "
    "the leaf Tensor instead. See github.com/pytorch/pytorch/pull/30531 for more information."
)


def _get_grad(self) -> Any:
    """The gradient backward accumulated here; on a non-leaf that has none and doesn't retain one, PyTorch's warning."""
    grad = self._grad
    if grad is None and self._node is not None and not retains_grad(self):
        warn(NON_LEAF_GRAD)
    return grad


def _set_grad(self, value: Any) -> None:
    if value is not None and tuple(value.shape) != tuple(self.shape):
        raise RuntimeError(
            f"attempting to assign a gradient of size '{list(value.shape)}' to a tensor of size '{list(self.shape)}'. "
            "Please ensure that the gradient and the tensor are the same size"
        )
    if value is not None and value.dtype != self.dtype:
        raise RuntimeError(
            f"attempting to assign a gradient with dtype '{promotion.C_NAMES.get(value.dtype.name, value.dtype.name)}' to a tensor with grad_dtype "
            f"'{dtypes.scalar_name(self.dtype)}'. The gradient must match the tensor's grad_dtype (defaults to the "
            "tensor's dtype). You can set the tensor's grad_dtype attribute with a specific dtype, or None to allow "
            "any dtype. Set grad_dtype with caution. Diverging the dtypes of a tensor and its gradient may break "
            "downstream systems that assume they match."
        )
    self._grad = value


def size(self, dim=None):
    return self.shape if dim is None else self.shape[dim]


def dim(self) -> int:
    return self.ndim


def numel(self) -> int:
    return math.prod(self.shape)


def __len__(self) -> int:
    if self.ndim == 0:
        raise TypeError("len() of a 0-d tensor")
    return self.shape[0]


def __iter__(self: V) -> Iterator[V]:
    if self.ndim == 0:
        raise TypeError("iteration over a 0-d tensor")
    return (self[i] for i in range(self.shape[0]))


def item(self) -> float:
    """The value of a one-element Variable as a Python number (a float, int or bool)."""
    if self.numel() != 1:
        raise shapes.ShapeMismatch(
            f"a Tensor with {self.numel()} elements cannot be converted to Scalar"
        )  # (a ValueError too)
    return self._array().item()


def tolist(self) -> Any:
    return _host(self).tolist()


def __array__(self, dtype: Any = None, copy: bool | None = None) -> NDArray:
    array = self.numpy()
    return array if dtype is None else array.astype(dtype)


def __bool__(self) -> bool:
    if self.numel() != 1:
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
    return builtins.bool(self._array().item())


def _python_number(self) -> Any:
    if self.numel() != 1:  # (PyTorch's words for int(), float(), complex(); item()'s are its RuntimeError's)
        raise ValueError("only one element tensors can be converted to Python scalars")
    return self.item()


def __int__(self) -> int:
    return builtins.int(_python_number(self))


def __index__(self) -> int:
    if self.dtype.kind not in "iub" or self.numel() != 1:
        raise TypeError("only integer tensors of a single element can be converted to an index")
    return builtins.int(self._array().item())


def __format__(self, spec: str) -> str:
    if self.ndim == 0:
        return format(self.item(), spec)  # f"{loss:.4f}", as PyTorch formats a 0-d tensor
    return object.__format__(self, spec)


def __repr__(self) -> str:
    try:
        array = _host(self)
    except NoValue:
        return f"tensor(<traced {list(self.shape)} {self.dtype}>)"
    node, tangent = self._node, DUAL_LEVELS[0].tangent(self) if DUAL_LEVELS else None  # a dual's, as PyTorch shows it
    return format_tensor(array, None if node is None else node.name, self.requires_grad, str(self.device), tangent)


def zero_(self: V) -> V:
    if base_of(self) is not None:  # (a view's node stays its view's)
        return self.fill_(0)
    before = self.grad_fn
    return grad_fn_names.renamed(self.fill_(0), "ZeroBackward0", (before,))


SHARED = {
    f.__name__: f
    for f in (
        __init__,
        requires_grad_,
        retain_grad,
        register_hook,
        register_post_accumulate_grad_hook,
        size,
        dim,
        numel,
        __len__,
        __iter__,
        item,
        tolist,
        __array__,
        __bool__,
        __int__,
        __index__,
        __format__,
        __repr__,
        zero_,
        _is_view,
    )
}

SCALAR_WARNED: list = []  # PyTorch's scalar-conversion warning is a TORCH_WARN_ONCE


def _bound_methods(side, functions) -> tuple[dict, dict]:
    """(methods, module-level functions) that need the side's functions, grad mode or backward."""
    is_enabled = side.grad_mode.is_enabled
    setitem = functions["setitem"]
    variable = side.variable
    run_backward = side.backward

    def __setitem__(self, key, value):
        """In-place assignment, recorded as a `setitem` node when grad mode needs it."""
        if views.check_overlap(self, key) and key is not Ellipsis:
            self, key = self[key], ...  # (as PyTorch's `self[key].copy_(value)`: its elements alone rebased)
        assign(self, key, value)

    def fill_(self: V, value: Operand) -> V:
        # the rules of __setitem__ (PyTorch's fill_ of a number also writes an expanded view)
        if isinstance(value, variable):
            views.check_overlap(self)
        plain = not isinstance(value, variable) and base_of(self) is None  # (a view's node stays its view's)
        before = self.grad_fn if plain else None
        assign(self, ..., value)
        return grad_fn_names.renamed(self, "FillBackward2", (before,)) if plain else self  # (PyTorch's, for a number)

    def assign(self, key, value):
        if INFERENCE_MADE:
            side.grad_mode.refuse_inference(self, INFERENCE_INPLACE)
        if is_enabled():
            if self._node is None and self.requires_grad:
                views.check_unrecorded(self)  # (a view made in no_grad mode)
                raise RuntimeError(views.VIEW_OF_LEAF if _views_first(key) else LEAF_INPLACE)
            if self.requires_grad or (isinstance(value, variable) and value.requires_grad):
                self._assign_recorded(setitem(self._snapshot(), value, key), side.run)
                return
        try:
            self._assign_values(key, value, setitem)
        except (IndexError, ValueError) as error:
            raise indexing_op.refused_assignment(error, self, key, value) from None

    def backward(
        self,
        gradient: Operand | None = None,
        retain_graph: bool | None = None,
        create_graph: bool = False,
        inputs: Any = None,
    ) -> None:
        """Gradients of this Variable into every leaf's `.grad` (into those of `inputs` only, when given)."""
        run_backward([self], None if gradient is None else [gradient], retain_graph, create_graph, inputs=inputs)

    def numpy(self, *, force: bool = False) -> NDArray:
        """The values as a NumPy array (sharing memory with a CPU Variable). As PyTorch, refused for a Variable that
        requires grad in grad mode, unless `force` (then the values all the same, as `detach().numpy()` gives)."""
        if not isinstance(force, bool):
            raise TypeError(f"numpy(): argument 'force' must be bool, not {type(force).__name__}")
        if not force and self.requires_grad and is_enabled():
            raise RuntimeError(NUMPY_OF_GRAD)
        return backend.to_numpy(plain(self.data))

    def __float__(self) -> float:
        if self.requires_grad and is_enabled() and not SCALAR_WARNED:  # (`complex()` too; once a process, as PyTorch)
            SCALAR_WARNED.append(True)
            warn(SCALAR_OF_GRAD)
        return builtins.float(_python_number(self))

    gather = functions["gather"]
    maximum = extreme("max", functions["amax"], functions["argmax"], functions["maximum"], gather)
    minimum = extreme("min", functions["amin"], functions["argmin"], functions["minimum"], gather)
    return {
        "__setitem__": __setitem__,
        "fill_": fill_,
        "__getitem__": functions["getitem"],
        "backward": backward,
        "numpy": numpy,
        "__float__": __float__,
        "max": lambda self, dim=None, keepdim=False, **aliases: maximum(self, dim, keepdim, **aliases),
        "min": lambda self, dim=None, keepdim=False, **aliases: minimum(self, dim, keepdim, **aliases),
    }, {"max": maximum, "min": minimum}


def install(side: Side) -> dict:
    """Install the surface on `side.variable`; return the module-level names."""
    cls = side.variable
    cls.__array_ufunc__ = None  # make `ndarray <op> Variable` defer to Variable's reflected operators
    cls.__hash__ = object.__hash__  # __eq__ is elementwise; Variables hash by identity
    functions = {}
    generated = METHOD_OPS if issubclass(cls, SurfaceMethods) else {}
    for name, op in OPS.items():
        functions[name] = casting(side.functions.get(name) or make_function(op, side.coerce, side.run(op)), name)
        for method in op.methods:
            if generated.get(method) != name:  # a method engine.surface_methods does not define (yet): set here
                setattr(cls, method, functions[name])  # a plain function: `v.op(*args)` calls `fn(v, *args)`
    cls._ops = SimpleNamespace(**functions)  # what the methods of engine.surface_methods call
    for dunder, (name, kind) in OPERATORS.items():
        method = side.operator(OPS[name], kind, functions[name])
        if name in CAST:  # `x @ w` casts under autocast, as torch.matmul does
            method = cast_operator(method, Side.operator(side, OPS[name], kind, functions[name]))
        setattr(cls, dunder, method)
    composed = modern.functions(functions)
    for name, function in composed.items():
        if name not in tensor_ops.FUNCTIONS_ONLY:
            setattr(cls, name, function)
    for name, method in SHARED.items():
        setattr(cls, name, method)
    methods, extremes = _bound_methods(side, functions)
    for name, method in methods.items():
        setattr(cls, name, method)
    cls.__str__ = __repr__
    cls.requires_grad = property(cls.requires_grad.fget, _set_requires_grad)
    # (not a class attribute: one more name in Variable's class dict measured +34k instructions, +0.7%, a seed-net
    # step in callgrind)
    GRAD_MODES[cls] = side.grad_mode
    for getter in (grad_fn, is_leaf, retains_grad, output_nr, _base):
        setattr(cls, getter.__name__, property(getter))
    cls.grad = property(_get_grad, _set_grad, doc="the gradient backward accumulated (a non-leaf's warns when unset)")
    transpose = functions["transpose"]

    def all_reversed(self) -> VariableSurface:
        reversing(self.ndim)
        return self.permute(tuple(reversed(range(self.ndim))))

    def last_two_swapped(self) -> VariableSurface:
        return transpose(self, -2, -1)

    cls.T = property(side.properties.get("T") or all_reversed, doc="all dimensions reversed")
    cls.mT = property(side.properties.get("mT") or last_two_swapped, doc="the last two dimensions swapped")
    placement = Placement(cls._computes_on)
    constructors = Constructors(cls, side.to_array, placement)
    for name, method in modern.methods(cls, functions, constructors).items():
        setattr(cls, name, method)
    if generated:
        SurfaceMethods.view = modern.view  # type: ignore[method-assign]
    found = _tensor_functions(cls, {**composed, **functions}, constructors)  # registry ops first (index_add)
    with_alpha = {**composed, **found, **functions, **{name: composed[name] for name in ("add", "sub", "div", "clamp")}}
    for name, method in inplace.methods(with_alpha, side.grad_mode, side.run).items():
        setattr(cls, name, method)
    methods, spellings = compat.spellings(constructors, lambda v, dtype: functions["cast"](v, dtype=dtype))
    for name, method in methods.items():
        setattr(cls, name, method)
    sampling = Sampling(constructors)  # normal, randperm, multinomial, bernoulli, x.uniform_()...
    for name, method in sampling.methods().items():
        setattr(cls, name, method)
    aliases = {alias: functions[name] for alias, name in modern.FUNCTION_ALIASES.items()}
    computing = {**functions, **composed, **found, **aliases, **extremes}  # torch.add(a, b, out=c)...
    return {
        **{name: _taking_out(fn, name, side.grad_mode) for name, fn in computing.items()},
        **constructors.names(),
        **sampling.names(),
        **spellings,
        **dtypes.names(),
        **placement.names(),
        **_module_functions(cls, side.grad_mode),
    }


def _tensor_functions(cls, ops, constructors) -> dict:
    """Install the methods of `engine.tensor_shaping`, `tensor_selection` and `tensor_math` (each module composed
    of the functions before it) on `cls`; return their torch.* functions."""
    out: dict = {}
    for module in (tensor_shaping, tensor_selection, tensor_more, tensor_math):
        found = grad_fn_names.named_composed(module.functions(dict(ops), constructors))
        ops.update(found)
        for name, function in found.items():
            if name not in module.FUNCTIONS_ONLY:
                setattr(cls, name, function)
            if name not in module.METHODS_ONLY:
                out[name] = function
    for name, prop in tensor_shaping.properties().items():
        setattr(cls, name, prop)
    return out


def exported(names) -> list:
    """The names for a package's `__all__`, sorted: all but those that would shadow a Python builtin under
    `from engine import *` (`float`, `int`, `bool`, `all`, `max`... stay `engine.float`...)."""
    return sorted(name for name in names if not hasattr(builtins, name))


OUT_RESIZED = (
    "An output with one or more elements was resized since it had shape {was}, which does not match the required "
    "output shape {now}. This behavior is deprecated, and in a future PyTorch release outputs will not be resized "
    "unless they have zero elements. You can explicitly reuse an out tensor t by resizing it, inplace, to zero "
    "elements with t.resize_(0)."
)


def _taking_out(fn, name, grad_mode):
    """The torch.* function `fn` taking PyTorch's `out=` (a Variable, or a tuple for (values, indices)): the result
    written into it (resized, with PyTorch's warning, when its shape differs), and it returned."""

    def call(*args, out=None, **kwargs):
        if out is None:
            return fn(*args, **kwargs)
        result = fn(*args, **kwargs)
        outs, results = (tuple(out), tuple(result)) if isinstance(out, (tuple, list)) else ((out,), (result,))
        for o, r in zip(outs, results):
            if grad_mode.is_enabled() and (r.requires_grad or o.requires_grad):
                raise RuntimeError(
                    f"{name}(): functions with out=... arguments don't support automatic differentiation, but one "
                    "of the arguments requires grad."
                )
            if not promotion.can_cast(r.dtype, o.dtype):
                raise RuntimeError(
                    f"result type {promotion.type_name(r.dtype)} can't be cast to the desired output type "
                    f"{promotion.type_name(o.dtype)}"
                )
            if tuple(o.shape) != tuple(r.shape):
                if o.numel():
                    warn(OUT_RESIZED.format(was=list(o.shape), now=list(r.shape)))
                o.data = r.detach().data.astype(o.data.dtype)
            else:
                with grad_mode.no_grad():
                    o.copy_(r)
        return type(result)(*outs) if isinstance(out, (tuple, list)) else out

    functools.update_wrapper(call, fn).__wrapped__ = getattr(fn, "__wrapped__", fn)  # (an autocast one's op function)
    return call


def _module_functions(cls, grad_mode) -> dict:
    """`is_tensor`, `numel`, `inference_mode`, `is_inference_mode_enabled`: module-level names that need the side's
    class or grad mode."""

    def is_tensor(obj: object) -> bool:
        return isinstance(obj, cls)

    def numel(input: VariableSurface) -> int:
        return input.numel()

    inference = {
        "inference_mode": grad_mode.inference_mode,
        "is_inference_mode_enabled": grad_mode.is_inference_mode_enabled,
    }
    return {"is_tensor": is_tensor, "numel": numel, **inference}
