"""Seeds chosen by power before the report runs (fl_bench.analysis.power), on hand-computed cases."""

import math

import numpy as np
import pytest

from fl_bench.analysis.power import expected_effect, seeds_needed, table_seeds


def test_the_seeds_a_difference_needs_follow_the_pilot_spread_and_the_distance_to_the_band():
    # paper +2.0 points: 1.5 from the band's edge +0.5; pilot sd sqrt(1 + 0) = 1;
    # n = ceil((1.96 * sqrt(pi/2) * 1 / 1.5)^2) = ceil(2.682) = 3
    need = seeds_needed(np.array([1.0, 2.0, 3.0]), np.array([5.0, 5.0, 5.0]), [2.0], "difference")
    assert (need.seeds, need.effect, need.distance, need.spread) == (3, 2.0, 1.5, 1.0)
    # twice the spread: four times the seeds (ceil(10.73))
    assert seeds_needed(np.array([2.0, 4.0, 6.0]), np.array([5.0, 5.0, 5.0]), [2.0], "difference").seeds == 11


def test_a_ratio_is_sized_on_the_log_scale_and_a_direction_without_a_number_at_twice_the_band():
    # paper 2.0x: log 2 - log 1.05 = 0.6444 from the edge; pilot log values sd: [log 100, log 200] each arm
    a, b = np.array([100.0, 200.0]), np.array([100.0, 200.0])
    sd = math.sqrt(2 * np.var(np.log([100.0, 200.0]), ddof=1))
    need = seeds_needed(a, b, [2.0], "ratio")
    assert need.spread == pytest.approx(sd)
    assert need.paper_seeds == math.ceil((1.959964 * math.sqrt(math.pi / 2) * sd / (math.log(2) - math.log(1.05))) ** 2)
    # the pilot measured a ratio of 1 (equal arms): log 1.05 from the edge of the paper's side, 1.05x
    assert need.pilot_seeds == math.ceil((1.959964 * math.sqrt(math.pi / 2) * sd / math.log(1.05)) ** 2)
    assert need.seeds == need.pilot_seeds > need.paper_seeds
    assert expected_effect([">1"], "ratio") == pytest.approx(math.log(1.05 ** 2))  # a direction: 1.1025x
    assert expected_effect(["<0"], "difference") == -1.0
    assert expected_effect([">4.8"], "ratio") == pytest.approx(math.log(4.8))  # a bound beyond the band counts
    assert expected_effect([3.3, 1.7, 1.8], "ratio") == pytest.approx(math.log(1.7))  # the hardest dataset
    assert expected_effect([0.94, 1.30], "ratio") is None  # the paper's datasets disagree: no side to resolve


def test_a_table_takes_its_most_demanding_verdict_within_the_minimum_and_the_cap():
    need = seeds_needed(np.array([1.0, 2.0, 3.0]), np.array([5.0, 5.0, 5.0]), [0.6], "difference")  # 0.1 from the edge
    assert need.seeds == 604
    split = seeds_needed(np.array([1.0, 2.0]), np.array([1.0, 2.0]), [0.94, 1.30], "ratio")
    assert split.seeds is None
    assert table_seeds([need, split], minimum=5, cap=30) == 30
    assert table_seeds([split], minimum=5, cap=30) == 5


def test_a_verdict_also_needs_the_seeds_to_decide_at_the_effect_its_pilot_measured():
    # paper +2.0 (3 seeds, first test); the pilot measures +0.8: 0.3 above the paper side's edge +0.5,
    # n = ceil((1.96 * sqrt(pi/2) * 1 / 0.3)^2) = ceil(67.05) = 68
    need = seeds_needed(np.array([4.8, 5.8, 6.8]), np.array([5.0, 5.0, 5.0]), [2.0], "difference")
    assert (need.paper_seeds, need.pilot_effect, need.pilot_seeds, need.seeds) == (3, pytest.approx(0.8), 68, 68)
    # the pilot measures -3.0 (the paper's side is far away): the paper's effect sets the seeds
    far = seeds_needed(np.array([1.0, 2.0, 3.0]), np.array([5.0, 5.0, 5.0]), [2.0], "difference")
    assert (far.pilot_seeds, far.seeds) == (1, 3)
    # paper 'smaller': the edge to clear is the lower one, -0.5; a pilot at +0.5 lies 1.0 from it
    smaller = seeds_needed(np.array([4.5, 5.5, 6.5]), np.array([5.0, 5.0, 5.0]), ["<0"], "difference")
    assert smaller.pilot_seeds == math.ceil((1.959964 * math.sqrt(math.pi / 2) * 1.0 / 1.0) ** 2) == 7


def test_a_closeness_claim_is_sized_against_its_margin_not_the_no_difference_band():
    # S-SGD 84.58 against HFL 83.41: the gap 1.17, the margin 1.17 + 2 points = 3.17; pilot sd sqrt(1 + 0) = 1
    ssgd, hfl = np.array([3.0, 4.0, 5.0]), np.array([0.0, 0.0, 0.0])
    need = seeds_needed(ssgd, hfl, [1.17], "difference", "closeness")
    z = 1.959964 * math.sqrt(math.pi / 2)
    assert need.claim == "closeness" and need.distance == pytest.approx(2.0)  # the tolerance, if the gap is real
    assert need.paper_seeds == math.ceil((z / 2.0) ** 2) == 2
    assert need.pilot_seeds == math.ceil((z / (4.0 - 3.17)) ** 2) == 9  # the pilot's 4 points, 0.83 past the margin
    assert need.seeds == 9
    # the same pilot under a side claim: 4 points, 3.5 from the band's edge +0.5
    assert seeds_needed(ssgd, hfl, [1.17], "difference").pilot_seeds == math.ceil((z / 3.5) ** 2) == 1
