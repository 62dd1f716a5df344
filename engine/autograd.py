"""Reverse-mode differentiation: `backward` and `grad`, walking the graph without recursion.

Also the rules the client shares (`client.autograd` applies them to its lazy graph): the
arguments of `backward()`/`grad()` (`backward_arguments`, `grad_arguments`, `check_unused`),
how `.grad` accumulates (`accumulate_grad`) and which nodes a backward visits (`walk`, which
runs the backward's course without computing, `reachable`, `nodes_reaching`).
"""

from __future__ import annotations

import math
import warnings
import weakref
from collections.abc import Sequence
from heapq import heapify, heappop, heappush, heappushpop
from typing import TYPE_CHECKING

import numpy

from engine import interrupt
from engine.anomaly_mode import check_nan, nan_check_on
from engine.backend import array_module
from engine.compat import type_name
from engine.function import Function  # noqa: F401  (torch.autograd.Function's spelling)
from engine.grad_mode import state as grad_state
from engine.gradient_edges import as_inputs
from engine.node import FORWARD, RECORDING, Meta, Node, _wrap
from engine.recording import note_constant, note_where
from engine.registry import F, trusted
from engine.tensor_arith import swap_named
from engine.variable import Size, Variable, as_array

if TYPE_CHECKING:
    from engine.surface_types import Operand

_result = Variable._result
ndarray = numpy.ndarray


def as_list(x, variable=Variable):
    """One Variable or a sequence of them, as a list."""
    if isinstance(x, variable):
        return [x]
    return list(x)


def check_roots(outputs, grad_outputs, variable=Variable):
    """Per output: its gradient as given, or None for the implied 1 of a one-element output.
    Raises PyTorch's errors for a missing gradient of a larger output, or a shape mismatch."""
    roots = []
    for i, out in enumerate(outputs):
        g = None if grad_outputs is None else grad_outputs[i]
        if g is None:
            if math.prod(out.shape) != 1:
                raise RuntimeError(
                    f"grad can be implicitly created only for scalar outputs (output {i} has shape {list(out.shape)}); "
                    "pass a gradient of the output's shape"
                )
        else:
            shape = tuple(g.shape) if isinstance(g, variable) else tuple(numpy.shape(g))
            if shape != tuple(out.shape):
                raise RuntimeError(
                    f"Mismatch in shape: grad_output[{i}] has a shape of {Size(shape)} and output[{i}] has a shape of "
                    f"{Size(out.shape)}."  # (PyTorch's words)
                )
        roots.append(g)
    return roots


def backward_arguments(outputs, grad_outputs, variable=Variable):
    """(outputs, gradients by `check_roots`) of a `backward()` call, checked."""
    outputs = as_list(outputs, variable)
    for i, out in enumerate(outputs):
        if not isinstance(out, variable):
            raise TypeError(f"element {i} of tensors is a {type(out).__name__}, not a {variable.__module__} Variable")
        if not out.requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have a grad_fn")
    if grad_outputs is not None:
        grad_outputs = as_list(grad_outputs, variable) if not isinstance(grad_outputs, Sequence) else list(grad_outputs)
    return outputs, check_roots(outputs, grad_outputs, variable)


def backward_inputs(inputs, variable=Variable):
    """The Variables of `backward(inputs=...)`, checked (None: every leaf that requires grad gets its `.grad`)."""
    if inputs is None:
        return None
    inputs = as_list(as_inputs(inputs), variable)
    if not inputs:
        raise RuntimeError("`inputs` argument to `backward()` cannot be empty.")
    if not all(isinstance(v, variable) and v.requires_grad for v in inputs):
        raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")  # (PyTorch's)
    return inputs


def grad_arguments(outputs, inputs, grad_outputs, variable=Variable):
    """(outputs, inputs, gradients by `check_roots`) of a `grad()` call, checked."""
    outputs = as_list(outputs, variable)
    inputs = as_list(as_inputs(inputs), variable)  # (GradientEdges as the Variables they stand for)
    for i, out in enumerate(outputs):  # (the outputs first, as PyTorch)
        if not isinstance(out, variable):
            raise TypeError(
                f"element {i} of the outputs is a {type(out).__name__}, not a {variable.__module__} Variable"
            )
        if not out.requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have a grad_fn")
    for v in inputs:
        if not isinstance(v, variable) or not v.requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")  # (PyTorch's)
    if grad_outputs is not None:
        grad_outputs = (
            [grad_outputs]
            if isinstance(grad_outputs, variable) or not isinstance(grad_outputs, (list, tuple))
            else list(grad_outputs)
        )
    return outputs, inputs, check_roots(outputs, grad_outputs, variable)


