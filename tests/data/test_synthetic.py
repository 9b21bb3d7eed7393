"""Synthetic(gamma, xi): one labelling shared by every device (dataset.shared_labelling) or one per
device, and the per-client validation split that says whose held-out rows are whose."""

import numpy as np
import pytest

from fl_bench.data.federated import split_clients
from fl_bench.data.synthetic import generate_synthetic, shared_labelling
from fl_bench.errors import ConfigError
from tests.conftest import compose_run_config


def every_example(data):
    return np.concatenate([data.x.numpy(), data.x_val.numpy()]), np.concatenate([data.y.numpy(), data.y_val.numpy()])


@pytest.mark.parametrize("shared", [True, False])
def test_shared_labelling_labels_every_device_by_one_argmax_of_w_x_plus_b(shared):
    gamma = 0 if shared else 1
    cfg = compose_run_config("dataset.num_clients=40", f"dataset.shared_labelling={shared}", f"dataset.gamma={gamma}").dataset
    data = generate_synthetic(cfg)
    w, b = shared_labelling(cfg)
    x, y = every_example(data)
    agreement = (np.argmax(x @ w + b, axis=1) == y).mean()
    if shared:
        assert agreement == 1.0 and len(np.unique(y)) > 2  # every device, train and validation rows
    else:  # each device its own W_i, b_i: no single labelling fits them all
        assert agreement < 0.5


def test_shared_labelling_keeps_the_inputs_heterogeneous_by_device():
    cfg = compose_run_config("dataset.num_clients=40", "dataset.shared_labelling=true", "dataset.gamma=0").dataset
    data = generate_synthetic(cfg)
    means = np.stack([data.client(i)[0].numpy().mean(axis=0) for i in range(data.num_clients)])
    assert means[:, 0].std() > 0.5  # v_i ~ N(B_i, 1), B_i ~ N(0, xi): device means spread by ~sqrt(2)


def test_shared_centres_put_every_device_on_one_of_k_input_centres():
    """HFL's stand-in (issue 55): with dataset.num_centres = k device i draws around centre i mod k, so
    devices i and i + k hold inputs from one distribution, and the sizes are the default's."""
    common = ("dataset.num_clients=40", "dataset.shared_labelling=true", "dataset.gamma=0", "dataset.xi=0")
    own, shared = (generate_synthetic(compose_run_config(*common, *extra).dataset)
                   for extra in ((), ("dataset.num_centres=4",)))
    means = np.stack([shared.client(i)[0].numpy().mean(axis=0) for i in range(40)])
    same = np.linalg.norm(means[0] - means[4])  # centre 0 both: only the sample means' noise apart
    other = np.linalg.norm(means[0] - means[1])  # centres 0 and 1: v_c ~ N(0, 1) apart, |v_0 - v_1| ~ sqrt(2 * 60)
    assert same < 0.2 * other
    assert [len(own.client(i)[0]) for i in range(40)] == [len(shared.client(i)[0]) for i in range(40)]
    assert "4 shared centres" in shared.name


def test_shared_labelling_refuses_a_gamma_it_would_ignore():
    # gamma only spreads per-device labellings: under one shared labelling it would be a silent no-op
    with pytest.raises(ConfigError, match=r"dataset.gamma=1.0 is not allowed: must be 0 with dataset.shared_labelling"):
        compose_run_config("dataset.shared_labelling=true", "dataset.gamma=1")


def test_split_clients_records_whose_held_out_rows_are_whose():
    xs = [np.full((n, 1), float(c), np.float32) for c, n in enumerate([10, 5, 20])]  # x = the client's id
    ys = [np.zeros(len(x), np.int64) for x in xs]
    data = split_clients("toy", xs, ys, 0.2, 2, seed=0)
    assert data.val_offsets.tolist() == [0, 2, 3, 7]
    for c in range(3):
        rows = data.x_val[data.val_offsets[c]:data.val_offsets[c + 1]]
        assert (rows == c).all()
    assert data.to("cpu").val_offsets.tolist() == [0, 2, 3, 7]
    assert data.pooled().val_offsets.tolist() == [0, 7]  # one client holds every held-out row
