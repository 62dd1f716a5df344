"""One side of one case, in a fresh process: `python -m benchmarks.worker <case> <side> '<json params>'`.

Every side's step returns (loss, gradients...) so the tests can check that the sides compute the
same thing (the NumPy floor's hand-written gradients included).

Prints one JSON line: {"times": [seconds per sample, ...], "extra": {...}}.
Sides: engine, torch, numpy (the hand-written floor), and for the client cases embedded/remote/resident;
the engine cases also run the peers of `benchmarks.peers` (autograd, jax, jaxjit) and `executor`
(the service's compute, in-process: `wire.handler.run` of a request `wire.handler.decode` decoded).
"""

from __future__ import annotations

import json
import resource
import sys
import time

import numpy

from benchmarks import alternate, peers

SEED = (64, 1000, 100, 10)
LARGE = (512, 4096, 4096, 1024)
HVP = (32, 16, 32, 4)  # the HVP case's small MLP: N, D_in, H, D_out (float64)


def _timeit(fn, reps, warmup, max_s=120.0):
    return alternate.samples(fn, reps, warmup, max_s)[0]


def _data(shape_dims, dtype, seed=0):
    n, d_in, h, d_out = shape_dims
    rng = numpy.random.default_rng(seed)
    x = rng.standard_normal((n, d_in)).astype(dtype)
    y = rng.standard_normal((n, d_out)).astype(dtype)
    w1 = (rng.standard_normal((d_in, h)) / numpy.sqrt(d_in)).astype(dtype)
    w2 = (rng.standard_normal((h, d_out)) / numpy.sqrt(h)).astype(dtype)
    return x, y, w1, w2


# --- the two-layer net (seed net and large MLP): one forward + backward -------------------------


def net_step(side, dims, dtype, count=1):
    x, y, w1, w2 = _data(dims, dtype)
    if side in peers.PEERS:
        return peers.net_step(side, x, y, w1, w2)
    if side == "executor":
        from benchmarks import payloads

        if dims != SEED:
            raise ValueError("the executor side runs the seed net only")
        header, arrays = payloads.seed_request(numpy.dtype(dtype).name)
        return executor_step(header, arrays, "loss", count)
    if side == "numpy":

        def step():
            h = x @ w1
            h_relu = numpy.maximum(h, 0)
            y_pred = h_relu @ w2
            diff = y_pred - y
            loss = (diff * diff).sum()
            g_pred = 2.0 * diff
            g_w2 = h_relu.T @ g_pred
            g_h = g_pred @ w2.T
            g_h *= h > 0
            g_w1 = x.T @ g_h
            return loss, g_w1, g_w2

        return step
    if side == "torch":
        import torch

        tx, ty = torch.from_numpy(x), torch.from_numpy(y)
        tw1, tw2 = torch.from_numpy(w1).requires_grad_(), torch.from_numpy(w2).requires_grad_()

        def step():
            tw1.grad = tw2.grad = None
            loss = (tx.mm(tw1).clamp(min=0).mm(tw2) - ty).pow(2).sum()
            loss.backward()
            return loss, tw1.grad, tw2.grad

        return step
    import engine

    ex, ey = engine.tensor(x), engine.tensor(y)
    ew1, ew2 = engine.tensor(w1, requires_grad=True), engine.tensor(w2, requires_grad=True)

    def step():
        ew1.grad = ew2.grad = None
        loss = (ex.mm(ew1).clamp(min=0).mm(ew2) - ey).pow(2).sum()
        loss.backward()
        return loss, ew1.grad, ew2.grad

    return step


# --- the chain of small ops ---------------------------------------------------------------------


def chain_data():
    rng = numpy.random.default_rng(0)
    x0 = rng.standard_normal((2, 2)).astype(numpy.float32)
    a = (1.0 + 0.001 * rng.standard_normal((2, 2))).astype(numpy.float32)
    b = (0.001 * rng.standard_normal((2, 2))).astype(numpy.float32)
    return x0, a, b


