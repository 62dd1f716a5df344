"""Random numbers the PyTorch way on the engine (issue 22, item 3): `Generator`, `manual_seed`, `generator=`
on every random function, `randperm`, `multinomial`, `bernoulli`, `normal`'s overloads, the in-place fills,
and `dropout`/`nn.init` with a generator. Shapes, dtypes, errors and gradients are checked against PyTorch
(its values are not: gradserve's stream is NumPy's PCG64); the statistics against their distributions."""

from __future__ import annotations

import math

import numpy as np
import pytest

import engine


@pytest.fixture
def oracle():
    return pytest.importorskip("torch")


def values(v):
    return np.asarray(v.detach().numpy())


# programs that draw through `generator=` (g) on a package m: each must repeat with the seed
DRAWS = {
    "rand": lambda m, g: m.rand(2, 3, generator=g),
    "randn": lambda m, g: m.randn((4,), generator=g),
    "randint high": lambda m, g: m.randint(7, (5,), generator=g),
    "randint low high": lambda m, g: m.randint(-3, 3, (2, 2), generator=g),
    "randperm": lambda m, g: m.randperm(9, generator=g),
    "normal floats": lambda m, g: m.normal(1.0, 2.0, (3,), generator=g),
    "normal tensors": lambda m, g: m.normal(m.zeros(3), m.ones(3), generator=g),
    "multinomial": lambda m, g: m.multinomial(m.tensor([1.0, 2.0, 3.0, 4.0]), 3, generator=g),
    "multinomial replacement": lambda m, g: m.multinomial(m.ones(2, 5), 8, True, generator=g),
    "bernoulli": lambda m, g: m.bernoulli(m.full((6,), 0.5), generator=g),
    "bernoulli p": lambda m, g: m.bernoulli(m.zeros(6), 0.3, generator=g),
    "uniform_": lambda m, g: m.zeros(4).uniform_(-1, 1, generator=g),
    "normal_": lambda m, g: m.zeros(4).normal_(3.0, 0.5, generator=g),
    "bernoulli_": lambda m, g: m.zeros(6).bernoulli_(0.5, generator=g),
    "random_": lambda m, g: m.zeros(5).random_(10, generator=g),
    "exponential_": lambda m, g: m.zeros(5).exponential_(2.0, generator=g),
    "dropout": lambda m, g: m.nn.functional.dropout(m.ones(20), 0.5, generator=g),
    "init.uniform_": lambda m, g: m.nn.init.uniform_(m.zeros(2, 3), generator=g),
    "init.normal_": lambda m, g: m.nn.init.normal_(m.zeros(2, 3), generator=g),
    "init.kaiming_uniform_": lambda m, g: m.nn.init.kaiming_uniform_(m.zeros(4, 3), generator=g),
    "init.kaiming_normal_": lambda m, g: m.nn.init.kaiming_normal_(m.zeros(4, 3), generator=g),
    "init.xavier_uniform_": lambda m, g: m.nn.init.xavier_uniform_(m.zeros(4, 3), generator=g),
    "init.xavier_normal_": lambda m, g: m.nn.init.xavier_normal_(m.zeros(4, 3), generator=g),
}


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_a_generator_repeats_its_draws_and_leaves_the_default_alone(name):
    draw = DRAWS[name]
    engine.manual_seed(11)
    default_next = values(engine.rand(8))
    engine.manual_seed(11)
    g = engine.Generator().manual_seed(5)
    first, second = values(draw(engine, g)), values(draw(engine, g))
    assert not np.array_equal(first, second) or name in ("multinomial", "randperm")  # the stream moved on
    np.testing.assert_array_equal(values(engine.rand(8)), default_next)  # g's draws did not move the default
    g.manual_seed(5)
    np.testing.assert_array_equal(values(draw(engine, g)), first)
    other = engine.Generator().manual_seed(6)
    assert not np.array_equal(values(draw(engine, other)), first) or name in ("multinomial",)


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_manual_seed_repeats_the_default_generators_draws(name):
    draw = DRAWS[name]
    engine.manual_seed(3)
    first = values(draw(engine, None))
    engine.manual_seed(3)
    np.testing.assert_array_equal(values(draw(engine, None)), first)


