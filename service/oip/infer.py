"""An Open Inference Protocol infer request as a wire `Request`, and a wire `Result` as its response.

The requested `outputs` choose the work: graph outputs only is a forward; any `grad:<input>`
is a forward and backward with those inputs as `wrt`. No `outputs` asks for every output the
model's metadata lists, gradients included. `grad_output:<output>` input tensors seed the
backward (needed for outputs that are not scalars). Each output is binary when its
`parameters.binary_data` says so, else when the request's `parameters.binary_data_output` does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy

from engine import backend
from engine.attrs import shown
from service.oip.repository import GRAD, GRAD_OUTPUT, Model
from wire import codec
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


def decode_infer(model: Model, header, tail, limits, admits=None) -> Infer:
    """An `Infer` from a parsed JSON header and the body's binary tail (None for plain JSON);
    `admits(nbytes)` says whether the model's plan may keep a new input signature's Shapes."""
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
    request = decode_request({"id": header.get("id"), "inputs": tensors}, tail, limits)
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


def execute(executor, infer: Infer):
    """The wire Result of an Infer, on the executor that runs /forward and /backward. A missing
    or misshapen seed is reported under the name this protocol gives it."""
    with numpy.errstate(all="ignore"):
        if infer.kind == "forward":
            return executor.forward(infer.request)
        try:
            return executor.backward(infer.request)
        except GraphError as err:
            if err.field != "grad_outputs":
                raise
            hint = f" (here: an input tensor named '{GRAD_OUTPUT}{err.node}')" if err.node else ""
            raise RequestError(f"{err}{hint}", node=err.node, field="inputs", kind=err.kind) from None


def encode_infer(model: Model, infer: Infer, result, max_json_elements: int) -> tuple[list, int | None]:
    """([body pieces], header length or None) of an infer response: JSON, or the binary
    extension when any output is binary. JSON outputs over `max_json_elements` in all are refused
    (413): encoding them would hold the server for long."""
    arrays = dict(result.outputs)
    if result.grads:
        arrays.update((GRAD + name, grad) for name, grad in result.grads.items())
    in_json = sum(int(arrays[name].size) for name, binary in zip(infer.outputs, infer.binary) if not binary)
    if in_json > max_json_elements:
        raise RequestError(
            f"the JSON outputs would hold {in_json} elements, over the limit of {max_json_elements} "
            "(max_json_output_elements): ask for them in binary (parameters.binary_data)",
            field="outputs",
            kind="too_large",
        )
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
