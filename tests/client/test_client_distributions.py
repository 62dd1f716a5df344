"""`torch.distributions` as policy-gradient and VAE programs use it, on the engine, the embedded client and a
live server (`torch_like`), against PyTorch in float64: log_prob, entropy, kl_divergence and their gradients,
sample shapes and statistics, rsample's gradient, errors."""

from __future__ import annotations

import numpy as np
import pytest

from tests.client.test_client_nn_optim import values


@pytest.fixture
def oracle():
    return pytest.importorskip("torch")


LOGITS = [[0.1, 0.5, -1.0], [2.0, 0.0, -0.3]]
LOC, SCALE = [0.0, 1.0, -0.5], [1.0, 2.0, 0.3]


def _leaf(torch, data):
    return torch.tensor(data, dtype=torch.float64, requires_grad=True)


def _quantities(torch):
    """Values of every family's log_prob, entropy and KL, and the gradients of their sum."""
    D = torch.distributions
    logits, loc, scale = _leaf(torch, LOGITS), _leaf(torch, LOC), _leaf(torch, SCALE)
    probs = _leaf(torch, [0.2, 0.7, 0.5])
    cat, cat_p = D.Categorical(logits=logits), D.Categorical(probs=logits.softmax(-1) * 3)
    normal, other = D.Normal(loc, scale), D.Normal(torch.zeros(3, dtype=torch.float64), 1.5)
    bern, bern_l = D.Bernoulli(probs=probs), D.Bernoulli(logits=loc)
    uni = D.Uniform(loc - 1, loc + scale)
    ind = D.Independent(D.Normal(loc.reshape(1, 3).expand(2, 3), scale), 1)
    x = torch.tensor([0.5, 0.25, -0.4], dtype=torch.float64)
    out = [
        cat.log_prob(torch.tensor([2, 0])),
        cat.log_prob(torch.tensor([[1, 1], [0, 2], [2, 2]])),  # a sample shape before the batch shape
        cat.entropy(),
        cat_p.log_prob(torch.tensor([1, 2])),
        cat_p.entropy(),
        D.kl_divergence(cat, cat_p),
        normal.log_prob(x),
        normal.entropy(),
        normal.cdf(x),
        normal.variance,
        D.kl_divergence(normal, other),
        bern.log_prob(torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64)),
        bern.entropy(),
        bern_l.log_prob(torch.tensor([0.0, 1.0, 1.0], dtype=torch.float64)),
        D.kl_divergence(bern, bern_l),
        uni.log_prob(x),
        uni.entropy(),
        uni.mean,
        ind.log_prob(torch.zeros(2, 3, dtype=torch.float64)),
        ind.entropy(),
        D.kl_divergence(ind, D.Independent(D.Normal(torch.zeros(2, 3, dtype=torch.float64), 2.0), 1)),
    ]
    total = sum(o.sum() for o in out)
    total.backward()
    return [values(o) for o in out] + [values(v.grad) for v in (logits, loc, scale, probs)]


def test_log_prob_entropy_kl_and_their_gradients_match_torch(torch_like, oracle):
    for i, (ours, theirs) in enumerate(zip(_quantities(torch_like), _quantities(oracle), strict=True)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12, err_msg=str(i))


def test_shapes_of_samples_and_distributions_match_torch(torch_like, oracle):
    def shapes(torch):
        D = torch.distributions
        logits = torch.zeros(4, 3)
        cat, normal = D.Categorical(logits=logits), D.Normal(torch.zeros(4, 1), torch.ones(5))
        ind = D.Independent(normal, 1)
        bern = D.Bernoulli(logits=torch.zeros(2))
        return [
            tuple(cat.sample().shape),
            tuple(cat.sample((7,)).shape),
            str(cat.sample().dtype),
            cat.batch_shape,
            tuple(normal.sample((2, 3)).shape),
            normal.batch_shape,
            ind.batch_shape,
            ind.event_shape,
            tuple(ind.rsample((6,)).shape),
            tuple(bern.sample((3,)).shape),
            normal.has_rsample,
            cat.has_rsample,
        ]

    assert [tuple(s) if isinstance(s, tuple) else s for s in shapes(torch_like)] == [
        tuple(s) if isinstance(s, tuple) else s for s in shapes(oracle)
    ]


def test_draws_follow_their_distribution(torch_like):
    torch_like.manual_seed(3)
    D = torch_like.distributions
    probs = torch_like.tensor([0.1, 0.6, 0.3])
    counts = np.bincount(values(D.Categorical(probs=probs).sample((20000,))), minlength=3) / 20000
    np.testing.assert_allclose(counts, [0.1, 0.6, 0.3], atol=0.015)
    assert abs(values(D.Bernoulli(probs=torch_like.tensor(0.25)).sample((20000,))).mean() - 0.25) < 0.015
    draws = values(D.Normal(torch_like.tensor(2.0), torch_like.tensor(3.0)).sample((20000,)))
    assert abs(draws.mean() - 2.0) < 0.1 and abs(draws.std() - 3.0) < 0.1
    u = values(D.Uniform(-1.0, 3.0).sample((20000,)))
    assert u.min() >= -1.0 and u.max() < 3.0 and abs(u.mean() - 1.0) < 0.05


def test_rsample_carries_the_reparameterized_gradient(torch_like):
    torch_like.manual_seed(0)
    loc = torch_like.tensor([1.0, -2.0], dtype=torch_like.float64, requires_grad=True)
    scale = torch_like.tensor([0.5, 2.0], dtype=torch_like.float64, requires_grad=True)
    z = torch_like.distributions.Normal(loc, scale).rsample((1000,))
    z.mean().backward()
    eps = (values(z) - values(loc)) / values(scale)
    np.testing.assert_allclose(values(loc.grad), [0.5, 0.5])
    np.testing.assert_allclose(values(scale.grad), eps.mean(0) / 2, rtol=1e-10)
    assert not torch_like.distributions.Normal(loc, scale).sample().requires_grad


def test_a_policy_gradient_step_matches_torch(torch_like, oracle):
    """REINFORCE: the gradient of -(log_prob(actions) * returns).mean() for a linear policy."""

    def step(torch):
        rng = np.random.default_rng(5)
        w = torch.tensor(rng.standard_normal((4, 2)), requires_grad=True)
        states = torch.tensor(rng.standard_normal((6, 4)))
        actions = torch.tensor(rng.integers(0, 2, 6))
        returns = torch.tensor(rng.standard_normal(6))
        policy = torch.distributions.Categorical(logits=states @ w)
        loss = -(policy.log_prob(actions) * returns).mean() - 0.01 * policy.entropy().mean()
        loss.backward()
        return values(loss), values(w.grad)

    for ours, theirs in zip(step(torch_like), step(oracle), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10)


def test_errors_name_what_is_wrong(torch_like):
    D = torch_like.distributions
    with pytest.raises(ValueError, match="Either `probs` or `logits` must be specified, but not both"):
        D.Categorical(probs=torch_like.ones(2), logits=torch_like.ones(2))
    with pytest.raises(ValueError, match="at least one-dimensional"):
        D.Categorical(probs=torch_like.tensor(1.0))
    with pytest.raises(NotImplementedError):
        D.kl_divergence(D.Normal(0.0, 1.0), D.Bernoulli(probs=torch_like.tensor(0.5)))
    with pytest.raises(NotImplementedError):
        D.Categorical(logits=torch_like.zeros(3)).rsample()
    D.Distribution.set_default_validate_args(False)
