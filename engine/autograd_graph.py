"""torch.autograd.graph: saved-tensor hooks, a node's own hooks, `Node`, `increment_version`.

Saved-tensor hooks: under `saved_tensors_hooks(pack, unpack)` (per thread; the innermost pair applies) a node made
by `apply_op` or `Function.apply` hands `pack` what its backward reads (`saved_indices`: the inputs its vjps read,
by the op's `reads`/`saves`, and its output where they read it; a Python number's input is not a tensor to PyTorch)
and keeps what `pack` returns instead: its `saved` then holds the input's `Meta`, its `out_data` None. Its backward
and `grad_fn._saved_<name>` read what `unpack` makes of it. As in PyTorch, a packed tensor's in-place change is not
checked (the node no longer holds it), and a backward that frees the graph drops the packed values.

A node with packed values or hooks keeps them in its `hooks` slot (`Hooks`: a cycle through a hook is collected) and
becomes an instance of its class's `hooked` subclass (same name, same slots):
its `vjp` runs the pre-hooks, unpacks, runs its class's vjp and then the hooks, and its `free` drops the packed
values. A node without them, and the backward walk, pay nothing; `apply_op` checks one list (`node.SAVING`)."""

from __future__ import annotations

import contextlib
import weakref
from threading import get_ident
from types import SimpleNamespace

import numpy

from engine import autograd, backend
from engine.autograd import _fit
from engine.function import FunctionNode, FunctionOutputs
from engine.grad_mode import state as grad_state
from engine.gradient_edges import GradientEdge, get_gradient_edge
from engine.graph_hooks import multi_grad_hook, passes
from engine.node import SAVING, GraphFreedError, Meta, Node, OpNode, reads_output
from engine.registry import OPS, input_names
from engine.surface import RemovableHandle
from engine.variable import Variable

STACKS: dict[int, list] = {}  # thread id -> its (pack, unpack) pairs and disabling messages (str), innermost last
PACK_IN_PLACE = (
    "A saved tensor pack hook is modifying its input in place. Tensors provided as input to pack hook cannot be "
    "modified by in-place operations as this can lead to unexpected side-effects. Please open an issue if you need "
    "to perform in-place operations on the input to a pack hook."
)
HOOKS_SET = (
    "Calling register_hooks on a saved tensor whose hooks have already been set. "
    "Hint: only one pair of hooks is allowed at a time."
)
FREED_HOOKS = (
    "Calling register_hooks on a saved tensor after it has been freed. Saved intermediate values of the graph are "
    "freed when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to backward through "
    "the graph a second time or if you need to access saved variables after calling backward."
)
NOT_HERE = "{what} of a client Variable's grad_fn: its backward is one request, computed by the server"


class Hooks:
    """A node's hooks (`pre`, `post`: id -> hook), packed values (`packed`: index -> (unpack, packed); -1 is the
    output) and PyTorch's `metadata` dict."""

    __slots__ = ("pre", "post", "packed", "metadata")

    def __init__(self):
        self.pre, self.post, self.packed, self.metadata = {}, {}, {}, {}


def state_of(node) -> Hooks:
    """`node.hooks`, made on first use (a slot of the node: a cycle through a hook or a packed value is collectable)."""
    state = getattr(node, "hooks", None)
    if state is None:
        state = node.hooks = Hooks()
    return state


# --- saved-tensor hooks ---------------------------------------------------------------------------------


class saved_tensors_hooks:  # noqa: N801  (torch's name)
    """Pack and unpack hooks for the tensors nodes save, while in this context (see the module docstring)."""

    def __init__(self, pack_hook, unpack_hook):
        self.pack_hook, self.unpack_hook = pack_hook, unpack_hook

    def __enter__(self):
        stack = STACKS.setdefault(get_ident(), [])
        if stack and type(stack[-1]) is str:
            raise RuntimeError(stack[-1])
        stack.append((self.pack_hook, self.unpack_hook))
        SAVING[:] = [pack]

    def __exit__(self, *exc):
        _pop()


def _pop():
    key = get_ident()
    STACKS[key].pop()
    if not STACKS[key]:
        del STACKS[key]
    if not STACKS:
        SAVING.clear()


