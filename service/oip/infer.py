"""An Open Inference Protocol infer request as a wire `Request`, and a wire `Result` as its response.

The requested `outputs` choose the work: graph outputs only is a forward; any `grad:<input>`
is a forward and backward with those inputs as `wrt`. No `outputs` asks for every output the
model's metadata lists, gradients included. `grad_output:<output>` input tensors seed the
backward (needed for outputs that are not scalars). Each output is binary when its
`parameters.binary_data` says so, else when the request's `parameters.binary_data_output` does.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

from engine import backend
from engine.api import shown
from service.oip.repository import GRAD, GRAD_OUTPUT, Model
from wire import codec, handler
from wire.admission import JsonAnswer
from wire.errors import GraphError, RequestError
from wire.messages import Request, decode_request

INFER_KEYS = {
    "id",
    "inputs",
    "outputs",
    "parameters",
    "model_name",
    "model_version",
}  # KServe's client sends model_name
UNSUPPORTED = ("shared_memory_region", "classification")


@dataclass
class Infer:
    """A decoded infer request: the wire request, its kind and the outputs to answer with."""

    request: Request
    kind: str  # "forward" or "backward"
    outputs: tuple  # names, in response order
    binary: tuple  # per output: binary or JSON


def _flag(params: dict, key: str, where: str, default: bool) -> bool:
    value = params.get(key, default)
    if not isinstance(value, bool):
        raise RequestError(f"{where}.{key} must be true or false", field=f"{where}.{key}")
    return value


def _parameters(obj: dict, where: str, unsupported=UNSUPPORTED) -> dict:
    """obj's `parameters` (where = its path, e.g. "outputs[0].parameters"), refusing the
    Triton features gradserve lacks (shared memory, classification)."""
    params = obj.get("parameters") or {}
    if not isinstance(params, dict):
        raise RequestError(f"'{where}' must be an object", field=where)
    for key in unsupported:
        if key in params:
            raise RequestError(f"{where}.{key} is not supported by gradserve", field=f"{where}.{key}")
    return params


def _selection(model: Model, header: dict, binary_default: bool) -> tuple[tuple, tuple]:
    requested = header.get("outputs")
    if requested is None:
        return model.output_names, (binary_default,) * len(model.outputs)
    if not isinstance(requested, list) or not requested:
        raise RequestError("'outputs' must be a non-empty list of {name, parameters}", field="outputs")
    known = set(model.output_names)
    names, binary = [], []
    for i, obj in enumerate(requested):
        where = f"outputs[{i}]"
        name = obj.get("name") if isinstance(obj, dict) else None
        if not isinstance(name, str):
            raise RequestError(f"{where} must be an object with a 'name'", field=f"{where}.name")
        if name not in known:
            raise RequestError(
                f"model {shown(model.name)} has no output {shown(name)}; its outputs: {', '.join(model.output_names)}",
                field=f"{where}.name",
            )
        if name in names:
            raise RequestError(f"output {shown(name)} is requested twice", field=f"{where}.name")
        names.append(name)
        binary.append(
            _flag(_parameters(obj, f"{where}.parameters"), "binary_data", f"{where}.parameters", binary_default)
        )
    return tuple(names), tuple(binary)


def decode_infer(model: Model, header, tail, limits, admits=None, aligned: bool = True) -> Infer:
    """An `Infer` from a parsed JSON header and the body's binary tail (None for plain JSON);
    `admits(nbytes)` says whether the model's plan may keep a new input signature's Shapes;
    `aligned`: see `wire.handler.decode`."""
    if not isinstance(header, dict):
        raise RequestError("the body must be a JSON object", kind="malformed")
    unknown = set(header) - INFER_KEYS
    if unknown:
        raise RequestError(f"unknown field(s) in infer request: {', '.join(sorted(unknown))}", field=min(unknown))
    for key, expected in (("model_name", model.name), ("model_version", model.version)):
        if header.get(key, expected) != expected:
            raise RequestError(f"{key} {shown(header[key])} does not match the path's {shown(expected)}", field=key)
    binary_default = _flag(_parameters(header, "parameters", ()), "binary_data_output", "parameters", False)
    names, binary = _selection(model, header, binary_default)
    tensors = header.get("inputs")
    if isinstance(tensors, list):
        for i, obj in enumerate(tensors):
            if isinstance(obj, dict):
                _parameters(obj, f"inputs[{i}].parameters")
    request = decode_request({"id": header.get("id"), "inputs": tensors}, tail, limits, aligned)
    seeds = {}
    for name in [n for n in request.inputs if n.startswith(GRAD_OUTPUT)]:
        output = name[len(GRAD_OUTPUT) :]
        if output not in model.graph_outputs:
            raise RequestError(
                f"input {shown(name)}: {shown(output)} is not an output of model {shown(model.name)}",
                node=output,
                field="inputs",
            )
        seeds[output] = request.inputs.pop(name)
    if model.checks_shapes:
        _check_shapes(model, request.inputs)
    for name, array in model.bound.items():  # the parameters the model holds
        if name in request.inputs:
            raise RequestError(
                f"input {shown(name)} is a parameter that model {shown(model.name)} holds: it cannot be sent",
                node=name,
                field="inputs",
            )
        request.inputs[name] = array
    wrt = [name[len(GRAD) :] for name in names if name.startswith(GRAD)]
    if seeds and not wrt:
        raise RequestError(f"grad_output tensors are given but no {GRAD}<input> output is requested", field="inputs")
    request.held = (model.plan, model.key, admits)  # the registered plan itself: never re-serialised or re-parsed
    request.grad_outputs = seeds
    request.wrt = wrt or None
    request.json_answer = json_answer(names, binary)
    return Infer(request, "backward" if wrt else "forward", names, binary)


def _check_shapes(model: Model, arrays: dict) -> None:
    """The tensors against the shapes the model publishes (-1: any size there)."""
    for spec in model.inputs:
        array = arrays.get(spec.name)
        if array is None or spec.shape == (-1,):
            continue
        shape = tuple(array.shape)
        if len(shape) != len(spec.shape) or any(d not in (-1, s) for d, s in zip(spec.shape, shape)):
            raise RequestError(
                f"input {shown(spec.name)} has shape {list(shape)}; model {shown(model.name)} takes {list(spec.shape)} "
                "(-1: any size)",
                node=spec.name,
                field="inputs",
            )


def json_answer(names: tuple, binary: tuple) -> JsonAnswer | None:
    """The outputs an infer response encodes as JSON (graph outputs, and gradients by their input's
    name), as admission bounds them (`wire.admission`); None when every output is binary."""
    in_json = [name for name, is_binary in zip(names, binary) if not is_binary]
    if not in_json:
        return None
    return JsonAnswer(
        tuple(n for n in in_json if not n.startswith(GRAD)),
        tuple(n[len(GRAD) :] for n in in_json if n.startswith(GRAD)),
        "the JSON outputs would hold {elements} elements, over the limit of {limit} (max_json_output_elements): "
        "ask for them in binary (parameters.binary_data)",
        "outputs",
    )


def admit(executor, infer: Infer, cheap_steps: int | None = None):
    """The `wire.admission.Ticket` of an Infer, admitted as /forward and /backward requests are."""
    with _seeds_named():
        return executor.admit(infer.request, infer.kind, cheap_steps)


def execute(executor, ticket):
    """The wire Result of an admitted Infer, by the pipeline that runs /forward and /backward
    (`wire.handler.execute`)."""
    with _seeds_named():
        return handler.execute(executor, ticket)


@contextmanager
def _seeds_named():
    """A missing or misshapen seed is reported under the name this protocol gives it."""
    try:
        yield
    except GraphError as err:
        if err.field != "grad_outputs":
            raise
        hint = f" (here: an input tensor named '{GRAD_OUTPUT}{err.node}')" if err.node else ""
        hint += (
            ", or request only the forward outputs you want (no 'outputs' asks for every output, gradients included)"
        )
        raise RequestError(f"{err}{hint}", node=err.node, field="inputs", kind=err.kind) from None


def encode_infer(model: Model, infer: Infer, result) -> tuple[list, int | None]:
    """([body pieces], header length or None) of an infer response: JSON, or the binary
    extension when any output is binary. (Its JSON outputs were bounded by admission, `json_answer`.)"""
    arrays = dict(result.outputs)
    if result.grads:
        arrays.update((GRAD + name, grad) for name, grad in result.grads.items())
    buffers, outputs = [], []
    for name, binary in zip(infer.outputs, infer.binary):
        array = backend.to_numpy(arrays[name])
        outputs.append(codec.encode_binary(name, array, buffers) if binary else codec.encode_json(name, array))
    body = {"model_name": model.name, "model_version": model.version, "outputs": outputs}
    if infer.request.id is not None:
        body["id"] = infer.request.id
    if any(infer.binary):
        return codec.body_parts(body, buffers)
    return [codec.dumps(body)], None
