"""Today's `.data` idioms in a training program, through the engine and through the client (embedded and against
the live server), against PyTorch: the batch size from `x.data.size(0)`, an update through `.data`'s Tensor
methods (`p.data.add_(p.grad.data.sign().mul(-lr))`, `.masked_fill_`), an accuracy from `.data.argmax(dim=1)` and
`.eq(...).float().mean()`, and a parameter re-initialised through `.data.t()`/`.view(-1)`."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")


def _program(t, steps=4):
    rng = np.random.default_rng(3)
    x = t.tensor(rng.standard_normal((8, 5)).astype(np.float32))
    labels = t.tensor(rng.integers(0, 3, 8))
    w = t.tensor(rng.standard_normal((5, 3)).astype(np.float32), requires_grad=True)
    w.data.t()[0].zero_()  # a view of `.data` written in place: w's first column
    w.data.view(-1)[1] = 0.5
    seen = []
    for _ in range(steps):
        batch = x.data.size(0)
        loss = t.nn.functional.cross_entropy(x.mm(w), labels, reduction="sum") / batch
        loss.backward()
        w.data.add_(w.grad.data.sign().mul(-0.01))
        w.data.masked_fill_(w.data.abs().lt(1e-3), 0.0)
        w.grad.data.zero_()
        accuracy = x.mm(w).data.argmax(dim=1).eq(labels.data).float().mean()
        seen.append((float(loss.data.sum()), float(accuracy), x.data.size()[1], w.data.sum(dim=0).tolist()))
    return seen, w.detach().numpy().copy()


def test_a_program_of_today_s_data_idioms_runs_as_on_pytorch(torch_like):
    got, got_w = _program(torch_like)
    want, want_w = _program(torch)
    for (loss, accuracy, width, sums), (t_loss, t_accuracy, t_width, t_sums) in zip(got, want):
        assert loss == pytest.approx(t_loss, rel=1e-5)
        assert accuracy == t_accuracy and width == t_width == 5
        np.testing.assert_allclose(sums, t_sums, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_w, want_w, rtol=1e-5, atol=1e-6)
