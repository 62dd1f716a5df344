"""Custom differentiable functions, PyTorch style: subclass `Function`, write static
`forward(ctx, *args)` and `backward(ctx, *grad_outputs)`, call `MyOp.apply(...)`; or PyTorch 2's
`forward(*args)` with a static `setup_context(ctx, inputs, output)`. forward may return a tuple (one
node, `FunctionOutputs`, and an `OutputNode` per output); `ctx.mark_non_differentiable`,
`ctx.mark_dirty` (in-place Functions) and `ctx.set_materialize_grads` work as PyTorch's.

The legacy style (PyTorch before 1.3) works too, on the engine and the client alike: instance
methods `forward(self, *args)` and `backward(self, *grad_outputs)` that save through
`self.save_for_backward` and read `self.saved_tensors`, called on an instance, `MyReLU()(x)`.
`FunctionBase.__call__` runs it through `apply` (see `_legacy_adapter`)."""

from __future__ import annotations

import functools
import inspect
import weakref
from typing import Any

import numpy

from engine import views
from engine.grad_mode import INFERENCE_MADE, is_grad_enabled, no_grad
from engine.node import FLOATS, FORWARD, SAVING, Meta, Node, check_saved, edge_of, next_seq, refuse_saved_inference
from engine.variable import Variable, as_array

FUNCTION_NAME = "a custom Function"  # how a version error names a Function's node


ONCE = "trying to differentiate twice a function that was marked with @once_differentiable"


def once_differentiable(backward):
    """torch.autograd.function.once_differentiable: a Function's `backward` run with grad mode off; under
    create_graph, with gradients that require grad, its results pass through an `Error` node, whose
    backward raises PyTorch's error (differentiating them again is refused)."""

    @functools.wraps(backward)
    def without_graph(ctx, *grad_outputs):
        with no_grad():
            grads = backward(ctx, *grad_outputs)
        if not is_grad_enabled() or not any(isinstance(g, Variable) and g._requires_grad for g in grad_outputs):
            return grads
        many = isinstance(grads, tuple)
        marked = [g.detach().requires_grad_() if isinstance(g, Variable) else g for g in (grads if many else (grads,))]
        out = Error.apply(*marked)
        return out if many else out[0]

    return without_graph


class FunctionCtx:
    """The `ctx` a custom Function's forward and backward share: `to_save` is what forward
    saved, `saved_read` whether backward read it (the client's tracing asks both)."""

    materialize_grads = True  # backward gets zeros for an output that got no gradient (else None)
    non_differentiable: tuple[Any, ...] = ()  # outputs that `apply` returns without a grad_fn
    dirty: tuple[Any, ...] = ()  # inputs that forward modified in place and returns (`mark_dirty`)

    def __init__(self) -> None:
        self.to_save: tuple[Any, ...] = ()
        self._versions: tuple[int | None, ...] = ()
        self._freed = False
        self.saved_read = False
        self.needs_input_grad: tuple[bool, ...] = ()
        self._forward_result: Any = None  # what forward returned, when it saved it too
        self._output: Any = None  # that output as the graph has it, while backward runs
        self.saved_for_forward: tuple[Any, ...] = ()  # what `jvp` reads as `ctx.saved_tensors` (forward-mode AD)
        self._unpack: Any = None  # with saved-tensor hooks, what `saved_tensors` reads (`engine.autograd_graph`)

    def save_for_backward(self, *variables: Any) -> None:
        self.to_save = tuple(variables)
        self._versions = tuple(v._version if isinstance(v, Variable) else None for v in variables)

    @property
    def saved_tensors(self) -> tuple[Any, ...]:
        check_saved(None, True, self.to_save, None if self._freed else self._versions, FUNCTION_NAME)
        self.saved_read = True
        output = self._output
        if self._unpack is not None:
            return self._unpack()
        if output is None:
            return self.to_save
        # forward saved its own results: backward reads each output as the graph has it (its grad_fn is
        # this Function's node), so a backward recorded with create_graph differentiates through it
        return tuple(output.get(id(v), v) for v in self.to_save)

    saved_variables = saved_tensors

    def save_for_forward(self, *variables):
        self.saved_for_forward = variables

    def mark_non_differentiable(self, *outputs: Any) -> None:
        self.non_differentiable = outputs

    def mark_dirty(self, *inputs: Any) -> None:
        self.dirty = inputs

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = bool(value)


