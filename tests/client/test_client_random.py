"""Random numbers through the client (issue 22, item 3): the same seed, or the same `Generator` seed, gives
the engine's numbers bit for bit on the embedded client and against a live server, including draws whose
inputs are lazy (computed, not yet fetched) client Variables: `multinomial`'s and `bernoulli`'s probabilities
are fetched to sample (one /forward), `dropout`'s mask and `normal`'s draws are made without the values."""

from __future__ import annotations

import numpy as np
import pytest

import client
import engine

WEIGHTS = np.array([[0.5, 1.0, 0.0, 2.0], [1.0, 1.0, 1.0, 1.0]])
MEANS = np.array([0.0, 1.0, -2.0])


def values(v):
    return np.asarray(v.detach().numpy())


def lazy(m, array, scale=1.0):
    """A computed Variable: recorded (not computed at once) on the client, since its leaf requires grad."""
    leaf = m.tensor(array, requires_grad=True)
    return leaf * scale, leaf


# name -> program(m, g): the draws whose values must agree across engine, embedded and remote
PROGRAMS = {
    "rand randn randint": lambda m, g: [m.rand(2, 3, generator=g), m.randn(4, generator=g), m.randint(3, 9, (5,))],
    "randperm": lambda m, g: [m.randperm(10, generator=g), m.randperm(4)],
    "normal floats": lambda m, g: [m.normal(2.0, 3.0, (2, 2), generator=g), m.normal(0.0, 1.0, size=(3,))],
    "normal tensors": lambda m, g: [m.normal(m.tensor(MEANS), m.ones(3), generator=g), m.normal(m.zeros(2, 1), 2.0)],
    "normal lazy mean and std": lambda m, g: [
        m.normal(lazy(m, MEANS, 2.0)[0], lazy(m, [1.0, 2.0, 3.0], 0.5)[0], generator=g),
        m.normal(1.5, lazy(m, [1.0, 0.5])[0]),
    ],
    "multinomial": lambda m, g: [
        m.multinomial(m.tensor(WEIGHTS), 3, generator=g),
        m.multinomial(m.tensor(WEIGHTS[0]), 50, replacement=True),
    ],
    "multinomial lazy": lambda m, g: [
        m.multinomial(lazy(m, WEIGHTS, 3.0)[0], 2, generator=g),
        m.multinomial(lazy(m, WEIGHTS)[0].exp(), 20, True),
    ],
    "bernoulli": lambda m, g: [m.bernoulli(m.full((3, 4), 0.3), generator=g), m.bernoulli(m.zeros(5), 0.7)],
    "bernoulli lazy": lambda m, g: [
        m.bernoulli(lazy(m, np.full((2, 5), 0.2), 2.0)[0], generator=g),
        lazy(m, np.full((4,), 0.4))[0].bernoulli(),
    ],
    "in-place fills": lambda m, g: [
        m.zeros(3).uniform_(-1, 1, generator=g),
        m.zeros(2, 2).normal_(5.0, 0.1, generator=g),
        m.zeros(6).bernoulli_(0.5, generator=g),
        m.zeros(4).random_(3, 30, generator=g),
        m.zeros(3, dtype=m.float64).exponential_(0.5, generator=g),
        m.zeros(4).uniform_(),
    ],
    "like": lambda m, g: [m.rand_like(m.ones(2, 2)), m.randn_like(m.ones(3)), m.randint_like(m.ones(3), 4, 9)],
    "dropout lazy": lambda m, g: [
        m.nn.functional.dropout(lazy(m, np.ones((4, 5)), 2.0)[0], 0.4, generator=g),
        m.nn.functional.dropout(m.ones(6), 0.5),
    ],
    "nn.init": lambda m, g: [
        m.nn.init.kaiming_uniform_(m.nn.Linear(5, 3).weight, generator=g),
        m.nn.init.xavier_normal_(m.zeros(4, 4), generator=g),
        m.nn.init.normal_(m.zeros(3), 1.0, 0.1),
    ],
}


def run(m, name, seed=17, generator_seed=23):
    m.manual_seed(seed)
    g = m.Generator().manual_seed(generator_seed)
    out = [values(v) for v in PROGRAMS[name](m, g)]
    out.append(values(m.rand(3)))  # where the default stream stands afterwards
    out.append(values(m.rand(3, generator=g)))  # and the generator's
    return out


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_same_seed_gives_the_engines_numbers_bit_for_bit(session, name):
    want = run(engine, name)
    got = run(client, name)
    assert len(got) == len(want)
    for ours, theirs in zip(got, want):
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
        np.testing.assert_array_equal(ours, theirs)
    assert not np.array_equal(run(client, name, seed=18, generator_seed=24)[0], want[0]) or name == "like"


def test_a_client_generator_is_the_engines_class_and_keeps_its_own_stream(session):
    assert client.Generator is engine.Generator
    assert client.manual_seed(4) is client.default_generator
    assert client.default_generator is not engine.default_generator
    g = client.Generator()
    engine.manual_seed(4)
    client.rand(5, generator=g)  # a generator's draws leave the default stream alone
    np.testing.assert_array_equal(values(client.rand(2)), values(engine.rand(2)))
    state = client.get_rng_state()
    first = values(client.randn(3))
    client.set_rng_state(state)
    np.testing.assert_array_equal(values(client.randn(3)), first)
    assert client.initial_seed() == 4


def test_sampling_fetches_lazy_probabilities_once_and_nothing_else(mode, request):
    """multinomial/bernoulli of a computed input fetch it (one /forward against a server); dropout's mask
    and normal's draws on a computed mean send nothing until a value is needed."""
    server = request.getfixturevalue("server") if mode == "remote" else None
    with client.connect(server.url if server else None):
        client.manual_seed(0)
        probabilities, leaf = lazy(client, WEIGHTS, 2.0)
        before = server.requests("/forward") if server else None
        picked = client.multinomial(probabilities, 2)
        assert picked.shape == (2, 2) and picked.dtype == np.int64 and not picked.requires_grad
        if server:
            assert server.requests("/forward") == before + 1
        dropped = client.nn.functional.dropout(leaf * 1.0, 0.5)
        drawn = client.normal(leaf * 1.0, 1.0)
        if server:
            assert server.requests("/forward") == before + 1  # recorded, not computed
        assert dropped.requires_grad and drawn.requires_grad and drawn.shape == (2, 4)
        (dropped.sum() + drawn.sum()).backward()
        grad = values(leaf.grad)  # dropout's mask / (1 - p); normal adds zero
        assert set(np.unique(grad).tolist()) == {0.0, 2.0}
        np.testing.assert_array_equal(values(dropped), WEIGHTS * grad)


def test_bad_multinomial_input_fails_at_the_call_on_every_side(session):
    with pytest.raises(RuntimeError, match="input.*element < 0"):
        client.multinomial(lazy(client, [1.0, -1.0])[0], 1)
    with pytest.raises(RuntimeError, match="num_samples.*without replacement"):
        client.multinomial(lazy(client, [1.0, 1.0])[0], 3)
    with pytest.raises(RuntimeError, match="std >= 0.0"):
        client.normal(client.zeros(2), lazy(client, [1.0, -1.0])[0])
