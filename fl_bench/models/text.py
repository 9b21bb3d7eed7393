"""Models of Sent140's token ids, each with its config: ``sent140_lstm`` (FedBuff, HFL: GloVe or a trained
embedding, a 2-layer LSTM) and ``bow_linear`` (FedGBO: a linear model on a bag of words). Token ids
are fixed by the data layer: 0 padding, 1 unknown word, 2.. the training words by descending
frequency."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from fl_bench.errors import ConfigError
from fl_bench.models.base import ModelConfig, exported, token_input
from fl_bench.models.glove import load_glove
from fl_bench.models.rnn import UnrollableLSTM
from fl_bench.schema import choice, require, schema


PAD_ID, UNK_ID = 0, 1  # Sent140 token ids fixed by the data layer; data words start at id 2


SENT140_EMBEDDINGS = ("glove", "random")


class Sent140LSTM(nn.Module):
    """FedBuff App. B.1 Sent140 (also HFL's Sent140 LSTM): 300-d word embedding, 2-layer LSTM with
    100 hidden units, a 128-unit linear layer, 2 outputs; max sequence length 25; dropout 0.1.

    Follows LEAF's sent140/stacked_lstm.py: the 128-unit layer is linear (no activation) and the
    first ``max_len`` tokens are used. The classifier reads the LSTM output at the last non-padding
    token (FLSim's LSTM example does the same; with right padding this equals running the LSTM
    on the unpadded sequence). Dropout: between the LSTM layers and on the LSTM output.

    ``embedding=glove``: the model vocabulary is GloVe's ``vocab_size`` most frequent words plus a
    padding row and an unknown row (both zero, like LEAF's get_embs.py); the embedding is frozen
    (requires_grad False: not trained, not federated). A data word maps to its GloVe row (exact
    match, else lower-cased), else to unknown; the data-id -> model-id table is a buffer.
    ``embedding=random``: a trainable embedding over the data's ``vocab_size`` most frequent
    words (ids >= vocab_size + 2 map to unknown)."""

    def __init__(
        self, cfg: Sent140LSTMConfig, input_shape: tuple[int, ...], num_classes: int, vocab: list[str] | None = None
    ):
        super().__init__()
        token_input(cfg.name, input_shape)
        self.max_len = cfg.max_len
        self.num_ids = cfg.vocab_size + 2  # ids at or above this are unknown words
        if cfg.embedding == "glove":
            if vocab is None:
                raise ConfigError(
                    "model=sent140_lstm with model.embedding=glove needs the dataset's vocabulary (a text dataset such as sent140)"
                )
            words, vectors = load_glove(cfg.glove_path, cfg.vocab_size, cfg.embed_dim)
            table = torch.cat([torch.zeros(2, cfg.embed_dim), vectors])
            self.embedding = nn.Embedding.from_pretrained(table, freeze=True, padding_idx=PAD_ID)
            row = {w: i + 2 for i, w in enumerate(words)}
            lookup = [PAD_ID, UNK_ID] + [row.get(w, row.get(w.lower(), UNK_ID)) for w in vocab[2:]]
            self.register_buffer("lookup", torch.tensor(lookup, dtype=torch.long))
        else:
            self.embedding = nn.Embedding(self.num_ids, cfg.embed_dim, padding_idx=PAD_ID)
            self.lookup = None
        self.lstm = UnrollableLSTM(
            cfg.embed_dim, cfg.hidden, num_layers=cfg.layers, batch_first=True,
            dropout=cfg.dropout if cfg.layers > 1 else 0.0,
        )
        self.dropout = nn.Dropout(cfg.dropout)
        self.fc = nn.Linear(cfg.hidden, cfg.fc)
        self.out = nn.Linear(cfg.fc, num_classes)

    def model_ids(self, x: torch.Tensor) -> torch.Tensor:
        """Data token ids -> rows of the embedding."""
        if self.lookup is None:
            return torch.where(x < self.num_ids, x, UNK_ID)
        return self.lookup[torch.where(x < len(self.lookup), x, UNK_ID)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x[:, : self.max_len].long()
        h, _ = self.lstm(self.embedding(self.model_ids(x)))
        positions = torch.arange(x.shape[1], device=x.device)
        last = (positions * (x != PAD_ID)).amax(dim=1)  # last non-padding token (0 if none)
        h = h[torch.arange(x.shape[0], device=x.device), last]
        return self.out(self.fc(self.dropout(h)))


@schema("model", "sent140_lstm", exported(Sent140LSTM))
class Sent140LSTMConfig(ModelConfig):
    """FedBuff App. B.1 Sent140: frozen GloVe 300-d (top 10k words), 2-layer LSTM 100, FC 128, 2 outputs."""

    # glove: frozen pretrained vectors, vocabulary = GloVe's vocab_size most frequent words;
    # random: a trainable embedding over the data's vocab_size most frequent training words.
    embedding: str = "glove"
    glove_path: str = "${data_root}/glove/glove.6B.300d.txt"
    vocab_size: int = 10000
    embed_dim: int = 300
    hidden: int = 100
    layers: int = 2
    fc: int = 128
    max_len: int = 25
    dropout: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        m = "model."
        choice(m + "embedding", self.embedding, SENT140_EMBEDDINGS)
        for key in ("vocab_size", "embed_dim", "hidden", "layers", "fc", "max_len"):
            require(getattr(self, key) >= 1, m + key, getattr(self, key), "must be >= 1")
        require(0 <= self.dropout < 1, m + "dropout", self.dropout, "must be in [0, 1)")


BOW_VALUES = ("presence", "counts")


class BagOfWordsLinear(nn.Module):
    """FedGBO Sec. 5 Sent140: a linear model on a normalised bag-of-words vector of length
    ``vocab_size`` (5k) over the most common training tokens (data ids 2 .. vocab_size + 1).

    Entries: presence (1 per distinct top-k token, the paper's "presence") or counts (FedGBO's
    gen_sent140_vecs.py), divided by their sum (L1; the script divides by the number of in-vocab
    tokens). A text with no top-k token gives the zero vector, i.e. logits = bias (FedGBO drops
    such samples from the data). The forward pass gathers the weight columns of the tokens in
    the batch instead of building the dense [B, vocab_size] vector."""

    def __init__(
        self, cfg: BagOfWordsConfig, input_shape: tuple[int, ...], num_classes: int, vocab: list[str] | None = None
    ):
        super().__init__()
        token_input(cfg.name, input_shape)
        self.vocab_size = cfg.vocab_size
        self.presence = cfg.values == "presence"
        self.linear = nn.Linear(cfg.vocab_size, num_classes)

    def _columns(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per token: its bag-of-words column (0 where unused) and its weight in the normalised vector."""
        col = x.long() - 2
        col = torch.where((col >= 0) & (col < self.vocab_size), col, -1)
        if self.presence:  # keep the first of each repeated token
            col = col.sort(dim=1).values
            repeat = torch.zeros_like(col, dtype=torch.bool)
            repeat[:, 1:] = col[:, 1:] == col[:, :-1]
            col = torch.where(repeat, -1, col)
        w = (col >= 0).to(self.linear.weight.dtype)
        return col.clamp_min(0), w / w.sum(dim=1, keepdim=True).clamp_min(1)

    def bag(self, x: torch.Tensor) -> torch.Tensor:
        """The dense normalised bag-of-words vectors [B, vocab_size] (for inspection and tests)."""
        col, w = self._columns(x)
        return torch.zeros(x.shape[0], self.vocab_size, dtype=w.dtype, device=x.device).scatter_add_(1, col, w)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        col, w = self._columns(x)
        return torch.einsum("bl,blc->bc", w, F.embedding(col, self.linear.weight.t())) + self.linear.bias


@schema("model", "bow_linear", exported(BagOfWordsLinear))
class BagOfWordsConfig(ModelConfig):
    """FedGBO Sent140: a linear model on the normalised presence vector of the vocab_size most
    frequent training tokens."""

    vocab_size: int = 5000
    # presence: 1 per distinct top-vocab_size token in the text (FedGBO Sec. 5 text); counts: token
    # counts (FedGBO's gen_sent140_vecs.py). Either way the vector is divided by its sum (L1).
    values: str = "presence"

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.vocab_size >= 1, "model.vocab_size", self.vocab_size, "must be >= 1")
        choice("model.values", self.values, BOW_VALUES)
