"""Every bound the protocol enforces, declared once: name, type, default, doc and lower bound.

`Limits` is what the protocol reads; `service.settings` derives its settings (their
`GRADSERVE_<NAME>` variables, TOML keys, defaults, docs and validation) from the same fields
(`LIMIT_FIELDS`), so a limit is added or changed here only."""

from __future__ import annotations

import typing
from dataclasses import dataclass, field, fields


def limit(default, doc: str, *, gt: float | None = None, ge: float | None = None):
    """A field of `Limits`: its default, what it bounds, and its lower bound (exclusive `gt` or
    inclusive `ge`), which the service's settings enforce."""
    return field(default=default, metadata={"doc": doc, "gt": gt, "ge": ge})


@dataclass
class Limits:
    """Every bound the protocol enforces; all configurable (see service settings).

    `max_request_bytes` bounds a request's planned peak memory (inputs, values, what the backward
    keeps and its gradients; see wire.budget) and `max_request_work` its work in flop-equivalents
    (see engine.costs). The defaults fit a 2 GiB container with room to spare: 4 computations at
    their budget (1 GiB), 256 MiB of bodies being received (service), 256 MiB of tapes, 64 MiB of
    plans and the ~70 MiB process; one request's work stays well under the default 60 s compute
    timeout on a slow core. A binary body (128 MiB) fits a request's budget with room for values
    of its size. `plan_cache_bytes` bounds the estimated size of the cached plans. JSON parsing and
    encoding hold the GIL in one call each: `max_json_body_bytes` and `max_json_output_elements`
    keep a call to tens of ms."""

    max_body_bytes: int = limit(128 * 2**20, "bytes of a request body", gt=0)
    max_json_body_bytes: int = limit(
        4 * 2**20, "bytes of a JSON request body (parsed in one piece; binary bodies have max_body_bytes)", gt=0
    )
    max_json_output_elements: int = limit(
        2**18, "elements of a JSON answer (a larger one must be asked for in binary)", ge=0
    )
    max_tensor_elements: int = limit(2**27, "elements of one tensor or value", gt=0)
    max_total_elements: int = limit(2**28, "elements of a request's tensors together", gt=0)
    max_nodes: int = limit(100_000, "nodes of a graph", gt=0)
    max_depth: int = limit(100_000, "nesting depth of a graph (function subgraphs)", gt=0)
    max_tapes: int = limit(1024, "retained tapes held at once", ge=0)
    max_tape_bytes: int = limit(256 * 2**20, "bytes of retained tapes held at once", ge=0)
    tape_ttl_s: float = limit(600.0, "seconds a retained tape is kept unused", gt=0)
    plan_cache_size: int = limit(512, "planned graphs kept", ge=0)
    plan_cache_bytes: int = limit(64 * 2**20, "estimated bytes of the planned graphs kept", ge=0)
    max_request_bytes: int = limit(256 * 2**20, "a request's planned peak memory", gt=0)
    max_request_work: int = limit(10**11, "a request's planned work (flop-equivalents)", gt=0)
    # resident arrays (wire.residents): parameters and optimizer state kept across requests, per session
    max_resident_bytes: int = limit(256 * 2**20, "bytes of resident arrays held at once, all sessions", ge=0)
    max_session_resident_bytes: int = limit(
        128 * 2**20, "bytes of resident arrays one session holds (its parameters and optimizer state)", ge=0
    )
    resident_ttl_s: float = limit(1800.0, "seconds a session's resident arrays are kept unused", gt=0)
    # the compute queue (service.compute): bodies waiting for a compute slot, bounded in bytes (and by queue_timeout_s)
    max_queued_bytes: int = limit(
        128 * 2**20,
        "bytes of request bodies waiting for a compute slot, all together; past it 503 (default: one body at "
        "max_body_bytes, half of the service's max_inflight_body_bytes)",
        ge=0,
    )

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class LimitField:
    """One declared limit, as a settings object states it."""

    name: str
    type: type
    default: object
    doc: str
    gt: float | None
    ge: float | None


def _declared() -> tuple[LimitField, ...]:
    hints = typing.get_type_hints(Limits)
    return tuple(
        LimitField(f.name, hints[f.name], f.default, f.metadata["doc"], f.metadata["gt"], f.metadata["ge"])
        for f in fields(Limits)
    )


LIMIT_FIELDS = _declared()
