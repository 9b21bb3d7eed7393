"""Partitioner properties: every example at most once, seeded, and each split's defining property."""

import numpy as np
import pytest

from fl_bench.data.federated import Examples
from fl_bench.data.partition import (
    DirichletPartitionConfig,
    IIDPartitionConfig,
    LabelGroupsPartitionConfig,
    NaturalPartitionConfig,
    OneClassPartitionConfig,
    PachinkoPartitionConfig,
    TwoLabelsPartitionConfig,
    partition,
)
from fl_bench.errors import ConfigError

LABELS = np.repeat(np.arange(10), 100)  # 10 classes x 100 examples
POOL = Examples(np.zeros((len(LABELS), 2), np.float32), LABELS)
# CIFAR-100-like: 20 coarse labels x 5 fine labels x 12 examples
FINE = np.repeat(np.arange(100), 12)
CIFAR100_LIKE = Examples(np.zeros((len(FINE), 1), np.float32), FINE, coarse=FINE // 5)

ALL_EXAMPLES = [
    IIDPartitionConfig(num_clients=30),
    DirichletPartitionConfig(num_clients=40, alpha=0.3),
    OneClassPartitionConfig(num_clients=50, size_std=0.5),
    TwoLabelsPartitionConfig(num_clients=40),
]


def clients(order, sizes):
    return np.split(order, np.cumsum(sizes)[:-1])


@pytest.mark.parametrize("cfg", ALL_EXAMPLES, ids=lambda c: c.name)
def test_every_example_assigned_exactly_once_and_clients_non_empty(cfg):
    order, sizes = partition(cfg, POOL, 10)
    assert sorted(order.tolist()) == list(range(len(LABELS)))
    assert len(sizes) == cfg.num_clients and sizes.sum() == len(LABELS) and sizes.min() >= 1


@pytest.mark.parametrize("cfg", ALL_EXAMPLES + [LabelGroupsPartitionConfig()], ids=lambda c: c.name)
def test_seeded(cfg):
    a, b = partition(cfg, POOL, 10), partition(cfg, POOL, 10)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    cfg.seed = 1
    c = partition(cfg, POOL, 10)
    assert not np.array_equal(a[0], c[0])


def test_one_class_purity_and_normal_sizes():
    order, sizes = partition(OneClassPartitionConfig(num_clients=50, size_std=0.3), POOL, 10)
    for c, part in enumerate(clients(order, sizes)):
        assert set(LABELS[part].tolist()) == {c % 10}
    assert sizes.std() > 0  # sizes are drawn, not equal
    assert partition(OneClassPartitionConfig(num_clients=50, size_std=0.0), POOL, 10)[1].tolist() == [20] * 50


def test_dirichlet_label_skew_grows_as_alpha_shrinks():
    def mean_top_label_share(alpha):
        order, sizes = partition(DirichletPartitionConfig(num_clients=20, alpha=alpha), POOL, 10)
        return np.mean([np.bincount(LABELS[p], minlength=10).max() / len(p) for p in clients(order, sizes)])

    shares = [mean_top_label_share(a) for a in (100.0, 1.0, 0.05)]
    assert shares[0] < shares[1] < shares[2]
    assert shares[0] < 0.3 and shares[2] > 0.7  # near-uniform mix vs mostly one label per client


def test_two_labels_per_device_and_power_law_sizes():
    order, sizes = partition(TwoLabelsPartitionConfig(num_clients=40, power_law_shape=1.0), POOL, 10)
    assert all(len(set(LABELS[p].tolist())) <= 2 for p in clients(order, sizes))
    assert sizes.max() > 4 * np.median(sizes)  # heavy tail


def test_label_groups_are_disjoint_and_ordered_fast_then_slow():
    cfg = LabelGroupsPartitionConfig(groups=[[4, 5, 6, 7, 8, 9], [0, 1, 2, 3]], clients_per_group=[10, 5])
    order, sizes = partition(cfg, POOL, 10)
    assert len(sizes) == 15 and sorted(order.tolist()) == list(range(len(LABELS)))
    parts = clients(order, sizes)
    assert all(set(LABELS[p].tolist()) <= {4, 5, 6, 7, 8, 9} for p in parts[:10])
    assert all(set(LABELS[p].tolist()) <= {0, 1, 2, 3} for p in parts[10:])
    assert sizes[:10].tolist() == [60] * 10 and sizes[10:].tolist() == [80] * 5  # IID deal within a group


def test_pachinko_client_count_coverage_and_coarse_skew():
    order, sizes = partition(PachinkoPartitionConfig(num_clients=24, alpha=0.1, beta=10.0), CIFAR100_LIKE, 100)
    assert len(sizes) == 24 and sizes.tolist() == [50] * 24
    assert sorted(order.tolist()) == list(range(len(FINE)))
    # alpha = 0.1 over 20 coarse labels: a client's examples concentrate on few coarse labels.
    top = [np.bincount(FINE[p] // 5, minlength=20).max() / len(p) for p in clients(order, sizes)]
    assert np.mean(top) > 0.4  # IID would give about 0.1


def test_pachinko_needs_coarse_labels():
    with pytest.raises(ConfigError, match="coarse labels"):
        partition(PachinkoPartitionConfig(num_clients=5), POOL, 10)


def test_natural_keeps_a_grouped_store_in_place_and_groups_an_unsorted_one():
    grouped = Examples(np.zeros((6, 1)), np.zeros(6), user=np.array([0, 0, 1, 1, 1, 2]))
    order, sizes = partition(NaturalPartitionConfig(), grouped, 2)
    assert order.tolist() == list(range(6)) and sizes.tolist() == [2, 3, 1]
    mixed = Examples(np.zeros((5, 1)), np.zeros(5), user=np.array([1, 0, 1, 2, 0]))
    order, sizes = partition(NaturalPartitionConfig(), mixed, 2)
    assert order.tolist() == [1, 4, 0, 2, 3] and sizes.tolist() == [2, 2, 1]
    with pytest.raises(ConfigError, match="natural clients"):
        partition(NaturalPartitionConfig(), POOL, 10)


def test_more_clients_than_examples_is_a_clear_error():
    with pytest.raises(ConfigError, match="num_clients=2000"):
        partition(IIDPartitionConfig(num_clients=2000), POOL, 10)


def test_dirichlet_picks_a_client_s_examples_in_one_pass_as_one_draw_per_example_would():
    """The partition draws one uniform per example and picks its label by the client's q restricted to
    the labels left; the fast path picks the draws between two labels running out in one pass. The
    same partition and the same generator state after, as the per-example loop (written out here)."""
    from fl_bench.data import partition

    def per_example(y, num_classes, sizes, alpha, rng):
        by_label = [rng.permutation(np.flatnonzero(y == k)) for k in range(num_classes)]
        left, taken, order = np.array([len(ix) for ix in by_label]), np.zeros(num_classes, dtype=int), []
        for size in sizes:
            q = rng.dirichlet(np.full(num_classes, alpha))
            for _ in range(size):
                k = partition._pick(q, left > 0, rng)
                order.append(by_label[k][taken[k]])
                taken[k] += 1
                left[k] -= 1
        return np.array(order)

    for case in range(20):
        draw = np.random.default_rng(case)
        n, classes, clients = int(draw.integers(50, 1500)), int(draw.integers(2, 12)), int(draw.integers(1, 40))
        y, alpha = draw.integers(0, classes, n), float(draw.choice([1e-3, 0.1, 1.0, 10.0]))
        sizes = np.full(clients, n // clients)
        sizes[: n - sizes.sum()] += 1
        slow, fast = np.random.default_rng(7), np.random.default_rng(7)
        np.testing.assert_array_equal(partition.dirichlet(y, classes, sizes, alpha, fast)[0],
                                      per_example(y, classes, sizes, alpha, slow))
        assert fast.random() == slow.random()


def test_a_partition_refused_for_what_the_data_lacks_suggests_only_options_the_data_can_take():
    # natural needs owners, pachinko coarse labels: neither is suggested for data without them, nor natural for
    # data without owners; pachinko is for data with coarse labels
    with pytest.raises(ConfigError) as refused:
        partition(NaturalPartitionConfig(), POOL, 10)
    suggested = str(refused.value).split("choose one of ", 1)[1].split(", ")
    assert "iid" in suggested and "dirichlet" in suggested and not {"natural", "pachinko"} & set(suggested)
    with pytest.raises(ConfigError) as refused:
        partition(PachinkoPartitionConfig(num_clients=5), POOL, 10)
    assert "pachinko" not in str(refused.value).split("choose one of ", 1)[1]
    with pytest.raises(ConfigError, match="choose one of .*pachinko"):
        partition(NaturalPartitionConfig(), CIFAR100_LIKE, 100)
