"""Graph nodes: what `grad_fn` points at, and the one place an op is applied."""

from __future__ import annotations

import weakref
from itertools import count
from threading import get_ident
from types import FunctionType

import numpy

from engine import backend
from engine.grad_mode import INFERENCE, INFERENCE_MADE, INFERENCE_SAVED
from engine.grad_mode import state as _grad
from engine.shapes import LinAlgError, ShapeError, ShapeMismatch, as_raised
from engine.variable import Variable

_result = Variable._result
_new = object.__new__
ndarray = numpy.ndarray
# PyTorch's sequence numbers: a node's is above its inputs' nodes' (`autograd.run_backward` runs the latest first)
next_seq = count(1).__next__
FORWARD: list = []  # the active forward-AD level while there is one (`engine.forward_ad`): told of every op
RECORDING: dict = {}  # thread id -> its `engine.recording.Recording`: told of every op's forward on that thread
SAVING: list = []  # `engine.autograd_graph.pack` while a thread has saved-tensor hooks: told of every node made
ALONE = object()  # `apply_op`'s second operand when a unary operator calls it
NO_ATTRS: dict = {}  # an operator's attributes (shared: never changed)
FLOATS = frozenset(type(numpy.dtype(c)) for c in "efdg")  # the dtypes that can require grad (kind "f"), by class
FLOAT32 = numpy.dtype(numpy.float32)  # (an identity check first: the common dtype)

FREED_MESSAGE = (
    "Trying to backward through the graph a second time (or directly access saved tensors after "
    "they have already been freed). Saved intermediate values of the graph are freed when you call "
    ".backward() or autograd.grad(). Specify retain_graph=True if you need to backward through the "
    "graph a second time or if you need to access saved tensors after calling backward."
)


class GraphFreedError(RuntimeError):
    """A backward through a graph whose saved values a previous backward freed."""

    def __init__(self):
        super().__init__(FREED_MESSAGE)


INPLACE_MESSAGE = (
    "one of the variables needed for gradient computation has been modified by an inplace operation: "
    "an input of {node} is at version {now}; expected version {then} instead."
)


def check_saved(node, saves, saved, versions, name=None):
    """Raise PyTorch's errors for the saved inputs a node's vjp reads: freed by a backward
    (`versions` None) or modified in place since recording. `saves`: True (every input) or a
    slice of them; `saved[i]`: input i; `versions[i]`: its version then (None: not checked).
    The one check of the engine's nodes and Function ctx and of the client's grad_fn nodes."""
    if versions is None:
        if saves is True or saved[saves]:
            raise GraphFreedError()
        return
    if saves is not True:
        saved, versions = saved[saves], versions[saves]
    for v, then in zip(saved, versions):
        if then is not None and v is not None and v._version != then:
            raise RuntimeError(INPLACE_MESSAGE.format(node=name or node.name, now=v._version, then=then))


def reads_output(op, edges) -> bool:
    """Whether a node's vjps read its output: `op.uses_output` is True, or the inputs whose vjps
    read it and one of them gets a gradient (PyTorch saves the output only then, e.g. `x ** y`'s
    for y's gradient; an output modified in place then refuses a backward)."""
    uses = op.uses_output  # (one input's, the common case, read without `any` and a generator's frames)
    return uses is True or (edges[uses[0]] is not None if len(uses) == 1 else any(edges[i] is not None for i in uses))


def check_output(node, out_ref):
    """Raise PyTorch's error when the output that a node's vjp reads (`out_ref`: a weak
    reference to it, or None) was modified in place."""
    out = out_ref() if out_ref is not None else None
    if out is not None and out._version:
        raise RuntimeError(INPLACE_MESSAGE.format(node=node.name + "'s output", now=out._version, then=0))


