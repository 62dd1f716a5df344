"""The engine's public API for the layers above it (`wire`, `service`, `client`): the narrow waist.

What is public in `engine`, and what the layers above may import (`tests/test_architecture.py`
holds them to it with an import-linter `forbidden` contract built from `PUBLIC_MODULES`):

* `engine` itself (the PyTorch-style namespace: `engine.Variable`, `engine.exp`, `engine.no_grad`...),
* `engine.api` (this module: everything else the layers above need, by name),
* `engine.backend` (NumPy or CuPy: choosing the device, moving arrays),
* `engine.nn`, `engine.optim` and `engine.utils` with their submodules (torch.nn, torch.optim,
  torch.utils.data; written once for both Variables, so the client re-exports them).

Every other engine module (`variable`, `node`, `function`, `autograd`, `registry`, `surface`,
`shapes`, `attrs`, `indexing`, `grad_mode`, `ops`...) is internal: it may change shape without
notice, and code above the engine reads an engine object's state only through the functions here,
never through its underscore attributes (`Variable._data`, `._node`, a node's `saved`, a custom
Function's `ctx`).

The sections below: values (wrapping and unwrapping arrays), ops (apply one by registry name, the
registry and its helpers), graph introspection (a value's node, a node's name, edges and saved
values, what a value and its graph hold, the backward's walk), autograd and grad mode, custom
Functions, attributes, shapes and index keys, the Variable surface (for a second side such as the
client's lazy Variable) and the torch-named helpers written once for both Variables.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from engine import anomaly_mode, profiling, promotion
from engine import interrupt as _interrupt
from engine import shapes as _shapes
from engine.attrs import INT64, AttrError, shown
from engine.autograd import (
    accumulate_grad,
    backward_arguments,
    backward_inputs,
    batched_rows,
    check_unused,
    grad,
    grad_arguments,
    grad_of_every_leaf,
    run_hooks,
    stacked_rows,
    unused_rule,
    walk,
    watch_of,
)
from engine.autograd_functional import Functional
from engine.autograd_graph import namespace as autograd_graph
from engine.composite import composite_grad_fn
from engine.costs import ELEMENT_OP, ENV, Factors
from engine.devices import Device
from engine.distribution_families import bind as bind_distributions
from engine.dtypes import DType
from engine.dtypes import default as default_dtype
from engine.dtypes import of as dtype_of
from engine.fft_functions import bind as bind_fft
from engine.forward_ad import UnpackedDualTensor, check_dual
from engine.func import Transforms, vmap_with
from engine.function import FUNCTION_NAME, LEAF_DIRTY, Function, FunctionBase, FunctionCtx, once_differentiable
from engine.function import node_class as function_node_class
from engine.grad_fn_names import BY_CALL as GRAD_FN_BY_CALL
from engine.grad_fn_names import call_name as grad_fn_call_name
from engine.grad_mode import INFERENCE, INFERENCE_MADE, GradMode, enable_grad, is_grad_enabled, no_grad
from engine.gradcheck import _GRADCHECK_KEYWORDS, _GRADGRADCHECK_KEYWORDS, GradcheckError, _accept, _compare
from engine.indexing import from_key, tensor_count, to_key
from engine.linalg_functions import bind as bind_linalg
from engine.mixed_precision import bind as bind_mixed_precision
from engine.module_paths import bind as bind_module_paths
from engine.node import RECORDING as _RECORDING
from engine.node import GraphFreedError, Meta, Node, check_output, check_saved, reads_output, refuse_saved_inference
from engine.recording import as_array as array_like
from engine.recording import derived, note_constant, note_input, note_where, recording
from engine.registry import OPS, OpDef, coerce, gives_floats, grad_fn_name, make_function, trusted
from engine.runtime import bind as bind_runtime
from engine.saving import loader, save
from engine.shapes import Bounded, ShapeError
from engine.special_functions import bind as bind_special
from engine.surface import NoValue, Side, exported
from engine.surface import install as install_surface
from engine.surface_types import Size, VariableSurface
from engine.tensor_data import same_array, tensor_data
from engine.variable import Variable, as_array, host_array
from engine.views import alias, check_rebase, live, positions, view_of
from engine.views import note as note_view

if TYPE_CHECKING:
    from engine.surface_types import Operand as Operand  # re-exported for annotations

PUBLIC_MODULES = ("engine", "engine.api", "engine.backend", "engine.nn", "engine.optim", "engine.utils")
"""The engine modules that the layers above may import (with the submodules of `engine.nn`, `engine.optim` and
`engine.utils`)."""


# --- values: wrapping and unwrapping arrays ------------------------------------------------------
def variable_of(array: Any, requires_grad: bool = False) -> Variable:
    """A leaf Variable holding `array` (an array of the active backend) as is: no copy, no conversion."""
    v = Variable._result(array, None)
    if requires_grad:
        v._requires_grad = True
    return v


def array_of(v: Variable) -> Any:
    """The array a Variable holds (the active backend's; shared, not copied: not to be mutated)."""
    return v._data


def node_of(v: Variable) -> Node | None:
    """The node that computed `v` (its `grad_fn`), None for a leaf."""
    return v._node


def version_of(v: Any) -> int:
    """How many times `v` was modified in place (either side's Variable)."""
    return v._version


# --- ops ---------------------------------------------------------------------------------------
def apply(op_name: str, inputs: Iterable[Any], attrs: dict | None = None) -> Any:
    """The registry op `op_name` applied to `inputs` (Variables, arrays or Python numbers, coerced
    by the engine's rules) with checked attributes (`OPS[op_name].check_attrs(...)`; None: the defaults).
    Records a node when grad mode is on and an input requires grad, as the op's function would."""
    op = OPS[op_name]
    return op.call(coerce(list(inputs)), op.check_attrs({}) if attrs is None else attrs)


# --- graph introspection -----------------------------------------------------------------------
def node_name(node: Any) -> str:
    """A node's name, as PyTorch shows a grad_fn: `MulBackward0`, `<Function>Backward` for a custom Function."""
    return node.name


def node_edges(node: Any) -> tuple:
    """Where the gradient of each of a node's inputs goes: a node, a leaf Variable, or None."""
    return node.edges


def saved_values(node: Any) -> list:
    """What a node keeps alive for its backward, any node: a registry op's saved inputs (and output,
    when its vjps read it), a custom Function's `ctx.save_for_backward` values and any Variable set
    on its ctx. Variables, or arrays where the node keeps only the array."""
    return node.holds()


def held_arrays(variables: Iterable[Any], nodes: list | None = None) -> Iterator[Any]:
    """Every array that `variables` (Variables; other values are skipped) and the graphs recorded
    behind them keep alive, each node's saved values included; the nodes walked are appended to
    `nodes` when given."""
    seen: set[int] = set()
    stack = []
    for v in variables:
        if isinstance(v, Variable):
            yield v._data
            if v._node is not None:
                stack.append(v._node)
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if nodes is not None:
            nodes.append(node)
        for held in node.holds():
            yield held._data if isinstance(held, Variable) else held
        stack.extend(edge for edge in node.edges if edge is not None and not isinstance(edge, Variable))


def recording_active() -> bool:
    """Whether this thread's engine steps are being recorded (`recording()`, see engine.recording)."""
    return bool(_RECORDING)


def current_interrupt() -> Any:
    """The cancel check set for this thread (`interrupt.set_hook`), or None: long loops call it."""
    return _interrupt.current()


set_interrupt = _interrupt.set_hook

# --- shapes ------------------------------------------------------------------------------------
shape_proxy = _shapes.proxy  # (shape, dtype) -> a zero-strided array of that shape, for indexing rules

# --- gradcheck helpers, written once for both Variables ------------------------
GRADCHECK_KEYWORDS = _GRADCHECK_KEYWORDS
GRADGRADCHECK_KEYWORDS = _GRADGRADCHECK_KEYWORDS
accept_keywords = _accept  # (name, given, known): TypeError for an unknown keyword argument
compare_jacobians = _compare  # (numerical, analytical, wrt, mode, atol, rtol, raise_exception) -> bool

__all__ = [
    "make_function",
    "note_view",
    "check_rebase",
    "alias",
    "live",
    "positions",
    "view_of",
    "PUBLIC_MODULES",
    # values
    "Variable",
    "Size",
    "VariableSurface",
    "variable_of",
    "array_of",
    "node_of",
    "version_of",
    "as_array",
    "host_array",
    "same_array",
    "tensor_data",
    "Device",
    "DType",
    "dtype_of",
    "default_dtype",
    # ops
    "OPS",
    "OpDef",
    "apply",
    "coerce",
    "gives_floats",
    "promotion",
    "grad_fn_name",
    "grad_fn_call_name",
    "GRAD_FN_BY_CALL",
    "trusted",
    "composite_grad_fn",
    "reads_output",
    # graph
    "Node",
    "Meta",
    "node_name",
    "node_edges",
    "saved_values",
    "held_arrays",
    "check_saved",
    "check_output",
    "GraphFreedError",
    "walk",
    "current_interrupt",
    "array_like",
    "derived",
    "note_constant",
    "note_input",
    "note_where",
    "recording",
    "recording_active",
    "set_interrupt",
    # autograd and grad mode
    "grad",
    "accumulate_grad",
    "backward_arguments",
    "backward_inputs",
    "grad_arguments",
    "grad_of_every_leaf",
    "batched_rows",
    "check_unused",
    "stacked_rows",
    "unused_rule",
    "run_hooks",
    "watch_of",
    "GradMode",
    "INFERENCE",
    "INFERENCE_MADE",
    "refuse_saved_inference",
    "no_grad",
    "enable_grad",
    "is_grad_enabled",
    # custom Functions
    "Function",
    "FunctionBase",
    "FunctionCtx",
    "once_differentiable",
    "FUNCTION_NAME",
    "LEAF_DIRTY",
    "function_node_class",
    # attributes, shapes, index keys
    "shown",
    "AttrError",
    "INT64",
    "ShapeError",
    "Bounded",
    "shape_proxy",
    "from_key",
    "to_key",
    "tensor_count",
    # work model
    "ELEMENT_OP",
    "ENV",
    "Factors",
    # the surface, for a second side
    "Side",
    "install_surface",
    "exported",
    "NoValue",
    # torch-named helpers written once for both Variables
    "Functional",
    "vmap_with",
    "Transforms",
    "bind_mixed_precision",
    "bind_runtime",
    "bind_distributions",
    "bind_special",
    "anomaly_mode",
    "autograd_graph",
    "profiling",
    "bind_linalg",
    "bind_fft",
    "bind_module_paths",
    "save",
    "loader",
    "UnpackedDualTensor",
    "check_dual",
    "GradcheckError",
    "GRADCHECK_KEYWORDS",
    "GRADGRADCHECK_KEYWORDS",
    "accept_keywords",
    "compare_jacobians",
]
