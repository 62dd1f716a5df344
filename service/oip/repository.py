"""Graphs registered by name as models (Triton's model-repository extension).

A model is a graph (graph format v1) validated and planned once, at load, by the executor's
plan cache. Its Open Inference Protocol face: the graph's input tensors in; the graph's outputs
plus one `grad:<input>` per input that requires grad out; optional `grad_output:<output>` input
tensors seed the backward of non-scalar outputs. The repository is bounded by the number of
models and the bytes of their graphs' JSON (`max_models`, `max_model_bytes`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.attrs import shown
from service.errors import ApiError
from wire.codec import datatype_of
from wire.errors import GraphError

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
    """A registered graph: what infer needs (the graph, its output names) and what it publishes."""

    name: str
    graph: dict
    nbytes: int
    inputs: tuple  # TensorSpec of each input node
    outputs: tuple  # TensorSpec of each graph output, then of each grad:<input>
    graph_outputs: frozenset
    version: str = VERSION

    @property
    def output_names(self) -> tuple:
        return tuple(spec.name for spec in self.outputs)

    def metadata(self) -> dict:
        return {
            "name": self.name,
            "versions": [self.version],
            "platform": PLATFORM,
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
            "platform": PLATFORM,
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


def model_of(name: str, graph: dict, plan, nbytes: int) -> Model:
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
    return Model(name, graph, nbytes, tuple(inputs), outputs, frozenset(plan.outputs))


class ModelRepository:
    """Models by name, bounded in count and bytes. Used from the event loop only."""

    def __init__(self, max_models: int, max_bytes: int):
        self.max_models = max_models
        self.max_bytes = max_bytes
        self._models: dict[str, Model] = {}
        self._bytes = 0

    def __len__(self):
        return len(self._models)

    @property
    def nbytes(self) -> int:
        return self._bytes

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

    def check_room(self, name: str, nbytes: int) -> None:
        """Refuse (409 or 413) a model of `nbytes` under `name` that would pass a bound (a model
        it replaces gives its room back)."""
        replaced = self._models.get(name)
        count = len(self._models) + (replaced is None)
        if count > self.max_models:
            raise ApiError(
                409, f"the repository already holds max_models={self.max_models} models; unload one first", field="name"
            )
        total = self._bytes - (replaced.nbytes if replaced else 0) + nbytes
        if total > self.max_bytes:
            raise ApiError(
                413,
                f"the graph's {nbytes} bytes would bring the repository to {total} bytes, over "
                f"max_model_bytes={self.max_bytes}",
                field="parameters.config",
            )

    def add(self, model: Model) -> None:
        self.check_room(model.name, model.nbytes)
        replaced = self._models.pop(model.name, None)
        if replaced is not None:
            self._bytes -= replaced.nbytes
        self._models[model.name] = model
        self._bytes += model.nbytes

    def remove(self, name: str) -> Model:
        model = self.get(name)
        del self._models[name]
        self._bytes -= model.nbytes
        return model
