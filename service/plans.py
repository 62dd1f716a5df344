"""`GET /plans/{id}.dot`: a cached plan's graph as Graphviz DOT (`wire.dot`), to see what was sent;
`GET /plans/{id}/programs`: the generated source of the programs it runs as (`wire.codegen`).

Plan ids are those the service hands out in /forward and /backward answers (`"plan"`): a digest
of the graph's text (`wire.stores.plan_id`), so a client can name the plan of a graph it sent
(`client.to_dot` titles its own rendering with it). Shapes and dtypes are those of the input
signatures the plan was checked with (where several disagree, only what they share). The API
key guards it like the compute endpoints; plans over `MAX_DOT_NODES` nodes are refused (413).
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from starlette.responses import PlainTextResponse, Response

from service.auth import require_api_key
from service.errors import ApiError
from wire.dot import merged_shapes, render
from wire.program import Program

DOT = "text/vnd.graphviz"
# nodes (function subgraphs' included) of a plan rendered. A 2,000-node chain: ~80 ms to render, 290 KiB of DOT,
# ~1.6 s of `dot -Tsvg`; 5,000 nodes: 0.2-0.4 s, 720 KiB, 5-9 s (2 shared cores)
MAX_DOT_NODES = 2_000
PATH = "/plans/{plan_id}.dot"
PROGRAMS = "/plans/{plan_id}/programs"


def _api_key(request: Request) -> None:
    require_api_key(request.app.state.settings.api_key, request.headers)


def _error(description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": {"type": "object"}}}}


router = APIRouter(tags=["plans"], dependencies=[Depends(_api_key)])


@router.get(
    PATH,
    response_class=Response,
    responses={
        200: {"description": "the plan's graph as Graphviz DOT", "content": {DOT: {"schema": {"type": "string"}}}},
        401: _error("missing or wrong API key (when one is set)"),
        404: _error("no plan with this id is held (unknown, or evicted from the plan cache)"),
        413: _error(f"the plan has more than {MAX_DOT_NODES} nodes"),
    },
)
def plan_dot(plan_id: str, request: Request) -> Response:
    """A cached plan's graph (ids, ops, attributes, shapes, dtypes, what gets a gradient) as DOT."""
    # (a plain def: FastAPI runs it on a worker thread, so rendering a large plan does not hold the event loop)
    plan = request.app.state.executor.plans.by_id(plan_id)
    if plan is None:
        raise ApiError(404, f"plan {plan_id!r} is not (or no longer) held by this server", field="plan_id")
    count = plan.count_steps()
    if count > MAX_DOT_NODES:
        raise ApiError(
            413, f"plan {plan_id!r} has {count} nodes, more than the {MAX_DOT_NODES} rendered as DOT", field="plan_id"
        )
    return Response(render(plan, merged_shapes(plan), title=f"plan {plan_id}"), media_type=DOT)


@router.get(
    PROGRAMS,
    response_class=PlainTextResponse,
    responses={
        200: {"description": "the generated source of each of the plan's programs, one after the other"},
        401: _error("missing or wrong API key (when one is set)"),
        404: _error("no plan with this id is held (unknown, or evicted from the plan cache)"),
    },
)
def plan_programs(plan_id: str, request: Request) -> PlainTextResponse:
    """The generated Python source of a cached plan's programs (one per input signature and request
    shape whose program is generated; a program runs interpreted until then), as tracebacks show it."""
    plan = request.app.state.executor.plans.by_id(plan_id)
    if plan is None:
        raise ApiError(404, f"plan {plan_id!r} is not (or no longer) held by this server", field="plan_id")
    programs = [p for s in list(plan.checked.values()) for p in list(s.programs.values()) if isinstance(p, Program)]
    texts = [f"# {p.filename}\n{p.source}" for p in programs if p.source is not None]
    return PlainTextResponse("\n\n".join(texts) if texts else "# no generated program yet\n")


def mark_secured(schema: dict, scheme: str) -> None:
    """Mark the routes of an OpenAPI `schema` as needing `scheme` (an instance with an API key)."""
    for path in (PATH, PROGRAMS):
        schema["paths"].get(path, {}).get("get", {})["security"] = [{scheme: []}]