class Watch(weakref.ref):
    """What a Variable's gradient meets in a walk: `hooks(grad)` in order (`register_hook`; one returning a value
    replaces the gradient), then, on a non-leaf, `retains` (`retain_grad`), and on a leaf, after its `.grad`
    accumulated, `post` hooks of the Variable. A non-leaf's is its node's `retained`; a leaf's is in `LEAF_WATCH`."""

    __slots__ = ("hooks", "post", "retains")

    def __init__(self, var, callback=None):
        super().__init__(var, callback)
        self.hooks, self.post, self.retains = {}, {}, False


LEAF_WATCH: dict[int, Watch] = {}  # id(leaf) -> its Watch, while the leaf lives


def watch_of(var, make=True):
    """`var`'s Watch (made with `make`), or None."""
    node = var._node
    watch = LEAF_WATCH.get(id(var)) if node is None else node.retained
    if watch is not None and watch() is var:
        return watch
    if not make:
        return None
    if node is not None:  # a node's hooks stay with it when the Variable goes (PyTorch's grad_fn hooks)
        kept, node.retained = watch, Watch(var)
        if kept is not None:
            node.retained.hooks = kept.hooks
        return node.retained
    key = id(var)
    LEAF_WATCH[key] = watch = Watch(var, lambda _: LEAF_WATCH.pop(key, None))
    return watch


def _hooked(watch, g, wrap=None):
    """`g` through `watch`'s hooks in order, each one's value (if not None) replacing it; `wrap` makes a Variable of
    the side's kind (the client's) from an array a hook returned."""
    for hook in list(watch.hooks.values()):
        out = hook(g)
        if out is not None:
            if not hasattr(out, "shape"):
                raise TypeError(f"expected Variable, but hook returned '{type(out).__name__}'")  # (PyTorch's)
            if tuple(out.shape) != tuple(g.shape):
                raise RuntimeError(f"hook '{getattr(hook, '__name__', hook)}' has changed the size of value")
            if out.dtype != g.dtype:
                raise RuntimeError(
                    f"hook '{getattr(hook, '__name__', hook)}' has changed the type of value "
                    f"(was {type_name(g.dtype)} got {type_name(out.dtype)})"
                )
            if wrap is not None:
                g = out if isinstance(out, type(g)) else wrap(out)
            else:
                g = out if isinstance(out, Variable) else _result(as_array(out), None)
    return g


run_hooks = _hooked  # (the client's name for it: `client.autograd` runs a backward's hooks after its request)


def _watched(node, g, capture, into_grad):
    """A non-leaf's gradient after its hooks, kept in its `.grad` when it retains it (a backward)."""
    watch = node.retained
    g = _hooked(watch, g) if watch.hooks else g
    var = watch()
    if watch.retains and var is not None and var._node is node:  # (a grad() or backward(inputs=) too, as PyTorch's)
        into_grad(var, g)
    return g


def check_unused(result, allow_unused, materialize=None):
    """`result`, unless an input got no gradient and `allow_unused` is false; with `materialize` (a function
    of an input's index: `materialize_grads`), a missing gradient is what it makes."""
    for i, g in enumerate(result):
        if g is None and not allow_unused:
            raise RuntimeError(
                f"The differentiated Tensor at index {i} appears to not have been used in the graph. "
                "Set allow_unused=True if this is the desired behavior."
            )
    return result if materialize is None else tuple(materialize(i) if g is None else g for i, g in enumerate(result))


def unused_rule(allow_unused, materialize_grads, only_inputs=True):
    """`allow_unused` as PyTorch reads it: it defaults to `materialize_grads` and may not be False beside it.
    (`only_inputs`, deprecated, is ignored with PyTorch's warning when False.)"""
    if not only_inputs:
        warnings.warn(
            "only_inputs argument is deprecated and is ignored now (defaults to True). To accumulate gradient for "
            "other parts of the graph, please use torch.autograd.backward.",
            FutureWarning,
            stacklevel=3,
        )
    if materialize_grads and allow_unused is False:
        raise ValueError(
            "Expected allow_unused to be True or not passed when materialize_grads=True, but got: allow_unused=False."
        )
    return bool(materialize_grads if allow_unused is None else allow_unused)


