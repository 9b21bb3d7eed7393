"""A plugin algorithm whose schema is registered under a misspelt group: no option of it could be chosen."""

from fl_bench.algorithms.buffered import FedBuff, FedBuffConfig
from fl_bench.schema import schema


@schema("algoritm", "misspelt_group_fedbuff", FedBuff)
class MisspeltGroupConfig(FedBuffConfig):
    pass
