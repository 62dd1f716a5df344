"""The protocol's errors. Each carries a `kind`, what went wrong in the protocol's own terms;
the service turns kinds into HTTP statuses in one table (`service/errors.py`). An error answer's
body is `error_body`, whatever answers it (the service, the client's embedded mode)."""

from __future__ import annotations

import orjson

KINDS = {
    "malformed": "the body cannot be read: bad JSON, a bad binary header length, truncated binary data",
    "invalid": "an invalid graph or tensor, or an op that failed while running (the node is named)",
    "too_large": "over one of the limits or budgets",
    "not_found": "an unknown or expired tape, or a plan id the server does not hold (send the graph)",
    "conflict": "a backward through a tape a previous backward freed, or a step whose step before was not applied",
    "cancelled": "the computation was cancelled (its compute time ran out or its client left)",
    "out_of_memory": "the (device) memory ran out",
}


class GraphError(ValueError):
    """An invalid graph or request, or a failure while running it, naming the node and field at fault."""

    def __init__(self, message, node=None, field=None, kind="invalid"):
        super().__init__(message)
        if kind not in KINDS:
            raise ValueError(f"unknown error kind {kind!r}")
        self.node = node
        self.field = field
        self.kind = kind


class RequestError(GraphError):
    """A request that is malformed or over a limit."""


class TensorError(GraphError):
    """A tensor object that can't be decoded."""

    def __init__(self, message, field=None, kind="invalid"):
        super().__init__(message, field=field, kind=kind)


class TapeFreedError(GraphError):
    def __init__(self):
        super().__init__(
            "Trying to backward through the tape a second time: its saved values were freed by the previous backward. "
            "Pass parameters.retain_graph=true with a backward that should keep the tape.",
            field="tape",
            kind="conflict",
        )


def protocol_error(exc: BaseException) -> GraphError | None:
    """The GraphError that an exception raised while handling a request is answered as (a
    MemoryError: out_of_memory), or None: an internal error."""
    if isinstance(exc, MemoryError):
        return GraphError("out of memory", kind="out_of_memory")
    return exc if isinstance(exc, GraphError) else None


def error_body(message: str, node=None, field=None) -> bytes:
    """The body of an error answer: {"error": message, "node": id|null, "field": name|null}."""
    return orjson.dumps({"error": message, "node": node, "field": field})