def batched_rows(outputs, inputs, grad_outputs):
    """PyTorch's `is_grads_batched`: the first dimension of every grad_output is a batch, and PyTorch vmaps one
    vjp a row; here the rows run in turn (the same values). The outputs and inputs as lists, and each row's
    grad_outputs, after PyTorch's checks."""
    outputs, inputs = [list(x) if isinstance(x, (list, tuple)) else [x] for x in (outputs, inputs)]
    batched = grad_outputs if isinstance(grad_outputs, (list, tuple)) else [grad_outputs] * len(outputs)
    for i, (out, g) in enumerate(zip(outputs, batched, strict=True)):
        if g is None:
            raise ValueError(f"is_grads_batched=True needs every grad_output; grad_outputs[{i}] is None")
        if tuple(g.shape[1:]) != tuple(out.shape) or not len(g) or len(g) != len(batched[0]):
            raise RuntimeError(
                "If `is_grads_batched=True`, we interpret the first dimension of each grad_output as the batch "
                "dimension. The sizes of the remaining dimensions are expected to match the shape of corresponding "
                f"output, but a mismatch was detected: grad_output[{i}] has a shape of {tuple(g.shape)} and "
                f"output[{i}] has a shape of {tuple(out.shape)} (batches of {len(batched[0])} rows)."
            )
    return outputs, inputs, [[g[r] for g in batched] for r in range(len(batched[0]))]


def stacked_rows(results, stack, zeros, inputs, allow_unused, materialize):
    """Each input's gradients from the rows' `results`, stacked along the batch dimension; `zeros(input)` is a
    materialized gradient (unbatched, as PyTorch's)."""
    columns = tuple(None if col[0] is None else stack(col) for col in zip(*results))
    return check_unused(columns, allow_unused, (lambda j: zeros(inputs[j])) if materialize else None)


def _root_gradients(outputs, roots):
    grads = []
    for out, g in zip(outputs, roots):
        if g is None:
            data = out._data
            if type(data) is numpy.ndarray:  # numpy.ones_like's and empty_like's Python wrappers cost more
                ones = data.copy()
                ones.fill(1)
            else:
                ones = array_module(data).ones_like(data)
            if RECORDING:
                note_constant(ones)  # the implied gradient of a one-element output (engine.recording)
            grads.append(_result(ones, None))
        elif not isinstance(g, Variable):
            grads.append(_result(as_array(g, out.dtype), None))
        elif g._data.dtype != out._data.dtype:  # PyTorch casts a gradient to its output's dtype
            grads.append(trusted.cast(g, dtype=out._data.dtype.name))
        else:
            grads.append(g)
    return grads


def _fit(g, meta):
    """Sum a broadcast gradient back to its input's shape and dtype (the one place this happens).

    `meta` is the input's array (or its `Meta`): anything with `shape` and `dtype`."""
    shape = tuple(meta.shape)
    if g._data.shape != shape:
        g = trusted.sum_to(g, shape=shape)
    if g._data.dtype != meta.dtype:
        g = trusted.cast(g, dtype=meta.dtype.name)
    return g


def reachable(root_nodes):
    """(every node reachable from the roots, dependency counts: incoming edges per node).

    Works on any graph of `engine.node.Node`s (the client's grad_fn nodes are ones too)."""
    deps = {}
    seen = set(root_nodes)
    stack = list(seen)
    while stack:
        for edge in stack.pop().edges:
            if isinstance(edge, Node):
                if edge in deps:
                    deps[edge] += 1
                else:
                    deps[edge] = 1
                    if edge not in seen:
                        seen.add(edge)
                        stack.append(edge)
    return seen, deps


def nodes_reaching(nodes, target_nodes, target_leaves):
    """Nodes from which a target can be reached (so their vjps must run).

    Works on any graph whose nodes have `edges` (`walk` runs it on the client's grad_fn graph)."""
    parents = {}
    for node in nodes:
        for edge in node.edges:
            if edge is not None:
                parents.setdefault(id(edge), []).append(node)
    needed = set()
    stack = [n for n in target_nodes if n in nodes]
    for leaf_id in target_leaves:
        stack.extend(parents.get(leaf_id, ()))
    needed.update(stack)
    while stack:
        node = stack.pop()
        for parent in parents.get(id(node), ()):
            if parent not in needed:
                needed.add(parent)
                stack.append(parent)
    return needed


