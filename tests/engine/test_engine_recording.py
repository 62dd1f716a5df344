"""engine.recording: the engine's array-level steps, observed (issue 23 item 1)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import engine
from engine.node import RECORDING
from engine.recording import derived, note_input, recording
from engine.variable import Variable


def _replay(made, inputs):
    regs = {}
    for name, reg in made.inputs.items():
        regs[reg] = inputs[name]
    for reg, array in made.constants:
        regs[reg] = array
    for step in made.steps:
        args = [regs[i] for i in step.ins]
        out = step.fn(np, *args, **step.attrs) if step.xp else step.fn(*args)
        regs[step.out] = np.asarray(out)
    return regs


def test_a_backward_is_recorded_with_its_masks_and_replays_on_other_values():
    x0 = np.array([-1.0, 2.0, -3.0, 4.0])
    with recording() as made:
        note_input("x", x0)
        x = Variable._result(x0, None)
        x._requires_grad = True
        y = (engine.relu(x) * x.abs()).sum()
        (g,) = engine.grad(y, [x])
    assert made.spoiled is None
    names = [s.name for s in made.steps]
    # abs's sign is a derived step; relu's mask is made inside its vjp's local step (no create_graph)
    assert names[:4] == ["relu", "abs", "mul", "sum"] and "sign_as" in names and "local" in names
    assert {s.where for s in made.steps[4:]} >= {"ReluBackward0", "AbsBackward0", "MulBackward0"}
    grad_reg = made.register(g._data)
    x1 = np.array([3.0, -2.0, 1.0, -4.0])  # other signs: a baked mask would give other gradients
    replayed = _replay(made, {"x": x1})[grad_reg]
    x = Variable(x1, requires_grad=True)
    (expected,) = engine.grad((engine.relu(x) * x.abs()).sum(), [x])
    np.testing.assert_array_equal(replayed, expected._data)


def test_an_array_made_outside_the_steps_spoils_the_recording():
    with recording() as made:
        note_input("x", np.ones(3))
        outside = Variable._result(np.arange(3.0), None)  # not an input, not a constant, no step made it
        engine.exp(outside)
    assert made.spoiled is not None and "exp" in made.spoiled


def test_derived_values_are_steps_and_gradient_free():
    x = Variable(np.array([1.0, -1.0]), requires_grad=True)
    with recording() as made:
        note_input("x", x._data)
        mask = derived(lambda a: a > 0, x)
    assert not mask.requires_grad and mask._data.tolist() == [True, False]
    assert [s.name for s in made.steps] == ["lambda"] and made.steps[0].ins == (0,)


def test_recordings_are_per_thread_and_leave_nothing_behind():
    seen = []
    with recording() as made:
        note_input("x", np.ones(2))
        thread = threading.Thread(target=lambda: seen.append(engine.exp(Variable(np.ones(2)))))
        thread.start()
        thread.join()
        with pytest.raises(RuntimeError, match="already under way"), recording():
            pass
    assert seen and made.steps == [] and made.spoiled is None  # the other thread's op was not recorded
    assert RECORDING == {}


def test_pow_with_a_constant_exponent_takes_the_power_rule_and_a_replay_keeps_a_varying_exponent_masked():
    x = engine.tensor(np.array([0.5, 1.5, -2.0]), requires_grad=True)
    for c in (2, 3.0, 0.5, -1.5):
        (g,) = engine.grad((x.abs() ** c).sum(), [x], create_graph=True)
        (h,) = engine.grad(g.sum(), [x])
        a = np.abs(x.detach().numpy())
        np.testing.assert_allclose(g.detach().numpy(), np.sign(x.detach().numpy()) * c * a ** (c - 1))
        np.testing.assert_allclose(h.numpy(), c * (c - 1) * a ** (c - 2))
    # an exponent that is an input of the recording may be 0 on a replay: its mask stays, so the
    # replayed gradient is 0 there (no 0 * x ** -1 = nan at x == 0)
    x = engine.tensor(np.array([0.0, 1.5, -2.0]), requires_grad=True)
    y = engine.tensor(np.array(3.0))
    with recording() as made:
        note_input("x", x._data)
        note_input("y", y._data)
        (g,) = engine.grad((x**y).sum(), [x])
    out = made.register(g._data)
    regs = _replay(made, {"x": np.array([0.0, 1.5, -2.0]), "y": np.array(0.0)})
    np.testing.assert_array_equal(regs[out], [0.0, 0.0, 0.0])
