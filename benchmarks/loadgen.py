"""A light HTTP/1.1 keep-alive load generator on raw sockets (far cheaper per request than
httpx, so the server, not the client, is what is measured).

`python -m benchmarks.loadgen '<json>'` with {"port", "path", "body_file", "headers", "seconds",
"max_requests", "connections", "cpu_pgid"}: runs `connections` keep-alive connections at once in this
process, one thread each (a thread waits in `recv` without the GIL; the driver runs several of these
processes for more), each sending its next request when the last is answered, and prints
{"latencies": [...2xx answers only], "count" (answered), "ok" (2xx), "non2xx", "failed" (connection
errors), "errors" (non2xx + failed), "statuses": {status: count}, "elapsed"}; with `cpu_pgid` (a
server's process group) also "cpu_s", the CPU time (user + system) that group spent during the
measured requests. With "ports", "bursts" and "cpu_pgids" instead: `alternating`'s servers' CPU per request.
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
    """User + system CPU seconds of the live processes of process group `pgid` (Linux /proc), each read
    from its CPU-time clock in nanoseconds (`process_cpu_seconds`), not `/proc/<pid>/stat`'s 10 ms ticks
    (~1% of a second's burst, per read)."""
    return sum(process_cpu_seconds(int(pid), fields) for pid, fields in _group_pids(pgid))


def process_cpu_seconds(pid: int, fields: list[str]) -> float:
    """Process `pid`'s CPU seconds, its threads' and its ended threads' (the process CPU-time clock
    of `clock_getcpuclockid`, `((~pid) << 3) | 2` on Linux); its `stat` ticks (`fields`) where that
    clock cannot be read (the process ended meanwhile)."""
    try:
        return time.clock_gettime((~pid << 3) | 2)
    except OSError:
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pin_group(pgid: int, cpus: set) -> None:
    """Pin every thread of process group `pgid`'s live processes to `cpus` (threads made later inherit it)."""
    for pid, _ in _group_pids(pgid):
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                os.sched_setaffinity(int(tid), cpus)
        except OSError:  # a thread or process that ended meanwhile
            continue


def alternating(ports, request: bytes, seconds: float, bursts: int, pgids, block: int) -> dict:
    """One keep-alive connection to each server of `ports`, sent `block` requests `request` in turn (one
    in flight in all, the order reversed every other burst), `bursts` bursts of `seconds`: each server's
    CPU time (process group `pgids`) per request, burst by burst, {"cpu": [[s, ...] a server]}, or
    {"error"}. Servers compared this way see the same machine a block apart (milliseconds), where bursts
    in turns (`run`) see it seconds apart; a block, not a request, a turn, so that a server's CPU per
    request is what it is on its own (a request each in turn put ~1.8x the CPU on each, its caches the
    other's)."""
    conns = [Connection(port) for port in ports]
    cpu = [[] for _ in ports]
    for b in range(-1, bursts):  # burst -1: a warm-up
        order = list(range(len(ports)))[:: 1 if b % 2 else -1]
        start = [group_cpu_seconds(pgid) for pgid in pgids]
        end, rounds = time.perf_counter() + (0.2 if b < 0 else seconds), 0
        while time.perf_counter() < end:
            for i in order:
                for _ in range(block):
                    status, _ = conns[i].roundtrip(request)
                    if not 200 <= status < 300:
                        return {"error": f"status {status} from port {ports[i]}"}
            rounds += block
        if b >= 0:
            for i, pgid in enumerate(pgids):
                cpu[i].append((group_cpu_seconds(pgid) - start[i]) / rounds)
    for conn in conns:
        conn.close()
    return {"cpu": cpu}


def main(argv):
    p = json.loads(argv[0])
    with open(p["body_file"], "rb") as f:
        body = f.read()
    request = build_request(p["path"], body, p.get("headers"))
    if "ports" in p:
        print(json.dumps(alternating(p["ports"], request, p["seconds"], p["bursts"], p["cpu_pgids"], p["block"])))
        return
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
