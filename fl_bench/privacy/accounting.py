"""(epsilon, delta) of a private run, from Google's dp-accounting (RDP): for DP-FTRL, the Gaussian
mechanism of the participation that happened (each client's l2 sensitivity over the tree's nodes:
:func:`tree_sensitivity`); for DP-SGD, the Gaussian sampled without replacement. :func:`calibrate`
finds the noise multiplier for a target epsilon before the run; :func:`spent` states what the run
spent, for its summary.
"""

from __future__ import annotations

import functools
import logging
import math
from typing import Any

import numpy as np

from fl_bench.errors import ConfigError
from fl_bench.privacy.mechanism import PrivateAggregation

logger = logging.getLogger(__name__)

REPLACE_ONE_SENSITIVITY = 2.0  # of a sum of updates clipped to L, in units of L (DP-SGD's adjacency)
LEAST_NOISE = 1e-3  # the smallest noise multiplier calibrate() searches: a larger target epsilon is refused


def tree_depth(steps: int) -> int:
    """Levels of complete nodes a leaf of a ``steps``-leaf tree can lie in: ceil(log2(steps + 1)), the
    max_depth of dp-accounting's single-epoch tree aggregation."""
    return max(int(steps), 1).bit_length()


def tree_sensitivity(contributions, tree_steps: list[int]) -> float:
    """The largest change, in units of L/K, that zeroing one client's uploads makes to the released
    nodes of the trees: max over clients of sqrt(sum over complete nodes v of n_v^2), n_v the client's
    uploads under v (Kairouz et al. 2021, Sec. 4 and App. D: a node is the sum of its leaves plus its
    own noise; the matrix-mechanism sensitivity of a participation pattern, Denisov et al. 2022). One
    upload per client per tree gives sqrt(tree_depth); k uploads at most k sqrt(tree_depth).

    ``contributions``: (client, tree, step within the tree, from 0) per upload that entered a step;
    ``tree_steps``: the steps each tree took (a node is released only once its last leaf is in)."""
    record = np.asarray(contributions, dtype=np.int64).reshape(-1, 3)
    if not len(record):
        return 0.0
    client, tree, step = record.T
    length = np.asarray(tree_steps, dtype=np.int64)[tree]
    squares = np.zeros(int(client.max()) + 1)
    for level in range(tree_depth(int(length.max()))):
        node = step >> level
        complete = ((node + 1) << level) <= length
        keys, counts = np.unique(np.stack([client, tree, node])[:, complete], axis=1, return_counts=True)
        np.add.at(squares, keys[0], counts.astype(float) ** 2)
    return float(np.sqrt(squares.max()))


def participation_sensitivity(max_participations: int, steps: int, restart_every: int | None) -> float:
    """:func:`tree_sensitivity`'s bound when no client enters more than ``max_participations`` (k)
    steps of a run of ``steps`` server steps: k sqrt(tree_depth of the longest tree), whatever the
    pattern (several uploads in one step and uploads spread over restarted trees included: sum_v n_v^2
    <= (sum over levels) k^2)."""
    longest = min(steps, restart_every) if restart_every else steps
    return max_participations * math.sqrt(tree_depth(longest))


def _event(mechanism: str, noise_multiplier: float, steps: int, num_clients: int, per_step: int,
           sensitivity: float | None):
    import dp_accounting

    if mechanism == "ftrl":
        sensitivity = participation_sensitivity(1, steps, None) if sensitivity is None else sensitivity
        # Every released prefix sum is post-processing of the trees' noisy nodes (std sigma L/K each), one
        # Gaussian mechanism whose l2 sensitivity is ``sensitivity`` L/K (tree_sensitivity)
        return dp_accounting.GaussianDpEvent(noise_multiplier / sensitivity)
    # dp-accounting's Gaussian takes its noise relative to the l2-sensitivity under the accountant's
    # relation. Fixed-size cohorts are replace-one: swapping one client's clipped Delta (norm <= L) for
    # another's moves the sum by up to 2L, so noise sigma L is sigma / 2 sensitivities (Wang, Balle and
    # Kasiviswanathan 2019, Thm. 27); every round is a fresh uniform draw, so repeated participation is
    # in the composition.
    gaussian = dp_accounting.GaussianDpEvent(noise_multiplier / REPLACE_ONE_SENSITIVITY)
    sampled = dp_accounting.SampledWithoutReplacementDpEvent(num_clients, per_step, gaussian)
    return dp_accounting.SelfComposedDpEvent(sampled, steps)


def _accountant(mechanism: str):
    from dp_accounting import NeighboringRelation, rdp

    # The adjacency each event is defined under in dp-accounting: fixed-size cohorts drawn without
    # replacement, replace-one (one client's data swapped); tree aggregation, the "replace special"
    # relation of Kairouz et al. (one client's contributions replaced by zeros, its schedule unchanged).
    relation = NeighboringRelation.REPLACE_ONE if mechanism == "dpsgd" else NeighboringRelation.REPLACE_SPECIAL
    return rdp.RdpAccountant(neighboring_relation=relation)


