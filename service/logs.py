"""The service's logs: one line per request, and every other line (the app's, uvicorn's), as
readable text or as one JSON object per line (`--log-format text|json`), at `--log-level`.

`log_config(level, fmt)` is the `logging.config.dictConfig` dict handed to uvicorn (which applies
it in this process and in each worker): its handler is on the root logger, so the `gradserve`
logger's lines appear at their level (without it they fell to logging's last-resort handler,
which prints warnings and above only). uvicorn's own access log stays off: `request_line` (from the
compute endpoints, which call it themselves) and `RequestLogMiddleware` (every other route)
replace it, with the request id, route template, body sizes and, for a computation, its plan and
what ran it. A request line costs a tuple of its fields, queued; the handler formats and writes
them in batches, without a LogRecord (see `request_line`); nothing at all when `gradserve.access`
is not enabled at INFO."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections import deque

import orjson

from service import request_id
from service.metrics import route_label

LEVELS = {"critical": 50, "error": 40, "warning": 30, "info": 20, "debug": 10, "trace": 5}  # trace: uvicorn's
FORMATS = ("text", "json")
ACCESS_NAME = "gradserve.access"
ACCESS = logging.getLogger(ACCESS_NAME)
INFO = logging.INFO
TEXT_IN_MESSAGE = frozenset({"method", "route", "status", "duration_ms"})  # the text line's message says these

FLUSH_S = 0.1  # request lines are written at most this late...
FLUSH_LINES = 500  # ... or once this many are waiting (~70 KiB of text)
_second = [-1, ""]  # the last whole second formatted, and its text
MILLIS = [f"{n:03d}" for n in range(1000)]  # a fraction's three digits, found instead of formatted (~1.5k instructions)
DECIMALS = [f"{n:03d}".rstrip("0") or "0" for n in range(1000)]  # the same, as a float's `repr` ends them


def timestamp(created: float) -> str:
    """`created` as ISO 8601 UTC with milliseconds; the date and time formatted once a second."""
    whole = int(created)
    second = _second
    if second[0] != whole:
        second[1] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
        second[0] = whole
    return f"{second[1]}.{MILLIS[int((created - whole) * 1000)]}Z"


class TextFormatter(logging.Formatter):
    """`<time> <LEVEL> <logger>: <message> key=value ...` (a request line's fields as key=value)."""

    def format(self, record: logging.LogRecord) -> str:
        fields = record.__dict__.get("fields")
        return self.line(record.created, record.levelname, record.name, record.getMessage(), fields, record.exc_info)

    def line(self, created: float, level: str, name: str, message: str, fields=None, exc_info=None) -> str:
        line = f"{timestamp(created)} {level} {name}: {message}"
        if fields:
            line += " " + " ".join([f"{k}={v}" for k, v in fields.items() if k not in TEXT_IN_MESSAGE])
        if exc_info:
            line += "\n" + self.formatException(exc_info)
        return line

    def requests(self, waiting) -> str:
        """What `line` makes of request lines' fields (`request_line`'s tuples), each in one f-string
        (`timestamp` inline), what lines in a row share (method, route, status; peer) made once. The
        duration is whole microseconds written with a table, as `repr(round(seconds * 1e6) / 1000)` (a
        JSON line's `duration_ms`) writes it, not `round(ms, 3)` and its `repr` (~4k instructions)."""
        lines = []
        second = _second
        said = head = client_was = peer = None
        for created, rid, method, route, status, seconds, received, sent, client, ran in waiting:
            whole = int(created)
            if second[0] != whole:
                timestamp(created)  # the new second's text
            if said != (method, route, status):
                said = method, route, status
                head = f"Z INFO {ACCESS_NAME}: {method} {route} {status} "
            if client is not client_was:
                client_was, peer = client, peer_of(client)
            micros = round(seconds * 1e6)
            plan = "" if ran is None else f" plan={ran[0]} executor={ran[1]}"
            lines.append(
                f"{second[1]}.{MILLIS[int((created - whole) * 1000)]}{head}{micros // 1000}.{DECIMALS[micros % 1000]}"
                f"ms request_id={rid} bytes_in={received} bytes_out={sent} peer={peer}{plan}"
            )
        lines.append("")
        return "\n".join(lines)


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, and a request line's fields."""

    def format(self, record: logging.LogRecord) -> str:
        fields = record.__dict__.get("fields")
        return self.line(record.created, record.levelname, record.name, record.getMessage(), fields, record.exc_info)

    def line(self, created: float, level: str, name: str, message: str, fields=None, exc_info=None) -> str:
        obj = {"time": timestamp(created), "level": level.lower(), "logger": name, "message": message}
        if fields:
            obj.update(fields)
        if exc_info:
            obj["exception"] = self.formatException(exc_info)
        return orjson.dumps(obj, default=str).decode()

    def requests(self, waiting) -> str:
        """What `line` makes of request lines' fields (`request_line`'s tuples), each object built at once."""
        lines = []
        for created, rid, method, route, status, seconds, received, sent, client, ran in waiting:
            duration = round(seconds * 1e6) / 1000
            message = f"{method} {route} {status} {duration}ms"
            obj = {"time": timestamp(created), "level": "info", "logger": ACCESS_NAME, "message": message}
            obj.update(request_fields(rid, method, route, status, duration, received, sent, peer_of(client), ran))
            lines.append(orjson.dumps(obj, default=str))
        lines.append(b"")
        return b"\n".join(lines).decode()


_peer = [(None, None)]  # (the last client address seen, its text), replaced as one (threads may call)


def peer_of(client) -> str | None:
    """`host:port` of an ASGI scope's client (None without one); a connection's requests share its tuple."""
    last = _peer[0]
    if client is not last[0]:
        last = _peer[0] = (client, f"{client[0]}:{client[1]}" if client else None)
    return last[1]


def request_fields(rid, method, route, status, duration, received, sent, peer, ran) -> dict:
    """A request line's fields, in the order a JSON line writes them (`ran`: (plan, executor) or None)."""
    fields = {
        "request_id": rid,
        "method": method,
        "route": route,
        "status": status,
        "duration_ms": duration,
        "bytes_in": received,
        "bytes_out": sent,
        "peer": peer,
    }
    if ran is not None:
        fields["plan"], fields["executor"] = ran
    return fields


BATCHED = (TextFormatter, JsonFormatter)  # the formatters whose `requests` a StderrHandler's batch calls


class StderrHandler(logging.StreamHandler):
    """A StreamHandler on whatever `sys.stderr` is when a line is written (not when configured),
    which also writes request lines in batches (`queued`)."""

    def __init__(self):
        super().__init__(sys.stderr)
        self._waiting: deque[tuple] = deque()  # request lines' fields, not formatted or written yet

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass

    def queued(self, waiting: deque) -> None:
        """`request_line` appended a request line's fields to `waiting` (this handler's `_waiting`; a
        deque's append, safe against another thread's `write_lines` without the lock): they are
        formatted and written with the others queued on the event loop within FLUSH_S, in one write
        (a write a request cost ~5% of a tiny request's CPU, to a file), or at once where no loop runs.
        A request pays for a tuple and an append; its formatting is the batch's, one loop over the lines."""
        if len(waiting) == 1:
            try:
                asyncio.get_running_loop().call_later(FLUSH_S, self.write_lines)
            except RuntimeError:
                self.write_lines()
        elif len(waiting) >= FLUSH_LINES:
            self.write_lines()

    def write_lines(self) -> None:
        with self.lock:
            waiting = self._waiting
            if waiting:
                fields = [waiting.popleft() for _ in range(len(waiting))]
                stream = sys.stderr
                stream.write(self.formatter.requests(fields))
                stream.flush()

    def emit(self, record: logging.LogRecord) -> None:
        self.write_lines()  # the request lines before it, in order
        super().emit(record)

    def flush(self) -> None:  # logging.shutdown (at exit) calls it
        self.write_lines()
        super().flush()


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
            # its own handler (the same one): `request_line` writes to it without a LogRecord
            "gradserve.access": {"handlers": ["stderr"], "propagate": False},
            "uvicorn": {"handlers": [], "level": number, "propagate": True},
            "uvicorn.error": {"level": number},
            "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},  # ours replaces it
        },
    }


