"""The six parts (1-4 and 6 in their own `part_*` modules) and the reasons of missed targets. Each part returns
(markdown section, [`benchmarks.rounds.Target`])."""

from __future__ import annotations

import subprocess

from benchmarks import part_client, part_engine, part_onnx, part_service, part_transfer, rounds
from benchmarks.common import PY, ROOT, interleave, timing_table
from benchmarks.rounds import Target, ratio_target

# --- part 5: GPU -------------------------------------------------------------------------------

GPU_LABELS = {
    "engine": "engine (CuPy)",
    "torch": "PyTorch CUDA",
    "cupy": "hand-written CuPy (floor)",
    "executor": "server compute (CuPy)",
}
NETS = {"seed": "seed net (N=64, 1000, 100, 10)", "large": "large MLP (N=512, 4096, 4096, 1024)"}


def served_label(net: str, peer: str) -> tuple[str, float]:
    """(label, limit) of issue 14's through-the-server GPU target for `net` against `peer` (cupy|torch)."""
    name, limit = {"cupy": ("a hand-written CuPy floor", 1.2), "torch": ("PyTorch CUDA", 1.3)}[peer]
    return f"GPU {'seed net' if net == 'seed' else 'large MLP'} through the server ≤{limit}x {name} (#14)", limit


GPU_TARGETS_14 = [served_label(net, peer)[0] for net in NETS for peer in ("cupy", "torch")]


