"""A light HTTP/1.1 keep-alive load generator on raw sockets (far cheaper per request than
httpx, so the server, not the client, is what is measured).

`python -m benchmarks.loadgen '<json>'` with {"port", "path", "body_file", "headers", "seconds",
"max_requests", "connections"}: runs `connections` sequential keep-alive connections in this
process (threads would share the GIL, so the driver runs several of these processes) and prints
{"latencies": [...], "count", "errors", "elapsed"}.
"""

from __future__ import annotations

import json
import socket
import sys
import time


def build_request(path: str, body: bytes, headers: dict | None = None) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {len(body)}"]
    hdrs = {"Content-Type": "application/json"}
    hdrs.update(headers or {})
    lines += [f"{k}: {v}" for k, v in hdrs.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class Connection:
    def __init__(self, port: int, timeout: float = 60.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()

    def _fill(self):
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("server closed the connection")
        self.buf += chunk

    def roundtrip(self, request: bytes) -> tuple[int, bytes]:
        """Send one request; return (status, body). Handles Content-Length and chunked bodies."""
        self.sock.sendall(request)
        while (end := self.buf.find(b"\r\n\r\n")) < 0:
            self._fill()
        head = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
        del self.buf[: end + 4]
        status = int(head[0].split(" ", 2)[1])
        fields = {}
        for line in head[1:]:
            k, _, v = line.partition(":")
            fields[k.strip().lower()] = v.strip()
        if "content-length" in fields:
            n = int(fields["content-length"])
            while len(self.buf) < n:
                self._fill()
            body = bytes(self.buf[:n])
            del self.buf[:n]
            return status, body
        if fields.get("transfer-encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                while (e := self.buf.find(b"\r\n")) < 0:
                    self._fill()
                size = int(bytes(self.buf[:e]).split(b";")[0], 16)
                del self.buf[: e + 2]
                while len(self.buf) < size + 2:
                    self._fill()
                out += self.buf[:size]
                del self.buf[: size + 2]
                if size == 0:
                    return status, bytes(out)
        raise ConnectionError("response without a length")

    def close(self):
        self.sock.close()


def run(port, request: bytes, seconds: float, max_requests: int, connections: int = 1):
    conns = [Connection(port) for _ in range(connections)]
    latencies, errors = [], 0
    start = time.perf_counter()
    end = start + seconds
    i = 0
    while i < max_requests and time.perf_counter() < end:
        c = conns[i % len(conns)]
        t0 = time.perf_counter()
        try:
            status, _ = c.roundtrip(request)
            if status != 200:
                errors += 1
        except (OSError, ConnectionError, ValueError):
            errors += 1
            c.close()
            conns[i % len(conns)] = Connection(port)
        latencies.append(time.perf_counter() - t0)
        i += 1
    elapsed = time.perf_counter() - start
    for c in conns:
        c.close()
    return {"latencies": latencies, "count": len(latencies), "errors": errors, "elapsed": elapsed}


def main(argv):
    p = json.loads(argv[0])
    with open(p["body_file"], "rb") as f:
        body = f.read()
    request = build_request(p["path"], body, p.get("headers"))
    # a short warm-up so connection set-up and first-request costs don't count
    run(p["port"], request, 0.5, 20)
    print(json.dumps(run(p["port"], request, p["seconds"], p["max_requests"], p.get("connections", 1))))


if __name__ == "__main__":
    main(sys.argv[1:])
