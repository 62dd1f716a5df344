"""`torch.utils.data` on both sides: `engine.utils.data` and `client.utils.data` (datasets, samplers,
random_split, default_collate, DataLoader) give PyTorch's batches, lengths and errors; a training loop over
a DataLoader gives PyTorch's losses on the engine and the client."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import client
import engine

torch = pytest.importorskip("torch")

SIDES = {"engine": engine, "client": client, "torch": torch}
X = np.arange(20.0).reshape(10, 2) / 10
Y = np.arange(10)


def data(name):
    return importlib.import_module(f"{name}.utils.data")


def host(value):
    if isinstance(value, dict):
        return {k: host(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [host(v) for v in value]
    return value if isinstance(value, str) else (np.asarray(value.numpy()), str(value.dtype).split(".")[-1])


@pytest.mark.parametrize("side", ["engine", "client"])
def test_batches_lengths_and_collation_are_pytorchs(side):
    def program(name):
        m, D = SIDES[name], data(name)
        ds = D.TensorDataset(m.tensor(X), m.tensor(Y))

        class Records(D.Dataset):
            def __len__(self):
                return 5

            def __getitem__(self, i):
                return {"x": float(i), "n": i, "v": np.ones(2) * i, "s": "a", "pair": (i, m.tensor([i, 2 * i]))}

        seen = [host(batch) for batch in D.DataLoader(ds, batch_size=4)]
        seen += [host(b) for b in D.DataLoader(Records(), batch_size=3)]
        seen.append(host(D.default_collate([(1.0, 2), (3.0, 4)])))
        lengths = [len(D.DataLoader(ds, batch_size=3, drop_last=d)) for d in (False, True)]
        lengths += [len(ds + ds), len(D.DataLoader(ds, batch_size=None))]
        return seen, lengths, host((ds + ds)[15])

    got, want = program(side), program("torch")
    assert repr(got) == repr(want)


@pytest.mark.parametrize("side", ["engine", "client"])
def test_shuffling_and_splits_are_permutations(side):
    m, D = SIDES[side], data(side)
    ds = D.TensorDataset(m.tensor(X), m.tensor(Y))
    g = m.Generator().manual_seed(3)
    epochs = [
        [int(i) for _, y in D.DataLoader(ds, batch_size=4, shuffle=True, generator=g) for i in y.tolist()]
        for _ in range(2)
    ]
    assert all(sorted(e) == list(range(10)) for e in epochs) and epochs[0] != epochs[1]
    again = [
        int(i)
        for _, y in D.DataLoader(ds, batch_size=4, shuffle=True, generator=m.Generator().manual_seed(3))
        for i in y.tolist()
    ]
    assert again == epochs[0]
    parts = D.random_split(ds, [0.7, 0.3], generator=m.Generator().manual_seed(1))
    assert [len(p) for p in parts] == [7, 3]
    assert sorted(int(p[i][1]) for p in parts for i in range(len(p))) == list(range(10))
    assert [len(p) for p in D.random_split(ds, [5, 5])] == [5, 5]
    drawn = list(D.RandomSampler(ds, replacement=True, num_samples=25, generator=m.Generator().manual_seed(2)))
    assert len(drawn) == 25 and all(0 <= i < 10 for i in drawn)


@pytest.mark.parametrize("side", ["engine", "client", "torch"])
def test_pytorchs_errors(side):
    m, D = SIDES[side], data(side)
    ds = D.TensorDataset(m.tensor(X), m.tensor(Y))
    with pytest.raises(AssertionError, match="Size mismatch between tensors"):
        D.TensorDataset(m.tensor(X), m.tensor(Y[:3]))
    with pytest.raises(ValueError, match="sampler option is mutually exclusive with shuffle"):
        D.DataLoader(ds, sampler=D.SequentialSampler(ds), shuffle=True)
    with pytest.raises(ValueError, match="batch_size should be a positive integer value"):
        D.DataLoader(ds, batch_size=0)
    with pytest.raises(ValueError, match="Sum of input lengths does not equal the length of the input dataset"):
        D.random_split(ds, [3, 3])


@pytest.mark.parametrize("side", ["engine", "client"])
def test_a_training_loop_over_a_dataloader_gives_pytorchs_losses(side):
    rng = np.random.default_rng(0)
    inputs, targets = rng.standard_normal((32, 3)), rng.standard_normal((32, 1))

    def losses(name):
        m, D = SIDES[name], data(name)
        model = m.nn.Linear(3, 1).double()
        with m.no_grad():
            model.weight.copy_(m.tensor([[0.1, -0.2, 0.3]]))
            model.bias.zero_()
        opt = m.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        out = []
        for _ in range(2):
            for x, y in D.DataLoader(D.TensorDataset(m.tensor(inputs), m.tensor(targets)), batch_size=8):
                opt.zero_grad()
                loss = m.nn.functional.mse_loss(model(x), y)
                loss.backward()
                opt.step()
                out.append(loss.item())
        return out

    np.testing.assert_allclose(losses(side), losses("torch"), rtol=1e-10)