def chain_step(side, length, count=1):
    x0, a, b = chain_data()
    if side in peers.PEERS:
        return peers.chain_step(side, length, x0, a, b)
    if side == "executor":
        from benchmarks import payloads

        return executor_step(*payloads.chain_request(length, x0, a, b), "loss", count)
    if side == "numpy":

        def step():
            y = x0
            for i in range(length):
                y = y * a if i % 2 == 0 else y + b
            loss = y.sum()
            g = numpy.ones_like(y)
            for i in reversed(range(length)):
                if i % 2 == 0:
                    g = g * a
            return loss, g

        return step
    if side == "torch":
        import torch

        tx, ta, tb = torch.from_numpy(x0).requires_grad_(), torch.from_numpy(a), torch.from_numpy(b)

        def step():
            tx.grad = None
            y = tx
            for i in range(length):
                y = y * ta if i % 2 == 0 else y + tb
            loss = y.sum()
            loss.backward()
            return loss, tx.grad

        return step
    import engine

    ex, ea, eb = engine.tensor(x0, requires_grad=True), engine.tensor(a), engine.tensor(b)

    def step():
        ex.grad = None
        y = ex
        for i in range(length):
            y = y * ea if i % 2 == 0 else y + eb
        loss = y.sum()
        loss.backward()
        return loss, ex.grad

    return step


def executor_step(header, arrays, output, count):
    """`step()` -> (output, *gradients): the request (header, arrays) sent as a binary body, run as the
    service runs it: decoded by `wire.handler.decode` (a header seen before is a `wire.layouts` repeat, as
    a client's next step is) and admitted and run by `wire.handler.run`, in a context with IEEE warnings
    off as a served worker's (a copy: the caller's own context, a test's, stays as it was). The `count`
    requests are decoded beforehand, so a sample times admission and the compute (decoding is the request
    path's, measured over HTTP)."""
    import contextvars

    from benchmarks import payloads
    from wire import codec, handler
    from wire.executor import Executor

    executor = Executor()
    served = contextvars.copy_context()
    served.run(handler.quiet_ieee)
    body, headers = payloads.encode(header, arrays, binary=True)
    length = int(headers[codec.HEADER_LENGTH])
    pending = [handler.decode(executor, body, length) for _ in range(count)]

    def step():
        request = pending.pop() if pending else handler.decode(executor, body, length)
        result = served.run(handler.run, executor, "/backward", request)
        return (result.outputs[output], *result.grads.values())

    return step


def _samples(step, reps, warmup, max_s=120.0):
    """Timed samples of `step`, and a `jax.jit` side's compile time (timed apart) as extra."""
    times = _timeit(step, reps, warmup, max_s)
    return {"times": times, "extra": {"compile_s": sum(peers.COMPILE_S.values())} if peers.COMPILE_S else None}


def case_chain100(side, p):
    reps, warmup = p.get("reps", 200), p.get("warmup", 20)
    return _samples(chain_step(side, 100, count=reps + warmup), reps, warmup, p.get("max_s", 120))


def case_seed(side, p):
    dtype = numpy.dtype(p.get("dtype", "float32"))
    reps, warmup = p.get("reps", 100), p.get("warmup", 10)
    return _samples(net_step(side, SEED, dtype, count=reps + warmup), reps, warmup, p.get("max_s", 120))


# --- Hessian-vector product of a small MLP ------------------------------------------------------


def hvp_data():
    x, y, w1, w2 = _data(HVP, numpy.float64)
    rng = numpy.random.default_rng(1)
    return x, y, w1, w2, rng.standard_normal(w1.shape), rng.standard_normal(w2.shape)


def hvp_step(side):
    """`step()` -> (hv1, hv2): the HVP of the tanh MLP's loss (see `peers.mlp_loss`) along (v1, v2).
    engine and torch: the gradient with `create_graph=True`, then the gradient of <grad, v>."""
    x, y, w1, w2, v1, v2 = hvp_data()
    if side in peers.PEERS:
        return peers.hvp_step(side, x, y, w1, w2, v1, v2)
    if side == "torch":
        import torch as lib

        grad = lib.autograd.grad
        tensor = lib.from_numpy
    else:
        import engine as lib

        grad, tensor = lib.grad, lib.tensor
    tx, ty, tv1, tv2 = (tensor(a) for a in (x, y, v1, v2))
    tw1, tw2 = tensor(w1).requires_grad_(), tensor(w2).requires_grad_()

    def step():
        loss = (tx.mm(tw1).tanh().mm(tw2) - ty).pow(2).sum()
        g1, g2 = grad(loss, [tw1, tw2], create_graph=True)
        return tuple(grad((g1 * tv1).sum() + (g2 * tv2).sum(), [tw1, tw2]))

    return step