def _gpu_found() -> tuple[bool, bool]:
    """(the engine sees a GPU, torch sees CUDA), each asked in a fresh process."""

    def ask(code: str) -> bool:
        proc = subprocess.run([PY, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
        return proc.stdout.strip() == "True"

    return ask("from engine.backend import gpu_available; print(gpu_available())"), ask(
        "import torch; print(torch.cuda.is_available())"
    )


def _agreement(res) -> str:
    """Each side's one-step loss (from the first round) and the worst relative difference of its loss and
    gradient norms from the floor's."""
    checks = {s: r["extra"][0]["check"] for s, r in res.items() if r.get("extra")}
    base = checks.get("cupy")
    if base is None:
        return "no floor check to compare with"
    worst = max(
        (abs(a - b) / max(abs(b), 1e-30) for c in checks.values() for a, b in zip(c, base, strict=True)), default=0.0
    )
    losses = ", ".join(f"{GPU_LABELS[s]} {c[0]:.9g}" for s, c in checks.items())
    return f"One step's loss: {losses}; loss and gradient norms within {worst:.1e} (relative) of the floor's"


def part5(quick: bool):
    out = ["## Part 5: GPU (CuPy engine vs PyTorch CUDA)\n"]
    engine_gpu, torch_cuda = _gpu_found()
    if not engine_gpu:
        out.append("skipped: no GPU (`engine.backend.gpu_available()` is False: CuPy missing or no device)\n")
        return "\n".join(out), [Target("5", "GPU MLP ≤1.2x PyTorch CUDA", 1.2, note="skipped: no GPU")] + [
            Target("5", t, None, note="not run: no GPU in this session") for t in GPU_TARGETS_14
        ]
    torch_side = ["torch"] if torch_cuda else []
    targets = []
    out.append(
        "Each sample is synchronized with the device. Resident: the arrays live on the GPU and a sample is "
        "forward + backward. Served: a sample is what the server does with a /backward request: the host "
        "arrays go to the GPU, the net runs, the loss and gradients come back to the host (server compute: "
        "`Executor.backward` of the decoded request with the engine on CuPy; HTTP is parts 2 and 3's).\n"
    )
    for served in (False, True):
        for net, title in NETS.items():
            sides = ["executor"] * served + ["engine"] * (not served) + torch_side + ["cupy"]
            res = interleave(
                "gpu_net", sides, rounds.ROUNDS, 20 if quick else 40, net=net, served=served, reps=10 if quick else 40
            )
            md, _ = timing_table(res, GPU_LABELS, ["cupy", *torch_side])
            notes = []
            if not served and net == "large":
                targets.append(ratio_target("5", "GPU MLP ≤1.2x PyTorch CUDA", res, "engine", "torch", 1.2))
                notes.append(targets[-1].summary())
            for peer in ["cupy", *torch_side] if served else []:
                label, limit = served_label(net, peer)
                targets.append(ratio_target("5", label, res, "executor", peer, limit))
                notes.append(targets[-1].summary())
            out += [
                f"### {title} float32, {'served' if served else 'resident'}\n",
                md,
                f"\n{_agreement(res)}." + (f" Targets: {'; '.join(notes)}" if notes else "") + "\n",
            ]
    return "\n".join(out), targets


PARTS = {
    "1": part_engine.part1,
    "2": part_service.part2,
    "3": part_transfer.part3,
    "4": part_client.part4,
    "5": part5,
    "6": part_onnx.part6,
}

# Why a target is missed when it is, from the profiles recorded in benchmarks/CHANGES.md
# (keyed by the start of the target's label).
MISSED_BECAUSE = {
    "server compute: seed net": "the generated program already runs its vjps on the arrays (local steps since session 12): in process "
    "it takes ~249 µs against the floor's ~242 µs (1.03x); the other ~21 µs of a step is the request around it "
    "(admission, plan lookup, the Ticket and the result: ~900 of the ~1,424 Python opcodes a request), after "
    "the cache-evicting matmuls (Changes, round 3)",
    "100-op chain": "CPython bytecode around each 2x2 NumPy call: making a Variable (~1.1k instructions) and a node "
    "(~0.9k), a thread-local grad-mode read (~0.6k) a recorded op, and the walk's per-node attribute reads, which do "
    "not specialize across the per-op node classes. callgrind a step: 5,973k after d2ba7b1 -> 3,698k (sessions 9-10) "
    "-> 3,304k (session 11) -> 2,964k in session 12, where each op's apply_op and node vjp got their own code "
    "objects (CPython's attribute caches are per code object; one shared code missed them at every mul/add "
    "alternation), against PyTorch's ~3,432k; alternating pinned processes read 0.75-0.76x in session 12 "
    "(Changes, round 3)",
    "seed net": "the engine does the floor's NumPy work but one 64x100 temporary in clamp's gradient; what is left is "
    "~4,600 Python opcodes a step, mostly the per-op dispatch (apply_op ~1,040), the backward walk (~930) and the "
    "node vjps (~510). Session 13 took sum's gradient off the dispatch and pow's and clamp's argument checks "
    "(f32 4,758k -> 4,720k instructions a step, floor 4,401k; paired 1.215x -> 1.201x, f64 1.108x -> 1.100x). "
    "The time ratio exceeds the instruction ratio because this Python runs right after the cache-evicting "
    "matmuls: callgrind's cache model gives ~18.2k instruction-cache misses a step against the floor's 7.4k (the "
    "interpreter loop 3.1k against 0.2k), so only fewer opcodes and fewer distinct code paths close it "
    "(Changes, round 3). Session 19 cut the Python calls a step 104 -> 90 (plain method calls straight to "
    "apply_op): the interpreter's share 318.6k -> 302.3k instructions a step (f32), 315.8k -> 302.0k (f64), "
    "which left f64 at 1.07-1.12x, on either side of 1.1x from round to round. Session 20 (engine12): two-input "
    "nodes of alike inputs skip the walk's per-edge fit: "
    "4,733.3k -> 4,732.8k instructions a step (f32; floor 4,404.9k), f64 unchanged within callgrind's ±15k; "
    "what is left needs less NumPy work (clamp's gradient's temporary) rather than less Python",
    "large MLP": "~99% of the step is the floor's own 5 BLAS calls: run-to-run noise of few ~0.5 s "
    "samples on a shared 2-core machine (Changes, round 1)",
    "tiny graph": "under 4-connection load the server spends ~215-230 µs of CPU a request against the FastAPI echo's "
    "~165 µs, and the echo gains more from concurrency (its cost drops ~40% under load, ours ~15%), so "
    "the ratio swings 56-82% between runs; in process the app is ~65 µs against the echo's 43 µs: decode "
    "~6, plan ~3, compiled run ~14 (sum's vjp dispatches an engine op), encode ~5, body read with its "
    "asyncio.timeout ~8 µs (Changes, request path)",
    "service seed net": "~1.6 ms of each round trip is moving 648 KiB up and 404 KiB down over this VM's loopback, the "
    "same for both sides; the ratio rests on the compute (~0.45 ms compiled, on the event loop when "
    "the pool is idle, against the torch endpoint's ~0.7 ms) (Changes, request path)",
    "service tiny graph": "in process the app takes ~65 µs a request against ~180 µs for the hand-written torch "
    "endpoint; uvicorn and the loopback, ~150 µs, are the same for both (Changes, request path)",
    "serve who waits": "for the seed net's binary body the bare ASGI echo, which computes nothing, read only 1.10-1.27x "
    "the hand-written endpoint's req/s at 1 and 4 connections (session 11's run B, detail table): 1.2x asks a "
    "server to be as cheap as no server on this VM's loopback, with the load generator on the same 2 cores. "
    "No more refusals: 0 non-2xx at 1-32 connections with 1 and 2 workers (the wait queue is bounded by "
    "bytes and time, FIFO; it was 4 x `max_concurrency` requests); paired against the build before it at 16 connections "
    "(4 alternating rounds) successful req/s was 0.97-1.74x (binary) and 1.3-2.5x (JSON) its, p99 0.4-0.56x its. What is "
    "left is CPU per request and "
    "this VM: a seed-net JSON `/backward` (1.9 MB body) cost the server about what the hand-written endpoint spends "
    "(28.1 against 28.6 ms of CPU at 1 connection), both mostly JSON parsing and encoding. Two causes of ours are gone "
    "(serve2 branch): the heap pad turned off glibc's sliding mmap threshold, so every block over 128 KiB (orjson's "
    "~23 MB parse buffer among them) was a fresh mapping faulted in page by page, ~1,130 page faults a request, now 0; "
    "and flat JSON lists are packed by `array.array` instead of `numpy.asarray`'s dtype discovery. In process a "
    "seed-net JSON request went 26.3-26.6 -> 22.4-23.4 ms of CPU on a loaded machine (the hand-written endpoint's "
    "25.6-27.9 ms in the same harness, ~510 page faults a request). What remains is orjson's parse into Python floats "
    "and freeing them, the same for both sides: 1.2x its throughput needs a decode that makes no Python object per "
    "number, which neither orjson nor NumPy offers (a NumPy text parser measured 3-5x slower than orjson) "
    "(issue 24 item 1)",
    "access log": "measured as server CPU per request, on ÷ off, two servers started side by side taking turns of 50 "
    "requests within each of 12 bursts (the median burst per round), each server's CPU read from its CPU-time "
    "clock in ns (session 20, log12; it was 6 pairs of bursts seconds apart read in 10 ms ticks: pairs -13% to "
    "+31% on a loaded machine, now -5% to +10%). callgrind in process found the cost was the line itself, nothing "
    "else switched on at level info: a request queues its fields as a tuple and the batch formats them, a text "
    "line 27.3k -> 15.7k (log4) -> 14.3k instructions (log12: a row's repeated method, route, status and peer "
    "made once, one f-string a line, request_line appends to the deque itself); ~9.7k of it is the batch's "
    "per-line Python (issue 24 item 5)",
    "first request of a new": "a first request parses, infers every shape and runs its graph on the engine with its "
    "backward walk (the reference the faster paths are checked against), in Python per node; a repeat runs the "
    "generated program (~0.6 ms, so <=10x needs a first request under ~6 ms). callgrind 197M -> 150M -> 140M "
    "(sessions 11-12) -> 111.9M (session 13, single request) -> 96.9M a request averaged over 5 new graphs in "
    "session 15 (98.3M before its cuts), against 11.9M a repeat: 8x in instructions but ~12x in time, a first "
    "request running colder code and data. Session 15 also took the collector's youngest-generation passes out of "
    "the way (every 50,000 allocations while serving, not 700: ~140 passes a first request), which made the first "
    "request ~9% faster in process but its repeat ~7% faster too, so the ratio hardly moved. What is left is spread "
    "over parse (~27M), the engine's eager forward and backward (~50M), inference (~15M) and decode (~11M); no "
    "piece is over ~3%. Session 18 cut the wire's per-node passes (an op node of a kind already checked parsed at once, "
    "no depth, dynamic-shape or unrecorded walk for a plain plan, inference counting each kind once; grad()'s "
    "leaf walk skipped where the plan's inputs are its leaves): 93.4M -> 71.4M "
    "a first request against 11.4M a repeat (parse 25.8M -> 16.6M, inference 20.1M -> 15.5M), in process "
    "12.2x -> 10.2x (median of 12 alternating runs); what is left is mostly the engine's eager forward (~19M) and "
    "backward walk (~18M), then parse and inference, each still a pass over every node (issue 24 item 4; Changes, "
    "round 3). Session 19 (first11): held metas found once per signature, liveness in one walk back, two-input "
    "steps read directly in parse, inference and the eager forward: 72.9M -> 58.8M, 7.70-9.07x a repeat in two "
    "full runs (met in every round)",
    "10k-node chain plan": "plans up to 100,000 steps run as recorded programs, interpreted past code generation's "
    "16,000 terms from int32 arrays over a few shared kinds of step: ~2-4 µs/node of CPU with no GC pass "
    "(in process, load average ~9 on 2 cores: 12-14 µs/node wall against 23-26 for the build before); "
    "a round over 5 µs is wall time on a loaded 2-core machine (issue 24 item 4, growth2 branch)",
    "100k-node chain plan": "a 100k-node plan is now kept with its program: charged 52.6 of the default 64 MiB "
    "`plan_cache_bytes` (key 5.1, plan 30.0, signature 12.0, program 5.5 MB: ~37 bytes a step in int32 arrays, "
    "was ~290 as objects and did not fit); its repeats run interpreted at 2.1-3.6 µs/node of CPU, "
    "4.0-7.3 µs wall at load average ~9 on 2 cores (issue 24 item 4, growth2 branch)",
    "binary transfer 4 MiB": "like 64 MiB's, on a smaller scale: each request first-touches two fresh arrays (the body "
    "buffer, clone's result) that the echo does not; page faults on this VM vary with its load (Changes, request path)",
    "binary transfer 64 MiB": "each request first-touches two fresh 64 MiB arrays (the body buffer, clone's result): 32k page "
    "faults at ~6 µs each on this VM, and the body read and answer copies need the event loop "
    "scheduled ~1000 times; on a busy machine 64 MiB round trips swing 240-800 ms (the echo's "
    "260-540 ms); reusing a spare body buffer halves the server's CPU (experiment) (Changes, request path)",
    "binary transfer": "a small binary request pays Python on top of the same uvicorn HTTP work as the raw echo, whose "
    "app does almost nothing. Since session 11 a repeat header is decoded by slicing the body's tail and admitted as "
    "its last request was; since session 12 a repeat layout's answer reuses its last JSON header, and a served "
    "worker's requests and the compute threads skip numpy.errstate and enable_grad (set once in the context they "
    "copy). callgrind through the ASGI app in process: 4 KiB 301k -> 202k -> 175k instructions a request, 64 KiB "
    "485k -> 391k -> 310k (of which ~130k is the clone's and the answer's two copies). What is left at 4 KiB is "
    "spread thin: running the program with its key, counters and Result ~34k, decode ~16k, admission ~11k, encode "
    "~13k, the body read with its budget hold ~24k, the two answer sends ~13k, headers, request id, checks and "
    "metrics ~20k; 80% of the echo would need all of it at about a quarter of the echo's round trip (issue 24 "
    "items 1, 4; wire4 and wire5 branches). Session 19 (wire8): callgrind of the served process puts the raw "
    "echo at 139k instructions a request, its whole uvicorn server included, and the service at 350k (was 357k: a "
    "repeat header compared, not hashed; no header timer for a request whose head comes in one read); 80% would "
    "need about half of the ~210k over the echo gone, and at 64 KiB the clone and the answer's join each copy "
    "the tensor (ASGI bodies must be bytes)"
    ". Session 20 (serve12): a compute request whose raw headers equal the last checked request's (no API key "
    "set) reuses their dict, length and safe X-Request-ID: 4 KiB served 310k -> 296k instructions (the echo 137.5k); "
    "uvicorn's own check of our five response headers is ~16k of what is left"
    ". Session 21 (serve13): a small 200 goes out as one write with uvicorn's own bytes (its two writes and its "
    "check of each header gone): 4 KiB served 296.9k -> 258.7k instructions, 64 KiB 703.6k -> 668.4k (the echo "
    "141.4k); what is left is spread over every layer of the request",
    "seed loop remote with resident parameters": "a step is one request of ~3 KiB (the batch and parameters held on the "
    "server, SGD stepped there in place, two steps in flight on one pipelined HTTP/1.1 connection), so its wall is "
    "the server's CPU a step. Since session 13 a step's header is decoded and admitted by its layout despite its "
    "changing step and after numbers: ~0.52 ms a step, of which ~0.28 ms is the compiled forward, backward and "
    "update at the NumPy floor and ~0.2 ms the HTTP/ASGI layer every small request pays, against the embedded "
    "loop's ~0.40 ms (which itself got ~10% faster in session 13); a round over 1.3x is that fixed per-request "
    "cost on a loaded machine (issue 24 item 3)"
    ". Session 21 (serve13): under the rule that short computations take at most half the event loop's time, about "
    "1 step in 5 went to a compute thread and back though no other request waited; a short computation now runs on "
    "the loop whenever its request is the only one the server runs, and a small answer is one write: in alternating "
    "pairs (server and client each on its own CPU) 1.14-1.40x -> 1.01-1.09x the embedded loop",
    "remote training loop": "the suite's remote loop is the seed program as written (`w.data -= lr * w.grad.data`): each step "
    "moves the parameters, a 650 KB request and a 400 KB answer over this VM's loopback, which the embedded "
    "loop does not pay; resident parameters (`client.optim.SGD(..., resident=True)`, issue 24 target 3) are "
    "the resident side's row",
    "embedded client seed loop": "since session 13 a step recorded again is not written again: the client keys the recorded "
    "program with one lean walk and replays last step's graph, and the embedded executor admits it as the last "
    "request of its header and shapes (callgrind 5,765k -> 5,468k instructions a step, the engine's 4,943k; "
    "1.34-1.36x -> 1.21-1.24x in quick runs). What is left is recording (~57k instructions an op against the "
    "engine's ~15k an eager op: Value and Node objects, weakrefs, coercion), the program key (~103k a step) and "
    "the walk over the grad_fn nodes (~91k) (Changes, round 3). Session 19 (client11, in process): the embedded "
    "executor computes a step in 276-282 µs, less than the engine's 297 µs; the ~108 µs over is the client's "
    "Python (recording ~50 µs, the key ~10, the grad_fn walk ~12, request and reply ~36); per-call trims measured "
    "0.1% of instructions, so 1.15x needs the program keyed while recording and the walk skipped on a replay. "
    "The engine side got faster in session 19 (plain methods straight to apply_op) and the client's did not, "
    "so the ratio rose from 1.23-1.26x to 1.30-1.32x"
    ". Session 20 (client12): a fixed-name op's grad_fn class is found before it is named: 5,566k -> 5,550k "
    "instructions a step against the engine's 4,900k (1.13x in instructions; the time ratio is higher, as the seed "
    "net's, because the client's Python runs after the cache-evicting matmuls)"
    ". Session 21 (client13, not merged): the program keyed while it is recorded saved 0.7% of a step's "
    "instructions (5,553k -> 5,514k over 80 steps) and no measurable time, for 64 lines and a trace holding up to "
    "4,096 recorded values between requests; skipping the grad_fn walk on a replay is unsound (the nodes are new "
    "each step, version counters move anywhere, a create_graph backward frees nodes without a request), so 1.15x "
    "needs less Python per recorded op (~50-58 µs of a step records 6 ops)",
    "HVP": "two grad() calls walk 6 and then 19 nodes, ~49 op applications, all in Python at ~50-80 "
    "instructions a bytecode: callgrind a step 3,016k after d2ba7b1 -> 1,937k (sessions 9-10) -> ~1,770k "
    "(session 12) -> 1,624k in session 13 (one-input nodes made without comprehension frames, unrolled version "
    "checks, grad()'s capture without comprehensions) -> 1,622k in session 16 (the walk trusts one-input ops that "
    "keep shapes; several gradients summed on the arrays), against PyTorch's 1,306k in C++. Phase by phase in "
    "process (session 16): forward 19.8 against torch's 17.5 µs, the create_graph backward 47 against 36, the "
    "second backward 88 against 77. What is left is spread "
    "out: apply_op and the registry layers of the ops the vjps call ~40%, the walk's loop ~25%, the pruning pass "
    "over every reachable node ~4%, the per-edge shape/dtype check ~3%; no single piece is worth more than ~4%. "
    "Session 18: mm's vjps and the transposes call their ops' own operators, grad()'s leaf check reads each node "
    "once: 1,641k -> 1,560k a step (torch 1,326k). NumPy's kernels at these sizes cost more than torch's whole "
    "calls (a 32x16x32 matmul 31k instructions against torch's whole mm at 30k; tanh and sum ~15k over torch's), "
    "so 1.0x needs cheaper small-matrix kernels than NumPy's or much less Python per node (Changes, round 3). "
    "Session 19 sent plain method calls (x.mm(w), x.tanh(), x.pow(2), x.sum()) straight to their op's apply_op and "
    "took 1 - y*y's and x.T's helper frames off the create_graph walk: 1,566k -> 1,541k a step; a Python frame costs "
    "~400-500 instructions here, so the ~215k left over torch's is not a matter of fewer layers"
    ". Session 20 (engine12): add/sub/mul of one dtype and shape and mm of one dtype make nodes whose gradients "
    "the walk need not fit: 1,548.7k -> 1,517.7k a step (torch 1,323.0k "
    "by the same pinned harness, PYTHONHASHSEED=0, one BLAS thread: 1.15x in instructions)",
    "GPU seed net through the server ≤1.2x a hand-written CuPy floor": "at the edge: session 23's two H200 runs "
    "gave 0.97-1.16x (met) and 1.12-1.21x (1 round over); session 22's, 1.17-1.39x. Host time per op, not the "
    "transfers: the served step adds ~0.35 ms of transfers to every side alike, and the program reads nothing back "
    "from the device but its results (tests/engine/test_gpu_syncs.py); what is left is the engine's Python per op "
    "and per vjp, and the vjps' extra kernels where the floor's arithmetic is written fused (not profiled on the GPU)",
    "tensor program": "the client records every op lazily and never materializes the updated weights: each "
    "`loss.item()` sends the whole history back to the first weights (~20 more nodes a step, so a "
    "step's cost grows with the step count), parsed and re-run by the Executor (cProfile of steps "
    "3-5: 17 `mm` per fetch; issue 13, section 3)",
}


def why(target: str, verdict_text: str) -> str:
    """The recorded reason for a missed target ('' when it is met or has none)."""
    if not verdict_text.startswith("missed"):
        return ""
    return next((reason for key, reason in MISSED_BECAUSE.items() if target.startswith(key)), "")