def _targets(nodes, inputs):
    """(the nodes whose vjps a grad() for `inputs` must run, {target node: id(target)})."""
    target_nodes = {v._node: id(v) for v in inputs if v._node is not None}
    return nodes_reaching(nodes, target_nodes, [id(v) for v in inputs if v._node is None]), target_nodes


def walk(outputs, targets=None):
    """The course of a backward from `outputs` (a grad() for `targets`) without computing, on a
    graph whose nodes tell before computing (the client's grad_fn graph): `node.check()` raises
    what the node's vjp would (freed, modified in place), `node.produces(i)` says whether it
    sends input i a gradient. Returns (the nodes whose vjps run, the Variables that get a
    gradient: for a backward the leaves reached and the retained (`retain_grad`) non-leaves of
    those nodes, for a grad() the targets reached)."""
    roots = list(dict.fromkeys(o._node for o in outputs if o._node is not None))
    capture = None if targets is None else {id(t) for t in targets}
    leaves = {id(o): o for o in outputs if o._node is None and (capture is None or id(o) in capture)}
    needed = None if targets is None else _targets(reachable(roots)[0], targets)[0]
    processed, seen, queue = [], set(roots), list(roots)
    while queue:
        node = queue.pop()
        processed.append(node)
        needs = [e is not None and (needed is None or id(e) in capture or e in needed) for e in node.edges]
        if any(needs):
            node.check()
        for i, edge in enumerate(node.edges):
            if not needs[i] or not node.produces(i):
                continue
            if isinstance(edge, Node):
                if edge not in seen:
                    seen.add(edge)
                    queue.append(edge)
            elif capture is None or id(edge) in capture:
                leaves[id(edge)] = edge
    if targets is not None:
        return processed, [
            t for t in dict.fromkeys(targets) if (id(t) in leaves if t._node is None else t._node in seen)
        ]
    retained = ((node, node.retained()) for node in processed if node.retained is not None and node.retained.retains)
    return processed, [*leaves.values(), *(v for node, v in retained if v is not None and v._node is node)]


class _Sink:
    """Where a backward's gradients land: leaves' `.grad`. The arrays in `handed` (the roots' gradients, and
    those kept in a `.grad`) are copied before being kept again, so a later in-place add changes one `.grad`."""

    def __init__(self, create_graph, grad_outputs):
        self.create_graph = create_graph
        self.copied: dict = {}  # id(Variable) -> the gradient its `.grad` is a copy of (create_graph)
        self.handed = {id(g._data): g._data for g in grad_outputs}

    def _owned(self, g):
        data = g._data
        flags = getattr(data, "flags", None)
        if id(data) in self.handed or (flags is not None and (not flags.owndata or not _writeable(flags))):
            data = data.copy()
        self.handed[id(data)] = data
        return Variable._result(data, None)

    def into_grad(self, var, g):
        if self.create_graph and (var._grad is None or id(var) in self.copied):  # PyTorch's recorded copy of the
            total = self.copied[id(var)] = g if var._grad is None else self.copied[id(var)] + g  # edges' sum
            copy = F.clone(total) if var._node else total.new_zeros(total.shape).copy_(total)  # (PyTorch's edges)
            var.grad = swap_named(copy, "CloneBackward0" if var._node else "CopyBackwards")
        else:
            accumulate_grad(var, g, self._owned, self._may_update, self.create_graph)

    def _may_update(self, grad):
        current = grad._data
        flags = getattr(current, "flags", None)
        return flags is not None and _writeable(flags) and id(current) not in self.handed


def _writeable(flags) -> bool:
    """An array's flags say it may be written in place. CuPy's have no `writeable` (a broadcast view can be
    written, aliased): there only an array that owns its memory may."""
    writeable = getattr(flags, "writeable", None)
    return flags.owndata if writeable is None else writeable