class Meta:
    """Shape and dtype of a freed input: all that linear ops' vjps need.

    It stands where the input Variable stood, so `meta._data.shape` reads like `variable._data.shape`."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape = shape
        self.dtype = dtype

    @staticmethod
    def of(variable):
        meta = _new(Meta)
        data = variable._data
        meta.shape = data.shape
        meta.dtype = data.dtype
        return meta

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def _data(self):
        return self


class NodeName(str):
    """A node's `name`: the engine reads it as a string, PyTorch programs call it (`grad_fn.name()`: PyTorch's,
    qualified for its two C++ nodes, `torch::autograd::CopySlices`)."""

    def __call__(self) -> str:
        return QUALIFIED.get(self) or str(self)


QUALIFIED = {name: "torch::autograd::" + name for name in ("AccumulateGrad", "CopySlices", "CopyBackwards")}


class Node:
    """A recorded operation. Subclasses are named as PyTorch's (`MulBackward0`: `engine.grad_fn_names`).

    `edges[i]` says where the gradient of input i goes: a Node (a non-leaf input), the leaf
    Variable itself, or None when that input needs no gradient. `saved[i]` is input i (or its
    `Meta` once freed): autograd reads `saved[i]._data.shape` and `.dtype` to fit gradients.
    `vjp(grad, needs)` returns one gradient per input; `needs[i]` is None where input i's
    gradient is not wanted (the edges themselves are a valid `needs`).
    """

    __slots__ = ("edges", "saved", "retained", "seq", "hooks", "__weakref__")  # hooks: unset until `autograd_graph`'s
    saved: tuple | None  # what the vjp reads (None once freed)
    seq: int  # when it was made (`next_seq`): the backward walk runs nodes from the latest down
    freeing: str | None = None  # `OpNode`'s: what `free` drops (run_backward frees "all" and "none" inline)
    fits = False  # whether every gradient the vjp returns has its input's shape and dtype (see `autograd._fit`)
    owner = None  # an output's node of a Function with several outputs: the node its `grad_fn` shows
    output_nr = 0  # (and which output it is)

    def vjp(self, grad, needs):
        raise NotImplementedError

    def produces(self, i) -> bool:
        """Whether input i's gradient can be non-None, known without computing (see `autograd.walk`)."""
        return True

    def free(self):
        raise NotImplementedError

    def holds(self) -> list:
        """The Variables and arrays this node keeps alive for its backward (not the nodes it points to)."""
        return [v for v in self.saved or () if isinstance(v, Variable)]

    name = NodeName("Node")  # each class's own (`__init_subclass__`): an attribute costs less than a property

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:  # (a property where PyTorch's name depends on the call: grad_fn_names)
            cls.name = NodeName(cls.__name__)

    @property
    def next_functions(self):
        """PyTorch's: per input, (its grad_fn, its output_nr), an `AccumulateGrad` for a leaf that requires grad, or (None, 0)."""
        return tuple(
            (e.owner or e, e.output_nr) if isinstance(e, Node) else (None if e is None else AccumulateGrad(e), 0)
            for e in self.edges
        )

    def __repr__(self):
        return f"<{self.name} object at {id(self):#x}>"


class AccumulateGrad:
    """What `next_functions` shows for a leaf that requires grad (PyTorch's name): `variable` is the leaf."""

    __slots__ = ("variable",)
    next_functions = ()
    name = NodeName("AccumulateGrad")

    def __init__(self, variable):
        self.variable = variable

    def __eq__(self, other):
        return isinstance(other, AccumulateGrad) and other.variable is self.variable

    def __hash__(self):
        return id(self.variable)

    def __repr__(self):
        return f"<AccumulateGrad object at {id(self):#x}>"


def edge_of(v):
    node = v._node
    if node is not None:
        return node
    return v if v._requires_grad else None


