"""The engine benchmarks' peers: HIPS `autograd` and JAX (eager, and `jax.jit`).

Each builder returns `step()` -> (loss, gradients...) like `benchmarks.worker`'s sides, so the
tests can check that every peer computes what the engine computes. JAX steps block until their
results are ready. A `jax.jit` builder compiles ahead of time (`jit(f).lower(...).compile()`) and
reports that time separately as `COMPILE_S[case]`, never inside a sample.

Sides: `autograd` (HIPS autograd), `jax` (`jax.value_and_grad` called eagerly: traced and
dispatched op by op every call), `jaxjit` (the same function compiled once by `jax.jit`).
"""

from __future__ import annotations

import time

PEERS = ("autograd", "jax", "jaxjit")
MODULE_OF = {"autograd": "autograd", "jax": "jax", "jaxjit": "jax"}
COMPILE_S: dict[str, float] = {}


def _numpy_of(side):
    if side == "autograd":
        import autograd
        import autograd.numpy as anp

        return autograd, anp
    import jax
    import jax.numpy as jnp

    return jax, jnp


def _jax_arrays(*arrays):
    import jax
    import jax.numpy as jnp

    if any(a.dtype.itemsize == 8 for a in arrays):
        jax.config.update("jax_enable_x64", True)
    return [jnp.asarray(a) for a in arrays]


def _value_and_grad(side, f, args, case):
    """`step()` -> (value, grad) of `f(*args)` with respect to its first argument on `side`."""
    lib, _ = _numpy_of(side)
    if side == "autograd":
        vg = lib.value_and_grad(f)
        return lambda: vg(*args)
    vg = lib.value_and_grad(f)
    if side == "jaxjit":
        t0 = time.perf_counter()
        vg = lib.jit(vg).lower(*args).compile()
        COMPILE_S[case] = time.perf_counter() - t0

    def step():
        return lib.block_until_ready(vg(*args))

    return step


def chain_step(side, length, x0, a, b):
    """The chain of `length` alternating `* a`, `+ b` ops on x0, summed; -> (loss, d loss/d x0)."""
    _, np_ = _numpy_of(side)
    args = (x0, a, b) if side == "autograd" else _jax_arrays(x0, a, b)

    def f(x, a, b):
        y = x
        for i in range(length):
            y = y * a if i % 2 == 0 else y + b
        return np_.sum(y)

    return _value_and_grad(side, f, args, "chain")


def net_step(side, x, y, w1, w2):
    """The two-layer net's loss and gradients of (w1, w2), as `worker.net_step`."""
    _, np_ = _numpy_of(side)
    args = ((w1, w2), x, y) if side == "autograd" else (tuple(_jax_arrays(w1, w2)), *_jax_arrays(x, y))

    def f(w, x, y):
        d = np_.dot(np_.maximum(np_.dot(x, w[0]), 0), w[1]) - y
        return np_.sum(d * d)

    step = _value_and_grad(side, f, args, "net")

    def flat():
        loss, (g1, g2) = step()
        return loss, g1, g2

    return flat


def mlp_loss(np_, w, x, y):
    """The HVP case's small tanh MLP: sum((tanh(x w1) w2 - y)^2)."""
    d = np_.dot(np_.tanh(np_.dot(x, w[0])), w[1]) - y
    return np_.sum(d * d)


def hvp_step(side, x, y, w1, w2, v1, v2):
    """The Hessian-vector product of `mlp_loss` at (w1, w2) along (v1, v2); -> (hv1, hv2).

    autograd: reverse over reverse (the gradient of <grad, v>), as the engine and PyTorch do it;
    JAX: forward over reverse (`jvp` of `grad`), the form JAX's documentation recommends."""
    lib, np_ = _numpy_of(side)
    if side == "autograd":
        grad = lib.grad(lambda w: mlp_loss(np_, w, x, y))

        def along_v(w):
            g1, g2 = grad(w)
            return np_.sum(g1 * v1) + np_.sum(g2 * v2)

        hvp = lib.grad(along_v)
        return lambda: tuple(hvp((w1, w2)))
    jx, jy, jw1, jw2, jv1, jv2 = _jax_arrays(x, y, w1, w2, v1, v2)

    def hvp(w, v, x, y):
        return lib.jvp(lib.grad(lambda p: mlp_loss(np_, p, x, y)), (w,), (v,))[1]

    args = ((jw1, jw2), (jv1, jv2), jx, jy)
    if side == "jaxjit":
        t0 = time.perf_counter()
        hvp = lib.jit(hvp).lower(*args).compile()
        COMPILE_S["hvp"] = time.perf_counter() - t0
    return lambda: tuple(lib.block_until_ready(hvp(*args)))
