"""fl_bench: asynchronous federated learning experiment suite."""

__version__ = "0.1.0"
