"""HTTP/1.1 pipelining on one keep-alive connection: a request is written without waiting for the answers to
the ones before it, and the server answers them in order (RFC 9112 9.3; uvicorn runs a connection's requests
one after another). A session's resident optimizer steps go this way (`client.session`), so the server holds
the next step when it has answered one. A reader thread reads the answers, so a large answer never waits
for a request still being written (nor the reverse)."""

from __future__ import annotations

import http.client
import io
import queue
import socket
import threading
from concurrent.futures import Future

from client.errors import ConnectionFailed
from client.transports import Response, _readable


class Pipeline:
    """Requests to `transport`'s server (a `PlainHttpTransport`) on a connection of their own."""

    def __init__(self, transport):
        self._transport = transport
        self._lock = threading.Lock()
        self._connection: _Connection | None = None

    def submit(self, method, path, content=None, headers=None) -> Future:
        """The Future of the Response to a request written now, after those submitted before it."""
        t = self._transport
        head = [f"{method} {t._prefix}{path} HTTP/1.1", f"Host: {t._address[0]}:{t._address[1]}"]
        for name, value in {**t.headers, **(headers or {}), "Content-Length": str(len(content or b""))}.items():
            head.append(f"{name}: {value}")
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (content or b"")
        with self._lock:
            connection = self._connection
            if connection is None or not connection.reusable():
                connection = self._connection = _Connection(t)
            return connection.send(data, path)

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None


class _Connection:
    """One socket, the Futures of the requests written to it (in order) and the thread reading their answers."""

    def __init__(self, transport):
        self._url = transport.url
        self._sock = transport._take().sock  # connected (or the session's ConnectionFailed), its timeout set
        self._file = _Kept(socket.SocketIO(self._sock, "rb"))
        self._waiting: queue.SimpleQueue = queue.SimpleQueue()
        self._sent = self._answered = 0  # (each counted by one thread: the writer's, the reader's)
        self._closing = False  # an answer said `Connection: close`, or reading failed: written requests fail
        threading.Thread(target=self._read, name="gradserve-pipeline", daemon=True).start()

    def reusable(self) -> bool:
        """False once it is closing, or when the server closed it while idle (it is readable then)."""
        if not self._closing and self._sent == self._answered and _readable(self._sock):
            self.close()
        return not self._closing

    def send(self, data: bytes, path: str) -> Future:
        future: Future = Future()
        self._sent += 1
        self._waiting.put((future, path))
        try:
            self._sock.sendall(data)
        except OSError:  # the server stopped reading: its answer (an early 413, say), if any, is still read
            self._closing = True
        return future

    def _read(self) -> None:
        failure = None
        while (item := self._waiting.get()) is not None:
            future, path = item
            try:
                if failure is not None:
                    raise failure
                answer = http.client.HTTPResponse(self._file)  # type: ignore[arg-type]  # (it calls makefile)
                answer.begin()
                body = answer.read()
                if answer.will_close:  # nothing after this answer runs (RFC 9112 9.6): sent again, safely
                    self._closing, failure = (
                        True,
                        ConnectionFailed(
                            f"the server at {self._url} closed the connection before reading this request",
                            self._url,
                            retry="always",
                        ),
                    )
            except ConnectionFailed as err:
                future.set_exception(err)
            except (OSError, ValueError, http.client.HTTPException) as err:  # (ValueError: closed meanwhile)
                self._closing, failure = (
                    True,
                    ConnectionFailed(f"the connection to {self._url}{path} was dropped: {err!r}", self._url),
                )
                future.set_exception(failure)
            else:
                future.set_result(Response(answer.status, {k.lower(): v for k, v in answer.getheaders()}, body))
            self._answered += 1
            if self._closing and self._sent == self._answered:
                self._shut()

    def close(self) -> None:
        self._closing = True
        self._waiting.put(None)
        self._shut()

    def _shut(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        io.BufferedReader.close(self._file)
        self._sock.close()


class _Kept(io.BufferedReader):
    """The connection's one buffered reader, handed to each `http.client.HTTPResponse` in turn (`makefile`)
    and left open when one has been read: the next answer's bytes may be in its buffer already."""

    def makefile(self, mode):
        return self

    def close(self):
        pass
