"""ONNX models in the model repository: from a load request's files, or a directory at start.

Triton's load API carries a model's files in the request's parameters (`"file:1/model.onnx":
base64`), with `parameters.config` its model configuration (JSON); `gradserve serve
--model-repository DIR` loads Triton's layout (`DIR/<name>/config.pbtxt` or `config.json`,
optional, and `DIR/<name>/<version>/model.onnx`, the highest version). Either way the bytes go
through `wire.onnx.import_model` (bounded: bytes, nodes, initializers, no external data; no
path from a request is opened), the graph it writes is planned by the executor's plan cache like
any registered graph, and its planned cost for the declared shapes (a dynamic dimension taken as
1) is checked against the request budgets before the model is registered. The Model publishes
the ONNX inputs' and outputs' datatypes and shapes (-1 where dynamic) and one `grad:<name>`
output per floating input, and per parameter when the configuration asks for them
(`parameter_gradients`). The floating initializers are held by the model (`Model.bound`, not
in the graph's JSON) and filled into every infer; a request cannot send them.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import os
import re

import numpy

from service.oip.model_config import flag, parse_json, parse_pbtxt
from service.oip.repository import GRAD, Model, TensorSpec, check_name, model_of
from wire.admission import check_budgets
from wire.errors import GraphError, RequestError
from wire.infer import check_request_inputs
from wire.onnx.reader import shown

PLATFORM = "gradserve_onnx"
FILE_KEY = re.compile(r"file:([0-9]{1,9})/([A-Za-z0-9_.\-]{1,128}\.onnx)")
PARAMETER_GRADIENTS = "parameter_gradients"


def onnx_limits(settings):
    from wire.onnx.reader import OnnxLimits

    return OnnxLimits(
        settings.max_onnx_model_bytes, settings.max_onnx_nodes, settings.max_tensor_elements, settings.max_nodes
    )


def is_file_load(params: dict) -> bool:
    return any(isinstance(key, str) and key.startswith("file:") for key in params)


def files_of(params: dict, max_bytes: int) -> tuple[str, bytes]:
    """(version, model bytes) of a load request's parameters: exactly one `file:<version>/<name>.onnx`."""
    keys = [k for k in params if k != "config"]
    bad = [k for k in keys if not FILE_KEY.fullmatch(k)]
    if bad:
        raise RequestError(
            f"parameters.{bad[0]}: a model file goes in 'file:<version>/<name>.onnx' (one ONNX file)",
            field=f"parameters.{bad[0]}",
        )
    if len(keys) != 1:
        raise RequestError(
            "a load request carries exactly one model file (file:<version>/model.onnx)", field="parameters"
        )
    key = keys[0]
    content = params[key]
    if not isinstance(content, str):
        raise RequestError(f"parameters.{key} must be the file's content in base64", field=f"parameters.{key}")
    if len(content) * 3 // 4 > max_bytes + 2:
        raise RequestError(
            f"parameters.{key}: the model is about {len(content) * 3 // 4} bytes, over the limit of {max_bytes} "
            "(max_onnx_model_bytes)",
            field=f"parameters.{key}",
            kind="too_large",
        )
    try:
        data = base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError):
        raise RequestError(f"parameters.{key} is not valid base64", field=f"parameters.{key}") from None
    return str(int(FILE_KEY.fullmatch(key).group(1))), data


def load_onnx(executor, settings, name: str, version: str, data: bytes, config: dict) -> Model:
    """On a compute thread: the Model of an ONNX model's bytes (GraphError names what is wrong)."""
    from wire.onnx import import_model

    check_name(name)
    if config.get("name") not in (None, "", name):
        raise GraphError(
            f"the configuration names model {shown(config['name'])}, not {shown(name)}", field="config.name"
        )
    gradients = flag(config, PARAMETER_GRADIENTS, "config.parameters")
    imported = import_model(data, onnx_limits(settings), parameter_gradients=gradients)
    plan, key = executor.plans.hold(imported.graph, executor.limits)
    _check_cost(plan, imported, executor.limits)
    return onnx_model_of(name, version, plan, key, imported)


