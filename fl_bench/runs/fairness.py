"""Fairness of aggregation (FedStaleWeight Sec. 6), the metrics a run reports: how much of the
aggregate each client and each group of clients got, and how well the final model serves each group.

From trips.csv's ``weight`` (each upload's normalised share of its server step; every algorithm of
the FedBuff family, FedStaleWeight and HFL logs it; an algorithm that defines no ``step_weights`` leaves it
empty, and its shares are NaN): each group's share of the total weight, Jain's index
(sum x)^2 / (n sum x^2) of the clients' shares (1: equal influence) and the share per group against
server steps. Groups are the ``label_groups`` partition's (clients numbered group by group, fast then
slow). ``accuracy_by_group``: the final model's accuracy on any grouping of the clients' data (HFL's
normal devices and stragglers, in the summary). The tables and plots across runs are
``fl_bench.analysis.fairness``'s.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def accuracy_by_class(y_val, predicted, num_classes: int) -> list[float]:
    """The accuracy of ``predicted`` (tensors) on each label's validation rows (NaN for a label without
    rows); empty without predictions (a task without classes)."""
    if predicted is None:
        return []
    return [float((predicted[y_val == c] == c).float().mean()) if (y_val == c).any() else float("nan")
            for c in range(num_classes)]


def client_groups(clients_per_group: list[int]) -> np.ndarray:
    """Group of every client of a label_groups partition (clients numbered group by group)."""
    return np.repeat(np.arange(len(clients_per_group)), clients_per_group)


def accuracy_by_group(correct: np.ndarray, y_val: np.ndarray, val_offsets: np.ndarray | None, y: np.ndarray,
                      offsets: np.ndarray, members: dict[str, np.ndarray]) -> tuple[dict[str, float], str]:
    """The final model's accuracy on each group's data (``members[name]``: one bool per client) and
    its basis, from ``correct`` (one 0/1 per validation row). Where each client holds out its own
    rows (``val_offsets``), the group's rows; where the validation set is pooled, each label's
    accuracy weighted by the group's training label counts, so the mean sees the labels the group
    holds. NaN for a group without rows."""
    if val_offsets is not None:
        basis, owner = "own validation examples", np.repeat(np.arange(len(val_offsets) - 1), np.diff(val_offsets))
        weights = {name: member[owner].astype(float) for name, member in members.items()}
    else:
        basis, owner = "label mix", np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
        labels = int(max(y.max(), y_val.max())) + 1
        per_row = 1.0 / np.bincount(y_val, minlength=labels)[y_val]  # a label's rows share its weight
        weights = {name: np.bincount(y[member[owner]], minlength=labels)[y_val] * per_row
                   for name, member in members.items()}
    return {name: float(correct @ w / w.sum()) if w.sum() else float("nan") for name, w in weights.items()}, basis


def has_step_weights(trips: pd.DataFrame) -> bool:
    """Whether the run's algorithm logged each used upload's share of its step (``Server.step_weights``):
    one that defines none (a plugin's, FedLaAvg) leaves trips.csv's ``weight`` empty, and no share can be read."""
    return bool(trips.loc[trips["used"] == 1, "weight"].notna().any())


def weight_shares(trips: pd.DataFrame, groups: np.ndarray) -> pd.Series:
    """Each group's share of the total aggregation weight over the uploads that were used (NaN for a run
    without step weights: :func:`has_step_weights`)."""
    used = trips[(trips["used"] == 1) & trips["weight"].notna()]
    per_group = used.groupby(groups[used["client"].to_numpy()])["weight"].sum()
    if not per_group.sum():
        return pd.Series(float("nan"), index=range(groups.max() + 1))
    return (per_group / per_group.sum()).reindex(range(groups.max() + 1), fill_value=0.0)


def jain_index(values: np.ndarray) -> float:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 when all are equal, 1/n when one takes all."""
    values = np.asarray(values, dtype=float)
    return float(values.sum() ** 2 / (len(values) * (values**2).sum()))


def client_shares(trips: pd.DataFrame, num_clients: int) -> np.ndarray:
    """Each of ``num_clients`` clients' share of the total aggregation weight over the used
    uploads (0 for a client that never uploaded; NaN for all without step weights)."""
    used = trips[(trips["used"] == 1) & trips["weight"].notna()]
    shares = used.groupby("client")["weight"].sum().reindex(range(num_clients), fill_value=0.0).to_numpy()
    return shares / shares.sum() if shares.sum() else np.full(num_clients, float("nan"))  # (NaN: no step weights)


def share_over_steps(trips: pd.DataFrame, groups: np.ndarray, window: int) -> pd.DataFrame:
    """Each group's share of the weight aggregated in consecutive windows of ``window`` server steps."""
    used = trips[(trips["used"] == 1) & trips["weight"].notna()].copy()
    used["step"] = used["download_version"] + used["staleness"] + 1  # the step that consumed it
    used["group"] = groups[used["client"].to_numpy()]
    used["bucket"] = (used["step"] - 1) // window * window + window
    table = used.pivot_table(index="bucket", columns="group", values="weight", aggfunc="sum", fill_value=0.0)
    return table.div(table.sum(axis=1), axis=0)