def case_hvp(side, p):
    return _samples(hvp_step(side), p.get("reps", 200), p.get("warmup", 20), p.get("max_s", 120))


def case_large(side, p):
    step = net_step(side, LARGE, numpy.float32)
    return {"times": _timeit(step, p.get("reps", 5), p.get("warmup", 1), p.get("max_s", 120))}


def case_chain100k(side, p):
    """One build + backward of a 100,000-op chain; the peak RSS growth over this process's baseline."""
    length = p.get("length", 100_000)
    step = chain_step(side, length)
    # warm the op dispatch with a short chain so the baseline includes imported code, not the graph
    chain_step(side, 10)()
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    step()
    elapsed = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"times": [elapsed], "extra": {"peak_rss_growth_mib": (peak - base) / 1024, "peak_rss_mib": peak / 1024}}


# --- cost growth: a new graph's first request, and large plans ----------------------------------


def _decoder(executor, header, arrays):
    """`decode()` -> a fresh decoded request of (header, arrays) sent as a binary body, as the service
    reads one (the JSON head parsed and validated each time)."""
    import orjson

    from benchmarks import payloads
    from wire import codec
    from wire.messages import decode_request

    body, headers = payloads.encode(header, arrays, binary=True)
    length = int(headers[codec.HEADER_LENGTH])

    def decode():
        head, tail = codec.split_body(body, length)
        return decode_request(orjson.loads(bytes(head)), tail, executor.limits)

    return decode


def case_growth(side, p):
    """The request of a `nodes`-node chain graph: side `first` times the first request of each of
    `graphs` graphs the executor has not seen (decode, validate, plan, infer, run on the engine); side
    `repeat` times repeats of one graph after its first request. One sample = decode + backward. Both
    sides run with the garbage collector as the service runs it (`service.app.serving_collector`)."""
    from service.app import serving_collector

    with serving_collector():
        return _growth(side, p)


def _growth(side, p):
    from wire.executor import Executor

    nodes, graphs = p.get("nodes", 1000), p.get("graphs", 10)
    x0, a, b = chain_data()
    executor = Executor()
    if side == "first":  # a graph not seen before per call (twice `graphs`: a batch's first call may be dropped)
        decoders = [_decoder(executor, *payloads_chain(nodes - 4, x0, a, b, f"g{i}_")) for i in range(2 * graphs + 1)]
        executor.backward(decoders.pop()())  # the executor's own first-call costs are not a new graph's
        times = _timeit(lambda: executor.backward(decoders.pop()()), graphs, 0, p.get("max_s", 120))
        return {"times": times}
    from wire.codegen import GENERATOR

    decode = _decoder(executor, *payloads_chain(nodes - 4, x0, a, b, "g_"))
    for _ in range(3):  # the first request, the recorded second and the checked third
        executor.backward(decode())
    # the steady repeat: its generated code, every round (timed while it was being generated, a round's
    # repeats were interpreted or not as the generator's thread happened to be done, ~1.1 or ~0.7 ms)
    GENERATOR.idle(60)
    return {"times": _timeit(lambda: executor.backward(decode()), p.get("reps", 3 * graphs), 1, p.get("max_s", 120))}


def payloads_chain(length, x0, a, b, salt):
    from benchmarks import payloads

    return payloads.chain_request(length, x0, a, b, salt)


def case_plan(side, p):
    """Repeats of a cached `nodes`-node chain plan (`Executor.backward` of requests decoded
    beforehand, as `executor_step`) after its third request, which checks its program (recorded by
    the second) against the engine (`wire.compile`); samples are seconds per node. extra: the first
    request's seconds per node (planning included). With the service's garbage collector, as `case_growth`."""
    from service.app import serving_collector

    with serving_collector():
        return _plan(side, p)


