"""Clients grouped by their main label: FedLaAvg's diurnal availability groups and FedStaleWeight's
speed groups are sets of labels, and a client belongs to the set that holds its majority label."""

from __future__ import annotations

import numpy as np

from fl_bench.errors import ConfigError


def majority_labels(labels: np.ndarray, offsets: np.ndarray, num_classes: int) -> np.ndarray:
    """Each client's most frequent training label (ties: the smallest), in one bincount."""
    sizes = np.diff(offsets)
    owner = np.repeat(np.arange(len(sizes)), sizes)
    counts = np.bincount(owner * num_classes + labels, minlength=len(sizes) * num_classes)
    return counts.reshape(len(sizes), num_classes).argmax(1)


def groups_by_label(labels: np.ndarray, offsets: np.ndarray, num_classes: int, label_sets: list[list[int]], key: str) -> np.ndarray:
    """Client -> index of the label set that holds its majority label (FedLaAvg's diurnal groups,
    FedStaleWeight's speed groups); a client whose label is in no set is a config error."""
    group_of_label = np.full(num_classes, -1)
    for g, labels_of_group in enumerate(label_sets):
        bad = [label for label in labels_of_group if not 0 <= label < num_classes]
        if bad:
            raise ConfigError(f"{key}={label_sets} names label {bad[0]}, but the dataset's labels are 0..{num_classes - 1}")
        group_of_label[labels_of_group] = g
    majority = majority_labels(labels, offsets, num_classes)
    groups = group_of_label[majority]
    if (groups < 0).any():
        missing = sorted(set(majority[groups < 0].tolist()))
        raise ConfigError(
            f"{key}={label_sets} leaves out label(s) {missing}, the main label of {int((groups < 0).sum())} clients: "
            "every client needs a group"
        )
    return groups