def test_generator_api_is_pytorchs(oracle):
    g = engine.Generator()
    assert g.initial_seed() == oracle.Generator().initial_seed()  # both start from PyTorch's default seed
    assert g.device == "cpu" and g.device == engine.device("cpu")
    assert engine.Generator(device="cpu").device.type == "cpu"
    assert g.manual_seed(-1) is g and g.initial_seed() == oracle.Generator().manual_seed(-1).initial_seed()
    for bad, kind in ((2**64, ValueError), (1.5, RuntimeError)):
        with pytest.raises(kind):
            oracle.Generator().manual_seed(bad)
        with pytest.raises(kind):
            g.manual_seed(bad)
    seed = g.seed()
    assert isinstance(seed, int) and g.initial_seed() == seed and 0 <= seed < 2**64
    state = g.get_state()
    drawn = values(engine.rand(5, generator=g))
    assert g.set_state(state) is g
    np.testing.assert_array_equal(values(engine.rand(5, generator=g)), drawn)
    with pytest.raises(TypeError, match="get_state"):
        g.set_state(b"not a state")
    with pytest.raises(TypeError, match="generator must be a Generator"):
        engine.rand(2, generator=np.random.default_rng(0))


def test_the_default_generator_functions(oracle):
    returned = engine.manual_seed(21)
    assert returned is engine.default_generator and isinstance(returned, engine.Generator)
    assert isinstance(oracle.manual_seed(21), oracle.Generator)  # PyTorch's returns its default generator too
    assert engine.initial_seed() == 21
    state = engine.get_rng_state()
    drawn = values(engine.randn(4))
    engine.set_rng_state(state)
    np.testing.assert_array_equal(values(engine.randn(4)), drawn)
    seed = engine.seed()
    assert engine.initial_seed() == seed
    engine.manual_seed(seed)
    again = values(engine.rand(3))
    engine.manual_seed(seed)
    np.testing.assert_array_equal(values(engine.rand(3)), again)
    assert engine.cuda.manual_seed(1) is None  # accepted (one host stream seeds everything)


def test_the_stream_is_numpys_pcg64():
    """Documented: the same seed gives NumPy's default_rng numbers (so old gradserve seeds keep their draws)."""
    engine.manual_seed(42)
    np.testing.assert_array_equal(
        values(engine.randn(3, dtype=engine.float64)), np.random.default_rng(42).standard_normal(3)
    )
    g = engine.Generator().manual_seed(7)
    np.testing.assert_array_equal(
        values(engine.rand(3, generator=g, dtype=engine.float64)), np.random.default_rng(7).random(3)
    )


# --- shapes and dtypes as PyTorch's ------------------------------------------------------------------