def accumulate_grad(var, g, owned, may_update, create_graph=False):
    """The one `.grad` rule (engine and client): the first gradient is kept (`owned(g)`: one the
    caller may update later), a later one added to it: in place when `may_update(var.grad)`
    and the shapes agree, out of place otherwise, as a recorded op when `create_graph` is set, and
    in place (its graph kept, as PyTorch's AccumulateGrad) when `.grad` requires grad but nothing records."""
    grad = var._grad  # (not `.grad`: a non-leaf's read warns)
    if grad is None:
        data, own = g._data, var._data  # one that fits its leaf: stored as PyTorch's AccumulateGrad stores it, not
        fits = own is not None and data is not None and data.shape == own.shape and data.dtype == own.dtype
        if fits and not create_graph:  # by `.grad`'s setter (its checks made on the arrays: no Size or DType call)
            var._grad = owned(g)
        else:
            var.grad = g if create_graph else owned(g)
    elif create_graph:
        var.grad = grad + g
    elif grad.requires_grad:  # (a create_graph gradient, then a plain backward: PyTorch's `+=`, its graph kept)
        grad.add_(g)
    else:
        data = g._array()
        if grad.shape == data.shape and may_update(grad):
            current = grad._array()
            current += data
        else:
            var.grad = type(g)._leaf(grad._array() + data)


def _needs(roots, inputs, capture, every_leaf=False):
    """A grad()'s pruning: ({node reachable from `roots`: its vjp's `needs` (its edges, None where that
    input leads to no target), or () where none does}, {target node: id(target)}). One pass, post-order;
    None instead of the needs where nothing is pruned (the common case: gradients for every leaf reached,
    known beforehand with `every_leaf`: see `grad_of_every_leaf`)."""
    target_nodes = {}
    for v in inputs:  # (a loop: a comprehension is a call of its own)
        if v._node is not None:
            target_nodes[v._node] = id(v)
    if not target_nodes and (every_leaf or _leaves_all_in(roots, capture)):
        return None, target_nodes  # every input a leaf and every leaf reached an input: no pruning
    needs = {}
    stack = list(roots)
    while stack:
        node = stack[-1]
        if node in needs:
            stack.pop()
            continue
        todo = [e for e in node.edges if isinstance(e, Node) and e not in needs]
        if todo:
            stack.extend(todo)
            continue
        stack.pop()
        mine = tuple(
            [
                (e if needs[e] or e in target_nodes else None)
                if isinstance(e, Node)
                else (e if e is not None and id(e) in capture else None)
                for e in node.edges
            ]
        )
        needs[node] = mine if any(e is not None for e in mine) else ()
    return needs, target_nodes


def _leaves_all_in(roots, capture):
    """Whether every leaf that the graph from `roots` sends a gradient to is in `capture` (by id)."""
    seen = set(roots)
    nodes = list(seen)
    for node in nodes:  # (grows while read: no pops)
        for edge in node.edges:
            if edge is None or edge in seen:
                continue
            if isinstance(edge, Node):
                seen.add(edge)
                nodes.append(edge)
            elif id(edge) not in capture:
                return False
    return True


def _to_leaf(var, g, capture, into_grad, hooked=None):
    """A leaf's gradient: into its `.grad` (a backward), or summed in `capture` where it is a grad()'s input. A
    leaf with hooks (`hooked`: made where any leaf has them) sums its gradients until the walk ends, as
    PyTorch's AccumulateGrad does, and `_hooked_leaves` delivers them."""
    if capture is None:
        if hooked is not None and id(var) in LEAF_WATCH:
            hooked[id(var)] = (var, g) if id(var) not in hooked else (var, hooked[id(var)][1] + g)
        else:
            into_grad(var, g)
    elif id(var) in capture:
        old = capture[id(var)]
        if old is not None and not (grad_state.enabled or FORWARD or RECORDING):  # the walk's `plain` sum: arrays'
            old, g = None, _result(_wrap(old._data + g._data, g._data), None)
        capture[id(var)] = g if old is None else old + g


def _hooked_leaves(hooked, capture, into_grad):
    """The gradients of leaves with hooks: through their hooks, into `.grad` (then their post hooks) or
    `capture`; a grad() runs the hooks of its inputs only."""
    for key, (var, g) in hooked.items():
        watch = LEAF_WATCH[key]
        g = _hooked(watch, g) if watch() is var else g
        if capture is None:
            into_grad(var, g)
            for hook in list(watch.post.values()):
                _post_hooked(hook(var))
    if capture is not None:
        for key, g in capture.items():
            watch = LEAF_WATCH.get(key)
            if g is not None and watch is not None:
                capture[key] = _hooked(watch, g)


def _post_hooked(result) -> None:
    """PyTorch's refusal of a post-accumulate-grad hook that returned something."""
    if isinstance(result, Variable):
        raise RuntimeError("Tensor post accumulate grad hooks should return None.")
    if result is not None:
        raise TypeError(f"expected Variable, but hook returned '{type(result).__name__}'")


