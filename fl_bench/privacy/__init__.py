"""User-level differential privacy in the trusted aggregator (FedBuff Alg. 1, lines marked DP, "in
TEE"; Sec. 2), every rule of it in this package, which builds on the contracts (fl_bench.contracts)
and not on the engine:

- ``server``: :class:`~fl_bench.privacy.server.PrivateServer`, DP as a wrapper around any server: the
  event loop steps it like any other, and the algorithm inside sees only the noised mean of a step's
  clipped uploads (SecAgg semantics); ``private_server`` builds it for a run, with every refusal; the
  ``dp=<option>`` configs;
- ``mechanism``: what the aggregator does to one step's uploads: clip each Delta to norm L, weight,
  average over the fixed number of uploads per step, add Gaussian noise (DP-SGD: fresh each round;
  DP-FTRL: from a binary tree over server steps, Kairouz et al. 2021, App. B.1);
- ``accounting``: (epsilon, delta) from Google's dp-accounting (RDP), the calibration of sigma for a
  target epsilon, and what a run spent.
"""
