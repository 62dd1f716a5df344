"""OpenAPI descriptions of the compute bodies (documentation only: bodies are parsed by hand
with orjson and validated by the engine, never by pydantic)."""

from __future__ import annotations

from wire.codec import DATATYPES, HEADER_LENGTH
from wire.graph import VERSIONS

TENSOR = {
    "type": "object",
    "description": "An Open Inference Protocol tensor: `data` row-major (flat or nested; non-finite floats spelled "
    '"NaN", "Infinity", "-Infinity"), or `parameters.binary_data_size` for a binary tensor.',
    "required": ["name", "shape", "datatype"],
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "datatype": {"type": "string", "enum": list(DATATYPES)},
        "data": {"description": "row-major values, flat or nested (a bare value for one element)"},
        "parameters": {"type": "object", "properties": {"binary_data_size": {"type": "integer", "minimum": 0}}},
    },
}

NODE = {
    "type": "object",
    "required": ["id", "op"],
    "properties": {
        "id": {"type": "string", "minLength": 1},
        "op": {
            "type": "string",
            "description": "a registry op (GET /ops), or input, constant, function, grad (version 1.1)",
        },
        "inputs": {"type": "array", "items": {"type": "string"}},
        "attrs": {"type": "object"},
        "requires_grad": {"type": "boolean"},
        "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "dtype": {"type": "string", "enum": list(DATATYPES)},
    },
    "additionalProperties": False,
}

GRAPH = {
    "type": "object",
    "required": ["nodes", "outputs"],
    "properties": {
        "version": {
            "description": 'the oldest graph format the graph needs (the number 1 means "1.0"; default: the server\'s)',
            "enum": [1, *VERSIONS],
        },
        "nodes": {"type": "array", "minItems": 1, "items": NODE},
        "outputs": {"type": "array", "minItems": 1, "items": {"type": "string"}},
    },
}

PARAMETERS = {
    "type": "object",
    "properties": {
        "retain_graph": {"type": "boolean", "description": "keep the tape for a later /backward"},
        "binary_data_output": {"type": "boolean", "description": "answer with the binary tensor extension"},
    },
    "additionalProperties": False,
}


def request_schema(kind: str) -> dict:
    props = {
        "id": {"type": ["string", "integer"]},
        "graph": GRAPH,
        "plan": {
            "type": "string",
            "description": "instead of graph: the plan id of an earlier answer (404 when the "
            "server no longer holds it: send the graph)",
        },
        "inputs": {"type": "array", "items": TENSOR},
        "parameters": PARAMETERS,
    }
    if kind == "backward":
        props |= {
            "grad_outputs": {"type": "array", "items": TENSOR},
            "wrt": {"type": "array", "items": {"type": "string"}},
            "tape": {"type": "string", "description": "a tape id from a retained /forward or /backward"},
        }
    return {"type": "object", "properties": props, "additionalProperties": False}


RESULT = {
    "type": "object",
    "required": ["outputs"],
    "properties": {
        "id": {"type": ["string", "integer"]},
        "outputs": {"type": "array", "items": TENSOR},
        "grads": {"type": "array", "items": TENSOR},
        "tape": {"type": "string"},
        "plan": {"type": "string", "description": "the id to send instead of this request's graph next time"},
    },
}

ERROR = {
    "type": "object",
    "required": ["error", "node", "field"],
    "properties": {
        "error": {"type": "string"},
        "node": {"type": ["string", "integer", "null"]},
        "field": {"type": ["string", "integer", "null"]},
        "request_id": {
            "type": "string",
            "description": "the request's id, as in the X-Request-ID response header (absent only from the "
            "refusals of a connection before its request is read: 408, 431, 503 over max_connections)",
        },
    },
}

_ERROR_CONTENT = {"application/json": {"schema": ERROR}}
ERROR_STATUSES = {
    "400": "malformed body (bad JSON, bad binary header length, truncated binary data)",
    "401": "missing or wrong API key (when GRADSERVE_API_KEY is set)",
    "404": "unknown or expired tape",
    "409": "tape already freed by a previous backward",
    "413": "over a size limit (body, tensor, nodes, depth, tape bytes)",
    "415": "Content-Type is not application/json or application/octet-stream (or is missing)",
    "422": "invalid graph or tensors",
    "503": "busy (max_concurrency) or compute timeout; see Retry-After",
    "507": "out of memory",
}


SUMMARIES = {
    "forward": "Run a graph: its outputs (optionally retaining the tape)",
    "backward": "Run a graph (or reuse a tape) and return outputs and gradients",
}


def compute_paths() -> dict:
    """The OpenAPI path items of POST /forward and /backward (plain ASGI routes, which FastAPI
    does not describe by itself)."""
    return {
        f"/{kind}": {
            "post": {
                "tags": ["compute"],
                "summary": summary,
                "operationId": f"{kind}_{kind}_post",
                **compute_openapi(kind),
            }
        }
        for kind, summary in SUMMARIES.items()
    }


def compute_openapi(kind: str) -> dict:
    """Parameters, request body and responses of POST /forward or /backward."""
    return {
        "parameters": [
            {
                "name": HEADER_LENGTH,
                "in": "header",
                "required": False,
                "schema": {"type": "integer", "minimum": 0},
                "description": "binary tensor extension: length of the JSON header at the start of the body",
            }
        ],
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": request_schema(kind)},
                "application/octet-stream": {
                    "schema": {
                        "type": "string",
                        "format": "binary",
                        "description": f"JSON header ({HEADER_LENGTH} bytes) then raw tensor data",
                    }
                },
            },
        },
        "responses": {
            "200": {
                "description": "outputs (and grads); binary when parameters.binary_data_output is true",
                "content": {
                    "application/json": {"schema": RESULT},
                    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
                },
            },
            **{code: {"description": text, "content": _ERROR_CONTENT} for code, text in ERROR_STATUSES.items()},
        },
    }