class save_on_cpu(saved_tensors_hooks):  # noqa: N801
    """Saved tensors kept in host memory: a device array is copied to the host when saved and back when read; on
    the host nothing is copied (PyTorch's `tensor.cpu()` of a CPU tensor). `pin_memory` has no effect here."""

    def __init__(self, pin_memory: bool = False, device_type: str = "cuda"):
        def to_host(v):
            on_host = isinstance(v._data, numpy.ndarray)
            return v.device, v if on_host else Variable._result(backend.to_numpy(v._data), None)

        def back(packed):
            device, v = packed
            return v if device.type == "cpu" else Variable._result(backend.to_active(v._data), None)

        super().__init__(to_host, back)


@contextlib.contextmanager
def disable_saved_tensors_hooks(error_message: str):
    """Saved-tensor hooks refused (RuntimeError(error_message)) in this context, as are any already set."""
    stack = STACKS.get(get_ident())
    if stack and type(stack[-1]) is not str:
        raise RuntimeError(error_message)
    STACKS.setdefault(get_ident(), []).append(error_message)
    try:
        yield
    finally:
        _pop()


def saved_indices(node) -> list:
    """What `node`'s backward reads, as PyTorch saves it and in its order: input indices (the op's `reads` of the
    inputs that get a gradient, else those `saves` names), and -1 for the output where its vjps read it."""
    op, edges = node.op, node.edges
    if op.reads is not None:
        found = list(dict.fromkeys(i for j, e in enumerate(edges) if e is not None for i in op.reads[j]))
    else:
        found = [] if op.saves is False else list(range(len(edges)))[slice(None) if op.saves is True else op.saves]
    return found + [-1] if op.uses_output and reads_output(op, edges) else found


def _number(v) -> bool:
    """A Python number's input (`x * 2`): a constant 0-d Variable, which PyTorch saves as a scalar, unpacked."""
    return type(v) is Variable and v._node is None and not v._requires_grad and v._data.ndim == 0


def _packed(hook, v):
    version, mode = v._version, grad_state.enabled
    grad_state.enabled = False  # PyTorch packs with grad mode off
    try:
        packed = hook(v)
    finally:
        grad_state.enabled = mode
    if v._version != version:
        raise RuntimeError(PACK_IN_PLACE)
    return packed


def _unpacked(hook, packed):
    v = hook(packed)
    if not isinstance(v, Variable):
        raise TypeError(
            f"Output of saved tensor unpack_hook expected to be a Tensor but got result of type {type(v).__name__}"
        )
    return v


class Packed:
    """What a node keeps of a packed tensor: `unpack` and `pack`'s result, and where the tensor's own gradient went
    (its `node`, or a weak reference to the leaf; None for the node's own output, which `value` is told of, so that
    the node's state holds no reference to the node), so that what `value()` unpacks is where it was in the graph."""

    __slots__ = ("unpack", "packed", "node", "leaf")

    def __init__(self, unpack, packed, v, output):
        self.unpack, self.packed, self.node = unpack, packed, None if output else v._node
        self.leaf = weakref.ref(v) if v._node is None and v._requires_grad else None

    def value(self, owner, index, backward=False):
        """The unpacked tensor, on its tensor's node (as PyTorch's; the output's is `owner`); where that was a leaf,
        a backward that records (create_graph) reads the leaf itself, whose gradient it must reach (`unpack` was
        called: its value is the leaf's)."""
        v = _unpacked(self.unpack, self.packed)
        node = owner if index < 0 else self.node
        if node is not None and v._node is not node:
            return Variable._result(v._data, node)
        leaf = None if self.leaf is None else self.leaf()
        if leaf is not None and v is not leaf:
            if backward and grad_state.enabled:
                return leaf
            v = Variable._result(v._data, None)
            v._requires_grad = True
        return v


def _store(node, i, v, pack_hook, unpack_hook):
    """Pack what `node` saved at `i` (-1: its output `v`); the node keeps the packed value in its stead."""
    state_of(node).packed[i] = Packed(unpack_hook, _packed(pack_hook, v), v, i < 0)
    if i < 0:
        node.out_data = None
    else:
        node.saved = (*node.saved[:i], Meta.of(v), *node.saved[i + 1 :])
        node.versions = (*node.versions[:i], None, *node.versions[i + 1 :])
    hooked(node)


def pack(node, inputs, result):
    """`apply_op`'s and `Function.apply`'s call for a node just made, while some thread has hooks."""
    stack = STACKS.get(get_ident())
    if not stack or type(stack[-1]) is str:
        return
    pack_hook, unpack_hook = stack[-1]
    if isinstance(node, FunctionNode):
        _pack_ctx(node.ctx, pack_hook, unpack_hook)
        return
    for i in saved_indices(node):
        v = result if i < 0 else inputs[i]
        if not _number(v):
            _store(node, i, v, pack_hook, unpack_hook)