SHAPED = {
    "rand": lambda m: m.rand(2, 3),
    "rand f64": lambda m: m.rand((2, 3), dtype=m.float64),
    "randn size=": lambda m: m.randn(size=(4,)),
    "randint(high, size)": lambda m: m.randint(5, (3,)),
    "randint(low, high, size)": lambda m: m.randint(2, 5, (3, 2)),
    "randint size=": lambda m: m.randint(5, size=(3,)),
    "randint keywords": lambda m: m.randint(low=2, high=5, size=(3,)),
    "randint dtype": lambda m: m.randint(5, (3,), dtype=m.float32),
    "randperm": lambda m: m.randperm(5),
    "randperm dtype": lambda m: m.randperm(5, dtype=m.float32),
    "normal(tensor, tensor)": lambda m: m.normal(m.zeros(3), m.ones(3)),
    "normal broadcast": lambda m: m.normal(m.zeros(2, 1), m.ones(3)),
    "normal float64 mean": lambda m: m.normal(m.zeros(3, dtype=m.float64), m.ones(3)),
    "normal(tensor, float)": lambda m: m.normal(m.zeros(3), 2.0),
    "normal(tensor)": lambda m: m.normal(m.zeros(3)),
    "normal(float, tensor)": lambda m: m.normal(1.0, m.ones(3, dtype=m.float64)),
    "normal(mean=, std=)": lambda m: m.normal(mean=m.zeros(3), std=m.ones(3)),
    "normal(float, float, size)": lambda m: m.normal(1.0, 2.0, (2, 3)),
    "normal size=": lambda m: m.normal(1.0, 2.0, size=(2, 3)),
    "multinomial 1-D": lambda m: m.multinomial(m.tensor([0.1, 0.0, 0.9]), 2),
    "multinomial 2-D": lambda m: m.multinomial(m.tensor([[0.1, 0.0, 0.9]] * 4), 2),
    "multinomial all categories": lambda m: m.multinomial(m.tensor([0.1, 0.0, 0.9]), 3),
    "multinomial replacement": lambda m: m.multinomial(m.tensor([0.1, 0.0, 0.9]), 5, replacement=True),
    "multinomial float64": lambda m: m.multinomial(m.tensor([1.0, 2.0], dtype=m.float64), 1),
    "multinomial method": lambda m: m.tensor([[1.0, 2.0]]).multinomial(2),
    "bernoulli": lambda m: m.bernoulli(m.full((2, 3), 0.5)),
    "bernoulli float64": lambda m: m.bernoulli(m.full((2, 3), 0.5, dtype=m.float64)),
    "bernoulli p": lambda m: m.bernoulli(m.zeros(2, 3), 0.3),
    "bernoulli p=": lambda m: m.bernoulli(m.zeros(2, 3), p=0.3),
    "bernoulli method": lambda m: m.full((2,), 0.5).bernoulli(),
    "rand_like": lambda m: m.rand_like(m.zeros(2, dtype=m.float64)),
    "randn_like": lambda m: m.randn_like(m.zeros(2)),
    "randint_like": lambda m: m.randint_like(m.zeros(2), 5),
    "randint_like low high": lambda m: m.randint_like(m.zeros(2, dtype=m.int32), 2, 5),
    "bernoulli_": lambda m: m.zeros(3).bernoulli_(0.5),
    "bernoulli_ tensor": lambda m: m.zeros(3).bernoulli_(m.full((3,), 0.5)),
    "uniform_": lambda m: m.zeros(3).uniform_(1, 2),
    "normal_": lambda m: m.zeros(3, dtype=m.float64).normal_(1, 2),
    "random_": lambda m: m.zeros(3).random_(10),
    "random_ low high": lambda m: m.zeros(3).random_(2, 10),
    "random_ int64": lambda m: m.zeros(3, dtype=m.int64).random_(),
    "exponential_": lambda m: m.zeros(3).exponential_(2.0),
}


@pytest.mark.parametrize("name", sorted(SHAPED))
def test_shape_dtype_and_requires_grad_are_pytorchs(name, oracle):
    ours, theirs = SHAPED[name](engine), SHAPED[name](oracle)
    assert tuple(ours.shape) == tuple(theirs.shape)
    assert str(ours.dtype) == str(theirs.dtype)  # both print as torch.float32
    assert ours.requires_grad == theirs.requires_grad is False


RANGES = {
    "randint": (lambda m: m.randint(2, 5, (1000,)), 2, 4),
    "randperm": (lambda m: m.randperm(50), 0, 49),
    "random_": (lambda m: m.zeros(1000).random_(2, 10), 2, 9),
    "random_ high": (lambda m: m.zeros(1000).random_(3), 0, 2),
    "random_ float32": (lambda m: m.zeros(1000).random_(), 0, 2**24),
    "uniform_": (lambda m: m.zeros(1000).uniform_(-2, -1), -2, -1),
    "exponential_": (lambda m: m.zeros(1000).exponential_(3.0), 0, math.inf),
    "randint_like": (lambda m: m.randint_like(m.zeros(1000), 3, 6), 3, 5),
}


