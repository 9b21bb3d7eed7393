"""Model architectures: shapes, gradients, parameter counts stated in conf/model/*.yaml, GloVe
loading, bag-of-words features, and the errors for bad configs and inputs."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.errors import MissingConfigException
from omegaconf import OmegaConf
from torch import nn
from torch.nn import functional as F

from fl_bench.clients.task import ClassificationTask
from fl_bench.clients.trainer import flatten_parameters
from fl_bench.errors import ConfigError, DataMissingError
from fl_bench.models import (
    BagOfWordsConfig,
    BagOfWordsLinear,
    CharRNNConfig,
    CNN4Config,
    ConvPoolCNNConfig,
    LogRegConfig,
    ModelConfig,
    Sent140LSTM,
    Sent140LSTMConfig,
    TutorialCNNConfig,
    UnrollableGRU,
    UnrollableLSTM,
    build_model,
    count_parameters,
    unrolled_rnns,
)
from fl_bench.runs.cli import CONFIG_DIR, one_line
from fl_bench.runs.config import register_configs

MODEL_DIR = Path(__file__).resolve().parents[2] / "conf" / "model"
PAPER_MODELS = ["cnn4", "tutorial_cnn", "cnn_fedgbo", "char_gru", "char_lstm", "sent140_lstm", "bow_linear", "logreg_l2"]
# "<n> [trainable] parameters on <shape>, <k> classes" in a YAML comment
COUNT_RE = re.compile(r"([\d,]+) (trainable )?parameters on ([\dx]+), (\d+) classes")


def model_config(name: str, data_root: str = "/data") -> ModelConfig:
    """conf/model/<name>.yaml composed on its schema and turned into its dataclass."""
    register_configs()
    with initialize_config_dir(config_dir=str(MODEL_DIR), version_base=None):
        cfg = compose(config_name=name)
    return OmegaConf.to_object(OmegaConf.create({"data_root": data_root, "model": cfg}).model)


def stated_counts(name: str) -> list[tuple[int, bool, tuple[int, ...], int]]:
    text = (MODEL_DIR / f"{name}.yaml").read_text()
    return [
        (int(n.replace(",", "")), bool(trainable), tuple(int(d) for d in shape.split("x")), int(k))
        for n, trainable, shape, k in COUNT_RE.findall(text)
    ]


def write_glove(path: Path, rows: dict[str, list[float]], extra: str = "") -> Path:
    path.write_text("".join(f"{w} {' '.join(str(v) for v in vec)}\n" for w, vec in rows.items()) + extra)
    return path


GLOVE = {  # most frequent first, like the real file
    "the": [0.1, 0.2, 0.3, 0.4],
    ",": [1.0, 1.0, 1.0, 1.0],
    "good": [0.5, -0.25, 2.0, 3.5],
    "bad": [-1.0, -2.0, -3.0, -4.0],
    "movie": [9.0, 8.0, 7.0, 6.0],
}
TINY_LSTM = dict(embed_dim=4, hidden=3, fc=5, vocab_size=5, max_len=6)


def tiny_glove_model(tmp_path: Path, vocab: list[str], **overrides) -> Sent140LSTM:
    # A malformed line right after vocab_size lines: reading must stop before it.
    path = write_glove(tmp_path / "glove.txt", GLOVE, extra="broken 1 2\n")
    cfg = Sent140LSTMConfig(glove_path=str(path), **{**TINY_LSTM, **overrides})
    return build_model(cfg, (10,), 2, vocab=vocab)


# ----------------------------------------------------------------------------- parameter counts
@pytest.mark.parametrize("name", PAPER_MODELS)
def test_parameter_counts_match_yaml_comments(name, tmp_path):
    cfg = model_config(name)
    counts = stated_counts(name)
    assert counts, f"{name}.yaml states no parameter count"
    for expected, trainable, shape, classes in counts:
        vocab = None
        if isinstance(cfg, Sent140LSTMConfig) and cfg.embedding == "glove":
            # The trainable count excludes the frozen embedding, so it does not depend on how many
            # GloVe words are read: build it on a tiny 300-d file.
            words = {f"w{i}": [0.01 * i] * cfg.embed_dim for i in range(3)}
            cfg = dataclasses.replace(cfg, glove_path=str(write_glove(tmp_path / "g.txt", words)), vocab_size=3)
            vocab = ["<pad>", "<unk>", "w0", "w1"]
        model = build_model(cfg, shape, classes, vocab=vocab)
        assert count_parameters(model) == expected, (name, shape, classes)


def test_other_stated_counts():
    """Counts stated in prose in the YAML comments and docstrings."""
    assert count_parameters(build_model(CNN4Config(shared_norm=True), (3, 32, 32), 2)) == 29_282
    assert count_parameters(build_model(CNN4Config(shared_norm=True), (3, 32, 32), 10)) == 31_594
    random = build_model(Sent140LSTMConfig(embedding="random"), (48,), 2)
    assert count_parameters(random) == 3_255_386
    assert count_parameters(build_model(CharRNNConfig(), (80,), 79)) == 162_887  # FedGBO's 79 characters
    # FedGBO's code sizes fc1 as 64*5*5 = 1600 for FEMNIST and 64*6*6 = 2304 for 32x32 CIFAR images
    assert build_model(ConvPoolCNNConfig(), (1, 28, 28), 62).classifier[0].in_features == 1600
    assert build_model(ConvPoolCNNConfig(), (3, 32, 32), 100).classifier[0].in_features == 2304


# ----------------------------------------------------------------------------- forward / backward
def image_batch(shape, b=3):
    return torch.randn(b, *shape)


def token_batch(shape, high, b=3):
    return torch.randint(0, high, (b, *shape), dtype=torch.int64)


CASES = [
    ("cnn4", CNN4Config(), (3, 32, 32), 2),
    ("cnn4-cifar", CNN4Config(), (3, 32, 32), 10),
    ("cnn4-shared", CNN4Config(shared_norm=True), (3, 32, 32), 10),
    ("cnn4-digits", CNN4Config(), (1, 8, 8), 10),
    ("tutorial_cnn", TutorialCNNConfig(), (3, 32, 32), 10),
    ("tutorial_cnn-femnist", TutorialCNNConfig(), (1, 28, 28), 62),
    ("cnn_fedgbo-cifar100", ConvPoolCNNConfig(), (3, 28, 28), 100),
    ("cnn_fedgbo-femnist", ConvPoolCNNConfig(), (1, 28, 28), 62),
    ("char_gru", CharRNNConfig(), (80,), 80),
    ("char_lstm", CharRNNConfig(cell="lstm", hidden=256), (80,), 80),
    ("sent140_lstm-random", Sent140LSTMConfig(embedding="random", vocab_size=50), (48,), 2),
    ("bow_linear", BagOfWordsConfig(vocab_size=50), (48,), 2),
    ("logreg", LogRegConfig(), (1, 28, 28), 10),
]


@pytest.mark.parametrize("label,cfg,shape,classes", CASES, ids=[c[0] for c in CASES])
def test_forward_backward(label, cfg, shape, classes):
    torch.manual_seed(0)
    model = build_model(cfg, shape, classes)
    x = image_batch(shape) if len(shape) == 3 else token_batch(shape, classes if label.startswith("char") else 60)
    logits = model(x)
    assert logits.shape == (3, classes) and logits.dtype == torch.float32
    F.cross_entropy(logits, torch.arange(3) % classes).backward()
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    assert params
    for n, p in params:
        assert p.grad is not None and torch.isfinite(p.grad).all(), n
    assert any(p.grad.abs().sum() > 0 for _, p in params)


def test_sent140_glove_forward_backward_trains_only_the_lstm_and_heads(tmp_path):
    vocab = ["<pad>", "<unk>", "good", "movie", "the"]
    model = tiny_glove_model(tmp_path, vocab)
    x = torch.tensor([[2, 3, 4, 0, 0, 0, 0, 0, 0, 0], [4, 1, 2, 3, 2, 3, 4, 0, 0, 0]])
    F.cross_entropy(model(x), torch.tensor([0, 1])).backward()
    assert model.embedding.weight.grad is None
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in trainable)


# ----------------------------------------------------------------------------- architecture details
def test_cnn4_layers_follow_flsim_simpleconvnet():
    model = build_model(CNN4Config(), (3, 32, 32), 10)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    norms = [m for m in model.modules() if isinstance(m, nn.GroupNorm)]
    assert [(c.in_channels, c.out_channels, c.kernel_size, c.stride, c.padding) for c in convs] == [
        (3, 32, (3, 3), (1, 1), (2, 2))
    ] + [(32, 32, (3, 3), (1, 1), (2, 2))] * 3
    assert len(norms) == 4 and all(n.num_groups == 32 and n.num_channels == 32 for n in norms)
    assert model.fc.in_features == 32 * 3 * 3  # FLSim: out_channels * (stride + padding)^2 on 32x32
    assert model.dropout.p == 0.1
    shared = build_model(CNN4Config(shared_norm=True), (3, 32, 32), 10)
    assert len([m for m in shared.modules() if isinstance(m, nn.GroupNorm)]) == 1


def test_tutorial_cnn_layers():
    model = build_model(TutorialCNNConfig(), (3, 32, 32), 10)
    linears = [(m.in_features, m.out_features) for m in model.modules() if isinstance(m, nn.Linear)]
    assert linears == [(400, 120), (120, 84), (84, 10)]


def test_char_rnn_cells_from_yaml():
    gru, lstm = build_model(model_config("char_gru"), (80,), 80), build_model(model_config("char_lstm"), (80,), 80)
    assert isinstance(gru.rnn, nn.GRU) and (gru.rnn.hidden_size, gru.rnn.num_layers) == (128, 2)
    assert isinstance(lstm.rnn, nn.LSTM) and (lstm.rnn.hidden_size, lstm.rnn.num_layers) == (256, 2)
    assert gru.embedding.embedding_dim == lstm.embedding.embedding_dim == 8


def test_sent140_reads_last_real_token_and_truncates_to_max_len():
    torch.manual_seed(0)
    model = build_model(Sent140LSTMConfig(embedding="random", vocab_size=20, max_len=5, **{
        k: v for k, v in TINY_LSTM.items() if k not in ("vocab_size", "max_len")}), (8,), 2).eval()
    base = torch.tensor([[5, 6, 7, 0, 0, 0, 0, 0]])
    shorter_pad = torch.tensor([[5, 6, 7, 0]])
    after_max_len = torch.tensor([[5, 6, 7, 0, 0, 9, 9, 9]])
    changed = torch.tensor([[5, 6, 8, 0, 0, 0, 0, 0]])
    out = model(base)
    assert torch.allclose(out, model(shorter_pad))  # padding after the text does not matter
    assert torch.allclose(out, model(after_max_len))  # tokens beyond max_len are cut
    assert not torch.allclose(out, model(changed))  # the last real token does matter
    # ids beyond the model's vocab_size words are unknown words
    assert torch.equal(model.model_ids(torch.tensor([[21, 22, 500]])), torch.tensor([[21, 1, 1]]))


def test_logreg_l2_matches_hfl_regulariser():
    cfg = model_config("logreg_l2")
    torch.manual_seed(0)
    model = build_model(cfg, (60,), 10).double()
    task = ClassificationTask(model, 10, weight_decay=cfg.weight_decay)
    x, y = torch.randn(7, 60, dtype=torch.float64), torch.randint(0, 10, (7,))
    sq_norm = sum(p.pow(2).sum() for p in model.parameters())
    # HFL App. C.1: loss = CE + eps ||w||^2 with eps = 1e-4
    assert torch.allclose(task.loss(x, y) - F.cross_entropy(model(x), y), 1e-4 * sq_norm)


# ----------------------------------------------------------------------------- GloVe
def test_glove_lookup_maps_words_to_their_vectors(tmp_path):
    vocab = ["<pad>", "<unk>", "good", "Movie", "zzz", "the"]
    model = tiny_glove_model(tmp_path, vocab)
    # model rows: 0 pad, 1 unk, 2 + GloVe rank; "Movie" falls back to lower case
    assert model.lookup.tolist() == [0, 1, 4, 6, 1, 2]
    assert "lookup" in dict(model.named_buffers()) and "lookup" not in dict(model.named_parameters())
    emb = model.embedding(model.model_ids(torch.tensor([[2, 3, 5, 4, 1, 0, 99]])))[0]
    assert torch.equal(emb[0], torch.tensor(GLOVE["good"]))
    assert torch.equal(emb[1], torch.tensor(GLOVE["movie"]))
    assert torch.equal(emb[2], torch.tensor(GLOVE["the"]))
    for unknown_or_pad in emb[3:]:  # "zzz", <unk>, <pad>, an id past the vocabulary
        assert torch.equal(unknown_or_pad, torch.zeros(4))
    assert model.embedding.weight.shape == (5 + 2, 4)
    assert not model.embedding.weight.requires_grad
    flat, _ = flatten_parameters(model)
    assert flat.numel() == count_parameters(model) == count_parameters(model, trainable_only=False) - 7 * 4


def test_glove_missing_file_is_one_line_naming_the_fix(tmp_path):
    from fl_bench.data.downloads import download_settings

    vocab = ["<pad>", "<unk>", "a"]
    mine = tmp_path / "vectors" / "my_glove.txt"  # no file of glove.6B.zip's: nothing to fetch
    with pytest.raises(DataMissingError) as err:
        build_model(Sent140LSTMConfig(glove_path=str(mine)), (48,), 2, vocab=vocab)
    msg = str(err.value)
    assert "\n" not in msg and not (tmp_path / "vectors").exists()
    assert str(mine) in msg and "glove.6B.300d.txt" in msg and "model.embedding=random" in msg
    missing = tmp_path / "glove" / "glove.6B.300d.txt"  # fetched on first use: here from a mirror that lacks it
    with download_settings(f"file://{tmp_path}/empty_mirror", False), pytest.raises(DataMissingError) as err:
        build_model(Sent140LSTMConfig(glove_path=str(missing)), (48,), 2, vocab=vocab)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"cannot download file://{tmp_path}/empty_mirror/nlp.stanford.edu/data/glove.6B.zip "
                          f"(No such file or directory): download https://nlp.stanford.edu/data/glove.6B.zip by hand "
                          f"to {missing.parent / 'glove.6B.zip'}")
    assert msg.endswith("or train the embedding with model.embedding=random")


def test_glove_bad_files(tmp_path):
    vocab = ["<pad>", "<unk>", "good"]
    short = write_glove(tmp_path / "short.txt", GLOVE)
    with pytest.raises(DataMissingError, match="only 5 words"):
        build_model(Sent140LSTMConfig(glove_path=str(short), **{**TINY_LSTM, "vocab_size": 7}), (10,), 2, vocab=vocab)
    with pytest.raises(ConfigError, match="line 6 has 2 values"):  # the malformed line 6 is read once vocab_size reaches it
        tiny_glove_model(tmp_path, vocab, vocab_size=6)
    path = write_glove(tmp_path / "g3.txt", {"a": [1.0, 2.0, 3.0]})
    with pytest.raises(ConfigError, match="embed_dim=4"):
        build_model(Sent140LSTMConfig(glove_path=str(path), **{**TINY_LSTM, "vocab_size": 1}), (10,), 2, vocab=vocab)
    with pytest.raises(ConfigError, match="vocabulary"):
        build_model(Sent140LSTMConfig(glove_path=str(path)), (10,), 2, vocab=None)


# ----------------------------------------------------------------------------- bag of words
BOW_X = torch.tensor([
    [2, 3, 3, 9, 0, 1],  # ids 2, 3 (3 twice); 9 is outside the top 4; pad; unknown
    [5, 5, 0, 0, 0, 0],
    [0, 1, 7, 0, 0, 0],  # no top-4 token
    [3, 2, 4, 5, 2, 0],
])
BOW_PRESENCE = torch.tensor([[0.5, 0.5, 0, 0], [0, 0, 0, 1], [0, 0, 0, 0], [0.25, 0.25, 0.25, 0.25]])
BOW_COUNTS = torch.tensor([[1 / 3, 2 / 3, 0, 0], [0, 0, 0, 1], [0, 0, 0, 0], [0.4, 0.2, 0.2, 0.2]])


@pytest.mark.parametrize("values,expected", [("presence", BOW_PRESENCE), ("counts", BOW_COUNTS)])
def test_bag_of_words_hand_computed(values, expected):
    model = build_model(BagOfWordsConfig(vocab_size=4, values=values), (6,), 4)
    assert isinstance(model, BagOfWordsLinear)
    assert torch.allclose(model.bag(BOW_X), expected)
    with torch.no_grad():
        model.linear.weight.copy_(torch.eye(4))
        model.linear.bias.copy_(torch.tensor([0.0, 0.0, 0.0, 0.0]))
    assert torch.allclose(model(BOW_X), expected)  # identity weights: logits = the features
    torch.manual_seed(0)
    with torch.no_grad():
        model.linear.weight.normal_()
        model.linear.bias.normal_()
    assert torch.allclose(model(BOW_X), model.linear(model.bag(BOW_X)), atol=1e-6)
    assert torch.allclose(model(BOW_X)[2], model.linear.bias)  # empty bag: the bias alone


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "cfg,shape",
    [
        (TutorialCNNConfig(), (1, 8, 8)),
        (ConvPoolCNNConfig(), (1, 8, 8)),
        (CNN4Config(padding=0), (1, 8, 8)),
    ],
)
def test_too_small_input_is_a_config_error(cfg, shape):
    with pytest.raises(ConfigError) as err:
        build_model(cfg, shape, 10)
    msg = str(err.value)
    assert cfg.name in msg and str(shape) in msg and "\n" not in msg


def test_cnn_needs_image_input():
    with pytest.raises(ConfigError, match=r"cnn4 needs image input .*\(60,\)"):
        build_model(CNN4Config(), (60,), 10)


def test_unknown_model_is_rejected_at_composition_with_the_choices():
    register_configs()
    with pytest.raises(MissingConfigException) as err:
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
            compose("config", overrides=["model=resnet"])
    msg = one_line(err.value)
    assert "resnet" in msg and "\n" not in msg
    for path in MODEL_DIR.glob("*.yaml"):
        assert path.stem in msg


@pytest.mark.parametrize(
    "make",
    [
        lambda: CharRNNConfig(cell="rnn"),
        lambda: Sent140LSTMConfig(embedding="word2vec"),
        lambda: Sent140LSTMConfig(dropout=1.0),
        lambda: BagOfWordsConfig(values="tfidf"),
        lambda: CNN4Config(norm_groups=5),
        lambda: ConvPoolCNNConfig(channels=[]),
    ],
)
def test_config_validation(make):
    with pytest.raises(ConfigError):
        make()


@pytest.mark.parametrize("rnn_class", [UnrollableLSTM, UnrollableGRU])
def test_unrolled_rnns_match_the_fused_kernels(rnn_class):
    torch.manual_seed(0)
    rnn = rnn_class(5, 7, num_layers=2, batch_first=True)
    x = torch.randn(3, 4, 5)
    fused, _ = rnn(x)
    with unrolled_rnns(rnn):
        unrolled, _ = rnn(x)
    assert not rnn.unrolled  # switched back after the block
    torch.testing.assert_close(unrolled, fused, rtol=1e-5, atol=1e-6)
    grads = [torch.autograd.grad(out.pow(2).sum(), list(rnn.parameters())) for out in (fused, unrolled)]
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