def run_backward(outputs, grad_outputs, retain_graph, create_graph, inputs=None, every_leaf=False):
    """Propagate gradients from `outputs`. With `inputs`, returns their gradients instead of
    accumulating into `.grad` (None where an input was not reached).

    Nodes run latest first (by `seq`, as PyTorch's ready queue does): a node's consumers were made
    after it, so by its turn every consumer that sends it a gradient has run, with no count of
    dependencies made beforehand. A node enters the heap with its first gradient; one that gets
    none never runs. The first node a node's vjp reaches waits beside the heap (`ready`) and runs
    next unless the heap holds a later one: a chain, where each node reaches one, never uses the
    heap. The loop stays in this one function: it is the hot path of every backward, and a call
    per node or per edge would cost more than its body."""
    capture = into_grad = needed = None
    if inputs is None:
        into_grad = _Sink(create_graph, grad_outputs).into_grad
    else:
        capture = dict.fromkeys(map(id, inputs))
    grads, heap, hooked = {}, [], {} if LEAF_WATCH else None
    for out, g in zip(outputs, grad_outputs):
        node = out._node
        if node is None:
            _to_leaf(out, g, capture, into_grad, hooked)
        elif node in grads:
            grads[node] = grads[node] + g
        else:
            grads[node] = g
            heap.append((-node.seq, node))
    if inputs is not None:
        needed, capture_nodes = _needs(list(grads), inputs, capture, every_leaf)
    heapify(heap)
    check = interrupt.current()
    nan_check = nan_check_on()  # anomaly mode, read once a backward
    plain = not (create_graph or FORWARD or RECORDING)  # gradients are plain arrays' sums (no graph, no tangents)
    mode = grad_state.enabled  # grad mode is create_graph inside (`enable_grad`/`no_grad`'s work, without their calls)
    grad_state.enabled = create_graph
    try:
        ready = heappop(heap)[1] if heap else None
        while ready is not None:
            if check is not None:
                check()
            node, ready = ready, None
            if RECORDING:
                note_where(node.name)
            g = grads.pop(node)
            if node.retained is not None:
                if into_grad is None:  # (a grad()'s: only a retained non-leaf's `.grad` needs it, as PyTorch's)
                    into_grad = _Sink(create_graph, grad_outputs).into_grad
                g = _watched(node, g, capture, into_grad)
            if needed is None:
                needs = node.edges
            else:
                if node in capture_nodes:
                    key = capture_nodes[node]
                    capture[key] = g if capture[key] is None else capture[key] + g
                needs = needed[node]
            in_grads = node.vjp(g, needs) if needs else ()
            if nan_check:
                check_nan(node, in_grads)
            saved = node.saved if node.saved is not None else (None,) * len(needs)  # freed: read only with a gradient
            fits = node.fits  # (a node's gradient has its output's shape and dtype: roots and hooks are checked)
            for edge, gi, given in zip(needs, in_grads, saved):
                if gi is None or edge is None:
                    continue
                if not fits:
                    data, meta = gi._data, given if type(given) is Meta else given._data  # (Meta's _data: a property)
                    if data.shape != meta.shape or (data.dtype is not meta.dtype and data.dtype != meta.dtype):
                        gi = _fit(gi, meta)
                    data = meta = None  # (a fitting node after this one would leave them holding their arrays)
                if isinstance(edge, Variable):
                    _to_leaf(edge, gi, capture, into_grad, hooked)
                    continue
                previous = grads.get(edge)
                if previous is None:
                    grads[edge] = gi
                    if ready is None:
                        ready = edge
                    else:
                        heappush(heap, (-edge.seq, edge))
                elif plain:  # the sum on the arrays: nothing would record it or see it (apply_op's work, skipped)
                    total = previous._data + gi._data
                    grads[edge] = _result(total if type(total) is ndarray else _wrap(total, gi._data), None)
                else:
                    grads[edge] = previous + gi
            if not retain_graph:  # `OpNode.free`'s two common cases inline (a call per node costs more)
                freeing = node.freeing
                if freeing == "all":
                    node.saved = node.out_data = node.versions = None
                elif freeing == "none":
                    node.out_data = node.versions = None
                else:
                    node.free()
            if heap:
                ready = heappop(heap)[1] if ready is None else heappushpop(heap, (-ready.seq, ready))[1]
        if hooked is not None:
            _hooked_leaves(hooked, capture, into_grad)
    finally:
        grad_state.enabled = mode
    return capture