def request_line(scope, rid: str, route: str, status: int, seconds: float, received: int, sent: int, ran=None):
    """Log one answered request (the caller checks `ACCESS.isEnabledFor(INFO)` first). `ran`:
    (plan id, what ran it) of a computation. Its fields go to the configured handler as they are,
    formatted in its next batch by its formatter's `requests`, without a LogRecord, the handler
    chain or a dict: ~14k instructions a text line in all (~17k before lines in a row shared their
    repeated text), where made at once in an f-string it was ~27k (callgrind; benchmarks/CHANGES.md);
    through `logging` where the configuration is another."""
    handlers = ACCESS.handlers
    if len(handlers) == 1 and type(handler := handlers[0]) is StderrHandler and type(handler.formatter) in BATCHED:
        waiting = handler._waiting
        method, client = scope.get("method", ""), scope.get("client")
        waiting.append((time.time(), rid, method, route, status, seconds, received, sent, client, ran))
        if len(waiting) == 1 or len(waiting) >= FLUSH_LINES:  # a batch to schedule, or one to write now
            handler.queued(waiting)
        return
    method = scope.get("method", "")
    duration = round(seconds * 1e6) / 1000
    fields = request_fields(rid, method, route, status, duration, received, sent, peer_of(scope.get("client")), ran)
    record = ACCESS.makeRecord(ACCESS.name, INFO, "", 0, f"{method} {route} {status} {duration}ms", None, None)
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
