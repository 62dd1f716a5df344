"""Every bound the protocol enforces."""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass
class Limits:
    """Every bound the protocol enforces; all configurable (see service settings).

    `max_request_bytes` bounds a request's planned peak memory (inputs, values, what the backward
    keeps and its gradients; see wire.budget) and `max_request_work` its work in flop-equivalents
    (see engine.costs): 4-8 requests at their budget fit a 2 GiB container, and one request's work
    stays well under the default 60 s compute timeout on a slow core. `plan_cache_bytes` bounds
    the estimated size of the cached plans."""

    max_body_bytes: int = 512 * 2**20
    max_tensor_elements: int = 2**27
    max_total_elements: int = 2**28
    max_nodes: int = 100_000
    max_depth: int = 100_000
    max_tapes: int = 1024
    max_tape_bytes: int = 2 * 2**30
    tape_ttl_s: float = 600.0
    plan_cache_size: int = 512
    plan_cache_bytes: int = 64 * 2**20
    max_request_bytes: int = 192 * 2**20
    max_request_work: int = 10**11

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}
