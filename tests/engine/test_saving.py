"""`torch.save`/`torch.load` on both sides: a model's and an optimizer's state_dict round-trip through a file
and a buffer and training resumes with PyTorch's losses; a Variable is saved as its data (no graph); `load`
reads data only: it runs no code a file names. tests/client/test_client_torch_files.py checks the files
against torch's."""

from __future__ import annotations

import io
import os
import pickle

import numpy as np
import pytest

import client
import engine

torch = pytest.importorskip("torch")

SIDES = {"engine": engine, "client": client, "torch": torch}


@pytest.mark.parametrize("side", ["engine", "client"])
def test_resuming_from_saved_state_dicts_gives_pytorchs_losses(side, tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((16, 3)), rng.standard_normal((16, 1))
    weight = rng.standard_normal((1, 3))

    def losses(name):
        m = SIDES[name]
        model = m.nn.Linear(3, 1).double()
        with m.no_grad():
            model.weight.copy_(m.tensor(weight))
            model.bias.zero_()
        opt = m.optim.Adam(model.parameters(), lr=0.05)
        out = []
        for step in range(4):
            if step == 2:  # save, rebuild everything, load, go on
                path = os.path.join(tmp_path, f"{name}.pt")
                m.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, path)
                model = m.nn.Linear(3, 1).double()
                opt = m.optim.Adam(model.parameters(), lr=0.05)
                state = m.load(path)
                model.load_state_dict(state["model"])
                opt.load_state_dict(state["opt"])
                assert state["step"] == 2
            opt.zero_grad()
            loss = ((model(m.tensor(x)) - m.tensor(y)) ** 2).mean()
            loss.backward()
            opt.step()
            out.append(loss.item())
        return out

    np.testing.assert_allclose(losses(side), losses("torch"), rtol=1e-10)


@pytest.mark.parametrize("side", ["engine", "client"])
def test_a_variable_is_saved_as_its_data(side):
    m = SIDES[side]
    leaf = m.tensor([1.0, 2.0], requires_grad=True)
    made = leaf * 3
    buffer = io.BytesIO()
    m.save([made, leaf, m.nn.Parameter(m.ones(2)), np.float64(0.5), {"n": 1, "s": "x"}], buffer)
    buffer.seek(0)
    got, again, param, scalar, rest = m.load(buffer)
    assert type(got) is type(made) and got.grad_fn is None and got.requires_grad
    np.testing.assert_array_equal(got.detach().numpy(), [3.0, 6.0])
    assert again.requires_grad and isinstance(param, m.nn.Parameter) and scalar == 0.5 and rest == {"n": 1, "s": "x"}


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo owned",))


def test_load_reads_data_and_never_unpickles(tmp_path):
    """A pickle naming os.system is refused as torch's weights-only load refuses it; an old-format archive
    holding an object array is refused, not unpickled."""
    path = os.path.join(tmp_path, "bad.pt")
    with open(path, "wb") as f:
        pickle.dump(_Evil(), f, protocol=2)
    for m in (engine, client):
        with pytest.raises(pickle.UnpicklingError, match="GLOBAL posix.system whose module posix is blocked"):
            m.load(path)
    sneaky = os.path.join(tmp_path, "sneaky.pt")
    with open(sneaky, "wb") as f:
        np.savez(f, tree=np.frombuffer(b'{"array": 0}', np.uint8), a0=np.array([_Evil()], dtype=object))
    with pytest.raises(RuntimeError, match="not a file torch.save or gradserve's save wrote"):
        engine.load(sneaky)


def test_a_module_is_saved_by_its_state_dict():
    model = engine.nn.Sequential(engine.nn.Linear(2, 3), engine.nn.ReLU())
    with pytest.raises(TypeError, match="cannot save a Sequential: .* state_dict"):
        engine.save(model, io.BytesIO())
    buffer = io.BytesIO()
    engine.save(model.state_dict(), buffer)
    again = engine.nn.Sequential(engine.nn.Linear(2, 3), engine.nn.ReLU())
    again.load_state_dict(engine.load(buffer.getvalue()))
    x = engine.ones(4, 2)
    np.testing.assert_array_equal(again(x).detach().numpy(), model(x).detach().numpy())
