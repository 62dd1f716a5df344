"""A small 200 from a compute route goes out as one write (`service.connections.answered`): its bytes are those
uvicorn's httptools cycle writes for the same answer sent as two ASGI messages, and wherever uvicorn's own send
would do more (an access log, a closing or paused connection, a response already begun, another uvicorn's cycle)
nothing is written and the caller sends the two messages."""

from __future__ import annotations

import asyncio
import logging

import pytest

httptools_impl = pytest.importorskip("uvicorn.protocols.http.httptools_impl")

from service.connections import alone, answered, whole_body  # noqa: E402

HEADERS = [(b"content-length", b"11"), (b"x-request-id", b"r-1"), (b"content-type", b"application/octet-stream")]
BODY = b"hello world"
LOG = logging.getLogger("test_one_write_answer")


class Transport:
    def __init__(self):
        self.writes, self.closed = [], False

    def write(self, data):
        self.writes.append(bytes(data))

    def writelines(self, parts):
        self.writes.append(b"".join(parts))

    def close(self):
        self.closed = True

    def is_closing(self):
        return self.closed


class Server:
    """What a cycle's `on_response` is bound to: the protocol, whose `tasks` are the server's requests."""

    def __init__(self, tasks=1):
        self.tasks, self.responses = set(range(tasks)), 0

    def on_response(self):
        self.responses += 1


def cycle(keep_alive=True, access_log=False, tasks=1):
    transport, server = Transport(), Server(tasks)
    scope = {"type": "http", "method": "POST", "path": "/backward", "http_version": "1.1", "query_string": b""}
    scope.update(client=("127.0.0.1", 5000), headers=[])
    default_headers = [(b"date", b"Sun, 29 Nov 2026 17:00:00 GMT"), (b"server", b"uvicorn")]
    made = httptools_impl.RequestResponseCycle(
        scope, transport, httptools_impl.FlowControl(transport), LOG, LOG, access_log, default_headers,
        asyncio.Event(), False, keep_alive, server.on_response,
    )  # fmt: skip
    return made, transport, server


def uvicorns_own(made):
    async def two_messages():
        await made.send({"type": "http.response.start", "status": 200, "headers": list(HEADERS)})
        await made.send({"type": "http.response.body", "body": BODY})

    asyncio.run(two_messages())


def test_one_write_is_byte_for_byte_what_uvicorns_send_writes():
    fast, fast_out, fast_server = cycle()
    slow, slow_out, slow_server = cycle()
    assert answered(fast.send, list(HEADERS), [BODY[:5], memoryview(BODY)[5:]])  # an answer's parts, not joined
    uvicorns_own(slow)
    assert len(fast_out.writes) == 1 and len(slow_out.writes) == 2
    assert fast_out.writes[0] == b"".join(slow_out.writes)
    assert fast_out.writes[0].startswith(b"HTTP/1.1 200 OK\r\n") and fast_out.writes[0].endswith(b"\r\n\r\n" + BODY)
    for made, server in ((fast, fast_server), (slow, slow_server)):
        assert made.response_started and made.response_complete and made.message_event.is_set()
        assert server.responses == 1  # the next pipelined request may start
    assert not fast_out.closed


@pytest.mark.parametrize(
    "case",
    ["access log", "connection closing", "writes paused", "response begun", "disconnected", "not uvicorn's"],
)
def test_where_uvicorns_send_does_more_nothing_is_written(case):
    made, out, server = cycle(keep_alive=case != "connection closing", access_log=case == "access log")
    send = made.send
    if case == "writes paused":
        made.flow.write_paused = True
    elif case == "response begun":
        made.response_started = True
    elif case == "disconnected":
        made.disconnected = True
    elif case == "not uvicorn's":

        async def send(message):
            raise AssertionError("not called")

    assert not answered(send, list(HEADERS), [BODY])
    assert out.writes == [] and not made.response_complete and server.responses == 0


@pytest.mark.parametrize("missing", ["message_event", "on_response", "default_headers", "keep_alive", "flow"])
def test_a_cycle_lacking_an_attribute_is_left_untouched(missing):
    """Another uvicorn's cycle (an attribute renamed): the two messages, not a half-set state."""
    made, out, server = cycle()
    delattr(made, missing)
    assert not answered(made.send, list(HEADERS), [BODY])
    assert out.writes == [] and not made.response_started and server.responses == 0


def test_alone_is_the_only_request_of_its_server():
    assert alone(cycle(tasks=1)[0].send)
    assert not alone(cycle(tasks=2)[0].send)

    async def send(message):
        pass

    assert not alone(send)


def arrived(made, body: bytes, complete: bool = True):
    """`body` arrived on cycle `made` as uvicorn's httptools protocol gathers it (`on_body`, `on_message_complete`)."""
    made.body += body
    made.more_body = not complete
    made.message_event.set()


def test_a_whole_body_is_taken_as_uvicorns_receive_would_return_it():
    fast, _, _ = cycle()
    slow, _, _ = cycle()
    for made in (fast, slow):
        arrived(made, b'{"graph": 1}')
    taken = whole_body(fast.receive)
    own = asyncio.run(slow.receive())
    assert taken == own and taken["body"] == b'{"graph": 1}' and taken["more_body"] is False
    assert type(taken["body"]) is bytearray  # the cycle's own buffer, not a copy
    for made in (fast, slow):  # the cycle left as its receive leaves it: the next receive waits for the disconnect
        assert made.body == bytearray() and not made.message_event.is_set()
    assert whole_body(fast.receive) is None


def test_a_body_not_all_there_or_one_uvicorn_answers_first_is_left_to_its_receive():
    partial, _, _ = cycle()
    arrived(partial, b"part", complete=False)
    assert whole_body(partial.receive) is None and partial.body == b"part" and partial.message_event.is_set()
    continuing, transport, _ = cycle()
    continuing.waiting_for_100_continue = True  # its receive writes 100 Continue first
    arrived(continuing, b"body")
    assert whole_body(continuing.receive) is None and not transport.writes
    gone, _, _ = cycle()
    arrived(gone, b"body")
    gone.disconnected = True
    assert whole_body(gone.receive) is None

    async def receive():
        return {"type": "http.request", "body": b"body", "more_body": False}

    assert whole_body(receive) is None  # not uvicorn's httptools cycle
