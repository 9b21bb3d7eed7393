"""A plugin component whose config has a mutable default: dataclasses refuses it when @schema makes the class."""

from fl_bench.schema import schema


@schema("delay", "broken_mutable_default", "somewhere.Delay")
class MutableDefaultConfig:
    clients: list = []