def _pack_ctx(ctx, pack_hook, unpack_hook):
    """A custom Function's `save_for_backward` Variables packed; `saved_tensors` unpacks them."""
    packed = [(i, _packed(pack_hook, v)) for i, v in enumerate(ctx.to_save) if isinstance(v, Variable)]
    kept = list(ctx.to_save)
    for i, _ in packed:
        kept[i] = Meta.of(kept[i])
    ctx.to_save, ctx._versions = tuple(kept), (None,) * len(kept)

    def unpack():
        values = list(ctx.to_save)
        for i, p in packed:
            values[i] = _unpacked(unpack_hook, p)
        return tuple(values)

    ctx._unpack = unpack


# --- grad_fn._saved_<name> and _raw_saved_<name> ---------------------------------------------------------


def saved_names(op) -> dict:
    """{PyTorch's name: index} of what `op`'s nodes can save: `self`, `other`, `exponent`..., `result` (-1)."""
    if op.variadic:
        return {}
    names = input_names(op)
    every = [*(op.reads or ()), range(op.arity)[slice(None) if op.saves is True else op.saves or slice(0)]]
    found = {i: "self" if names[i] == "input" else names[i] for read in every for i in read}
    return {**{name: i for i, name in found.items()}, **({"result": -1} if op.uses_output else {})}


def _saved_value(node, i):
    """What `node` saved at `i` (None where this node saved nothing there, as PyTorch's)."""
    if node.versions is None:
        raise GraphFreedError()
    state = getattr(node, "hooks", None)
    if state is not None and i in state.packed:
        return state.packed[i].value(node, i)
    if i not in saved_indices(node):
        return None
    return Variable._result(node.out_data, node) if i < 0 else node.saved[i]


class SavedTensor:
    """`grad_fn._raw_saved_<name>`: `register_hooks(pack, unpack)` packs it now and unpacks it when read."""

    def __init__(self, node, index):
        self.node, self.index = node, index

    def register_hooks(self, pack_hook, unpack_hook):
        node, i = self.node, self.index
        if node.versions is None:
            raise RuntimeError(FREED_HOOKS)
        if i in state_of(node).packed:
            raise RuntimeError(HOOKS_SET)
        _store(node, i, _saved_value(node, i), pack_hook, unpack_hook)


def _saved_attribute(name: str, raw: bool) -> property:
    """`grad_fn._saved_<name>` (`raw`: `_raw_saved_<name>`), on every node class: properties, not a `__getattr__`,
    which would cost every attribute read of every node its specialization."""
    attribute = ("_raw_saved_" if raw else "_saved_") + name

    def read(node):
        index = saved_names(node.op).get(name) if isinstance(node, OpNode) else None
        if index is None:
            if not isinstance(node, (OpNode, FunctionNode)):
                raise NotImplementedError(NOT_HERE.format(what=f"`{attribute}`"))
            raise AttributeError(f"'{type(node).__name__}' object has no attribute '{attribute}'")
        return SavedTensor(node, index) if raw else _saved_value(node, index)

    return property(read)


# --- a node's own hooks --------------------------------------------------------------------------------------

_HOOKED: dict = {}  # node class -> its hooked subclass
_BASES: dict = {}  # hooked subclass -> its node class


def _base(cls):
    """The class a hooked node's class hooks (None for a class not hooked): its own, or a renamed one's
    (`engine.grad_fn_names.renamed`: a subclass of the hooked class)."""
    for c in cls.__mro__:
        if c in _BASES:
            return _BASES[c]
    return None


def hooked(node):
    """`node` as an instance of its class's hooked subclass (made once per class)."""
    cls = type(node)
    if _base(cls) is not None:
        return
    sub = _HOOKED.get(cls)
    if sub is None:
        # (not `fits`: the walk fits what a hook returns, as it fits any node's gradients)
        body = {"__slots__": (), "vjp": _hooked_vjp, "free": _hooked_free, "freeing": "hooked", "fits": False}
        body["name"] = cls.name  # (its class's: a NodeName, or the property of a name by call)
        sub = _HOOKED[cls] = type(cls.__name__, (cls,), {**body, "__module__": cls.__module__})
        _BASES[sub] = cls
    node.__class__ = sub


def _checked(hook, result, count):
    if len(result) != count:
        raise RuntimeError(
            f"hook '{getattr(hook, '__name__', hook)}' has returned an incorrect number of values "
            f"(got {len(result)}, but expected {count})"
        )
    return tuple(result)