def _plan(side, p):
    from wire.executor import Executor

    nodes, reps = p.get("nodes", 10_000), p.get("reps", 5)
    x0, a, b = chain_data()
    executor = Executor()
    decode = _decoder(executor, *payloads_chain(nodes - 4, x0, a, b, ""))
    pending = [decode() for _ in range(2 * reps + 3)]  # a batch's first call may be dropped
    t0 = time.perf_counter()
    executor.backward(pending.pop())
    first = time.perf_counter() - t0
    times = _timeit(lambda: executor.backward(pending.pop()), reps, 2, max_s=p.get("max_s", 60))
    return {"times": [t / nodes for t in times], "extra": {"first_per_node": first / nodes}}


# --- client end-to-end: the seed training loop -------------------------------------------------


def case_train(side, p):
    """`steps` SGD steps of the seed net after 5 untimed warm-up steps. Samples are per-step
    times (robust to a busy machine's spikes); extra.total is the whole loop's time.
    Sides: numpy, torch, engine, embedded and remote (the client; remote = GRADSERVE_URL set), and resident:
    remote with the parameters kept on the server (`client.optim.SGD(..., resident=True)`: the step is one
    request carrying the batch, the optimizer's update applied there)."""
    steps = p.get("steps", 500)
    lr = 1e-6
    x, y, w1, w2 = _data(SEED, numpy.float32)
    if side == "numpy":
        a, b = w1.copy(), w2.copy()

        def step():
            h = x @ a
            h_relu = numpy.maximum(h, 0)
            diff = h_relu @ b - y
            g_pred = 2.0 * diff
            g_b = h_relu.T @ g_pred
            g_h = g_pred @ b.T
            g_h *= h > 0
            a[...] -= lr * (x.T @ g_h)
            b[...] -= lr * g_b
    elif side == "torch":
        import torch

        tx, ty = torch.from_numpy(x), torch.from_numpy(y)
        a, b = torch.from_numpy(w1.copy()).requires_grad_(), torch.from_numpy(w2.copy()).requires_grad_()

        def step():
            loss = (tx.mm(a).clamp(min=0).mm(b) - ty).pow(2).sum()
            loss.backward()
            with torch.no_grad():
                a.sub_(lr * a.grad)
                b.sub_(lr * b.grad)
            a.grad = b.grad = None
    elif side == "resident":  # through the client with its parameters resident on the server (GRADSERVE_URL set)
        import client

        ex, ey = client.tensor(x), client.tensor(y)
        a, b = client.tensor(w1.copy(), requires_grad=True), client.tensor(w2.copy(), requires_grad=True)
        optimizer = client.optim.SGD([a, b], lr=lr, resident=True)

        def step():
            loss = (ex.mm(a).clamp(min=0).mm(b) - ey).pow(2).sum()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    else:  # the same program on the engine, or through the client (embedded; remote: GRADSERVE_URL is set)
        import importlib

        E = importlib.import_module("engine" if side == "engine" else "client")
        ex, ey = E.tensor(x), E.tensor(y)
        a, b = E.tensor(w1.copy(), requires_grad=True), E.tensor(w2.copy(), requires_grad=True)

        def step():
            loss = (ex.mm(a).clamp(min=0).mm(b) - ey).pow(2).sum()
            loss.backward()
            a.data -= lr * a.grad.data
            b.data -= lr * b.grad.data
            a.grad = b.grad = None

    for _ in range(5):
        step()
    return _timed_steps(step, steps, p.get("max_s", 300))


def _timed_steps(step, steps: int, max_s: float) -> dict:
    """Per-step times of up to `steps` calls of `step` (stopping after `max_s` seconds of them), the
    timed loop's wall time, the steps run (dropped warm-ups included) and this process's CPU time
    per step run."""
    times, spent = alternate.samples(step, steps, 0, max_s)
    cpu = spent["cpu"] / max(1, spent["ran"])
    return {"times": times, "extra": {"total": spent["wall"], "steps": len(times), "ran": spent["ran"], "cpu": cpu}}


