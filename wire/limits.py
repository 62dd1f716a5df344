"""Every bound the protocol enforces."""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass
class Limits:
    """Every bound the protocol enforces; all configurable (see service settings)."""

    max_body_bytes: int = 512 * 2**20
    # JSON parsing and encoding hold the GIL in one call each: these keep a call to tens of ms
    max_json_body_bytes: int = 4 * 2**20
    max_json_output_elements: int = 2**18
    max_tensor_elements: int = 2**27
    max_total_elements: int = 2**28
    max_nodes: int = 100_000
    max_depth: int = 100_000
    max_tapes: int = 1024
    max_tape_bytes: int = 2 * 2**30
    tape_ttl_s: float = 600.0
    plan_cache_size: int = 512

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}