def _hooked_vjp(self, grad, needs):
    base, state = _base(type(self)), getattr(self, "hooks", None)
    if state is None:
        return base.vjp(self, grad, needs)
    many = isinstance(self, FunctionOutputs)  # its gradients, one per output, wait in `pending`
    incoming = tuple(self.pending) if many else (grad,)
    for hook in list(state.pre.values()):
        out = hook(incoming)
        incoming = incoming if out is None else _checked(hook, out, len(incoming))
    if many:
        self.pending[:] = incoming
    grad = incoming[0]
    saved, out_data = self.saved, self.out_data if state.packed else None
    if state.packed and self.versions is not None:  # (an OpNode's: a FunctionNode's ctx unpacks)
        values = list(saved)
        for i, packed in state.packed.items():
            v = packed.value(self, i, backward=True)
            if i < 0:
                self.out_data = v._data
            else:
                values[i] = v
        self.saved = tuple(values)
    try:
        grads = base.vjp(self, grad, needs)
    finally:
        if state.packed:
            self.saved, self.out_data = saved, out_data
    if state.post:  # the gradients at their inputs' shapes; a Function's only of its tensor inputs, as PyTorch's
        metas, grads = self.saved or saved, list(grads)
        kept = [i for i, meta in enumerate(metas) if meta is not None or not isinstance(self, FunctionNode)]
        given = tuple(None if grads[i] is None else _fit(grads[i], metas[i]._data) for i in kept)
        for hook in list(state.post.values()):
            out = hook(given, incoming)
            given = given if out is None else _checked(hook, out, len(kept))
        for i, g in zip(kept, given):
            grads[i] = g
    return grads


def _hooked_free(self):
    state, cls = getattr(self, "hooks", None), type(self)
    if state is not None:
        state.packed.clear()
    self.__class__ = _base(cls)  # the class's own `free`, by its own `freeing`
    try:
        self.free()
    finally:
        self.__class__ = cls


def _hook(node, hook, post):
    if not isinstance(node, (OpNode, FunctionNode)):
        raise NotImplementedError(NOT_HERE.format(what="register_hook" if post else "register_prehook"))
    hooks = state_of(node).post if post else state_of(node).pre
    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    hooked(node)
    return handle


def register_hook(self, fn) -> RemovableHandle:
    """PyTorch's node hook: `fn(grad_inputs, grad_outputs)` after this node's backward; a tuple it returns
    replaces `grad_inputs` (one per input, None where an input gets none)."""
    return _hook(self, fn, True)


def register_prehook(self, fn) -> RemovableHandle:
    """`fn(grad_outputs)` before this node's backward (after its tensor's hooks); a tuple it returns replaces them."""
    return _hook(self, fn, False)


def increment_version(tensor) -> None:
    """Count an in-place change made behind autograd's back (one Variable or several)."""
    for v in [tensor] if isinstance(tensor, Variable) else tensor:
        v._version += 1


# torch.autograd.graph.Node's surface, on every node (the client's grad_fn nodes refuse hooks and saved values)
Node.metadata = property(lambda self: state_of(self).metadata)  # type: ignore[attr-defined]
Node.register_hook = register_hook  # type: ignore[attr-defined]
Node.register_prehook = register_prehook  # type: ignore[attr-defined]
for _name in {name for op in OPS.values() if not op.composite for name in saved_names(op)}:
    setattr(Node, f"_saved_{_name}", _saved_attribute(_name, False))
    setattr(Node, f"_raw_saved_{_name}", _saved_attribute(_name, True))


class _refused(saved_tensors_hooks):  # noqa: N801
    def __enter__(self):
        raise NotImplementedError(
            "autograd.graph.saved_tensors_hooks on the client: its graph is computed by the server, where pack and "
            "unpack (your code) do not run (save_on_cpu is accepted: a server's memory is its own)"
        )


def namespace(client: bool = False, backward_pass=None) -> SimpleNamespace:
    """torch.autograd.graph for a side; the client's refuses saved-tensor hooks (`_refused`). `backward_pass`:
    (module, name) of the side's function called once a backward (`engine.graph_hooks`; the engine's walk)."""
    names = (Node, save_on_cpu, disable_saved_tensors_hooks, increment_version, GradientEdge, get_gradient_edge)
    hook = multi_grad_hook(passes(*(backward_pass or (autograd, "run_backward"))))
    return SimpleNamespace(
        saved_tensors_hooks=_refused if client else saved_tensors_hooks,
        register_multi_grad_hook=hook,
        **{f.__name__: f for f in names},
    )
