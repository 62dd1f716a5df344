"""Every bound the protocol enforces."""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass
class Limits:
    """Every bound the protocol enforces; all configurable (see service settings).

    `max_request_bytes` bounds a request's planned peak memory (inputs, values, what the backward
    keeps and its gradients; see wire.budget) and `max_request_work` its work in flop-equivalents
    (see engine.costs). The defaults fit a 2 GiB container with room to spare: 4 computations at
    their budget (1 GiB), 256 MiB of bodies being received (service), 256 MiB of tapes, 64 MiB of
    plans and the ~70 MiB process; one request's work stays well under the default 60 s compute
    timeout on a slow core. A binary body (128 MiB) fits a request's budget with room for values
    of its size. `plan_cache_bytes` bounds the estimated size of the cached plans."""

    max_body_bytes: int = 128 * 2**20
    # JSON parsing and encoding hold the GIL in one call each: these keep a call to tens of ms
    max_json_body_bytes: int = 4 * 2**20
    max_json_output_elements: int = 2**18
    max_tensor_elements: int = 2**27
    max_total_elements: int = 2**28
    max_nodes: int = 100_000
    max_depth: int = 100_000
    max_tapes: int = 1024
    max_tape_bytes: int = 256 * 2**20
    tape_ttl_s: float = 600.0
    plan_cache_size: int = 512
    plan_cache_bytes: int = 64 * 2**20
    max_request_bytes: int = 256 * 2**20
    max_request_work: int = 10**11

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}
