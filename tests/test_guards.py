"""Guards: a tuned value at the edge of its search space is found, and named in the table's notes."""

import pytest
from omegaconf import OmegaConf

from fl_bench.guards import edge_side, search_space, tuned_edges
from fl_bench.reproduce import Arm, Reproduction


@pytest.fixture
def spaces(tmp_path):
    (tmp_path / "toy.yaml").write_text("""
hydra:
  sweeper:
    params:
      algorithm.client_lr: tag(log, interval(1e-2, 100.0))
      algorithm.server_optimizer.momentum: choice(0.0, 0.5, 0.9, 0.99)
      algorithm.lr_decay: interval(0.9, 1.0)
      algorithm.prox_mu: choice(0.001, 0.01, 0.1, 1.0)
      algorithm.weighting: choice(uniform, examples)
""")
    return tmp_path


def test_an_edge_is_the_outer_5_percent_of_an_interval_in_its_own_scale():
    # log [0.01, 100]: 4 decades, 5% is 0.2 decade: 0.0158 is at the edge, 0.0159 (0.2005 decade) is not
    assert edge_side(0.0158, 0.01, 100.0, log=True, discrete=False) == "lower"
    assert edge_side(0.0159, 0.01, 100.0, log=True, discrete=False) is None
    assert edge_side(70.0, 0.01, 100.0, log=True, discrete=False) == "upper"  # 10**1.845: within 0.2 decade
    assert edge_side(5.0, 0.0, 10.0, log=False, discrete=False) is None
    assert edge_side(9.6, 2.0, 10.0, log=False, discrete=False) == "upper"  # 95% of the width
    assert edge_side(0.2, 0.0, 10.0, log=False, discrete=False) is None  # 0: a natural limit on a linear scale
    assert edge_side(0.99, 0.0, 0.99, log=False, discrete=True) == "upper"
    assert edge_side(1.0, 0.001, 1.0, log=True, discrete=True) == "upper"  # 1 is no limit on a log scale


def test_a_tuned_setting_s_edges_are_found_in_its_search_space(spaces):
    assert set(search_space("toy", spaces)) == {"algorithm.client_lr", "algorithm.server_optimizer.momentum",
                                                  "algorithm.lr_decay", "algorithm.prox_mu", "algorithm.weighting"}
    tuned = {"study": "fedprox", "space": "toy", "best_params": {
        "algorithm.client_lr": 80.0,  # upper edge (log)
        "algorithm.server_optimizer.momentum": 0.0,  # momentum 0: the nested case, not an edge
        "algorithm.lr_decay": 0.999,  # 1: no decay, a natural limit
        "algorithm.prox_mu": 1.0,  # the largest of a log grid
        "algorithm.weighting": "uniform",  # not numeric
    }}
    assert [str(e) for e in tuned_edges(tuned, spaces)] == [
        "fedprox: algorithm.client_lr=80 at the upper edge of [0.01, 100]",
        "fedprox: algorithm.prox_mu=1 at the upper edge of [0.001, 1]",
    ]
    inside = {**tuned, "best_params": {"algorithm.client_lr": 1.0, "algorithm.prox_mu": 0.1}}
    assert tuned_edges(inside, spaces) == [] and tuned_edges({"best_params": {}}, spaces) == []


def test_a_table_s_notes_name_the_edges_of_its_arms_tuning(tmp_path):
    tuned = tmp_path / "tuned"
    tuned.mkdir()
    OmegaConf.save(OmegaConf.create({"study": "fedprox", "space": "fedbuff_smoke_fedprox", "wall_seconds": 1.0,
                                     "best_params": {"algorithm.client_lr": 1.0, "algorithm.prox_mu": 1.0}}),
                   tuned / "fedprox.yaml")
    OmegaConf.save(OmegaConf.create({"study": "fedavg", "space": "fedbuff_smoke_server_sgd", "wall_seconds": 1.0,
                                     "best_params": {"algorithm.client_lr": 1.0}}), tuned / "fedavg.yaml")
    spec = tmp_path / "spec.yaml"
    OmegaConf.save(OmegaConf.create({
        "workload": [], "seeds": [1], "runs_dir": str(tmp_path / "runs"), "tuned_dir": str(tuned), "smoke": [],
        "studies": {"fedprox": {"space": "fedbuff_smoke_fedprox", "overrides": []},
                    "fedavg": {"space": "fedbuff_smoke_server_sgd", "overrides": []},
                    "fedprox_again": {"setting_of": "fedprox", "overrides": []}},
        "tables": {}}), spec)
    reproduction = Reproduction(spec, smoke=False, runs_dir=None, jobs=1)
    notes = reproduction.guards([Arm("a", "fedavg", ()), Arm("b", "fedprox_again", ())])
    assert notes.startswith("Guard, edge: a tuned value at the edge of its search space")
    assert "fedprox: algorithm.prox_mu=1 at the upper edge of [0.001, 1]" in notes and "fedavg" not in notes
    assert reproduction.guards([Arm("a", "fedavg", ())]) == ""