def epsilon(mechanism: str, noise_multiplier: float, steps: int, delta: float, num_clients: int = 1,
            per_step: int = 1, sensitivity: float | None = None) -> float:
    """epsilon at ``delta`` after ``steps`` server steps (inf without noise). DP-FTRL: of a tree release
    whose sensitivity is ``sensitivity`` L/K (:func:`tree_sensitivity`, :func:`participation_sensitivity`;
    None: one upload per client in one tree of ``steps`` leaves, dp-accounting's single-epoch tree)."""
    if noise_multiplier == 0:
        return math.inf
    if steps == 0 or sensitivity == 0:
        return 0.0
    accountant = _accountant(mechanism)
    accountant.compose(_event(mechanism, noise_multiplier, steps, num_clients, per_step, sensitivity))
    return float(accountant.get_epsilon(delta))


@functools.lru_cache(maxsize=64)
def calibrate(mechanism: str, target_epsilon: float, steps: int, delta: float, num_clients: int = 1,
              per_step: int = 1, sensitivity: float | None = None) -> float:
    """The smallest noise multiplier whose epsilon after ``steps`` is at most ``target_epsilon`` (a
    bisection over the accountant: dp_accounting.calibrate_dp_mechanism); DP-FTRL at the bound
    ``sensitivity`` (:func:`participation_sensitivity`; None: :func:`epsilon`'s). Kept per arguments:
    the seeds of a multirun share it, and DP-SGD's accountant (sampling without replacement) takes
    seconds a calibration."""
    import dp_accounting

    def refused(why: str) -> ConfigError:
        return ConfigError(f"dp.target_epsilon={target_epsilon} is not allowed: {why}")

    if not math.isfinite(target_epsilon) or target_epsilon <= 0:
        raise refused("must be a finite number > 0 (or null: dp.noise_multiplier sets the noise)")
    where = f"this run ({steps} server step{'s' * (steps != 1)}, dp.delta={delta})"
    # dp-accounting's search for a bracket (from LEAST_NOISE up) finds none for a target above the epsilon at
    # LEAST_NOISE: it tries ever more noise, where DP-SGD's accountant fails, and its errors say neither
    most = epsilon(mechanism, LEAST_NOISE, steps, delta, num_clients, per_step, sensitivity)
    if target_epsilon > most:
        raise refused(f"for {where} sigma can be calibrated for a target epsilon of at most {_at_most(most)}, the "
                      f"epsilon at noise multiplier {LEAST_NOISE:g}, the least noise the calibration searches: give "
                      f"a smaller dp.target_epsilon, or set dp.noise_multiplier with dp.target_epsilon=null")
    try:
        return float(dp_accounting.calibrate_dp_mechanism(
            lambda: _accountant(mechanism),
            lambda sigma: _event(mechanism, sigma, steps, num_clients, per_step, sensitivity),
            target_epsilon, delta, dp_accounting.mechanism_calibration.LowerEndpointAndGuess(LEAST_NOISE, 1.0), tol=1e-4))
    except (ValueError, RuntimeError, dp_accounting.mechanism_calibration.NoBracketIntervalFoundError) as error:
        # (below the epsilon at LEAST_NOISE, so it is the small end: dp-accounting's search doubles the noise
        # 30 times from 1)
        raise refused(f"the accountant cannot calibrate sigma for it for {where} (dp-accounting: "
                      f"{str(error).splitlines()[0]}): it needs more noise than the calibration searches (noise "
                      f"multipliers from {LEAST_NOISE:g} to about 2^31); give a larger dp.target_epsilon, of at most "
                      f"{_at_most(most)}") from None


def _at_most(value: float) -> str:
    """``value`` to three significant digits, rounded down: a number no larger than it."""
    shown = float(f"{value:.3g}")
    if shown > value:
        digit = 10.0 ** (math.floor(math.log10(value)) - 2)
        shown = float(f"{shown - digit:.3g}")
    return f"{shown:.3g}"


def spent(aggregation: PrivateAggregation, delta: float, target_epsilon: float | None,
          num_clients: int) -> dict[str, Any]:
    """The summary's privacy keys: (epsilon, delta) of the private steps ``aggregation`` took, for the
    participation that happened (DP-FTRL: each client's uploads placed in the trees), and how many
    uploads it refused at dp.max_participations."""
    mechanism = aggregation.mechanism
    sensitivity = tree_sensitivity(aggregation.contributions, aggregation.tree_steps) if mechanism == "ftrl" else None
    epsilon_spent = epsilon(mechanism, aggregation.noise_multiplier, aggregation.steps, delta, num_clients,
                            aggregation.per_step, sensitivity)
    if aggregation.discarded:
        logger.warning("dp: %d uploads added nothing: their clients had already entered dp.max_participations=%d "
                       "steps (selection=longest_absent lets every client go once before any goes twice)",
                       aggregation.discarded, aggregation.max_participations)
    most = max(aggregation.participations.values(), default=0)
    summary = {"dp_mechanism": mechanism, "dp_epsilon": epsilon_spent, "dp_delta": delta,
               "dp_target_epsilon": target_epsilon, "dp_noise_multiplier": aggregation.noise_multiplier,
               "dp_clip": aggregation.clip, "dp_max_participations": most}
    if mechanism == "ftrl":
        summary.update(dp_participation_cap=aggregation.max_participations, dp_discarded_uploads=aggregation.discarded,
                       dp_tree_sensitivity=sensitivity)
    return summary