class FunctionNode(Node):
    """The node of one `Function.apply` call; its vjp is the user's `backward`."""

    __slots__ = ("function", "ctx", "metas")

    def __init__(self, function, ctx, args):
        self.function = function
        self.ctx = ctx
        self.seq = next_seq()
        self.edges = tuple(edge_of(a) if isinstance(a, Variable) else None for a in args)
        self.metas = tuple(Meta(a.shape, a.dtype) if isinstance(a, Variable) else None for a in args)
        self.saved = self.metas
        self.retained = None

    def output_node(self, index):
        """The node of output `index` (a Function with one output: this one)."""
        return self

    def vjp(self, grad, needs, many=False):
        """The user's `backward` of the output's gradient (`many`: of `grad`, one per output)."""
        ctx = self.ctx
        if ctx._forward_result is not None:  # the outputs forward saved, as the graph has them (while backward runs)
            ctx._output = {id(v): Variable._result(v._data, self.output_node(k)) for v, k in ctx._forward_result}
        try:
            grads = self.function.backward(ctx, *grad) if many else self.function.backward(ctx, grad)
            result = self.function.backward_result(grads, len(self.edges))
        finally:
            ctx._output = None
        out = []
        for index, (g, need, meta) in enumerate(zip(result, needs, self.metas)):
            if g is not None and not isinstance(g, Variable):
                if not hasattr(g, "shape"):  # (an array is taken: the engine's own Functions return some)
                    raise RuntimeError(f"expected Variable or None (got {type(g).__name__})")  # (PyTorch's)
                g = Variable._result(as_array(g), None)
            if g is not None and need is not None:
                _check_gradient_shape(type(self).__name__, index, g.shape, meta.shape)
            out.append(g if need is not None else None)
        return out

    def holds(self) -> list:
        """What forward saved on its ctx: `save_for_backward`'s Variables and any other attribute's
        (a dict's, list's or tuple's values included)."""
        found: list = []
        for value in vars(self.ctx).values():
            items = (
                value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
            )
            found.extend(v for v in items if isinstance(v, Variable))
        return found

    def free(self):
        """Drop what forward saved; the ctx (and its other attributes) stays, its `saved_tensors` refuses."""
        ctx = self.ctx
        ctx._freed, ctx.to_save, ctx._forward_result = True, (), None


class FunctionOutputs(FunctionNode):
    """The node of a Function with several outputs (or marked ones). Each differentiable output's grad_fn
    is an `OutputNode` whose `owner` is this node: the walk runs those first (they are made after it),
    each leaves its gradient in `pending` and sends this node a zero `TOKEN`, and this node's vjp hands
    `backward` one gradient per output (zeros, or None without `materialize_grads`, where none came)."""

    __slots__ = ("pending", "outputs", "proxies")

    def __init__(self, function, ctx, args, outs):
        super().__init__(function, ctx, args)
        self.outputs = tuple(Meta(v._data.shape, v._data.dtype) if isinstance(v, Variable) else None for v in outs)
        self.pending: list = [None] * len(outs)
        self.proxies: list = [None] * len(outs)  # weak references to the outputs' OutputNodes

    def output_node(self, index):
        proxy = self.proxies[index] and self.proxies[index]()
        if proxy is None:
            proxy = OutputNode(self, index)
            self.proxies[index] = weakref.ref(proxy)
        return proxy

    def vjp(self, grad, needs):
        grads, self.pending = self.pending, [None] * len(self.pending)
        if self.ctx.materialize_grads:
            zeros = Variable._result  # (a zero gradient requires none, as PyTorch's)
            grads = [
                zeros(as_array(numpy.zeros(m.shape, m.dtype)), None) if g is None and m is not None else g
                for g, m in zip(grads, self.outputs)
            ]
        return FunctionNode.vjp(self, grads, needs, True)


