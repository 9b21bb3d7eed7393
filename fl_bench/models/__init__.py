"""Model architectures (plain nn.Modules), one module per family with each option's config beside its
class; fl_bench.clients.task wraps them with loss and metrics.

- ``base``: :class:`ModelConfig` (what every option has), :func:`build_model`, the input checks;
- ``linear``: ``scalar_mean``, ``logreg``, ``mlp``;
- ``cnn``: ``cnn4``, ``tutorial_cnn``, ``cnn_fedgbo``, ``cnn_pfl``;
- ``rnn``: LSTM / GRU layers that vmap can batch (:func:`unrolled_rnns`), ``char_rnn``;
- ``text``: Sent140's ``sent140_lstm`` and ``bow_linear``; ``glove``: GloVe's vectors.

``build_model`` turns a model config into an ``nn.Module`` that maps a batch to logits
``[B, num_classes]``: it calls the class or function the config's ``_target_`` names with
``(cfg, input_shape, num_classes, vocab)``; ``vocab`` is the Sent140 word list, unused by the
other models. A built-in ``_target_`` is the name imported here, ``fl_bench.models.<name>``. Input
conventions (guaranteed by fl_bench.data):

- images: float32 ``[B, C, H, W]``, already normalised; CNNs size their first linear layer from
  ``input_shape`` with one dummy forward at build time;
- Sent140 text: int64 token ids ``[B, L]``; id 0 = padding, 1 = unknown word, ids 2.. = training
  words by descending frequency, ``vocab[i]`` the word of id i;
- Shakespeare: int64 ``[B, 80]`` indices into LEAF's 80-character alphabet.

Parameters with ``requires_grad=False`` (the frozen GloVe embedding) and buffers are not trained
and not federated: fl_bench.clients.trainer flattens only trainable parameters.
"""

from fl_bench.models.base import ModelConfig, build_model, count_parameters
from fl_bench.models.cnn import (CNN4, CNN4Config, ConvPoolCNN, ConvPoolCNNConfig, PflCNN, PflCNNConfig, TutorialCNN,
                                 TutorialCNNConfig)
from fl_bench.models.glove import load_glove
from fl_bench.models.linear import LogRegConfig, MLPConfig, ScalarMean, ScalarMeanConfig, logreg, mlp
from fl_bench.models.rnn import CharRNN, CharRNNConfig, UnrollableGRU, UnrollableLSTM, UnrollableRNN, unrolled_rnns
from fl_bench.models.text import BagOfWordsConfig, BagOfWordsLinear, Sent140LSTM, Sent140LSTMConfig

__all__ = [
    "BagOfWordsConfig", "BagOfWordsLinear", "CNN4", "CNN4Config", "CharRNN", "CharRNNConfig", "ConvPoolCNN",
    "ConvPoolCNNConfig", "LogRegConfig", "MLPConfig", "ModelConfig", "PflCNN", "PflCNNConfig", "ScalarMean",
    "ScalarMeanConfig", "Sent140LSTM", "Sent140LSTMConfig", "TutorialCNN", "TutorialCNNConfig", "UnrollableGRU",
    "UnrollableLSTM", "UnrollableRNN", "build_model", "count_parameters", "load_glove", "logreg", "mlp",
    "unrolled_rnns",
]