def _check_cost(plan, imported, limits) -> None:
    """The planned cost of an infer with the declared shapes (dynamic dims as 1), gradients
    included, against the request budgets: a model no request could run is refused at load."""
    arrays = dict(imported.parameters)
    for spec in imported.inputs:
        if spec.shape == (-1,):
            return  # an input of unknown rank: only requests tell
        dtype = numpy.dtype(_numpy_dtype(spec.datatype))
        arrays[spec.name] = numpy.broadcast_to(numpy.zeros((), dtype), tuple(1 if d < 0 else d for d in spec.shape))
    try:
        shapes = check_request_inputs(plan, arrays, keep=lambda *args: None)
    except GraphError as err:
        if err.kind == "too_large":
            raise
        return  # a shape that only real sizes resolve: requests check it
    check_budgets(shapes.backward_cost if plan.requires_grad else shapes.forward_cost, plan, limits)


def _numpy_dtype(datatype: str):
    from wire.codec import DATATYPES

    return DATATYPES[datatype]


def onnx_model_of(name, version, plan, key, imported) -> Model:
    model = model_of(name, plan, key)
    declared = {spec.name: spec for spec in imported.inputs}
    params = imported.parameters
    inputs = tuple(TensorSpec(s.name, s.datatype, s.shape) for s in imported.inputs)
    outputs = tuple(TensorSpec(s.name, s.datatype, s.shape) for s in imported.outputs)
    grads = []
    for step in plan.steps:
        if step.op == "input" and step.requires_grad:
            if step.id in declared:
                spec = declared[step.id]
                grads.append(TensorSpec(GRAD + step.id, spec.datatype, spec.shape))
            else:
                array = params[step.id]
                grads.append(TensorSpec(GRAD + step.id, _datatype(array), tuple(array.shape)))
    return dataclasses.replace(
        model,
        version=version,
        platform=PLATFORM,
        inputs=inputs,
        outputs=outputs + tuple(grads),
        bound=dict(params),
        checks_shapes=True,
        base_bytes=model.base_bytes + sum(a.nbytes for a in params.values()),
    )


def _datatype(array) -> str:
    from wire.codec import datatype_of

    return datatype_of(array.dtype)


# --------------------------------------------------------------------------- a repository directory


def check_repository(path: str) -> None:
    """Refuse (RuntimeError, one line) a --model-repository that is not a directory, or ONNX missing."""
    if not os.path.isdir(path):
        raise RuntimeError(f"--model-repository {path}: not a directory")
    try:
        import onnx  # noqa: F401
    except ImportError:
        raise RuntimeError("--model-repository needs the onnx package: pip install 'gradserve[onnx]'") from None


def repository_models(path: str, max_bytes: int):
    """(name, version, model bytes, config) of each model directory of `path`, sorted by name."""
    check_repository(path)
    for name in sorted(os.listdir(path)):
        folder = os.path.join(path, name)
        if name.startswith(".") or not os.path.isdir(folder):
            continue
        config = _config_of(folder)
        versions = sorted(int(v) for v in os.listdir(folder) if v.isdigit() and os.path.isdir(os.path.join(folder, v)))
        if not versions:
            raise RuntimeError(f"model {name}: no version directory (expected {name}/1/model.onnx)")
        filename = config.get("default_model_filename") or "model.onnx"
        if not isinstance(filename, str) or os.path.basename(filename) != filename:
            raise RuntimeError(f"model {name}: default_model_filename must be a file name")
        file = os.path.join(folder, str(versions[-1]), filename)
        if not os.path.isfile(file):
            raise RuntimeError(f"model {name}: {file} is not a file")
        size = os.path.getsize(file)
        if size > max_bytes:
            raise RuntimeError(f"model {name}: {file} is {size} bytes, over max_onnx_model_bytes={max_bytes}")
        with open(file, "rb") as handle:
            yield name, str(versions[-1]), handle.read(max_bytes + 1), config


def _config_of(folder: str) -> dict:
    for filename, parse in (
        ("config.pbtxt", parse_pbtxt),
        ("config.json", lambda text, field: parse_json(text, field)),
    ):
        path = os.path.join(folder, filename)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as handle:
                return parse(handle.read(), filename)
    return {}


def load_repository(path: str, repository, executor, settings, log=None) -> None:
    """Load every model of a repository directory (at start); RuntimeError names the model at fault."""
    for name, version, data, config in repository_models(path, settings.max_onnx_model_bytes):
        try:
            model = load_onnx(executor, settings, name, version, data, config)
            repository.check_room(name, model.nbytes, "its plan, constants and parameters")
            repository.add(model)
        except Exception as err:  # noqa: BLE001 - GraphError, ApiError: one line naming the model
            raise RuntimeError(f"--model-repository {path}: model {name}: {err}") from None
        if log is not None:
            log.info("loaded model %s version %s from %s", name, version, path)