TOKEN = Variable._result(numpy.zeros((), numpy.float32), None)  # what an OutputNode sends its owner


class OutputNode(Node):
    """Output `output_nr` of a `FunctionOutputs` node, `owner`: `grad_fn` shows the owner (see there)."""

    __slots__ = ("owner", "output_nr")
    fits = True

    def __init__(self, owner, index):
        self.owner, self.output_nr, self.edges = owner, index, (owner,)
        self.saved, self.retained, self.seq = (None,), None, next_seq()

    def vjp(self, grad, needs):
        self.owner.pending[self.output_nr] = grad
        return (TOKEN,)

    def free(self):
        pass


OutputNode.name = property(lambda self: self.owner.name)  # type: ignore[assignment]  # (after `__init_subclass__`)


def _check_gradient_shape(node_name: str, index: int, got: tuple, shape: tuple) -> None:
    """PyTorch's rule for a custom backward's gradient: its input's shape, or one that the input's shape
    broadcasts to (the engine then sums it down); anything else is refused, as PyTorch refuses it."""
    got, shape = tuple(got), tuple(shape)
    if got == shape or (len(shape) <= len(got) and all(s in (1, g) for s, g in zip(shape[::-1], got[::-1]))):
        return
    raise RuntimeError(
        f"Function {node_name} returned an invalid gradient at index {index} - got {list(got)} "
        f"but expected shape compatible with {list(shape)}"
    )