def backward(
    outputs: Variable | Sequence[Variable],
    grad_tensors: Operand | Sequence[Operand | None] | None = None,  # (PyTorch's name)
    retain_graph: bool | None = None,
    create_graph: bool = False,
    inputs: Variable | Sequence[Variable] | None = None,
) -> None:
    """Gradients of `outputs` accumulated into the `.grad` of every leaf that requires grad (of `inputs` only,
    leaves or not, when given)."""
    retain = create_graph if retain_graph is None else retain_graph
    one = outputs[0] if type(outputs) is list and len(outputs) == 1 and grad_tensors is inputs is None else None
    if type(one) is Variable and one._requires_grad and one._data.size == 1:  # `loss.backward()` (`[loss]`):
        run_backward(outputs, _root_gradients(outputs, (None,)), retain, create_graph)  # `backward_arguments`' checks
        return  # passed, without their lists and Size
    outputs, roots = backward_arguments(outputs, grad_tensors)
    inputs, seeds = backward_inputs(inputs), _root_gradients(outputs, roots)
    captured = run_backward(outputs, seeds, retain, create_graph, inputs)
    if inputs is not None:
        into_grad = _Sink(create_graph, seeds).into_grad
        for v in dict.fromkeys(inputs):
            if captured[id(v)] is not None:
                into_grad(v, captured[id(v)])


def grad(
    outputs: Variable | Sequence[Variable],
    inputs: Variable | Sequence[Variable],
    grad_outputs: Operand | Sequence[Operand | None] | None = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    allow_unused: bool | None = None,
    materialize_grads: bool = False,
    is_grads_batched: bool = False,
    *,
    only_inputs: bool = True,
) -> tuple[Variable, ...]:
    """Gradients of `outputs` with respect to `inputs`, as a tuple; `.grad` is not touched. An input the
    outputs don't reach gets None (with `allow_unused`), or zeros with `materialize_grads`."""
    zeros = lambda v: Variable(array_module(v._data).zeros_like(v._data), create_graph)  # noqa: E731
    allow_unused = unused_rule(allow_unused, materialize_grads, only_inputs)
    if is_grads_batched:
        outputs, inputs, rows = batched_rows(outputs, inputs, grad_outputs)
        last = len(rows) - 1
        results = [
            grad(outputs, inputs, row, retain_graph if r == last else True, create_graph, True)
            for r, row in enumerate(rows)
        ]
        return stacked_rows(results, F.stack, zeros, inputs, allow_unused, materialize_grads)  # type: ignore[no-any-return]
    outputs, inputs, roots = grad_arguments(outputs, inputs, grad_outputs)
    if not inputs:
        raise RuntimeError("`inputs` argument to `grad()` cannot be empty.")  # (PyTorch's)
    result = _gradients(outputs, inputs, roots, retain_graph, create_graph)
    return check_unused(tuple(result), allow_unused, (lambda i: zeros(inputs[i])) if materialize_grads else None)


def grad_of_every_leaf(outputs, inputs, grad_outputs, retain_graph) -> tuple:
    """`grad(outputs, inputs, grad_outputs, retain_graph, allow_unused=True)` for a caller whose `inputs`
    are every leaf that requires grad in the graph of `outputs` (the wire's executions), so the walk
    skips checking that (`_leaves_all_in`, a pass over the whole graph)."""
    outputs, inputs, roots = grad_arguments(outputs, inputs, grad_outputs)
    return tuple(_gradients(outputs, inputs, roots, retain_graph, False, True))


def _gradients(outputs, inputs, roots, retain_graph, create_graph, every_leaf=False) -> list:
    """grad()'s walk and its gradients (None where an input got none)."""
    captured = run_backward(
        outputs,
        _root_gradients(outputs, roots),
        create_graph if retain_graph is None else retain_graph,
        create_graph,
        inputs,
        every_leaf,
    )
    if create_graph:
        result = [captured[id(v)] for v in inputs]
    else:  # detached
        result = [None if (g := captured[id(v)]) is None else _result(g._data, None) for v in inputs]
        if FORWARD:  # a detached gradient keeps its tangent, as PyTorch's does
            for r, v in zip(result, inputs):
                if r is not None and (t := FORWARD[0].tangent(captured[id(v)])) is not None:
                    FORWARD[0].set(r, t)
    return result
