import math

import numpy as np
import pytest

from fl_bench.config import (
    ConstantDelayConfig,
    ExamplesExponentialDelayConfig,
    ExponentialDelayConfig,
    HalfNormalDelayConfig,
    UniformDelayConfig,
)
from fl_bench.delays import build_delay

CASES = [
    (HalfNormalDelayConfig(sigma=2.0), 2.0 * math.sqrt(2 / math.pi)),
    (UniformDelayConfig(low=1.0, high=3.0), 2.0),
    (ExponentialDelayConfig(mean=0.5), 0.5),
    (ExamplesExponentialDelayConfig(lam=0.02), 0.02 * 50),  # client of 50 examples
    (ConstantDelayConfig(value=1.5), 1.5),
]


@pytest.mark.parametrize("cfg, expected_mean", CASES, ids=lambda c: getattr(c, "name", ""))
def test_delay_mean_and_seeding(cfg, expected_mean):
    delay = build_delay(cfg)
    draw = lambda seed, n: np.array([delay.sample(rng, 50) for rng in [np.random.default_rng(seed)] for _ in range(n)])
    samples = draw(7, 20000)
    assert samples.mean() == pytest.approx(expected_mean, rel=0.03)
    assert delay.mean(50) == pytest.approx(expected_mean)
    assert (samples >= 0).all()
    assert np.array_equal(draw(3, 100), draw(3, 100))  # seeded: same seed, same durations


def test_examples_delay_grows_with_client_size():
    delay = build_delay(ExamplesExponentialDelayConfig(lam=0.1))
    rng = np.random.default_rng(0)
    small = np.mean([delay.sample(rng, 10) for _ in range(5000)])
    large = np.mean([delay.sample(rng, 100) for _ in range(5000)])
    assert small == pytest.approx(1.0, rel=0.06) and large == pytest.approx(10.0, rel=0.06)
