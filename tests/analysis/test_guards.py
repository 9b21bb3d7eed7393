"""Guards and the verdict (fl_bench.analysis.guards, .verdict, .search_spaces): edges of search spaces,
verdicts by interval, tuning failures, saturated workloads."""

import math

import pandas as pd
import pytest
from omegaconf import OmegaConf

from fl_bench.analysis.guards import edge_side, saturated, tuned_edges
from fl_bench.analysis.reproduce import Arm, Reproduction
from fl_bench.analysis.search_spaces import search_space, search_space_text
from fl_bench.analysis.verdict import claim_band, evidence, evidence_markdown, evidence_table, fill_notes, verdict
from tests.helpers.arms import as_arms


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
      algorithm/weighting: choice(uniform, examples)
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
    assert edge_side(0.0, 0.0, 1.0, log=True, discrete=True) is None  # mu = 0 beside a log grid: the special case


def test_a_tuned_setting_s_edges_are_found_in_its_search_space(spaces):
    assert set(search_space("toy", spaces)) == {"algorithm.client_lr", "algorithm.server_optimizer.momentum",
                                                  "algorithm.lr_decay", "algorithm.prox_mu", "algorithm/weighting"}
    tuned = {"study": "fedprox", "space": "toy", "best_params": {
        "algorithm.client_lr": 80.0,  # upper edge (log)
        "algorithm.server_optimizer.momentum": 0.0,  # momentum 0: the nested case, not an edge
        "algorithm.lr_decay": 0.999,  # 1: no decay, a natural limit
        "algorithm.prox_mu": 1.0,  # the largest of a log grid
        "algorithm/weighting": "uniform",  # not numeric
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
    tuner = {"trials": 32, "startup_trials": 10, "seeds": [100, 101], "objective": "trips_to_target_or_budget",
             "direction": "minimize"}
    made = {"overrides": [], "tuner": tuner, "enqueued": {}, "wall_seconds": 1.0}  # tuned under the protocol below
    OmegaConf.save(OmegaConf.create({"study": "fedprox", "space": "fedbuff_smoke_fedprox", **made,
                                     "params": search_space_text("fedbuff_smoke_fedprox"),
                                     "best_params": {"algorithm.client_lr": 1.0, "algorithm.prox_mu": 1.0}}),
                   tuned / "fedprox.yaml")
    OmegaConf.save(OmegaConf.create({"study": "fedavg", "space": "fedbuff_smoke_server_sgd", **made,
                                     "params": search_space_text("fedbuff_smoke_server_sgd"),
                                     "best_params": {"algorithm.client_lr": 1.0}}), tuned / "fedavg.yaml")
    spec = tmp_path / "spec.yaml"
    OmegaConf.save(OmegaConf.create({
        "workload": [], "runs_dir": str(tmp_path / "runs"), "tuned_dir": str(tuned), "smoke": [],
        "protocol": {"registered": "2026-11-25", "tuner": tuner, "report_seeds": [1, 2, 3, 4, 5], "verdict": "v"},
        "studies": {"fedprox": {"space": "fedbuff_smoke_fedprox", "overrides": []},
                    "fedavg": {"space": "fedbuff_smoke_server_sgd", "overrides": []},
                    "fedprox_again": {"setting_of": "fedprox", "overrides": []}},
        "tables": {}}), spec)
    reproduction = Reproduction(spec, smoke=False, runs_dir=None, jobs=1)
    notes = reproduction.guards([Arm("a", "fedavg", ()), Arm("b", "fedprox_again", ())])
    assert notes.startswith("Guard, edge: a tuned value at the edge of its search space")
    assert "fedprox: algorithm.prox_mu=1 at the upper edge of [0, 1]" in notes and "fedavg" not in notes
    assert reproduction.guards([Arm("a", "fedavg", ())]) == ""


def _runs(trips: dict[str, list[float]], budget: int = 1000, eval_every: int = 10) -> pd.DataFrame:
    return pd.DataFrame([{"method": m, "seed": s, "trips_to_target": t, "max_trips": budget, "eval_every": eval_every,
                          "best_val_accuracy": 0.5} for m, values in trips.items() for s, t in enumerate(values)])


def test_the_verdict_follows_the_interval_of_the_effect_against_the_paper_s_side():
    runs = _runs({"fedbuff": [100, 105, 98, 102, 101], "fedavgm": [300, 320, 310, 305, 315],
                  "fedavg": [100, 200, 150, 120, 170], "similar": [97, 103, 99, 101, 100]})
    arms = {"fedavgm": {"vs": "fedbuff", "paper": {"trips": [3.3, 1.7, 1.8]}},
            "fedavg": {"vs": "fedbuff", "paper": {"trips": [1.7]}},
            "similar": {"vs": "fedbuff", "paper": {"trips": [2.0]}}}
    table = evidence_table(runs, "fedbuff", as_arms(arms), "trips").set_index("method")
    assert table.loc["fedavgm", "verdict"] == "reproduces"  # 310 / 101, its interval above 1.05: the paper's side
    assert table.loc["fedavgm", "effect [95% CI]"].startswith("3.07×")
    assert table.loc["fedavg", "verdict"] == "inconclusive"  # 1.47x, but the interval reaches below 1.05
    assert table.loc["similar", "verdict"] == "differs"  # inside 1 +- 5%, the paper says 2x
    assert table.loc["fedbuff", "median [95% CI]"] == "101 [98, 105]" and table.loc["fedbuff", "verdict"] == ""


def test_an_interval_wholly_off_the_paper_s_side_differs_though_it_straddles_the_edge_between_the_others():
    # paper +11.49 (HFL above FedAvg); ours about -1.3 with an interval from below -0.5 into the band:
    # "the same or smaller" is undecided, "larger" is ruled out, so the paper's claim does not hold
    runs = pd.DataFrame({"method": ["fedavg"] * 5 + ["hfl"] * 5 + ["near"] * 5,
                         "best_val_accuracy": [0.80] * 5 + [0.775, 0.79, 0.787, 0.797, 0.783]
                         + [0.79, 0.805, 0.802, 0.812, 0.798]})
    arms = {"hfl": {"vs": "fedavg", "paper": {"difference": [11.49]}},
            "near": {"vs": "fedavg", "paper": {"difference": ["<0"]}}}
    table = evidence(runs, "fedavg", as_arms(arms), "best_accuracy").set_index("method")
    assert table.loc["hfl", "effect_low"] < -0.5 < table.loc["hfl", "effect_high"] <= 0.5
    assert table.loc["hfl", "verdict"] == "differs"
    # the paper says smaller: the same seeds 1.5 points higher reach into "smaller" and beyond
    assert table.loc["near", "effect_low"] < -0.5 < table.loc["near", "effect_high"]
    assert table.loc["near", "verdict"] == "inconclusive"


def test_a_nested_method_worse_than_its_special_case_is_a_tuning_failure_not_a_finding():
    runs = _runs({"fedbuff": [100, 102, 98], "fedavg": [150, 160, 155], "fedavgm": [400, 420, 410]})
    arms = {"fedavg": {"vs": "fedbuff", "paper": {"trips": [1.5]}},
            "fedavgm": {"vs": "fedbuff", "special_case": "fedavg", "paper": {"trips": [3.0]}}}
    table = evidence_table(runs, "fedbuff", as_arms(arms), "trips").set_index("method")
    assert table.loc["fedavgm", "verdict"] == "tuning failed"
    assert table.loc["fedavgm", "guard"] == "tuning failed: worse than its special case fedavg"
    assert table.loc["fedavg", "guard"] == "" and table.loc["fedavg", "verdict"] == "reproduces"
    assert "Guard, tuning failed: fedavgm: worse than its own special case" in evidence_markdown(runs, "fedbuff", as_arms(arms), "trips")
    misspelt = {**arms, "fedavgm": {**arms["fedavgm"], "special_case": "fed_avg"}}
    with pytest.raises(ValueError, match="arm 'fedavgm': special_case 'fed_avg' is not an arm of this table"):
        evidence_table(runs, "fedbuff", as_arms(misspelt), "trips")



def test_an_arm_tuned_to_its_special_case_has_no_verdict_of_its_own():
    """issue 54: FedProx tuned to mu = 0 is FedAvg run again; its row says so and is no second verdict."""
    runs = _runs({"fedbuff": [100, 102, 98], "fedavg": [150, 160, 155], "fedprox": [150, 160, 155]})
    arms = as_arms({"fedavg": {"vs": "fedbuff", "paper": {"trips": [1.5]}},
                    "fedprox": {"vs": "fedbuff", "special_case": "fedavg", "paper": {"trips": [1.5]}}})
    found = evidence(runs, "fedbuff", arms, "trips", degenerate={"fedprox": "algorithm.prox_mu = 0.0"})
    table = evidence_table(runs, "fedbuff", arms, "trips", found).set_index("method")
    assert table.loc["fedprox", "verdict"] == "" and table.loc["fedavg", "verdict"] == "reproduces"
    assert table.loc["fedprox", "guard"] == ("degenerate: tuned to its special case fedavg (algorithm.prox_mu = 0.0), "
                                             "so it runs that method; no verdict of its own")
    assert evidence_table(runs, "fedbuff", arms, "trips").set_index("method").loc["fedprox", "verdict"] == "reproduces"

def test_a_missed_target_counts_as_the_budget_and_a_workload_at_its_floor_or_ceiling_is_saturated():
    runs = _runs({"fedbuff": [100, 110, 105], "fedasync": [float("nan"), 900, float("nan")]})
    table = evidence_table(runs, "fedbuff", as_arms({"fedasync": {"vs": "fedbuff"}}), "trips").set_index("method")
    assert table.loc["fedasync", "median [95% CI]"].startswith(">1,000")
    assert table.loc["fedasync", "effect [95% CI]"].startswith(">9.52×")
    assert saturated(runs, "trips") == ""
    assert saturated(_runs({"a": [float("nan")] * 3, "b": [float("nan")] * 3}), "trips") == \
        "no arm reached the target within the budget"
    assert saturated(_runs({"a": [10, 10], "b": [10, 10]}), "trips") == "every arm reached the target at its first evaluation"
    accuracy = pd.DataFrame({"method": ["a"] * 3 + ["b"] * 3, "best_val_accuracy": [0.97, 0.96, 0.975, 0.968, 0.972, 0.96]})
    assert saturated(accuracy, "best_accuracy").startswith("every arm's median best accuracy lies within")
    apart = accuracy.assign(best_val_accuracy=[0.97, 0.96, 0.975, 0.80, 0.81, 0.79])
    assert saturated(apart, "best_accuracy") == ""


def test_an_interval_end_resting_on_the_budget_is_open_and_two_arms_at_the_budget_are_not_ordered():
    nan = float("nan")
    runs = _runs({"lrnorm": [nan] * 5, "examples": [nan, nan, 940, nan, nan], "fast": [400, 420, 410, 390, 405],
                  "slow": [nan, nan, nan, 980, 990], "near": [970, 975, 980, 985, 990], "some": [975, 985, nan, nan, 980]})
    arms = {"examples": {"vs": "lrnorm", "paper": {"trips": [1.15]}},  # 1000 / 1000: "the same" only by the budget
            "fast": {"vs": "lrnorm", "paper": {"trips": [1.5]}},  # 0.41x of a lower bound: faster still
            "slow": {"vs": "fast", "paper": {"trips": [0.9]}},  # at least 2.4x: slower, whatever the budget hid
            "some": {"vs": "near", "paper": {"trips": [1.5]}}}  # inside the band up to 1.03x, but its misses may hide more
    table = evidence(runs, None, as_arms(arms), "trips").set_index("method")
    assert (table.loc["examples", "effect_low"], table.loc["examples", "effect_high"]) == (0.94, 1.0)  # inside the band
    assert table.loc["examples", "verdict"] == "not reached"  # was "differs": the same only because both hit 1,000
    assert table.loc["fast", "verdict"] == "differs" and table.loc["slow", "verdict"] == "differs"
    assert table.loc["some", "effect_high"] < 1.05 and table.loc["some", "verdict"] == "inconclusive"  # was "differs"


def test_accuracy_effects_are_differences_in_points_compared_with_the_paper_s_difference():
    runs = pd.DataFrame({"method": ["fedavg"] * 4 + ["fedlaavg"] * 4,
                         "best_val_accuracy": [0.80, 0.81, 0.79, 0.80, 0.86, 0.85, 0.87, 0.86]})
    arms = {"fedavg": {"paper": {"accuracy": 58.0}}, "fedlaavg": {"vs": "fedavg", "paper": {"accuracy": 61.0}}}
    table = evidence_table(runs, "fedavg", as_arms(arms), "best_accuracy").set_index("method")
    assert table.loc["fedlaavg", "effect [95% CI]"].startswith("+6.00")
    assert table.loc["fedlaavg", "paper"] == "+3.00" and table.loc["fedlaavg", "verdict"] == "reproduces"


def test_a_paper_that_states_only_the_direction_of_a_difference_is_compared_by_its_side():
    runs = pd.DataFrame({"method": ["buffered"] * 4 + ["stale"] * 4 + ["worse"] * 4,
                         "best_val_accuracy": [0.80, 0.81, 0.79, 0.80, 0.86, 0.85, 0.87, 0.86, 0.70, 0.71, 0.69, 0.70]})
    runs = pd.concat([runs, runs[runs["method"] == "worse"].assign(method="below")])
    arms = {"buffered": {}, "stale": {"vs": "buffered", "paper": {"difference": [">0"]}},
            "worse": {"vs": "buffered", "paper": {"difference": [">0"]}},
            "below": {"vs": "buffered", "paper": {"difference": ["<0"]}}}
    table = evidence_table(runs, "buffered", as_arms(arms), "best_accuracy").set_index("method")
    assert table.loc["stale", "paper"] == ">0" and table.loc["stale", "verdict"] == "reproduces"
    assert table.loc["worse", "verdict"] == "differs"
    assert table.loc["below", "paper"] == "<0" and table.loc["below", "verdict"] == "reproduces"


def test_fig4_s_privacy_measure_compares_final_accuracy_and_a_same_utility_claim_by_the_no_difference_band():
    # best accuracies alike, final ones apart: the privacy measure must read the final ones
    runs = pd.DataFrame({"method": ["dpsgd"] * 4 + ["ftrl"] * 4 + ["alike"] * 4,
                         "best_val_accuracy": [0.90] * 12,
                         "final_val_accuracy": [0.50, 0.501, 0.499, 0.50, 0.60, 0.61, 0.59, 0.60, 0.501, 0.50, 0.499, 0.50]})
    arms = {"dpsgd": {}, "ftrl": {"vs": "dpsgd", "paper": {"difference": [">0"]}},
            "alike": {"vs": "dpsgd", "paper": {"difference": ["0"]}}}  # "the same utility" (FedBuff App. C.5)
    table = evidence_table(runs, "dpsgd", as_arms(arms), "privacy").set_index("method")
    assert table.loc["ftrl", "effect [95% CI]"].startswith("+10.00") and table.loc["ftrl", "verdict"] == "reproduces"
    assert table.loc["alike", "paper"] == "+0.00" and table.loc["alike", "verdict"] == "reproduces"
    assert "Median final accuracy (%)" in evidence_markdown(runs, "dpsgd", as_arms(arms), "privacy")
    assert saturated(runs, "privacy") == "" and saturated(runs, "best_accuracy") != ""


def test_a_setting_that_collapses_on_some_report_seeds_is_flagged_unstable_and_does_not_flatten_the_table():
    # FedLaAvg's FedAvg FCA: the tuned lr reached 65-67% on three report seeds and 30.5%, 42.9% on two
    accuracy = {"fedavg fca": [0.646, 0.305, 0.673, 0.429, 0.660], "fedlaavg": [0.62, 0.63, 0.61, 0.625, 0.615],
                "fedavg ica": [0.60, 0.61, 0.59, 0.605, 0.60]}
    runs = pd.DataFrame([{"method": m, "seed": s + 1, "best_val_accuracy": a}
                         for m, values in accuracy.items() for s, a in enumerate(values)])
    table = evidence_table(runs, "fedavg ica", as_arms({"fedlaavg": {"vs": "fedavg ica"}}), "best_accuracy").set_index("method")
    assert table.loc["fedavg fca", "guard"] == "unstable: collapsed on seeds 2, 4 of 5"
    assert table.loc["fedlaavg", "guard"] == table.loc["fedavg ica", "guard"] == ""
    assert "Guard, unstable: fedavg fca" in evidence_markdown(runs, "fedavg ica", {}, "best_accuracy")
    # the typical arm's noise (about 0.8 points), not the collapsed arm's 16: 2 points apart is not flat
    assert saturated(runs, "best_accuracy") == ""
    # trips: a miss where the arm's other seeds reached the target, or a divergence
    trips = _runs({"steady": [100, 110, 105, 95, 100], "fragile": [100, float("nan"), 105, 95, 100]}).assign(
        status=["completed"] * 9 + ["diverged"])
    table = evidence_table(trips, "steady", {}, "trips").set_index("method")
    assert table.loc["fragile", "guard"] == "unstable: collapsed on seeds 1, 4 of 5" and table.loc["steady", "guard"] == ""


def test_findings_quote_the_evidence_through_placeholders_so_a_rerun_cannot_leave_them_stale():
    runs = _runs({"fedbuff": [100, 105, 98, 102, 101], "fedavgm": [300, 320, 310, 305, 315]})
    arms = {"fedavgm": {"vs": "fedbuff", "paper": {"trips": [3.3]}}}
    found = evidence(runs, "fedbuff", as_arms(arms), "trips")
    shown = evidence_table(runs, "fedbuff", as_arms(arms), "trips", found).set_index("method")
    notes = ("FedAvgM needs {effect:fedavgm} ({verdict:fedavgm}, {seeds:fedavgm} seeds); FedBuff {median:fedbuff}, "
             "{effect:fedbuff}; {effect:fedasync}")
    assert fill_notes(notes, found) == (
        f"FedAvgM needs {shown.loc['fedavgm', 'effect [95% CI]']} (reproduces, 5 seeds); FedBuff 101 [98, 105], "
        "(no comparison); (fedasync: not run)")
    # an arm a smoke point did not run is said once, not once per placeholder ("... ((fedprox: not run))")
    assert fill_notes("FedProx {effect:fedprox} ({verdict:fedprox}), then 1.1x ({verdict:fedprox}); "
                      "FedAsync {median:fedasync}, {effect:fedasync}", found) == (
        "FedProx (fedprox: not run), then 1.1x (not run); FedAsync (fedasync: not run)")
    assert shown.loc["fedavgm", "effect [95% CI]"].startswith("3.07× [")
    assert found.set_index("method").loc["fedavgm", "effect"] == pytest.approx(310 / 101)


def test_a_paper_split_across_the_band_has_no_side_to_test_and_a_verdict_the_cap_cannot_resolve_says_so():
    from fl_bench.analysis.power import Need

    runs = _runs({"fedbuff": [100, 105, 98, 102, 101], "k1": [95, 120, 99, 104, 101], "k100": [90, 130, 95, 110, 100]})
    arms = {"k1": {"vs": "fedbuff", "paper": {"trips": [0.94, 1.30]}},  # two datasets on either side of 1 +- 5%
            "k100": {"vs": "fedbuff", "paper": {"trips": [1.5]}}}
    plain = evidence(runs, "fedbuff", as_arms(arms), "trips").set_index("method")
    assert plain.loc["k1", "verdict"] == "paper split" and plain.loc["k100", "verdict"] == "inconclusive"
    needs = {"k100": Need(seeds=40, effect=0.36, distance=0.31, spread=0.9)}  # the pilot said 40 > the cap of 30
    capped = evidence(runs, "fedbuff", as_arms(arms), "trips", needs, cap=30).set_index("method")
    assert capped.loc["k100", "verdict"] == "underpowered at 5 seeds"


# ----------------------------------------------------------------- claims of a kind (issue 54)
def test_a_size_claim_30x_the_papers_with_the_right_sign_is_not_reproduces():
    # effect 30x (3,000 trips against 100) where the paper claims 1.1x fewer: the side holds, the size does not
    runs = _runs({"base": [100, 101, 99, 100, 102], "far": [3000, 3010, 2990, 3005, 2995],
                  "near": [120, 121, 119, 120, 122]})
    arms = {"far": {"vs": "base", "paper": {"trips": [1.1]}, "claim": "size"},
            "near": {"vs": "base", "paper": {"trips": [1.1]}, "claim": "size"}}
    table = evidence_table(runs, "base", as_arms(arms), "trips").set_index("method")
    assert table.loc["far", "verdict"] == "same side, 27x the paper's"  # 30.0x / 1.1x
    assert table.loc["near", "verdict"] == "reproduces"  # 1.2x, inside 1.1x / 1.5 .. 1.1x * 1.5
    assert table.loc["near", "paper"] == "1.1× (size: 0.73× to 1.65×)"
    side = {label: {**arm, "claim": "side"} for label, arm in arms.items()}
    assert evidence_table(runs, "base", as_arms(side), "trips").set_index("method").loc["far", "verdict"] == "reproduces"


def test_a_closeness_claim_is_decided_both_ways():
    """HFL's headline: S-SGD 84.58 against HFL 83.41, a gap of 1.17 points; band: up to 1.17 + 2 points."""
    acc = lambda values: values  # noqa: E731
    runs = pd.DataFrame([{"method": m, "seed": s, "best_val_accuracy": v / 100}
                         for m, values in {"hfl": acc([50, 51, 49, 50, 50]), "far": acc([90, 91, 89, 90, 90]),
                                           "close": acc([52, 53, 51, 52, 52])}.items() for s, v in enumerate(values)])
    arms = {"hfl": {"paper": {"accuracy": 83.41}},
            "far": {"vs": "hfl", "paper": {"accuracy": 84.58}, "claim": "closeness"},
            "close": {"vs": "hfl", "paper": {"accuracy": 84.58}, "claim": "closeness"}}
    table = evidence_table(runs, "hfl", as_arms(arms), "best_accuracy").set_index("method")
    assert table.loc["far", "verdict"] == "same side, 34x the paper's gap"  # 40 points against 1.17
    assert table.loc["close", "verdict"] == "reproduces"  # 2 points, the whole interval within 1.17 + 2
    assert table.loc["close", "paper"] == "+1.17 (closeness: up to +3.17)"


def test_a_closeness_claim_is_the_one_sided_test_against_its_margin():
    # the margin: the paper's gap 1.17 plus the tolerance (max(2, 25% of 1.17) = 2 points) = 3.17
    assert verdict(2.0, 1.5, 2.5, [1.17], "difference", "closeness") == "reproduces"
    assert verdict(-1.0, -1.5, -0.5, [1.17], "difference", "closeness") == "reproduces"  # closer than the paper: holds
    assert verdict(3.0, 2.6, 3.5, [1.17], "difference", "closeness") == "inconclusive"  # straddles the margin
    assert verdict(3.0, 2.6, 3.5, [1.17], "difference", "closeness",
                   undecided="underpowered at 30 seeds") == "underpowered at 30 seeds"
    assert verdict(15.3, 14.9, 15.8, [1.17], "difference", "closeness") == "same side, 13x the paper's gap"
    assert verdict(5.0, 4.0, 6.0, [0.3], "difference", "closeness") == "differs"  # the paper: the same; ours: apart


def test_a_size_claim_needs_its_side_and_its_band():
    band = claim_band([7.5], "difference", "size")  # +7.50 within max(2, 25% of 7.5 = 1.875) = 2 points
    assert band == (5.5, 9.5)
    assert verdict(6.0, 5.0, 7.0, [7.5], "difference", "size") == "reproduces"
    assert verdict(1.38, 0.86, 1.89, [7.5], "difference", "size") == "same side, 0.18x the paper's"
    # the side undecided (the interval straddles +0.5) and the band ruled out: the size does not hold
    assert verdict(0.67, 0.11, 1.03, [9.0], "difference", "size") == "differs"
    # the side undecided and the band within reach: nothing decided
    assert verdict(0.48, -0.04, 0.86, [1.5], "difference", "size") == "inconclusive"
    assert verdict(-2.0, -2.5, -1.5, [7.5], "difference", "size") == "differs"  # the other side
    # a paper split across the no-difference band (0.94x and 1.3x) claims its range: 0.63x to 1.95x
    assert verdict(1.16, 1.06, 1.26, [0.94, 1.3], "ratio", "size") == "reproduces"
    assert verdict(1.16, 1.06, 1.26, [0.94, 1.3], "ratio", "side") == "paper split"
    assert verdict(4.6, 4.3, 5.0, [0.94, 1.3], "ratio", "size") == "differs"
    assert claim_band([8.5, ">4.8", 5.7], "ratio", "size") == (4.8 / 1.5, math.inf)  # a bound opens its side
    assert verdict(4.0, 3.7, math.inf, [8.5, ">4.8", 5.7], "ratio", "size", bound=True) == "reproduces"


def test_a_censored_effect_is_a_bound_against_the_band():
    # "slow" misses the target on 3 of 5 seeds (counted as the budget, 1000): its effect is a lower bound
    runs = _runs({"base": [100, 101, 99, 100, 102], "slow": [900, float("nan"), float("nan"), float("nan"), 950]})
    passing = {"slow": {"vs": "base", "paper": {"trips": [2.0]}, "claim": "size"}}
    found = evidence_table(runs, "base", as_arms(passing), "trips").set_index("method")
    assert found.loc["slow", "verdict"] == "same side, more than 5x the paper's"  # its bound, >9.8x, is past 3x
    within = {"slow": {"vs": "base", "paper": {"trips": [8.0]}, "claim": "size"}}  # band 5.3x to 12x: a bound inside
    assert evidence_table(runs, "base", as_arms(within), "trips").set_index("method").loc["slow", "verdict"] == "reproduces"


def test_the_final_accuracy_measure_judges_the_model_each_run_ends_with():
    """issue 55: HFL's evaluation reading: the same runs judged on final accuracy, not the best within the budget."""
    runs = pd.DataFrame([{"method": m, "seed": s, "best_val_accuracy": best / 100, "final_val_accuracy": final / 100}
                         for m, rows in {"hfl": [(80, 60), (81, 61), (79, 59)], "fedavg": [(70, 70), (71, 71), (69, 69)]}.items()
                         for s, (best, final) in enumerate(rows)])
    arms = {"hfl": {"paper": {"accuracy": 83.41}}, "fedavg": {"vs": "hfl", "paper": {"accuracy": 71.92}}}
    best = evidence(runs, "hfl", as_arms(arms), "best_accuracy").set_index("method").loc["fedavg"]
    final = evidence(runs, "hfl", as_arms(arms), "final_accuracy").set_index("method").loc["fedavg"]
    assert best["effect"] == pytest.approx(-10.0) and best["verdict"] == "reproduces"
    assert final["effect"] == pytest.approx(10.0) and final["verdict"] == "differs"


def test_a_headline_sentence_says_whether_any_reading_restores_the_paper():
    from fl_bench.analysis.verdict import headline_sentence

    from fl_bench.analysis.sweep_file import Headline

    headline = Headline("FedAvg is only 71.92%", "Sec. 6", ["t: FedAvg", "t: FedAvg digits"],
                        {"lambda constant": ["t: HFL constant"], "lambda delay": ["t: HFL delay"]})
    verdicts = {"t: FedAvg": "differs", "t: FedAvg digits": "same side, 2.1x the paper's",
                "t: HFL constant": "same side, 0.5x the paper's", "t: HFL delay": "differs"}
    assert headline_sentence(headline, verdicts) == (
        "The paper's \"FedAvg is only 71.92%\" (Sec. 6) does not hold here (2 rows: 1 differs, 1 same side); it holds "
        "under none of the 2 other readings tried; in direction only under lambda constant (lambda constant: holds in "
        "direction only (1 row: 1 same side); lambda delay: does not hold (1 row: 1 differs)).")
    verdicts["t: HFL delay"] = "reproduces"
    assert "; it holds under lambda delay; in direction only under lambda constant (" in headline_sentence(headline, verdicts)
    verdicts["t: HFL constant"] = "inconclusive"
    assert "it holds under lambda delay (" in headline_sentence(headline, verdicts)
    assert fill_notes("Headline: {headline:1}", pd.DataFrame(
        {"method": ["FedAvg"], "verdict": ["differs"], "seeds": [5]}), [headline], "t").startswith(
        "Headline: The paper's \"FedAvg is only 71.92%\" (Sec. 6) does not hold here (2 rows: 1 differs, 1 no verdict)")
    # a row of another table of the file: its verdict comes with the table's own
    assert "(2 rows: 2 differs)" in fill_notes("{headline:1}", pd.DataFrame({"method": ["FedAvg"], "verdict": ["differs"],
                                                                            "seeds": [5]}), [headline], "t",
                                               {"t: FedAvg digits": "differs"})