class OpNode(Node):
    """A node of a registry op; the op's vjps turn the output gradient into input gradients.

    Made by `apply_op` (no `__init__`: a call per node costs more than its body)."""

    __slots__ = ("attrs", "out_data", "versions", "out_ref")
    op = None  # set on each generated subclass
    freeing = "all"  # what `free` drops (set per subclass by `engine.registry.defop`): see `free`

    @property
    def freed(self) -> bool:
        return self.versions is None

    def holds(self) -> list:
        held = super().holds()
        return held if self.out_data is None else [*held, self.out_data]

    def vjp(self, grad, needs, op=None):  # `op`: the node class's own (`own`: each class has its copy)
        saved = self.saved
        saves = op.saves
        if saves:  # True: every input's values are read; a slice: those inputs'; False: none
            versions = self.versions
            if versions is None or saves is not True:
                check_saved(self, saves, saved, versions)
            elif len(versions) == 2:  # unrolled (no zip and loop): most saving ops take two inputs
                if saved[0]._version != versions[0] or saved[1]._version != versions[1]:
                    check_saved(self, True, saved, versions)
            else:
                for v, then in zip(saved, versions):
                    if v._version != then:
                        check_saved(self, True, saved, versions)
        ans = None
        if op.uses_output:
            if self.versions is None and reads_output(op, self.edges):  # its output freed (tan's: saves no input)
                raise GraphFreedError()
            check_output(self, self.out_ref)
            ans = _result(self.out_data, self)
        attrs = self.attrs
        if op.vjp is not None:
            return op.vjp(grad, ans, saved, [n is not None for n in needs], **attrs)
        if not attrs and len(needs) == 2:  # unrolled: most ops take one or two inputs, and no attributes
            fx, fy = op.vjps
            x, y = saved
            return (
                None if needs[0] is None or fx is None else fx(grad, ans, x, y),
                None if needs[1] is None or fy is None else fy(grad, ans, x, y),
            )
        if len(needs) == 2:
            fx, fy = op.vjps
            return (
                None if needs[0] is None or fx is None else fx(grad, ans, *saved, **attrs),
                None if needs[1] is None or fy is None else fy(grad, ans, *saved, **attrs),
            )
        if len(needs) == 1:
            fx = op.vjps[0]
            if needs[0] is None or fx is None:
                return (None,)
            return (fx(grad, ans, saved[0], **attrs) if attrs else fx(grad, ans, saved[0]),)
        return [
            fn(grad, ans, *saved, **attrs) if n is not None and fn is not None else None
            for fn, n in zip(op.vjps, needs)
        ]

    def passes_on(self, grad, needs, op=None):
        """The `vjp` of an op whose vjps all are `passes` (add's, clone's): the gradient, without their calls."""
        if len(needs) == 2:
            return (None if needs[0] is None else grad, None if needs[1] is None else grad)
        return [None if n is None else grad for n in needs]

    def free(self):
        if self.versions is not None:
            freeing = self.freeing
            if freeing == "all":  # every vjp reads its inputs: a second backward is refused, keep nothing
                self.saved = None
            elif freeing == "inputs":  # autograd reads the metas of inputs that get a gradient
                self.saved = tuple([None if e is None else Meta.of(v) for v, e in zip(self.saved, self.edges)])
            elif freeing == "values":
                self.saved = tuple([Meta.of(v) for v in self.saved])
            # else "none": saved holds metas only (saves=False)
            self.out_data = None
            self.versions = None


def passes(g, ans, *inputs, **attrs):
    """The vjp of an input whose gradient is the output's (add's): see `OpNode.passes_on`."""
    return g


def _metas(inputs, edges):
    """The inputs' Metas (None for an input without an edge, when `edges` is given)."""
    return tuple([None if edges is not None and e is None else Meta.of(v) for v, e in zip(inputs, edges or inputs)])


def _wrap(out, like):
    """`out` as an array of the array module of `like` (an op's first input's array)."""
    xp = numpy if type(like) is ndarray else backend.array_module(like)
    if type(out) is ndarray or isinstance(out, xp.ndarray):
        return out
    return xp.asarray(out)


def times(g, v):
    """`g * v` in a vjp (mul's): the arrays' product as `apply_op`'s result with no node, without its operator's
    dispatch, where nothing would record it (neither requires grad or grad mode is off, and nothing observes)."""
    if RECORDING or FORWARD or (g._requires_grad or v._requires_grad) and _grad.enabled:
        return g * v
    out = g._data * v._data
    return _result(out if type(out) is ndarray else _wrap(out, g._data), None)


