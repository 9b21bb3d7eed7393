"""FedStaleWeight (Ma et al.): staleness-aware weights on scripted buffers, by hand, for both rules."""

import pytest
import torch

from fl_bench.algorithms.fedstaleweight import FedStaleWeight, FedStaleWeightConfig
from fl_bench.contracts import Upload


def server(rule, buffer_size=3, ema=0.5):
    cfg = FedStaleWeightConfig(buffer_size=buffer_size, weight_rule=rule, staleness_ema=ema, server_lr=1.0)
    return FedStaleWeight(cfg, torch.zeros(2), 4)


def upload(client, staleness, vector):
    return Upload(client, 0, staleness, 1, torch.tensor(vector))


@pytest.mark.parametrize("rule, expected", [
    ("eq8", [10 / 15, 1 / 15, 4 / 15]),  # E*b + 1 with E = 3, 0, 1 and b = 3: 10, 1, 4
    ("alg1", [4 / 7, 1 / 7, 2 / 7]),  # E + 1: 4, 1, 2
])
def test_weights_of_a_scripted_buffer_equal_the_hand_computed_alpha(rule, expected):
    s = server(rule)
    s.observe(0, 2)  # client 0's earlier upload: E = 2
    deltas = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
    s.add(upload(0, 4, deltas[0]))  # E <- 0.5 * 2 + 0.5 * 4 = 3
    s.add(upload(1, 0, deltas[1]))  # first upload: E = 0
    s.add(upload(2, 1, deltas[2]))  # first upload: E = 1
    s.step()
    assert s.step_weights == pytest.approx(expected) and sum(s.step_weights) == pytest.approx(1.0)
    step = sum(a * torch.tensor(d) for a, d in zip(expected, deltas))
    assert torch.allclose(s.params, -step)  # w <- w - eta_g sum alpha_j Delta_j


def test_zero_staleness_gives_equal_weights():
    s = server("eq8", buffer_size=4)
    for client in range(4):
        s.add(upload(client, 0, [float(client), 1.0]))
    s.step()
    assert s.step_weights == pytest.approx([0.25] * 4)
    assert torch.allclose(s.params, -torch.tensor([1.5, 1.0]))  # the plain mean


def test_the_group_weight_share_of_a_scripted_trip_log_equals_the_hand_count():
    import numpy as np
    import pandas as pd

    from fl_bench.runs.fairness import client_groups, jain_index, share_over_steps, weight_shares

    groups = client_groups([2, 1])  # clients 0, 1 fast (group 0), client 2 slow (group 1)
    trips = pd.DataFrame({
        "client":           [0, 1, 2, 0, 2, 1],
        "used":             [1, 1, 1, 1, 1, 0],  # the last trip was dropped: it carries no weight
        "weight":           [0.25, 0.25, 0.5, 0.6, 0.4, np.nan],
        "download_version": [0, 0, 0, 1, 0, 1],
        "staleness":        [0, 0, 0, 0, 1, 0],
    })
    shares = weight_shares(trips, groups)
    assert shares.tolist() == [0.55, 0.45]  # (0.25 + 0.25 + 0.6) / 2 and (0.5 + 0.4) / 2
    assert jain_index([1, 1, 1]) == 1.0 and jain_index([1, 0, 0]) == 1 / 3
    over = share_over_steps(trips, groups, window=1)  # step 1: 0.5 / 0.5; step 2: 0.6 / 0.4
    assert over.loc[1].tolist() == [0.5, 0.5] and over.loc[2].tolist() == pytest.approx([0.6, 0.4])


def test_the_slow_group_gets_more_than_its_upload_share_end_to_end(tmp_path):
    import json

    import pandas as pd

    from fl_bench.runs.experiment import run_experiment
    from tests.conftest import compose_run_config

    for algorithm in ("fedstaleweight", "buffered_fedavg"):
        summary = run_experiment(compose_run_config("experiment=fedstaleweight_fig2_smoke", f"algorithm={algorithm}",
                                                    "max_rounds=200", "eval_every=500"), tmp_path / algorithm)
        trips = pd.read_csv(tmp_path / algorithm / "trips.csv")
        used = trips[trips.used == 1]
        uploads = float((used.client >= 10).mean())  # clients 10-14: the slow group
        slow_share = summary["weight_share_by_group"][1]
        assert abs(used.weight.groupby(used.download_version + used.staleness).sum() - 1).max() < 1e-9  # per step
        if algorithm == "fedstaleweight":
            assert slow_share > 2 * uploads and summary["jain_index"] > 0.85
        else:  # plain averaging: a group weighs what it uploads
            assert slow_share == pytest.approx(uploads) and summary["jain_index"] < 0.8
        assert json.loads((tmp_path / algorithm / "summary.json").read_text())["final_val_accuracy_by_class"]


@pytest.mark.slow
def test_the_weight_share_per_group_goes_to_wandb_at_every_evaluation(tmp_path, monkeypatch):
    from fl_bench.runs.experiment import run_experiment
    from fl_bench.runs.run_log import RunLog
    from tests.conftest import compose_run_config

    monkeypatch.setenv("WANDB_MODE", "offline")
    logged = []
    monkeypatch.setattr(RunLog, "wandb_only", lambda self, values, trips: logged.append((trips, values)))
    summary = run_experiment(compose_run_config("experiment=fedstaleweight_fig2_smoke", "max_rounds=100",
                                                "eval_every=100", "logger=wandb"), tmp_path)
    assert [trips for trips, _ in logged] == list(range(100, 501, 100))  # every evaluation after the first step
    last = logged[-1][1]
    assert last["weight_share/group_1"] == pytest.approx(summary["weight_share_by_group"][1])
    assert last["weight_share/group_0"] + last["weight_share/group_1"] == pytest.approx(1.0)


def test_trips_csv_has_every_weight_when_evaluations_fall_between_server_steps(run_config):
    # eval_every=53 is no multiple of b = 5: evaluations land while uploads wait in the buffer, whose
    # rows trips.csv must not write before their server step has given them a weight.
    summary, _, trips = run_config("experiment=fedstaleweight_fig2_smoke", "max_rounds=60", "eval_every=53")
    used = trips[trips.used == 1]
    stepped = used[used.download_version + used.staleness < summary["server_steps"]]
    assert len(stepped) == 5 * summary["server_steps"] and stepped.weight.notna().all()
    assert (stepped.weight.groupby(stepped.download_version + stepped.staleness).sum() - 1).abs().max() < 1e-9
