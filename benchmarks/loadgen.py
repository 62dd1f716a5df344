"""A light HTTP/1.1 keep-alive load generator on raw sockets (far cheaper per request than
httpx, so the server, not the client, is what is measured).

`python -m benchmarks.loadgen '<json>'` with {"port", "path", "body_file", "headers", "seconds",
"max_requests", "connections", "cpu_pgid"}: runs `connections` keep-alive connections at once in this
process, one thread each (a thread waits in `recv` without the GIL; the driver runs several of these
processes for more), each sending its next request when the last is answered, and prints
{"latencies": [...2xx answers only], "count" (answered), "ok" (2xx), "non2xx", "failed" (connection
errors), "errors" (non2xx + failed), "statuses": {status: count}, "elapsed"}; with `cpu_pgid` (a
server's process group) also "cpu_s", the CPU time (user + system) that group spent during the
measured requests.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from collections import Counter


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
    """`connections` keep-alive connections sending `request` back to back for `seconds` (at most
    `max_requests` in all); latencies of the 2xx answers, counts of the others."""
    latencies, statuses, failed = [], Counter(), [0]
    issued = iter(range(max_requests))  # next() on a range iterator is atomic under the GIL
    end = time.perf_counter() + seconds

    def client():
        conn = None
        while time.perf_counter() < end and next(issued, None) is not None:
            try:
                conn = conn or Connection(port)
                t0 = time.perf_counter()
                status, _ = conn.roundtrip(request)
                took = time.perf_counter() - t0
            except (OSError, ConnectionError, ValueError):
                failed[0] += 1
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(0.001)
                continue
            statuses[status] += 1
            if 200 <= status < 300:
                latencies.append(took)
        if conn is not None:
            conn.close()

    start = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    answered = sum(statuses.values())
    non2xx = answered - len(latencies)
    return {
        "latencies": latencies,
        "count": answered,
        "ok": len(latencies),
        "non2xx": non2xx,
        "failed": failed[0],
        "errors": non2xx + failed[0],
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "elapsed": elapsed,
    }


def _group_pids(pgid: int) -> list[tuple[str, list[str]]]:
    """The live processes of process group `pgid` (Linux /proc), each with its stat fields after the name."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # fields after the name: state, ppid, pgrp, ..., utime (12th), stime (13th)
            found.append((entry, fields))
    return found


def group_cpu_seconds(pgid: int) -> float:
    """User + system CPU seconds of the live processes of process group `pgid` (Linux /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    return sum(int(fields[11]) + int(fields[12]) for _, fields in _group_pids(pgid)) / ticks


def pin_group(pgid: int, cpus: set) -> None:
    """Pin every thread of process group `pgid`'s live processes to `cpus` (threads made later inherit it)."""
    for pid, _ in _group_pids(pgid):
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                os.sched_setaffinity(int(tid), cpus)
        except OSError:  # a thread or process that ended meanwhile
            continue


def main(argv):
    p = json.loads(argv[0])
    with open(p["body_file"], "rb") as f:
        body = f.read()
    request = build_request(p["path"], body, p.get("headers"))
    # a short warm-up so connection set-up and first-request costs don't count
    run(p["port"], request, 0.5, 20, min(p.get("connections", 1), 20))
    pgid = p.get("cpu_pgid")
    cpu0 = group_cpu_seconds(pgid) if pgid else None
    result = run(p["port"], request, p["seconds"], p["max_requests"], p.get("connections", 1))
    if pgid:
        result["cpu_s"] = group_cpu_seconds(pgid) - cpu0
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
