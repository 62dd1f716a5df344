"""Graphs registered by name as models (Triton's model-repository extension).

A model is a graph (graph format v1) validated and planned once, at load, by the executor's
plan cache. Its Open Inference Protocol face: the graph's input tensors in; the graph's outputs
plus one `grad:<input>` per input that requires grad out; optional `grad_output:<output>` input
tensors seed the backward of non-scalar outputs. The repository is bounded by the number of
models and the bytes they hold (`max_models`, `max_model_bytes`): a model holds its parsed plan
(steps and constants' arrays, `wire.stores.plan_base_bytes`), its graph's JSON (the plan's
cache key, which its configuration is read back from) and the Shapes its plan keeps per input
signature (kept only while they fit, and charged to the plan cache too, see
`wire.stores.PlanCache.keep_signature`; the programs compiled for them are the plan cache's).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import orjson

from engine.api import shown
from service.errors import ApiError
from wire.codec import datatype_of
from wire.errors import GraphError
from wire.stores import plan_base_bytes

GRAD = "grad:"
GRAD_OUTPUT = "grad_output:"
VERSION = "1"
PLATFORM = "gradserve_graph"
NOMINAL_DATATYPE = "FP32"  # published for a tensor whose datatype is known only when it is computed
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")


@dataclass(frozen=True)
class TensorSpec:
    name: str
    datatype: str
    shape: tuple

    def metadata(self) -> dict:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}

    def config(self, optional: bool = False) -> dict:
        return {"name": self.name, "data_type": f"TYPE_{self.datatype}", "dims": list(self.shape), "optional": optional}


@dataclass(frozen=True)
class Model:
    """A registered graph: what infer needs (its plan, output names) and what it publishes."""

    name: str
    plan: object  # wire.graph.Plan
    key: bytes  # the graph's JSON (sorted keys): the plan's cache key
    base_bytes: int  # the key and the plan as parsed (wire.stores.plan_base_bytes)
    inputs: tuple  # TensorSpec of each input node
    outputs: tuple  # TensorSpec of each graph output, then of each grad:<input>
    graph_outputs: frozenset
    version: str = VERSION
    platform: str = PLATFORM
    bound: dict = field(default_factory=dict)  # input name -> array the model holds (an ONNX model's parameters)
    checks_shapes: bool = False  # inputs' published shapes (-1: any size) are checked at infer

    @property
    def nbytes(self) -> int:
        """What the model holds now: its base and the Shapes its plan keeps per input signature
        (their compiled programs are charged to the plan cache alone)."""
        return self.base_bytes + sum(shapes.nbytes for shapes in list(self.plan.checked.values()))

    @property
    def graph(self) -> dict:
        return orjson.loads(self.key)

    @property
    def output_names(self) -> tuple:
        return tuple(spec.name for spec in self.outputs)

    def metadata(self) -> dict:
        return {
            "name": self.name,
            "versions": [self.version],
            "platform": self.platform,
            "inputs": [spec.metadata() for spec in self.inputs],
            "outputs": [spec.metadata() for spec in self.outputs],
        }

    def config(self) -> dict:
        seeds = [
            TensorSpec(GRAD_OUTPUT + spec.name, spec.datatype, spec.shape)
            for spec in self.outputs
            if spec.name in self.graph_outputs
        ]
        return {
            "name": self.name,
            "platform": self.platform,
            "backend": "gradserve",
            "max_batch_size": 0,
            "version_policy": {"latest": {"num_versions": 1}},
            "input": [spec.config() for spec in self.inputs] + [spec.config(optional=True) for spec in seeds],
            "output": [spec.config() for spec in self.outputs],
            "graph": self.graph,
        }


def check_name(name: str) -> str:
    if not NAME.fullmatch(name):
        raise ApiError(
            400,
            f"model name {shown(name)} must be 1-128 letters, digits, '_', '.' or '-' (starting with a letter or digit)",
            field="name",
        )
    return name


def model_of(name: str, plan, key: bytes) -> Model:
    """The Model of a graph and its Plan (`wire.graph.parse`'s answer). Input ids starting with
    `grad_output:` and output ids starting with `grad:` would be ambiguous here, so they are refused."""
    inputs, seeds = [], []
    for step in plan.steps:
        if step.op != "input":
            continue
        if step.id.startswith(GRAD_OUTPUT):
            raise GraphError(
                f"input node {shown(step.id)}: ids starting with {shown(GRAD_OUTPUT)} are reserved for the "
                "gradients of outputs on the Open Inference Protocol",
                node=step.id,
                field="id",
            )
        datatype = NOMINAL_DATATYPE if step.dtype is None else datatype_of(step.dtype)
        spec = TensorSpec(step.id, datatype, (-1,) if step.shape is None else step.shape)
        inputs.append(spec)
        if step.requires_grad:
            seeds.append(TensorSpec(GRAD + step.id, datatype, spec.shape))
    for out in plan.outputs:
        if out.startswith(GRAD):
            raise GraphError(
                f"output {shown(out)}: ids starting with {shown(GRAD)} are reserved for gradients on the Open Inference Protocol",
                node=out,
                field="graph.outputs",
            )
    outputs = tuple(TensorSpec(out, NOMINAL_DATATYPE, (-1,)) for out in plan.outputs) + tuple(seeds)
    base = len(key) + plan_base_bytes(plan)
    return Model(name, plan, key, base, tuple(inputs), outputs, frozenset(plan.outputs))


class ModelRepository:
    """Models by name, bounded in count and bytes. Changed from the event loop only (`admits` is
    also asked on compute threads)."""

    def __init__(self, max_models: int, max_bytes: int):
        self.max_models = max_models
        self.max_bytes = max_bytes
        self._models: dict[str, Model] = {}

    def __len__(self):
        return len(self._models)

    @property
    def nbytes(self) -> int:
        """What the models hold now (their plans' signatures grow as they are used)."""
        return sum(model.nbytes for model in list(self._models.values()))  # also read on compute threads

    def models(self) -> list:
        return list(self._models.values())

    def get(self, name: str, version: str | None = None) -> Model:
        model = self._models.get(name)
        if model is None:
            raise ApiError(
                404, f"unknown model {shown(name)}: load it with POST /v2/repository/models/{name}/load", field="name"
            )
        if version not in (None, "", model.version):
            raise ApiError(
                404,
                f"model {shown(name)} has no version {shown(version)} (its only version is {shown(model.version)})",
                field="version",
            )
        return model

    def check_room(self, name: str, nbytes: int, what: str = "graph's JSON") -> None:
        """Refuse (409 or 413) a model of `nbytes` under `name` that would pass a bound (a model
        it replaces gives its room back). Checked on the graph's JSON before it is parsed, and on
        what the model holds (`Model.nbytes`) once it is."""
        replaced = self._models.get(name)
        count = len(self._models) + (replaced is None)
        if count > self.max_models:
            raise ApiError(
                409, f"the repository already holds max_models={self.max_models} models; unload one first", field="name"
            )
        total = self.nbytes - (replaced.nbytes if replaced else 0) + nbytes
        if total > self.max_bytes:
            raise ApiError(
                413,
                f"the model's {nbytes} bytes ({what}) would bring the repository to {total} bytes, over "
                f"max_model_bytes={self.max_bytes}",
                field="parameters.config",
            )

    def add(self, model: Model) -> None:
        self.check_room(model.name, model.nbytes, "its plan, constants and graph as parsed")
        self._models[model.name] = model

    def admits(self, nbytes: int) -> bool:
        """Whether `nbytes` more (a model's plan keeping a new input signature) stay within max_model_bytes."""
        return self.nbytes + nbytes <= self.max_bytes

    def registered(self, model: Model) -> bool:
        """Whether `model` is still the one registered under its name."""
        return self._models.get(model.name) is model

    def remove(self, name: str) -> Model:
        model = self.get(name)
        del self._models[name]
        return model