@pytest.mark.parametrize("name", sorted(RANGES))
def test_draws_stay_in_their_range(name):
    draw, low, high = RANGES[name]
    got = values(draw(engine))
    assert got.min() >= low and got.max() <= high
    if name not in ("uniform_", "exponential_", "random_ float32"):
        assert {got.min(), got.max()} == {low, high}  # both ends are reached in 1000 draws
    if name == "randperm":
        assert sorted(got.tolist()) == list(range(50))


def test_integer_random_fills_the_dtypes_range():
    got = values(engine.zeros(2000, dtype=engine.int64).random_())
    assert got.min() >= 0 and got.max() > 2**62  # [0, 2**63 - 1]
    assert set(values(engine.zeros(200, dtype=engine.bool).random_()).tolist()) == {False, True}


# --- statistics -------------------------------------------------------------------------------------


def _binomial_bound(n, p):
    """5 standard deviations of a Binomial(n, p) count: a correct sampler fails this about once in 3.5 million."""
    return 5 * math.sqrt(n * p * (1 - p))


def test_multinomial_with_replacement_follows_the_weights():
    weights = np.array([1.0, 0.0, 3.0, 6.0])  # unnormalised, one zero
    n = 20_000
    engine.manual_seed(0)
    got = values(engine.multinomial(engine.tensor(weights), n, replacement=True))
    counts = np.bincount(got, minlength=4)
    assert counts[1] == 0
    for k, p in enumerate(weights / weights.sum()):
        assert abs(counts[k] - n * p) <= _binomial_bound(n, p) + 1e-9


def test_multinomial_rows_are_independent_distributions():
    rows = engine.tensor([[0.0, 1.0, 0.0], [1.0, 1.0, 0.0]], dtype=engine.float64)
    got = values(engine.multinomial(rows, 4000, True))
    assert got.shape == (2, 4000) and set(got[0].tolist()) == {1}
    assert abs((got[1] == 0).mean() - 0.5) < 5 * math.sqrt(0.25 / 4000)


def test_multinomial_without_replacement_gives_distinct_indices_by_weight():
    engine.manual_seed(1)
    weights = engine.tensor([[5.0, 1.0, 0.0, 2.0, 2.0]] * 2000)
    got = values(engine.multinomial(weights, 5))
    assert got.shape == (2000, 5)
    assert all(sorted(row) == [0, 1, 2, 3, 4] for row in got.tolist())
    assert (got[:, 4] == 2).all()  # the zero-weight category comes only after every other one
    assert not (values(engine.multinomial(weights, 4)) == 2).any()
    n, p = 2000, 5 / 10  # the first draw picks category 0 with probability 5/10
    assert abs((got[:, 0] == 0).sum() - n * p) <= _binomial_bound(n, p)
    everything = values(engine.multinomial(engine.tensor([0.2, 0.3, 0.5]), 3))
    assert sorted(everything.tolist()) == [0, 1, 2]


def test_bernoulli_mean_is_its_probability():
    engine.manual_seed(2)
    probabilities = engine.tensor([[0.1, 0.5, 0.9]]).expand(20_000, 3)
    got = values(engine.bernoulli(probabilities))
    assert set(np.unique(got).tolist()) <= {0.0, 1.0}
    for k, p in enumerate([0.1, 0.5, 0.9]):
        assert abs(got[:, k].sum() - 20_000 * p) <= _binomial_bound(20_000, p)
    constant = values(engine.bernoulli(engine.zeros(20_000), p=0.25))
    assert abs(constant.sum() - 5000) <= _binomial_bound(20_000, 0.25)
    assert values(engine.bernoulli(engine.tensor([0.0, 1.0]))).tolist() == [0.0, 1.0]