class FunctionBase:
    """What every custom Function declares, the engine's and the client's (`client.function`)."""

    _ctx: FunctionCtx  # a legacy Function's: the ctx of the call it is running

    def __call__(self, *args: Any) -> Any:
        """`MyFn()(x)`: a legacy Function, whose forward and backward are instance methods."""
        cls = type(self)
        if isinstance(inspect.getattr_static(cls, "forward"), staticmethod):
            raise RuntimeError(
                f"{cls.__name__} has a static forward(ctx, ...): call {cls.__name__}.apply(...), "
                "not an instance (instances are legacy Functions with forward(self, ...))"
            )
        return _legacy_adapter(cls).apply(_Legacy(self), *args)  # type: ignore[attr-defined]

    # a legacy Function's `self` saves and reads through the ctx of the call it is running
    def save_for_backward(self, *variables: Any) -> None:
        self._ctx.save_for_backward(*variables)

    @property
    def saved_tensors(self) -> tuple[Any, ...]:
        return self._ctx.saved_tensors

    saved_variables = saved_tensors

    @property
    def needs_input_grad(self) -> tuple[bool, ...]:
        return self._ctx.needs_input_grad[1:]

    @staticmethod
    def forward(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("Function subclasses must implement a static forward(ctx, *args)")

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("Function subclasses must implement a static backward(ctx, *grad_outputs)")

    @staticmethod
    def jvp(ctx, *tangents):
        """The output's tangent from the inputs' (forward-mode AD; see `engine.forward_ad`)."""
        raise NotImplementedError(
            "You must implement the jvp function for custom autograd.Function to use it with forward mode AD."
        )

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        raise NotImplementedError("setup_context is not implemented.")

    @classmethod
    def arguments(cls, args, kwargs):
        """(args, kwargs) that `forward` takes, keywords bound to its parameters as PyTorch does (they are
        inputs, positionally); with a `setup_context`, defaults applied: `setup_context` gets every input."""
        if cls.setup_context is FunctionBase.setup_context:
            if not kwargs:
                return args, kwargs
            bound = inspect.signature(cls.forward).bind(None, *args, **kwargs)  # (None: the ctx)
            return bound.args[1:], bound.kwargs
        bound = inspect.signature(cls.forward).bind(*args, **kwargs)
        bound.apply_defaults()
        return bound.args, bound.kwargs

    @classmethod
    def run_forward(cls, ctx, args, kwargs):
        """What forward returns: `forward(ctx, *args)`, or PyTorch 2's style where the class has a
        `setup_context`: `forward(*args)`, then `setup_context(ctx, args, output)`."""
        if cls.setup_context is FunctionBase.setup_context:
            return cls.forward(ctx, *args, **kwargs)
        out = cls.forward(*args, **kwargs)
        cls.setup_context(ctx, args, out)
        return out

    @classmethod
    def backward_result(cls, result, count):
        """backward()'s gradients as a tuple of at least `count` (one per forward input)."""
        if not isinstance(result, tuple):
            result = (result,)
        if len(result) < count or any(g is not None for g in result[count:]):
            raise RuntimeError(
                f"function {cls.__name__}Backward returned an incorrect number of gradients (expected {count}, got {len(result)})"
            )
        return result


_NO_SETUP = FunctionBase.setup_context


class Function(FunctionBase):
    """Base class of custom differentiable operations (see the module docstring)."""

    @classmethod
    def apply(cls, *args: Any, **kwargs: Any) -> Any:
        setup = cls.setup_context is not _NO_SETUP
        if setup or kwargs:
            args, kwargs = cls.arguments(args, kwargs)
        ctx = FunctionCtx()
        ctx.needs_input_grad = tuple(isinstance(a, Variable) and a._requires_grad for a in args)
        with no_grad():
            out = cls.run_forward(ctx, args, kwargs) if setup else cls.forward(ctx, *args, **kwargs)
        if type(out) is tuple or ctx.dirty or ctx.non_differentiable:
            return _outputs(cls, ctx, args, out)
        data = out._data if isinstance(out, Variable) else as_array(out)
        node = None
        if is_grad_enabled() and any(ctx.needs_input_grad) and type(data.dtype) in FLOATS:
            if any(v is out for v in ctx.to_save):
                ctx._forward_result = ((out, 0),)
            node = node_class(cls)(cls, ctx, args)
            _refuse_saved_inference(ctx)
            if SAVING:
                SAVING[0](node, args, out)
        result = Variable._result(data, node)
        if FORWARD:
            FORWARD[0].function(cls, ctx, args, result)
        return result


def _refuse_saved_inference(ctx):
    for i, v in enumerate(ctx.to_save):  # (PyTorch checks what forward saved once it records the node)
        if v is not None and not isinstance(v, Variable):
            raise TypeError(
                f"save_for_backward can only save variables, but argument {i} is of type {type(v).__name__}"
            )
    if INFERENCE_MADE:  # (PyTorch's refusal, as an op's: `engine.node.refuse_saved_inference`)
        refuse_saved_inference([v if isinstance(v, Variable) else None for v in ctx.to_save], True)


LEAF_DIRTY = "a leaf Variable that requires grad has been used in an in-place operation."


def _outputs(cls, ctx, args, out):
    """`apply` of a forward that returned a tuple (its Variables are the outputs, other values are returned
    as they are) or marked outputs: non-differentiable ones (and integer ones) get no grad_fn, a dirty one
    (an input modified in place) is returned itself, its version bumped and its history rebased onto
    the Function's node, as PyTorch's `mark_dirty` does."""
    many = type(out) is tuple
    outs = out if many else (out if isinstance(out, Variable) else Variable._result(as_array(out), None),)
    dirty, plain = ctx.dirty, ctx.non_differentiable
    ctx.dirty = ctx.non_differentiable = ()
    node = None
    if is_grad_enabled() and any(ctx.needs_input_grad):
        if any(v._node is None and v._requires_grad for v in dirty):
            raise RuntimeError(LEAF_DIRTY)
        node = node_class(cls, FunctionOutputs)(cls, ctx, args, outs)
        _refuse_saved_inference(ctx)
        saved = [(v, k) for k, v in enumerate(outs) if isinstance(v, Variable) and any(v is s for s in ctx.to_save)]
        ctx._forward_result = tuple(saved) or None
        if SAVING:
            SAVING[0](node, args, outs)
    results = []
    for k, v in enumerate(outs):
        if isinstance(v, Variable):
            result = Variable._result(v._data, None)
            differentiable = node is not None and type(v._data.dtype) in FLOATS and not any(v is p for p in plain)
            if any(v is d for d in dirty):  # the input itself (recorded, or one without grad; else detached)
                if differentiable and views.live(v):  # (a view, or a base with views: rebased as an in-place op's is)
                    v._assign_recorded(Variable._result(v._data, node.output_node(k)))
                    results.append(v)
                    continue
                v._version += 1
                result = v if node is not None or not v._requires_grad else result
                result._version = v._version
            if differentiable:
                result._node, result._requires_grad = node.output_node(k), True
            v = result
        results.append(v)
    if dirty:  # a dirty input that forward saved is saved as its output: at its new version
        ctx._versions = tuple(v._version if isinstance(v, Variable) else None for v in ctx.to_save)
    if FORWARD:
        FORWARD[0].function(cls, ctx, args, tuple(results))
    return tuple(results) if many else results[0]


class Error(Function):
    """The node of what a `once_differentiable` backward returned under create_graph (PyTorch's `Error`)."""

    @staticmethod
    def forward(ctx, *grads):
        return grads

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(ONCE)


_NODE_CLASSES: dict = {}  # (Function, node base) -> node class


def node_class(function: type, base: type = FunctionNode, /, **attrs) -> type:
    """The grad_fn class of `function`'s calls, `<Function>Backward`, a subclass of `base` (the
    engine's FunctionNode, or the client's) with class attributes `attrs`; made once."""
    key = (function, base)
    if key not in _NODE_CLASSES:
        _NODE_CLASSES[key] = type(f"{function.__name__}Backward", (base,), {"__slots__": (), **attrs})
    return _NODE_CLASSES[key]


class _Legacy:
    """The legacy Function instance an `apply` runs, passed as its first argument. Equal for
    instances of one class with equal (hashable) attributes, so the client's trace cache serves
    `MyReLU()(x)` in a loop with one trace."""

    __slots__ = ("instance", "key")

    def __init__(self, instance):
        self.instance = instance
        state = tuple(sorted((k, v) for k, v in vars(instance).items() if k != "_ctx"))
        try:
            hash(state)
        except TypeError:
            state = instance
        self.key = (type(instance), state)

    def __eq__(self, other):
        return isinstance(other, _Legacy) and self.key == other.key

    def __hash__(self):
        return hash(self.key)


def _legacy_adapter(cls: Any) -> Any:
    """A subclass of the legacy Function `cls` with static forward and backward that run the
    instance's methods (the `_Legacy` first argument says which instance), so `apply`, the
    engine's or the client's, runs it like any other Function."""
    adapter = vars(cls).get("_legacy_adapter")
    if adapter is not None:
        return adapter
    forward, backward = cls.forward, cls.backward

    def legacy_forward(ctx, legacy, *args):
        ctx.legacy = legacy.instance
        legacy.instance._ctx = ctx
        return forward(legacy.instance, *args)

    def legacy_backward(ctx, *grad_outputs):
        instance = ctx.legacy
        instance._ctx = ctx
        grads = backward(instance, *grad_outputs)
        return (None, *(grads if isinstance(grads, tuple) else (grads,)))

    adapter = type(
        cls.__name__,
        (cls,),
        {
            "forward": staticmethod(legacy_forward),
            "backward": staticmethod(legacy_backward),
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
        },
    )
    cls._legacy_adapter = adapter
    return adapter
