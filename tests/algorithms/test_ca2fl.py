"""CA2FL (Wang et al., ICLR 2024): cached update calibration on scripted buffers, by hand."""

import torch

from fl_bench.algorithms.ca2fl import CA2FL, CA2FLConfig
from fl_bench.contracts import Upload


def upload(client, vector):
    return Upload(client, 0, 0, 1, torch.tensor(vector, dtype=torch.float64))


def test_three_steps_of_a_scripted_run_equal_the_hand_computed_calibrated_updates():
    # N = 4 clients, M = 2, eta = 0.5; uploads are Delta = y_0 - y_Q, so x <- x - eta v_t.
    server = CA2FL(CA2FLConfig(buffer_size=2, server_lr=0.5), torch.zeros(2, dtype=torch.float64), num_clients=4)
    steps = [
        # step 1, empty cache (h_1 = 0): c = [2, 0] + [0, 4] = [2, 4]; v = [1, 2] (FedBuff's mean);
        # x = -0.5 [1, 2] = [-0.5, -1]; h_2 = [2, 4] / 4 = [0.5, 1]
        ([(0, [2.0, 0.0]), (1, [0.0, 4.0])], [-0.5, -1.0], [0.5, 1.0]),
        # step 2: client 0 again (cached [2, 0]), client 2 new: c = ([4, 2] - [2, 0]) + [2, 2] = [4, 4];
        # v = h_2 + c / 2 = [0.5, 1] + [2, 2] = [2.5, 3]; x = [-0.5, -1] - 0.5 [2.5, 3] = [-1.75, -2.5];
        # h_3 = [0.5, 1] + [4, 4] / 4 = [1.5, 2] (= ([4, 2] + [0, 4] + [2, 2] + 0) / 4: all N, not the 3 seen)
        ([(0, [4.0, 2.0]), (2, [2.0, 2.0])], [-1.75, -2.5], [1.5, 2.0]),
        # step 3: client 1 twice (cached [0, 4]): c = ([2, 0] - [0, 4]) + ([0, 2] - [2, 0]) = [0, -2];
        # v = [1.5, 2] + [0, -1] = [1.5, 1]; x = [-1.75, -2.5] - 0.5 [1.5, 1] = [-2.5, -3];
        # h_4 = [1.5, 2] + [0, -2] / 4 = [1.5, 1.5] (= ([4, 2] + [0, 2] + [2, 2]) / 4)
        ([(1, [2.0, 0.0]), (1, [0.0, 2.0])], [-2.5, -3.0], [1.5, 1.5]),
    ]
    for uploads, params, mean in steps:
        for client, vector in uploads:
            server.add(upload(client, vector))
        server.step()
        assert torch.equal(server.params, torch.tensor(params, dtype=torch.float64))
        assert torch.equal(server.cache_mean, torch.tensor(mean, dtype=torch.float64))
    rows = {client: row.tolist() for client, row in server.cache.rows.items()}
    assert rows == {0: [4.0, 2.0], 1: [0.0, 2.0], 2: [2.0, 2.0]}  # each client's latest update
    assert server.client_state_nbytes() == 3 * 2 * 8 and server.server_state_nbytes() == 2 * 8


def test_the_seen_reading_averages_the_cache_over_the_clients_seen_before_the_step():
    # The script above with cache_mean_over=seen: h_t = (sum of cached rows) / (clients cached before the step).
    server = CA2FL(CA2FLConfig(buffer_size=2, server_lr=0.5, cache_mean_over="seen"), torch.zeros(2, dtype=torch.float64),
                   num_clients=4)
    steps = [
        # step 1, nothing seen: h_1 = 0, v = [1, 2], x = [-0.5, -1] (as above); 2 clients cached, sum [2, 4]
        ([(0, [2.0, 0.0]), (1, [0.0, 4.0])], [-0.5, -1.0]),
        # step 2: h_2 = [2, 4] / 2 = [1, 2] (not / 4); c = [4, 4]; v = [1, 2] + [2, 2] = [3, 4];
        # x = [-0.5, -1] - 0.5 [3, 4] = [-2, -3]; 3 cached, sum [6, 8]
        ([(0, [4.0, 2.0]), (2, [2.0, 2.0])], [-2.0, -3.0]),
        # step 3: h_3 = [6, 8] / 3; c = [0, -2]; v = [2, 8/3 - 1]; x = [-2 - 1, -3 - 0.5 (5/3)] = [-3, -23/6]
        ([(1, [2.0, 0.0]), (1, [0.0, 2.0])], [-3.0, -23.0 / 6.0]),
    ]
    for uploads, params in steps:
        for client, vector in uploads:
            server.add(upload(client, vector))
        server.step()
        assert torch.allclose(server.params, torch.tensor(params, dtype=torch.float64), rtol=0, atol=1e-12)


def test_the_cache_keeps_its_own_copy_of_an_upload():
    # The engine reuses an upload's storage for the next trip: a cached row must not move with it.
    server = CA2FL(CA2FLConfig(buffer_size=1), torch.zeros(2), num_clients=2)
    sent = upload(0, [1.0, 2.0])
    server.add(sent)
    server.step()
    sent.vector.zero_()
    assert server.cache.get(0).tolist() == [1.0, 2.0]
