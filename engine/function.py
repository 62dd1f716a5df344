"""Custom differentiable functions, PyTorch style: subclass `Function`, write static
`forward(ctx, *args)` and `backward(ctx, *grad_outputs)`, call `MyOp.apply(...)`."""

from __future__ import annotations

from engine.grad_mode import is_grad_enabled, no_grad
from engine.node import INPLACE_MESSAGE, GraphFreedError, Meta, Node, edge_of
from engine.variable import Variable, as_array


class FunctionCtx:
    """The `ctx` a custom Function's forward and backward share."""

    def __init__(self):
        self._saved = ()
        self._versions = ()
        self._freed = False
        self.needs_input_grad = ()

    def save_for_backward(self, *variables):
        self._saved = variables
        self._versions = tuple(v._version if isinstance(v, Variable) else None for v in variables)

    @property
    def saved_tensors(self):
        if self._freed:
            raise GraphFreedError()
        for v, then in zip(self._saved, self._versions):
            if then is not None and v._version != then:
                raise RuntimeError(INPLACE_MESSAGE.format(node="a custom Function", now=v._version, then=then))
        return self._saved

    saved_variables = saved_tensors


class FunctionNode(Node):
    """The node of one `Function.apply` call; its vjp is the user's `backward`."""

    __slots__ = ("function", "ctx", "metas")

    def __init__(self, function, ctx, args):
        self.function = function
        self.ctx = ctx
        self.edges = tuple(edge_of(a) if isinstance(a, Variable) else None for a in args)
        self.metas = tuple(Meta(a.shape, a.dtype) if isinstance(a, Variable) else None for a in args)
        self.saved = self.metas
        self.retained = None

    def vjp(self, grad, needs):
        result = self.function.backward_result(self.function.backward(self.ctx, grad), len(self.edges))
        out = []
        for g, need in zip(result, needs):
            if g is not None and not isinstance(g, Variable):
                g = Variable._result(as_array(g), None)
            out.append(g if need is not None else None)
        return out

    def free(self):
        freed = FunctionCtx()
        freed._freed = True
        self.ctx = freed


class FunctionBase:
    """What every custom Function declares, the engine's and the client's (`client.function`)."""

    @staticmethod
    def forward(ctx, *args):
        raise NotImplementedError("Function subclasses must implement a static forward(ctx, *args)")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("Function subclasses must implement a static backward(ctx, *grad_outputs)")

    @classmethod
    def forward_output(cls, out):
        """Refuse a tuple from forward (one output per Function here)."""
        if isinstance(out, tuple):
            raise TypeError(f"{cls.__name__}.forward returned a tuple; custom Functions here return one Variable")
        return out

    @classmethod
    def backward_result(cls, result, count):
        """backward()'s gradients as a tuple of at least `count` (one per forward input)."""
        if not isinstance(result, tuple):
            result = (result,)
        if len(result) < count:
            raise RuntimeError(
                f"function {cls.__name__}.backward returned {len(result)} gradient(s) but forward took {count} input(s)")
        return result


class Function(FunctionBase):
    """Base class of custom differentiable operations (see the module docstring)."""

    @classmethod
    def apply(cls, *args):
        ctx = FunctionCtx()
        ctx.needs_input_grad = tuple(isinstance(a, Variable) and a._requires_grad for a in args)
        with no_grad():
            out = cls.forward(ctx, *args)
        cls.forward_output(out)
        data = out._data if isinstance(out, Variable) else as_array(out)
        if is_grad_enabled() and any(ctx.needs_input_grad):
            node_class = _node_class(cls)
            return Variable._result(data, node_class(cls, ctx, args))
        return Variable._result(data, None)


_NODE_CLASSES: dict[type, type] = {}


def _node_class(function: type) -> type:
    node_class = _NODE_CLASSES.get(function)
    if node_class is None:
        node_class = type(f"{function.__name__}Backward", (FunctionNode,), {"__slots__": ()})
        _NODE_CLASSES[function] = node_class
    return node_class
