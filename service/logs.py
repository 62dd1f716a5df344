"""The service's logs: one line per request, and every other line (the app's, uvicorn's), as
readable text or as one JSON object per line (`--log-format text|json`), at `--log-level`.

`log_config(level, fmt)` is the `logging.config.dictConfig` dict handed to uvicorn (which applies
it in this process and in each worker): its handler is on the root logger, so the `gradserve`
logger's lines appear at their level (without it they fell to logging's last-resort handler,
which prints warnings and above only). uvicorn's own access log stays off: `request_line` (from the
compute endpoints, which call it themselves) and `RequestLogMiddleware` (every other route)
replace it, with the request id, route template, body sizes and, for a computation, its plan and
what ran it. A request line costs one dict and one record, formatted without `logging.Formatter`'s
`%`-style machinery; nothing at all when `gradserve.access` is not enabled at INFO."""

from __future__ import annotations

import logging
import sys
import time

import orjson

from service import request_id
from service.metrics import route_label

LEVELS = {"critical": 50, "error": 40, "warning": 30, "info": 20, "debug": 10, "trace": 5}  # trace: uvicorn's
FORMATS = ("text", "json")
ACCESS = logging.getLogger("gradserve.access")
INFO = logging.INFO
TEXT_IN_MESSAGE = frozenset({"method", "route", "status", "duration_ms"})  # the text line's message says these

_second = [-1, ""]  # the last whole second formatted, and its text


def timestamp(created: float) -> str:
    """`created` as ISO 8601 UTC with milliseconds; the date and time formatted once a second."""
    whole = int(created)
    second = _second
    if second[0] != whole:
        second[1] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
        second[0] = whole
    return f"{second[1]}.{int((created - whole) * 1000):03d}Z"


class TextFormatter(logging.Formatter):
    """`<time> <LEVEL> <logger>: <message> key=value ...` (a request line's fields as key=value)."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{timestamp(record.created)} {record.levelname} {record.name}: {record.getMessage()}"
        fields = record.__dict__.get("fields")
        if fields:
            line += " " + " ".join(f"{k}={v}" for k, v in fields.items() if k not in TEXT_IN_MESSAGE)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, and a request line's fields."""

    def format(self, record: logging.LogRecord) -> str:
        obj = {
            "time": timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = record.__dict__.get("fields")
        if fields:
            obj.update(fields)
        if record.exc_info:
            obj["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(obj, default=str).decode()


class StderrHandler(logging.StreamHandler):
    """A StreamHandler on whatever `sys.stderr` is when a line is written (not when configured)."""

    def __init__(self):
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


def log_config(level: str = "info", fmt: str = "text") -> dict:
    """The logging configuration of a server process (for uvicorn's `log_config`)."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    number = LEVELS[level]
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"line": {"()": f"service.logs.{'Json' if fmt == 'json' else 'Text'}Formatter"}},
        "handlers": {"stderr": {"()": "service.logs.StderrHandler", "formatter": "line"}},
        "root": {"handlers": ["stderr"], "level": number},
        "loggers": {
            "gradserve": {"level": number},
            "uvicorn": {"handlers": [], "level": number, "propagate": True},
            "uvicorn.error": {"level": number},
            "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},  # ours replaces it
        },
    }


def request_line(scope, rid: str, route: str, status: int, seconds: float, received: int, sent: int, ran=None):
    """Log one answered request (the caller checks `ACCESS.isEnabledFor(INFO)` first). `ran`:
    (plan id, what ran it) of a computation."""
    client = scope.get("client")
    method = scope.get("method", "")
    duration = round(seconds * 1000, 3)
    fields = {
        "request_id": rid,
        "method": method,
        "route": route,
        "status": status,
        "duration_ms": duration,
        "bytes_in": received,
        "bytes_out": sent,
        "peer": f"{client[0]}:{client[1]}" if client else None,
    }
    if ran is not None:
        fields["plan"], fields["executor"] = ran
    record = ACCESS.makeRecord(
        "gradserve.access", INFO, "", 0, "%s %s %d %.3fms", (method, route, status, duration), None
    )
    record.fields = fields
    ACCESS.handle(record)


class RequestLogMiddleware:
    """Pure ASGI middleware for the routes FastAPI answers: gives each request its id (scope and
    `X-Request-ID` response header) and logs its line, unless its endpoint logged it itself (a
    compute endpoint reached through the router, such as /v2 infer, which sets `LOGGED`)."""

    LOGGED = "gradserve.logged"

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = request_id.of_scope(scope)
        counts = [500, 0, 0]  # status, bytes in, bytes out

        async def counting_receive():
            message = await receive()
            if message["type"] == "http.request":
                counts[1] += len(message.get("body", b""))
            return message

        async def tagging_send(message):
            if message["type"] == "http.response.start":
                counts[0] = message["status"]
                message["headers"] = request_id.with_header(list(message.get("headers", ())), rid)
            elif message["type"] == "http.response.body":
                counts[2] += len(message.get("body", b""))
            await send(message)

        start = time.perf_counter()
        try:
            await self.app(scope, counting_receive, tagging_send)
        finally:
            if not scope.get(self.LOGGED) and ACCESS.isEnabledFor(INFO):
                route = route_label(scope)
                request_line(scope, rid, route, counts[0], time.perf_counter() - start, counts[1], counts[2])