def test_normal_with_tensors_draws_around_each_mean():
    engine.manual_seed(4)
    mean = engine.tensor([-10.0, 0.0, 10.0], dtype=engine.float64).expand(20_000, 3)
    std = engine.tensor([0.1, 1.0, 3.0], dtype=engine.float64)
    got = values(engine.normal(mean, std))
    np.testing.assert_allclose(got.mean(0), [-10.0, 0.0, 10.0], atol=5 * 3.0 / math.sqrt(20_000))
    np.testing.assert_allclose(got.std(0), [0.1, 1.0, 3.0], rtol=0.03)


# --- gradients ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["both", "mean", "std"])
def test_normal_gives_mean_and_std_a_zero_gradient_as_pytorch(which, oracle):
    """PyTorch's normal is not reparameterised: its gradients to mean and std are zero (NormalBackward)."""
    grads = {}
    for m in (engine, oracle):
        mu = m.tensor([0.0, 1.0, 2.0], requires_grad=True)
        sigma = m.tensor([1.0, 2.0, 0.5], requires_grad=True)
        args = {"both": (mu, sigma), "mean": (mu, 2.0), "std": (1.0, sigma)}[which]
        out = m.normal(*args)
        assert out.requires_grad and out.grad_fn is not None
        (out * 3.0).sum().backward()
        grads[m] = [None if t.grad is None else values(t.grad) for t in (mu, sigma)]
    assert [g is None for g in grads[engine]] == [g is None for g in grads[oracle]]
    for ours, theirs in zip(grads[engine], grads[oracle]):
        if theirs is not None:
            np.testing.assert_array_equal(ours, theirs)
            assert not ours.any()


def test_normal_values_are_mean_plus_std_times_a_standard_draw():
    g = engine.Generator().manual_seed(9)
    mu = engine.tensor([0.0, 1.0, 2.0], dtype=engine.float64, requires_grad=True)
    sigma = engine.tensor([1.0, 2.0, 0.5], dtype=engine.float64, requires_grad=True)
    out = values(engine.normal(mu, sigma, generator=g))
    eps = np.random.default_rng(9).standard_normal(3)  # the stream is NumPy's PCG64 (documented)
    np.testing.assert_allclose(out, values(mu) + values(sigma) * eps, rtol=1e-15)


def test_bernoulli_of_probabilities_that_require_grad_is_like_pytorchs(oracle):
    for m in (engine, oracle):
        p = m.full((3,), 0.5, requires_grad=True)
        out = m.bernoulli(p)
        assert out.requires_grad
        out.sum().backward()
        assert not values(p.grad).any()


def test_inplace_fills_follow_autograds_rules(oracle):
    for m in (engine, oracle):
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad|a leaf"):
            m.ones(2, requires_grad=True).uniform_()
        w = m.ones(2, requires_grad=True)
        with m.no_grad():
            assert w.normal_() is w
        assert w.is_leaf and w.requires_grad


# --- errors as PyTorch's ------------------------------------------------------------------------------