def refuse_saved_inference(inputs, saves):
    """PyTorch's refusal to save an inference tensor (made in inference mode) for a backward: of `inputs`, those
    an op's `saves` names (True: all; a slice), None for a number (the client's)."""
    for v in inputs if saves is True else inputs[saves]:
        if v is not None and v.is_inference():
            raise RuntimeError(INFERENCE_SAVED)


def shape_refusal(op, inputs, attrs, error):
    """What to raise for a forward that NumPy refused: the op's shape rule's refusal as PyTorch's RuntimeError
    (`engine.shapes.ShapeMismatch`, `torch.ones(2, 3) @ torch.ones(4, 5)`), else NumPy's message as PyTorch's
    RuntimeError, still a ValueError (`torch.tensor([2]) ** -1`, `torch.ones(0).max()`; NumPy's LinAlgError as
    torch.linalg.LinAlgError)."""
    try:
        op.infer([v.shape for v in inputs], [v.dtype for v in inputs], attrs)
    except ShapeError as refusal:
        return as_raised(refusal)
    kind = LinAlgError if isinstance(error, numpy.linalg.LinAlgError) else ShapeMismatch
    return error if isinstance(error, RuntimeError) else kind(str(error))


def apply_op(
    a, b=ALONE, op=None, coerce=None, node_class=None, promote=None, floats=False, alike=None, any_shape=False
):
    """Run `op` forward on Variables, recording a node when a gradient may be needed.

    Each op has two copies of this function (`own`: its code copied; `op`, its node class and how it casts
    inputs of other dtypes (`engine.registry.PROMOTES`) as defaults): `op.call(inputs, attrs)`, and
    `op.operator`, its operators' method, called as (x, y) by `x * y` and (x,) by `-x` (`coerce` makes a
    number or array operand a Variable): an operator is one frame.
    Every op of every program comes here: one and two inputs are unrolled (and the forward called
    without a star-call when there are no attributes), and the result is made inline, since each
    call or comprehension costs about as much as the NumPy call itself on small arrays."""
    if coerce is None:  # `op.call(inputs, attrs)`
        inputs, attrs = a, b
        two = len(inputs) == 2
        if two:
            a, b = inputs
    elif type(b) is Variable:  # `x * y`
        inputs = (a, b)
        attrs = NO_ATTRS
        two = True
    elif b is ALONE:  # `-x`
        inputs = (a,)
        attrs = NO_ATTRS
        two = False
    else:  # `x * 2`: the other operand as a Variable first
        a, b = inputs = coerce((a, b))
        attrs = NO_ATTRS
        two = True
    try:
        forward = op.forward  # (a local: `op.forward(...)` is a method lookup CPython does not specialize)
        if two:
            x = a._data
            y = b._data
            dtype = x.dtype
            if dtype is not y.dtype or floats and dtype is not FLOAT32 and dtype.kind != "f":  # PyTorch's promotion
                if promote is not None:
                    x, y = promote((x, y))
                alike = None  # (inputs of two dtypes: their gradients are cast back)
            if not op.takes_xp:
                out = forward(x, y)
            else:
                xp = numpy if type(x) is ndarray else backend.array_module(x)
                out = forward(xp, x, y, **attrs) if attrs else forward(xp, x, y)
            grad = a._requires_grad or b._requires_grad  # an input with a node requires grad
        elif len(inputs) == 1:
            a = inputs[0]
            x = a._data
            if floats and x.dtype is not FLOAT32 and x.dtype.kind != "f":  # `sqrt` of integers: in the default dtype
                (x,) = promote((x,))
            if not op.takes_xp:
                out = forward(x)
            else:
                xp = numpy if type(x) is ndarray else backend.array_module(x)
                out = forward(xp, x, **attrs) if attrs else forward(xp, x)
            grad = a._requires_grad
        else:
            datas = tuple([v._data for v in inputs])
            x = datas[0]
            if op.takes_xp:
                out = forward(numpy if type(x) is ndarray else backend.array_module(x), *datas, **attrs)
            else:
                out = forward(*datas)
            grad = any([v._requires_grad for v in inputs])
    except ValueError as error:  # NumPy refused the inputs' shapes
        raise shape_refusal(op, inputs, attrs, error) from None
    if type(out) is not ndarray:
        out = _wrap(out, x)
    result = _new(Variable)
    result._data = out
    result._grad = None
    result._version = 0
    # an int or bool result never requires grad
    if grad and _grad.enabled and op.differentiable and type(out.dtype) in FLOATS:
        # the node: its edges, what its vjps read and the versions to check then (made here, not in a
        # helper: a call per recorded op costs ~0.5k instructions, a tenth of a small op's whole cost)
        # (`alike`: the node class of `fits` when the inputs have one dtype and one shape, or one dtype where
        # `any_shape` (mm): see `engine.registry.ALIKE_FITS`)
        node = result._node = (
            alike() if two and alike is not None and (any_shape or x.shape == y.shape) else node_class()
        )
        result._requires_grad = True
        node.seq = next_seq()
        if two:
            edges = node.edges = (
                a._node or (a if a._requires_grad else None),
                b._node or (b if b._requires_grad else None),
            )
        elif len(inputs) == 1:  # `a`, the one input: it requires grad, or there would be no node (no comprehensions)
            edges = node.edges = (a._node or a,)
        else:
            edges = node.edges = tuple([v._node or (v if v._requires_grad else None) for v in inputs])
        saves = op.saves
        if INFERENCE_MADE and saves is not False:  # PyTorch's refusal to save an inference tensor
            refuse_saved_inference(inputs, saves)
        if saves is True:
            node.saved = inputs
            if two:
                node.versions = (a._version, b._version)  # of the inputs whose values the vjps read
            elif len(edges) == 1:
                node.versions = (a._version,)
            else:
                node.versions = tuple([v._version for v in inputs])
        elif saves is False:  # the vjps read no input's values: keep shapes only (as free() does), not memory
            if two and op.vjp is None:
                node.saved = (None if edges[0] is None else Meta.of(a), None if edges[1] is None else Meta.of(b))
            elif len(edges) == 1:
                node.saved = (Meta.of(a),)
            else:
                node.saved = _metas(inputs, edges if op.vjp is None else None)
            node.versions = ()
        else:
            kept = range(len(inputs))[saves]
            node.saved = tuple([v if i in kept else Meta.of(v) for i, v in enumerate(inputs)])
            node.versions = tuple([v._version for v in inputs])
        node.attrs = attrs
        node.retained = None
        node.out_ref = None  # uses_output ops: a weakref to the output, whose version is checked too
        if op.uses_output:
            node.out_data = out
            if reads_output(op, edges):
                node.out_ref = weakref.ref(result)
        else:
            node.out_data = None
        if SAVING:
            SAVING[0](node, inputs, result)
    else:
        result._node = None
        result._requires_grad = False
        if INFERENCE and _grad.inference:  # `is_inference()`
            result._inference = True
    if FORWARD:
        FORWARD[0].op(op, inputs, attrs, result)
    if RECORDING:
        _recorded(op, (x, y) if two else (x,) if len(inputs) == 1 else datas, attrs, out)
    return result


def own(function, *defaults):
    """A copy of `function` with its own code object, `defaults` as its last parameters' defaults: `op`'s copies
    of `apply_op` (`call` and, with `coerce`, its operators') and of `OpNode.vjp`. Each copy's attribute caches
    see one op and one node class, so CPython specializes their loads and stores (shared, they miss)."""
    return FunctionType(function.__code__.replace(), function.__globals__, function.__name__, defaults)


def _recorded(op, arrays, attrs, out):
    recording = RECORDING.get(get_ident())
    if recording is not None:
        recording.step(op.name, op.forward, arrays, attrs, out, op.takes_xp)