def case_tensorprog(side, p):
    """`steps` iterations of the tutorials' `two_layer_net_tensor` (`benchmarks.programs`) after 2
    untimed ones, on torch, engine or the client (embedded; remote when GRADSERVE_URL is set).
    Samples are per-step times; extra.total is the timed loop's wall time."""
    from benchmarks import programs

    mod = __import__({"embedded": "client", "remote": "client"}.get(side, side))
    step = programs.two_layer_net_tensor(mod)
    for _ in range(2):
        step()
    return _timed_steps(step, p.get("steps", 50), p.get("max_s", 120))


# --- GPU ----------------------------------------------------------------------------------------


def gpu_net_step(side, dims, served):
    """`step()` -> (loss, g_w1, g_w2) of the two-layer net on the GPU, synchronized. Resident (`served`
    false): the arrays live on the device and the step is forward + backward. Served: as the server
    computes a request, the step takes the host arrays to the device and its results back to the host
    (engine: `Executor.backward` of the decoded /backward request with the engine on CuPy). Sides:
    engine (CuPy), torch (CUDA), cupy (the hand-written gradients, the floor) and, served, executor."""
    import cupy

    from engine import backend

    backend.use("cuda")
    host = _data(dims, numpy.float32)
    sync = cupy.cuda.Device().synchronize
    if side == "executor":
        from benchmarks import payloads

        if not served:
            raise ValueError("the executor side runs served only")
        header, arrays = payloads.seed_request("float32", dims)
        step = executor_step(header, arrays, "loss", 1)
        return lambda: tuple(map(_host, step()))
    if side == "torch":
        import torch

        def to_device(arrays):
            return [torch.from_numpy(a).to("cuda") for a in arrays]

        def net(x, y, w1, w2):
            w1.requires_grad_(), w2.requires_grad_()
            loss = (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum()
            loss.backward()
            return loss.detach(), w1.grad, w2.grad

        sync = torch.cuda.synchronize
    elif side == "cupy":

        def to_device(arrays):
            return [cupy.asarray(a) for a in arrays]

        def net(x, y, w1, w2):
            h = x @ w1
            h_relu = cupy.maximum(h, 0)
            diff = h_relu @ w2 - y
            g_pred = 2.0 * diff
            g_h = g_pred @ w2.T
            g_h *= h > 0
            return (diff * diff).sum(), x.T @ g_h, h_relu.T @ g_pred

    else:
        import engine

        def to_device(arrays):
            return [engine.tensor(cupy.asarray(a)) for a in arrays]

        def net(x, y, w1, w2):
            w1.requires_grad_(), w2.requires_grad_()
            loss = (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum()
            loss.backward()
            return loss.data, w1.grad.data, w2.grad.data

    if served:
        return lambda: tuple(map(_host, net(*to_device(host))))
    resident = to_device(host)

    def step():
        if side != "cupy":
            resident[2].grad = resident[3].grad = None
        out = net(*resident)
        sync()
        return out

    return step


def case_gpu_net(side, p):
    """The seed net or the large MLP (`net`: seed|large) on the GPU, resident or `served`. extra.check:
    the loss and the gradients' norms of one step on the host, so that the report can show the sides
    compute the same thing."""
    step = gpu_net_step(side, LARGE if p.get("net") == "large" else SEED, bool(p.get("served")))
    check = [float(numpy.linalg.norm(_host(a).astype(numpy.float64))) for a in step()]
    return {
        "times": _timeit(step, p.get("reps", 20), p.get("warmup", 3), p.get("max_s", 120)),
        "extra": {"check": check},
    }


def _host(a):
    """A step's result on the host: a torch tensor, a Variable or a NumPy/CuPy array."""
    from engine import Variable, backend

    if hasattr(a, "detach") and not isinstance(a, Variable):
        return a.detach().cpu().numpy()
    return backend.to_numpy(a.data if isinstance(a, Variable) else a)


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


def main(argv):
    case, side = argv[0], argv[1]
    params = json.loads(argv[2]) if len(argv) > 2 else {}
    result = CASES[case](side, params)
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
