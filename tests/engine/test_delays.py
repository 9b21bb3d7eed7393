import math

import numpy as np
import pytest

from fl_bench.engine.delays import (
    ClientDelays,
    ConstantDelayConfig,
    ExamplesExponentialDelayConfig,
    ExponentialDelayConfig,
    HalfNormalDelayConfig,
    UniformDelayConfig,
)
from fl_bench.errors import ConfigError
from fl_bench.schema import build

CASES = [
    (HalfNormalDelayConfig(sigma=2.0), 2.0 * math.sqrt(2 / math.pi)),
    (UniformDelayConfig(low=1.0, high=3.0), 2.0),
    (ExponentialDelayConfig(mean=0.5), 0.5),
    (ExamplesExponentialDelayConfig(lam=0.02), 0.02 * 50),  # client of 50 examples
    (ConstantDelayConfig(value=1.5), 1.5),
]


@pytest.mark.parametrize("cfg, expected_mean", CASES, ids=lambda c: getattr(c, "name", ""))
def test_delay_mean_and_seeding(cfg, expected_mean):
    delay = build(cfg)
    draw = lambda seed, n: np.array([delay.sample(rng, 50) for rng in [np.random.default_rng(seed)] for _ in range(n)])
    samples = draw(7, 20000)
    assert samples.mean() == pytest.approx(expected_mean, rel=0.03)
    assert delay.mean(50) == pytest.approx(expected_mean)
    assert (samples >= 0).all()
    assert np.array_equal(draw(3, 100), draw(3, 100))  # seeded: same seed, same durations


def test_examples_delay_grows_with_client_size():
    delays = ClientDelays([build(ExamplesExponentialDelayConfig(lam=0.1))], sizes=np.array([10, 100]))
    rng = np.random.default_rng(0)
    small = np.mean([delays.sample(rng, 0) for _ in range(5000)])
    large = np.mean([delays.sample(rng, 1) for _ in range(5000)])
    assert small == pytest.approx(1.0, rel=0.06) and large == pytest.approx(10.0, rel=0.06)
    assert delays.client_means().tolist() == pytest.approx([1.0, 10.0])
    assert delays.mean() == pytest.approx(0.1 * 55)  # a client of average size


def test_client_laws_and_speed_factors():
    # client 0: U(1, 2); client 1: constant 3, three times slower
    laws = [build(UniformDelayConfig(low=1.0, high=2.0)), build(ConstantDelayConfig(value=3.0))]
    delays = ClientDelays(laws, np.array([5, 5]), law_of=np.array([0, 1]), factor=np.array([1.0, 3.0]))
    rng = np.random.default_rng(0)
    assert all(1.0 <= delays.sample(rng, 0) <= 2.0 for _ in range(100))
    assert delays.sample(rng, 1) == 9.0
    assert delays.client_means().tolist() == [1.5, 9.0] and delays.mean() == pytest.approx(5.25)
    with pytest.raises(ConfigError, match="speed factor -1 is not allowed"):
        ClientDelays(laws[:1], np.array([5, 5]), factor=np.array([1.0, -1.0]))
