"""The HTTP floor: echo apps served by uvicorn exactly as the service is.

`bare` is a raw ASGI app that answers every request with its body (octet-stream echo);
`fast` is a FastAPI app whose POST routes do the same through a `Request` (same body, same
headers). Both answer `GET /healthz`.
"""


async def _read_body(receive) -> bytes:
    chunks = []
    more = True
    while more:
        message = await receive()
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def bare(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    body = await _read_body(receive) if scope["method"] == "POST" else b"ok"
    ctype = b"application/octet-stream"
    for key, value in scope["headers"]:
        if key == b"content-type":
            ctype = value
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", ctype), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _fastapi_app():
    from fastapi import FastAPI, Request, Response

    app = FastAPI()

    @app.get("/healthz")
    async def healthz():
        return {"status": "ok"}

    @app.post("/{path:path}")
    async def echo(path: str, request: Request):
        body = await request.body()
        return Response(body, media_type=request.headers.get("content-type", "application/octet-stream"))

    return app


def __getattr__(name):
    if name == "fast":
        app = _fastapi_app()
        globals()["fast"] = app
        return app
    raise AttributeError(name)
