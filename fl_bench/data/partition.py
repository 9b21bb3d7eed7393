"""Partitioners: split a pool of training examples into clients (each one a config under
``conf/partition/``).

Every partitioner returns ``(order, sizes)``: ``order`` lists example indices grouped client by
client and ``sizes[c]`` is client c's share, so the clients are ``order[offsets[c]:offsets[c+1]]``
(flat arrays, no per-client Python objects). All of them are seeded, assign every example at most
once, and give every client at least one example.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch
from omegaconf import MISSING

from fl_bench.data.federated import Examples, FederatedData
from fl_bench.data.transforms import ImageTransform
from fl_bench.errors import ConfigError
from fl_bench.schema import SCHEMAS, build, require, schema

Partition = tuple[np.ndarray, np.ndarray]


def partition(cfg: PartitionConfig, pool: Examples, num_classes: int) -> Partition:
    """Split ``pool`` as ``cfg`` says: calls the ``*_partition`` function its ``_target_`` names."""
    return build(cfg, pool, num_classes)


def federate(name: str, train: Examples, test: Examples, cfg: PartitionConfig, num_classes: int,
             transform: ImageTransform | None = None, vocab: list[str] | None = None) -> FederatedData:
    """Federated data from a pool of training examples split into clients as ``cfg`` says, with
    ``test`` as the validation split: how every real dataset (and a plugin's) becomes clients."""
    order, sizes = partition(cfg, train, num_classes)
    x, y = _take(train.x, order), _take(train.y, order)
    return FederatedData(
        name=name,
        x=torch.from_numpy(x),
        y=torch.from_numpy(y),
        offsets=np.concatenate([[0], np.cumsum(sizes)]),
        x_val=torch.from_numpy(np.ascontiguousarray(test.x)),
        y_val=torch.from_numpy(np.ascontiguousarray(test.y)),
        num_classes=num_classes,
        transform=transform,
        vocab=vocab,
    )


def _take(array: np.ndarray, order: np.ndarray) -> np.ndarray:
    """array[order], without copying when order is the identity (a stored natural partition)."""
    if len(order) == len(array) and np.array_equal(order, np.arange(len(array))):
        return array
    return array[order]


# ----------------------------------------------------------------------------- config entry points
# Each takes (cfg, pool, num_classes), seeds its rng from cfg.seed and calls the pure splitter below.
def natural_partition(cfg: NaturalPartitionConfig, pool: Examples, num_classes: int) -> Partition:
    """partition=natural: one client per natural owner (:func:`natural`)."""
    return natural(pool)


def label_groups_partition(cfg: LabelGroupsPartitionConfig, pool: Examples, num_classes: int) -> Partition:
    """partition=label_groups: :func:`label_groups` with the config's groups and clients per group."""
    return label_groups(pool.y, cfg.groups, cfg.clients_per_group, np.random.default_rng(cfg.seed))


def iid_partition(cfg: IIDPartitionConfig, pool: Examples, num_classes: int) -> Partition:
    """partition=iid: :func:`iid` into ``num_clients`` clients."""
    _check_enough(cfg.num_clients, len(pool), cfg.name)
    return iid(len(pool), cfg.num_clients, np.random.default_rng(cfg.seed))


def dirichlet_partition(cfg: DirichletPartitionConfig, pool: Examples, num_classes: int) -> Partition:
    """partition=dirichlet: :func:`dirichlet` with equal shares, or log-normal ones when
    ``size_sigma`` > 0."""
    _check_enough(cfg.num_clients, len(pool), cfg.name)
    rng = np.random.default_rng(cfg.seed)
    sizes = _deal(pool.y, cfg.num_clients) if cfg.size_sigma == 0 else _lognormal_shares(len(pool), cfg.num_clients, cfg.size_sigma, rng)
    return dirichlet(pool.y, num_classes, sizes, cfg.alpha, rng)


def one_class_partition(cfg: OneClassPartitionConfig, pool: Examples, num_classes: int) -> Partition:
    """partition=one_class: :func:`one_class`."""
    _check_enough(cfg.num_clients, len(pool), cfg.name)
    return one_class(pool.y, num_classes, cfg.num_clients, cfg.size_std, np.random.default_rng(cfg.seed))


def two_labels_partition(cfg: TwoLabelsPartitionConfig, pool: Examples, num_classes: int) -> Partition:
    """partition=two_labels: :func:`labels_per_client`."""
    _check_enough(cfg.num_clients, len(pool), cfg.name)
    return labels_per_client(
        pool.y, num_classes, cfg.num_clients, cfg.labels_per_client, cfg.power_law_shape, np.random.default_rng(cfg.seed)
    )


def pachinko_partition(cfg: PachinkoPartitionConfig, pool: Examples, num_classes: int) -> Partition:
    """partition=pachinko: :func:`pachinko` over the pool's coarse labels (refused without them)."""
    _check_enough(cfg.num_clients, len(pool), cfg.name)
    if pool.coarse is None:
        raise ConfigError(f"partition=pachinko needs coarse labels (CIFAR-100), and this dataset has none: "
                          f"{suggest(pool)}")
    return pachinko(pool.y, pool.coarse, cfg.num_clients, cfg.alpha, cfg.beta, np.random.default_rng(cfg.seed))


# What a partition may read of the examples besides their count (PartitionConfig.needs), and whether a pool has it.
NEEDS = {"labels": "y", "owners": "user", "coarse labels": "coarse"}


def _has(pool: Examples, need: str) -> bool:
    return getattr(pool, NEEDS[need], None) is not None


def suggest(pool: Examples) -> str:
    """'choose one of A, B' over the partition options whose ``needs`` the pool has, so that a refusal for
    what the data lacks never sends the user to another one that lacks it (natural's to pachinko on data
    without coarse labels). Their knobs (num_clients, groups) keep their own refusals."""
    fitting = [name for name, cls in SCHEMAS.get("partition", {}).items() if all(_has(pool, need) for need in cls.needs)]
    return "choose one of " + ", ".join(fitting)


# ----------------------------------------------------------------------------- splitters
def _check_enough(num_clients: int, num_examples: int, name: str) -> None:
    if num_clients > num_examples:
        raise ConfigError(
            f"partition.num_clients={num_clients} is not allowed with partition={name}: "
            f"the dataset has only {num_examples} training examples (at most one client per example)"
        )


def natural(pool: Examples) -> Partition:
    """One client per natural owner (LEAF user). Keeps the stored order when it is already grouped,
    so a prepared cache is used in place (no copy of a 660k-client dataset)."""
    if pool.user is None:
        raise ConfigError(f"partition=natural needs a dataset with natural clients (LEAF datasets, synthetic), and this "
                          f"one has none: {suggest(pool)}")
    user = np.asarray(pool.user)
    grouped = len(user) < 2 or bool(np.all(user[1:] >= user[:-1]))
    order = np.arange(len(user)) if grouped else np.argsort(user, kind="stable")
    sizes = np.bincount(user)
    return order, sizes[sizes > 0]


def _deal(indices: np.ndarray, num_clients: int) -> np.ndarray:
    """Sizes of num_clients near-equal shares of len(indices)."""
    base, extra = divmod(len(indices), num_clients)
    return np.array([base + 1] * extra + [base] * (num_clients - extra), dtype=np.int64)


def _lognormal_shares(total: int, num_clients: int, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """Sizes of num_clients shares of ``total`` examples, each at least 1, the rest split in
    proportion to LogNormal(0, sigma) draws: a long tail of large clients (as Sent140's)."""
    weights = rng.lognormal(0.0, sigma, num_clients)
    spare = total - num_clients
    exact = spare * weights / weights.sum()
    sizes = np.floor(exact).astype(np.int64)
    # the rounding remainder goes to the largest fractional parts, so the shares add up to total
    sizes[np.argsort(sizes - exact)[: spare - sizes.sum()]] += 1
    return sizes + 1


def iid(num_examples: int, num_clients: int, rng: np.random.Generator) -> Partition:
    """A random permutation dealt into ``num_clients`` near-equal shares (sizes differ by at most 1)."""
    order = rng.permutation(num_examples)
    return order, _deal(order, num_clients)


def dirichlet(
    y: np.ndarray, num_classes: int, sizes: np.ndarray, alpha: float, rng: np.random.Generator
) -> Partition:
    """Hsu et al. (2019), as FedBuff App. B.1 uses it for CIFAR-10: client c gets sizes[c] examples
    (equal shares in Hsu et al.); its labels are drawn from q_c ~ Dirichlet(alpha * 1), restricted
    to the labels that still have unassigned examples (sampling without replacement)."""
    by_label = [rng.permutation(np.flatnonzero(y == k)) for k in range(num_classes)]
    left = np.array([len(ix) for ix in by_label])
    taken = np.zeros(num_classes, dtype=np.int64)
    order = np.empty(len(y), dtype=np.int64)
    pos = 0
    for size in sizes:
        q = rng.dirichlet(np.full(num_classes, alpha))
        # The client's draws are one uniform per example (what one _pick per example would draw, in
        # order); between two labels running out, they are picked in one pass with the same cdf.
        u, done = rng.random(size), 0
        while done < size:
            picks = _picks(q, left > 0, u[done:])
            count = np.zeros(num_classes, dtype=np.int64)
            ranks = np.empty(len(picks), dtype=np.int64)  # each pick's place among its label's picks
            for k in np.unique(picks):
                mine = picks == k
                ranks[mine] = np.arange(mine.sum())
            last = np.flatnonzero(ranks == left[picks] - 1)  # a label's last example: the cdf changes after it
            n = last[0] + 1 if len(last) else len(picks)
            ks = picks[:n]
            order[pos: pos + n] = [by_label[k][taken[k] + r] for k, r in zip(ks, ranks[:n])]
            np.add.at(count, ks, 1)
            taken += count
            left -= count
            pos, done = pos + n, done + n
    return order, sizes


def one_class(
    y: np.ndarray, num_classes: int, num_clients: int, size_std: float, rng: np.random.Generator
) -> Partition:
    """FedLaAvg's CIFAR-10 split: client c holds only class c mod num_classes; within a class the
    client sizes are drawn from Normal(mean, size_std * mean) and rescaled to use every example."""
    owners = np.arange(num_clients) % num_classes
    order_parts, sizes = [None] * num_clients, np.zeros(num_clients, dtype=np.int64)
    for k in range(num_classes):
        clients = np.flatnonzero(owners == k)
        examples = rng.permutation(np.flatnonzero(y == k))
        if len(clients) == 0:
            continue
        if len(examples) < len(clients):
            raise ConfigError(
                f"partition.num_clients={num_clients} is not allowed with partition=one_class: "
                f"class {k} has {len(examples)} examples for {len(clients)} clients"
            )
        weights = np.clip(rng.normal(1.0, size_std, len(clients)), 0.05, None)
        counts = _apportion(len(examples), weights, minimum=1)
        for c, part in zip(clients, np.split(examples, np.cumsum(counts)[:-1])):
            order_parts[c], sizes[c] = part, len(part)
    return np.concatenate(order_parts), sizes


def labels_per_client(
    y: np.ndarray, num_classes: int, num_clients: int, labels: int, shape: float, rng: np.random.Generator
) -> Partition:
    """HFL (after FedProx's MNIST): each device holds `labels` labels, starting at c mod num_classes
    (so every label has an owner) plus distinct random others; device size weights follow a
    power law (Pareto(shape) + 1). Each label's examples go to its owners in proportion to
    their weights."""
    if labels > num_classes:
        raise ConfigError(f"partition.labels_per_client={labels} is not allowed: the dataset has {num_classes} labels")
    held = np.empty((num_clients, labels), dtype=np.int64)
    for c in range(num_clients):
        first = c % num_classes
        others = rng.choice(np.delete(np.arange(num_classes), first), labels - 1, replace=False)
        held[c] = np.concatenate([[first], others])
    weight = rng.pareto(shape, num_clients) + 1.0
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for k in range(num_classes):
        owners = np.flatnonzero((held == k).any(axis=1))
        examples = rng.permutation(np.flatnonzero(y == k))
        if len(examples) < len(owners):
            raise ConfigError(
                f"partition.num_clients={num_clients} is not allowed with partition=two_labels: "
                f"label {k} has {len(examples)} examples for {len(owners)} devices"
            )
        counts = _apportion(len(examples), weight[owners], minimum=1)
        for c, part in zip(owners, np.split(examples, np.cumsum(counts)[:-1])):
            parts[c].append(part)
    order_parts = [np.concatenate(p) for p in parts]
    return np.concatenate(order_parts), np.array([len(p) for p in order_parts], dtype=np.int64)


def label_groups(
    y: np.ndarray, groups: list[list[int]], clients_per_group: list[int], rng: np.random.Generator
) -> Partition:
    """FedStaleWeight Sec. 6.2: the examples of each label group are dealt IID (disjoint points) to
    that group's clients; clients are numbered group by group. Labels in no group are unused."""
    order_parts, sizes = [], []
    for labels, count in zip(groups, clients_per_group):
        examples = rng.permutation(np.flatnonzero(np.isin(y, labels)))
        if len(examples) < count:
            raise ConfigError(
                f"partition.clients_per_group={clients_per_group} is not allowed: labels {labels} "
                f"have only {len(examples)} examples"
            )
        order_parts.append(examples)
        sizes.append(_deal(examples, count))
    return np.concatenate(order_parts), np.concatenate(sizes)


def pachinko(
    y: np.ndarray, coarse: np.ndarray, num_clients: int, alpha: float, beta: float, rng: np.random.Generator
) -> Partition:
    """Pachinko allocation as in Reddi et al. (2021) App. C.1 (FedGBO's CIFAR-100): every client
    draws a Dirichlet(alpha) over coarse labels and, per coarse label, a Dirichlet(beta) over its fine
    labels; its equal share of examples is drawn one at a time (coarse, then fine, then an unused
    example of that fine label). Exhausted labels are removed and the distributions renormalised."""
    coarse_labels = np.unique(coarse)
    # fine[c, j]: the j-th fine label of coarse label c (CIFAR-100: 20 x 5).
    fine = [np.unique(y[coarse == c]) for c in coarse_labels]
    width = max(len(f) for f in fine)
    fine_ids = np.full((len(coarse_labels), width), -1)
    for i, f in enumerate(fine):
        fine_ids[i, : len(f)] = f
    pools = {int(f): list(rng.permutation(np.flatnonzero(y == f))) for f in np.unique(y)}
    left = np.array([[len(pools[int(f)]) if f >= 0 else 0 for f in row] for row in fine_ids])
    sizes = _deal(y, num_clients)
    order = np.empty(int(sizes.sum()), dtype=np.int64)
    pos = 0
    for size in sizes:
        p_coarse = rng.dirichlet(np.full(len(coarse_labels), alpha))
        p_fine = np.stack([np.pad(rng.dirichlet(np.full(len(f), beta)), (0, width - len(f))) for f in fine])
        for _ in range(size):
            c = _pick(p_coarse, left.sum(axis=1) > 0, rng)
            j = _pick(p_fine[c], left[c] > 0, rng)
            order[pos] = pools[int(fine_ids[c, j])].pop()
            left[c, j] -= 1
            pos += 1
    return order, sizes


def _picks(p: np.ndarray, live: np.ndarray, u: np.ndarray) -> np.ndarray:
    """For each uniform draw in ``u``, the index among the live entries that :func:`_pick` would pick
    with that draw."""
    w = p * live
    if w.sum() <= 0:  # as _pick
        w = live.astype(np.float64)
    cdf = np.cumsum(w)
    return np.searchsorted(cdf, u * cdf[-1], side="right").clip(max=len(p) - 1)


def _pick(p: np.ndarray, live: np.ndarray, rng: np.random.Generator) -> int:
    """An index among the live entries, drawn with probability proportional to p."""
    w = p * live
    if w.sum() <= 0:  # a tiny Dirichlet alpha can underflow every live entry to 0: uniform then
        w = live.astype(np.float64)
    cdf = np.cumsum(w)
    return int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right").clip(max=len(p) - 1))


def _apportion(total: int, weights: np.ndarray, minimum: int = 0) -> np.ndarray:
    """Integer counts summing to total, each >= minimum, the rest proportional to weights
    (largest-remainder rounding)."""
    n = len(weights)
    rest = total - minimum * n
    share = rest * weights / weights.sum()
    counts = np.floor(share).astype(np.int64)
    short = rest - counts.sum()
    counts[np.argsort(share - counts)[::-1][:short]] += 1
    return counts + minimum


@dataclass
class PartitionConfig:
    """How the training examples are split into clients (seeded). ``needs``: what of the examples it reads
    besides their count (:data:`NEEDS`); a plugin's reads their labels unless it says otherwise (a refusal
    suggests only the options whose needs the data has)."""

    needs: ClassVar[tuple[str, ...]] = ("labels",)

    name: str = MISSING
    seed: int = 0
    # fl_bench.data.partition function (cfg, pool, num_classes) -> (order, sizes); see build()
    _target_: str = MISSING



@schema("partition", "natural", natural_partition)
class NaturalPartitionConfig(PartitionConfig):
    """One client per natural owner: a LEAF user, or a generated Synthetic(gamma, xi) device."""

    needs = ("owners",)


@dataclass
class _CountedPartitionConfig(PartitionConfig):
    num_clients: int = 100

    def __post_init__(self) -> None:
        require(self.num_clients >= 1, "partition.num_clients", self.num_clients, "must be >= 1")


@schema("partition", "iid", iid_partition)
class IIDPartitionConfig(_CountedPartitionConfig):
    """Shuffle, then deal the examples into num_clients near-equal shares."""

    needs = ()  # no label: any examples


@schema("partition", "dirichlet", dirichlet_partition)
class DirichletPartitionConfig(_CountedPartitionConfig):
    """Hsu et al. (2019): clients whose label mix is drawn from Dirichlet(alpha); equal sizes, or
    log-normal sizes with size_sigma > 0."""

    num_clients: int = 5000
    alpha: float = 0.1
    # 0: equal shares (Hsu et al., FedBuff's CIFAR-10); > 0: shares of 1 + LogNormal(0, size_sigma)
    # weight, a long tail of large clients like Sent140's.
    size_sigma: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.alpha > 0, "partition.alpha", self.alpha, "must be > 0")
        require(self.size_sigma >= 0, "partition.size_sigma", self.size_sigma, "must be >= 0 (0: equal shares)")


@schema("partition", "one_class", one_class_partition)
class OneClassPartitionConfig(_CountedPartitionConfig):
    """FedLaAvg: every client holds one class; sizes within a class ~ Normal(mean, size_std * mean)."""

    num_clients: int = 1000
    size_std: float = 0.3

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.size_std >= 0, "partition.size_std", self.size_std, "must be >= 0")