ERRORS = {
    "multinomial negative": (lambda m: m.multinomial(m.tensor([-0.1, 1.0]), 1), "input.*`inf`, `nan` or element < 0"),
    "multinomial inf": (lambda m: m.multinomial(m.tensor([math.inf, 1.0]), 1), "input.*`inf`, `nan`"),
    "multinomial nan": (lambda m: m.multinomial(m.tensor([math.nan, 1.0]), 1), "input.*`inf`, `nan`"),
    "multinomial zero row": (
        lambda m: m.multinomial(m.tensor([[0.0, 0.0], [1.0, 1.0]]), 1),
        r"input.*sum of probabilities <= 0",
    ),
    "multinomial 3-D": (lambda m: m.multinomial(m.ones(2, 2, 2), 1), "input.*prob_dist must be 1 or 2 dim"),
    "multinomial 0-D": (lambda m: m.multinomial(m.tensor(1.0), 1), "input.*prob_dist must be 1 or 2 dim"),
    "multinomial integers": (lambda m: m.multinomial(m.tensor([1, 2]), 1), "input.*floating"),
    "multinomial no samples": (lambda m: m.multinomial(m.ones(3), 0), "num_samples.*n_sample <= 0"),
    "multinomial too many": (
        lambda m: m.multinomial(m.ones(3), 4),
        r"num_samples.*n_sample > prob_dist.size\(-1\) samples without replacement",
    ),
    "bernoulli over 1": (lambda m: m.bernoulli(m.full((2,), 1.5)), "p_in >= 0 && p_in <= 1"),
    "bernoulli p over 1": (lambda m: m.bernoulli(m.zeros(2), 1.5), r"p to be in \[0, 1\]"),
    "bernoulli_ p over 1": (lambda m: m.zeros(2).bernoulli_(2.0), r"p to be in \[0, 1\]"),
    "normal negative std": (lambda m: m.normal(m.zeros(3), -1.0), "std >= 0.0"),
    "normal negative std tensor": (lambda m: m.normal(m.zeros(3), -m.ones(3)), "std >= 0.0"),
    "normal negative std floats": (lambda m: m.normal(0.0, -1.0, (2,)), "std >= 0.0"),
    "normal_ negative std": (lambda m: m.zeros(2).normal_(0, -1), "std >= 0.0"),
    "uniform_ reversed": (lambda m: m.zeros(2).uniform_(2, 1), r"\[from, to\) range"),
    "exponential_ rate": (lambda m: m.zeros(2).exponential_(-2.0), "lambda > 0.0"),
    "randint empty range": (lambda m: m.randint(5, 2, (3,)), "from=5 >= to=2"),
    "randperm negative": (lambda m: m.randperm(-1), "negative"),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_bad_arguments_raise_as_pytorch(name, oracle):
    call, message = ERRORS[name]
    with pytest.raises(RuntimeError):
        call(oracle)
    with pytest.raises(RuntimeError, match=message):
        call(engine)


def test_normal_overloads_refuse_what_pytorch_refuses(oracle):
    for m in (engine, oracle):
        with pytest.raises(TypeError):
            m.normal(0.0, 1.0)  # floats need a size
    with pytest.raises(TypeError, match="size"):
        engine.normal(engine.zeros(2), 1.0, (2,))
    with pytest.raises(TypeError, match="requires_grad"):
        engine.normal(engine.zeros(2), 1.0, requires_grad=True)
    with pytest.raises(RuntimeError, match="mean must be a floating point"):
        engine.normal(engine.tensor([1, 2]), 1.0)
    with pytest.raises(NotImplementedError):
        oracle.normal(oracle.tensor([1, 2]), 1.0)
    with pytest.raises(RuntimeError, match="bernoulli.*floating"):
        engine.bernoulli(engine.tensor([0, 1]))


# --- nn ------------------------------------------------------------------------------------------------


def test_dropout_and_init_draw_from_the_generator_given():
    g = engine.Generator().manual_seed(8)
    mask = values(engine.nn.functional.dropout(engine.ones(1000, dtype=engine.float64), 0.25, generator=g))
    expected = (np.random.default_rng(8).random(1000) < 0.75) / 0.75
    np.testing.assert_array_equal(mask, expected)
    w = engine.zeros(3, 4, requires_grad=True)
    assert engine.nn.init.uniform_(w, -1, 1, generator=g.manual_seed(8)) is w and w.requires_grad
    np.testing.assert_allclose(values(w), -1 + 2 * np.random.default_rng(8).random((3, 4)), rtol=1e-6)
    linear = engine.nn.Linear(4, 3)
    engine.nn.init.kaiming_uniform_(linear.weight, a=math.sqrt(5), generator=g.manual_seed(1))
    first = values(linear.weight)
    engine.nn.init.kaiming_uniform_(linear.weight, a=math.sqrt(5), generator=g.manual_seed(1))
    np.testing.assert_array_equal(values(linear.weight), first)
    assert np.abs(first).max() <= 1 / math.sqrt(4)