@schema("partition", "two_labels", two_labels_partition)
class TwoLabelsPartitionConfig(_CountedPartitionConfig):
    """HFL / FedProx's MNIST: labels_per_client labels per device, power-law (Pareto) device sizes."""

    labels_per_client: int = 2
    power_law_shape: float = 1.5  # Pareto tail index a of the size weights

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.labels_per_client >= 1, "partition.labels_per_client", self.labels_per_client, "must be >= 1")
        require(self.power_law_shape > 0, "partition.power_law_shape", self.power_law_shape, "must be > 0")


@schema("partition", "label_groups", label_groups_partition)
class LabelGroupsPartitionConfig(PartitionConfig):
    """FedStaleWeight Sec. 6.2: label groups (fast agents: labels 4-9, slow agents: 0-3), each dealt
    IID over its clients; clients are numbered group by group."""

    groups: list[list[int]] = field(default_factory=lambda: [[4, 5, 6, 7, 8, 9], [0, 1, 2, 3]])
    clients_per_group: list[int] = field(default_factory=lambda: [10, 5])

    def __post_init__(self) -> None:
        require(
            len(self.groups) == len(self.clients_per_group) and len(self.groups) >= 1,
            "partition.clients_per_group", self.clients_per_group, "needs one entry per label group",
        )
        require(min(self.clients_per_group) >= 1, "partition.clients_per_group", self.clients_per_group, "entries must be >= 1")
        labels = [label for group in self.groups for label in group]
        require(len(labels) == len(set(labels)), "partition.groups", self.groups, "label groups must be disjoint")


@schema("partition", "pachinko", pachinko_partition)
class PachinkoPartitionConfig(_CountedPartitionConfig):
    """Pachinko allocation (Li & McCallum 2006; Reddi et al. 2021's CIFAR-100): per client a
    Dirichlet(alpha) over coarse labels and Dirichlet(beta) over each coarse label's fine labels."""

    needs = ("labels", "coarse labels")
    num_clients: int = 500
    alpha: float = 0.1
    beta: float = 10.0

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.alpha > 0, "partition.alpha", self.alpha, "must be > 0")
        require(self.beta > 0, "partition.beta", self.beta, "must be > 0")


def require_natural(dataset, partition: PartitionConfig | None) -> None:
    """Refuse a partition other than natural for a dataset whose clients come with it."""
    if partition is not None and not isinstance(partition, NaturalPartitionConfig):
        raise ConfigError(
            f"partition={partition.name!r} is not allowed with dataset={dataset.name}: its clients are generated "
            "with their own distributions (partition=natural)"
        )
