"""Further masked-LM pre-training, within-task pre-training in fit, and encoder hand-over."""

import math
import re
import warnings

import numpy as np
import pytest
import torch
from conftest import LONG_TEXT, TEXTS, write_tokenizer
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.frozen import FrozenEstimator
from sklearn.model_selection import GridSearchCV
from sklearn.utils._param_validation import InvalidParameterError

from skbert import BertSentenceTransformer, BertTextClassifier
from skbert._nn.backbone import load_backbone
from skbert.pretraining import further_pretrain, load_masked_lm, mask_batch, masked_lm_windows

REPEATED = ["the cat sat on the mat and the dog sat on the cat"] * 48
POS = ["great film , love it", "a very good movie", "good dog", "love the cat", "great movie"]
NEG = ["terrible film , hate it", "a very bad movie", "bad dog", "hate the mat", "not good"]
X = np.array(POS + NEG, dtype=object)
Y = np.array([1] * 5 + [0] * 5)
FAST = {
    "learning_rate": 5e-3,
    "top_learning_rate": 5e-2,
    "batch_size": 4,
    "device": "cpu",
    "random_state": 0,
    "max_epochs": 1,
}


@pytest.fixture(autouse=True)
def _no_head_warning():
    # the tiny fixtures are saved without a masked-LM head; that warning has its own test
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*no trained masked-LM head")
        yield


def mlm_loss(path, texts, seed=0):
    """Masked-LM loss of the checkpoint at ``path`` on ``texts`` with a fixed masking."""
    from transformers import AutoModelForMaskedLM

    tokenizer, _ = load_masked_lm(path)
    torch.manual_seed(0)  # the same random head for a checkpoint that has none
    model = AutoModelForMaskedLM.from_pretrained(path).eval()
    torch.manual_seed(seed)
    batch = mask_batch(masked_lm_windows(tokenizer, texts, 32), tokenizer)
    with torch.inference_mode():
        return float(model(**batch).loss)


def pretrain(model, out, **params):
    options = {
        "max_steps": 4,
        "batch_size": 8,
        "learning_rate": 2e-3,
        "random_state": 0,
        "device": "cpu",
        "verbose": 0,
        **params,
    }
    return further_pretrain(REPEATED, out, model=model, **options)


def test_masked_lm_training_lowers_the_loss_on_a_repeated_text(tiny_model, tmp_path):
    before = mlm_loss(tiny_model, REPEATED[:8])
    path = pretrain(tiny_model, tmp_path / "mlm", max_steps=150, learning_rate=5e-3)
    after = mlm_loss(path, REPEATED[:8])
    assert after < 0.25 * before, (before, after)  # ln(31) = 3.43 -> under 0.2 on BERT


def test_checkpoint_reloads_with_automodel_and_as_model(tiny_model, tmp_path):
    from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer

    path = pretrain(tiny_model, tmp_path / "mlm", max_steps=3)
    assert AutoTokenizer.from_pretrained(path)("the cat")["input_ids"]
    mlm = AutoModelForMaskedLM.from_pretrained(path)
    encoder = AutoModel.from_pretrained(path)
    for name, value in mlm.base_model.state_dict().items():
        torch.testing.assert_close(encoder.state_dict()[name], value, rtol=0, atol=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # loading a masked-LM checkpoint as an encoder is quiet
        vectors = BertSentenceTransformer(path, device="cpu").fit(TEXTS).transform(TEXTS)
    original = BertSentenceTransformer(tiny_model, device="cpu").fit(TEXTS).transform(TEXTS)
    assert vectors.shape == original.shape and not np.allclose(vectors, original)


def test_the_checkpoint_keeps_the_pooler_that_pooling_pooler_reads(tiny_model, tmp_path):
    """The masked-LM model has no pooler: the written checkpoint carries the source's, which
    masked-LM training leaves as it was, so pooling="pooler" reads trained weights."""
    from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer

    path = pretrain(tiny_model, tmp_path / "mlm", max_steps=2)
    source = AutoModel.from_pretrained(tiny_model).state_dict()
    written = AutoModel.from_pretrained(path).state_dict()
    poolers = [name for name in source if name.startswith("pooler")]
    assert poolers
    for name in poolers:
        torch.testing.assert_close(written[name], source[name], rtol=0, atol=0)
    _, info = AutoModelForMaskedLM.from_pretrained(path, output_loading_info=True)
    assert not info["missing_keys"]  # the masked-LM model loads whole, its head trained
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        BertSentenceTransformer(path, pooling="pooler", device="cpu").fit(TEXTS)
    # a checkpoint without the pooler's weights: pooling="pooler" would read random values
    again = pretrain(path, tmp_path / "again", max_steps=1)  # its source has the pooler
    assert [n for n in AutoModel.from_pretrained(again).state_dict() if "pooler" in n] == poolers
    bare = tmp_path / "bare"
    AutoModelForMaskedLM.from_pretrained(path).save_pretrained(bare)  # as transformers' run_mlm
    AutoTokenizer.from_pretrained(path).save_pretrained(bare)
    with pytest.warns(UserWarning, match="has no trained pooler weights"):
        BertSentenceTransformer(str(bare), pooling="pooler", device="cpu").fit(TEXTS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the other poolings never read it
        BertSentenceTransformer(str(bare), pooling="mean", device="cpu").fit(TEXTS)


def test_windows_stay_within_the_positions_roberta_has(tiny_roberta, tmp_path, monkeypatch):
    """RoBERTa numbers positions after the padding index: 66 positions hold 64 tokens, the
    windows' cap even when max_length asks for more (as the estimators' max_length_)."""
    import skbert.pretraining as pretraining

    widths = []
    real = pretraining.masked_lm_windows

    def recorded(tokenizer, texts, max_length, whole_word_mask=False):
        widths.append(max_length)
        return real(tokenizer, texts, max_length, whole_word_mask)

    monkeypatch.setattr(pretraining, "masked_lm_windows", recorded)
    long = [" ".join(["the cat sat on the mat"] * 30)] * 4
    further_pretrain(long, tmp_path / "mlm", model=tiny_roberta, max_length=128, max_steps=2,
                     batch_size=4, random_state=0, device="cpu", verbose=0)  # fmt: skip
    assert widths == [64]


def test_same_seed_same_checkpoint_and_whole_word_masking(tiny_bert, tmp_path):
    from transformers import AutoModelForMaskedLM as Loader  # every weight is in the file

    a = Loader.from_pretrained(pretrain(tiny_bert, tmp_path / "a", max_steps=4)).state_dict()
    b = Loader.from_pretrained(pretrain(tiny_bert, tmp_path / "b", max_steps=4)).state_dict()
    c = Loader.from_pretrained(
        pretrain(tiny_bert, tmp_path / "c", max_steps=4, whole_word_mask=True)
    ).state_dict()
    for name, value in a.items():
        assert torch.equal(value, b[name]), name
    assert any(not torch.equal(value, c[name]) for name, value in a.items())


@pytest.mark.parametrize(
    "family",
    ["tiny_bert", "tiny_roberta", "tiny_mpnet", "tiny_deberta", "tiny_albert_unigram",
     "tiny_modernbert"],
)  # fmt: skip
def test_whole_word_masking_masks_words_in_every_family(family, request):
    """A chosen word's pieces are all chosen, other words apart: the words are the
    tokenizer's own (word_ids), in every family. (SentencePiece and untrimmed byte-level BPE
    spans begin with the word's space: grouping by spans took each window for one word.)"""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(request.getfixturevalue(family))
    text = "the cat sat on the mat and the dog was not good"
    windows = masked_lm_windows(tokenizer, [text] * 8, 32, whole_word_mask=True)
    content = np.array(windows[0]["special_tokens_mask"]) == 0
    word_of = np.array(windows[0]["word_ids"])[content]
    encoded = tokenizer(text, add_special_tokens=False)
    assert len(set(word_of.tolist())) == len(text.split()) == len(set(encoded.word_ids()))
    shares = []
    for seed in range(20):
        torch.manual_seed(seed)
        chosen = mask_batch(windows, tokenizer, 0.15, whole_word_mask=True)["labels"] != -100
        chosen = chosen.numpy()[:, : len(content)][:, content]
        for row in chosen:  # a word's pieces are chosen together, words apart
            for word in set(word_of.tolist()):
                assert len(set(row[word_of == word].tolist())) == 1
        shares.append(chosen.mean())
    assert 0.05 < np.mean(shares) < 0.3
    assert any(0 < row.mean() < 1 for row in chosen)


def test_a_head_that_reads_the_word_embeddings_too_trains(tiny_deberta, tmp_path_factory):
    # DeBERTa-v2's head with legacy=False is lm_predictions(states, word_embeddings): called
    # as head(states), further_pretrain raised TypeError
    from conftest import save_tiny, write_unigram_tokenizer
    from transformers import AutoConfig, DebertaV2Model

    config = AutoConfig.from_pretrained(tiny_deberta)
    config.legacy = False
    folder = save_tiny(
        tmp_path_factory, "deberta-v2-new-head", DebertaV2Model, config, write_unigram_tokenizer
    )
    out = pretrain(folder, tmp_path_factory.mktemp("out"), max_steps=2)
    trained = load_backbone(out)[1].state_dict()
    start = load_backbone(folder)[1].state_dict()
    assert any(not torch.equal(value, start[name]) for name, value in trained.items())


def test_a_sentence_transformers_pipeline_is_kept_with_the_weights(tiny_bert, tmp_path):
    # the checkpoint of a normalising model (all-MiniLM-L6-v2) came back unnormalised
    import json
    import shutil

    source = tmp_path / "st-model"
    shutil.copytree(tiny_bert, source)
    (source / "1_Pooling").mkdir()
    (source / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    (source / "2_Normalize").mkdir()
    kinds = [
        ("0_Transformer", "Transformer"),
        ("1_Pooling", "Pooling"),
        ("2_Normalize", "Normalize"),
    ]
    modules = [
        {"idx": i, "name": str(i), "path": path, "type": f"sentence_transformers.models.{kind}"}
        for i, (path, kind) in enumerate(kinds)
    ]
    (source / "modules.json").write_text(json.dumps(modules))
    fitted = BertSentenceTransformer(str(source), device="cpu").fit(TEXTS)
    for model in (str(source), fitted):
        out = pretrain(model, tmp_path / f"out-{type(model).__name__}", max_steps=1)
        written = json.loads((tmp_path / out / "modules.json").read_text())
        assert [m["path"] for m in written] == ["", "1_Pooling", "2_Normalize"]  # weights: root
        assert (tmp_path / out / "1_Pooling" / "config.json").is_file()
        assert BertSentenceTransformer(out, device="cpu").fit(TEXTS).normalize_ is True
    # a second round in the same folder (model= the output): its pipeline stays (it raised
    # SameFileError copying the files onto themselves, after writing the weights)
    out = tmp_path / "out-str"
    before = (out / "model.safetensors").read_bytes()
    assert pretrain(str(out), out, max_steps=1) == str(out)
    assert (out / "model.safetensors").read_bytes() != before  # trained once more
    assert [m["path"] for m in json.loads((out / "modules.json").read_text())] == [
        "", "1_Pooling", "2_Normalize"
    ]  # fmt: skip
    assert BertSentenceTransformer(str(out), device="cpu").fit(TEXTS).normalize_ is True
    plain = pretrain(tiny_bert, tmp_path / "plain", max_steps=1)
    assert not (tmp_path / plain / "modules.json").exists()
    # a folder written before keeps no pipeline of another model
    again = pretrain(tiny_bert, tmp_path / "out-str", max_steps=1)
    assert not (tmp_path / again / "modules.json").exists()
    # a fitted estimator whose source folder is gone (unpickled elsewhere): no pipeline to
    # copy, no error (its lookup raised OSError after training, the weights written)
    gone = tmp_path / "gone"
    shutil.copytree(tiny_bert, gone)
    orphan = BertSentenceTransformer(str(gone), device="cpu").fit(TEXTS)
    shutil.rmtree(gone)
    assert pretrain(orphan, tmp_path / "orphan", max_steps=1) == str(tmp_path / "orphan")


def test_windows_cover_long_texts(tiny_bert):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    long_text = " ".join(["the cat sat on the mat"] * 20)  # 120 words
    windows = masked_lm_windows(tokenizer, [long_text, "", "a dog"], max_length=32)
    assert len(windows) == 5  # 120 tokens in windows of 30, and "a dog"; "" dropped
    assert all(len(w["input_ids"]) <= 32 for w in windows)
    assert sum(len(w["input_ids"]) - 2 for w in windows) == 122


def content_ids(windows) -> list:
    """The ids of ``windows`` that are no special token, in order."""
    return [
        token
        for window in windows
        for token, special in zip(window["input_ids"], window["special_tokens_mask"], strict=True)
        if not special
    ]


def check_windows(tokenizer, texts, max_length):
    """Each text's tokens, all read once and in order, in ceil(N / width) full windows."""
    width = max_length - 2  # [CLS] ... [SEP]
    every = []
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        windows = masked_lm_windows(tokenizer, [text], max_length)
        assert len(windows) == math.ceil(len(ids) / width), (len(ids), len(windows))
        assert content_ids(windows) == ids
        for window in windows:
            n = len(window["input_ids"])
            assert window["input_ids"][0] == tokenizer.cls_token_id
            assert window["input_ids"][-1] == tokenizer.sep_token_id
            assert window["special_tokens_mask"] == [1] + [0] * (n - 2) + [1]
            assert window["attention_mask"] == [1] * n
        assert all(len(w["input_ids"]) == max_length for w in windows[:-1])
        every.extend(windows)
    assert masked_lm_windows(tokenizer, texts, max_length) == every  # one call, the same


@pytest.mark.parametrize("truncation_side", ["right", "left"])
def test_windows_read_every_token_once_in_order(tiny_model, truncation_side):
    """The windows do not depend on the tokenizer's overflow handling (which reads a
    left-truncating tokenizer's windows backwards, and under transformers 5.17 dropped some)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model, truncation_side=truncation_side)
    long_text = LONG_TEXT + " the cats sat"  # 157 tokens: 5 windows of 30 and one of 7
    check_windows(tokenizer, [long_text, "a dog", "the cat sat on the mat and"], max_length=32)
    check_windows(tokenizer, [long_text], max_length=8)


@pytest.mark.real_model
@pytest.mark.parametrize("truncation_side", ["right", "left"])
def test_windows_of_the_real_tokenizer(packaged_model, truncation_side):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(packaged_model, truncation_side=truncation_side)
    text = (
        "Further pre-training reads unlabelled reviews; tokenization splits unfamiliar words "
        "such as 'unbelievably' into word pieces. "
    ) * 40  # over 512 tokens: longer than the model takes
    assert len(tokenizer(text, add_special_tokens=False)["input_ids"]) > 512
    check_windows(tokenizer, [text, "A short one."], max_length=128)


@pytest.mark.parametrize(("max_length", "truncation_side"), [(5, "left"), (16, "right")])
def test_whole_word_ids_line_up_with_the_tokens(tiny_bert, max_length, truncation_side):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_bert, truncation_side=truncation_side)
    text = "the cats sat on the mat , the dogs sat and it was very good . " * 4
    whole = tokenizer(text, add_special_tokens=False)
    windows = masked_lm_windows(tokenizer, [text], max_length, whole_word_mask=True)
    words = []
    for window in windows:
        assert len(window["word_ids"]) == len(window["input_ids"])
        for word, special in zip(window["word_ids"], window["special_tokens_mask"], strict=True):
            assert (word == -1) == bool(special)
            if not special:
                words.append(word)
    assert words == whole.word_ids()  # BERT's words: numbered from 0, one at a time
    assert content_ids(windows) == whole["input_ids"]


@pytest.mark.parametrize(
    ("family", "text", "words"),
    [
        # each CJK character is a word of BERT's (its normaliser spaces them): grouping by
        # character spans took a run of them, up to a whole window, for one word
        ("packaged_model", "我爱北京天安门", ["我", "爱", "北", "京", "天", "安", "门"]),
        # punctuation is a word of its own in BERT's words
        ("tiny_bert", "the mat. the dog's", ["the", "mat", ".", "the", "dog", "'", "s"]),
        # byte-level BPE: the two bytes of "é" are pieces of one word (spans split them)
        ("tiny_roberta", "the café is good", ["the", " café", " is", " good"]),
    ],
)
def test_whole_words_are_the_tokenizers_words(family, text, words, request):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(request.getfixturevalue(family))
    [window] = masked_lm_windows(tokenizer, [text], 64, whole_word_mask=True)
    content = [
        (token, word)
        for token, word, special in zip(
            window["input_ids"], window["word_ids"], window["special_tokens_mask"], strict=True
        )
        if not special
    ]
    pieces = {}
    for token, word in content:
        pieces.setdefault(word, []).append(token)
    decoded = [tokenizer.decode(ids) for ids in pieces.values()]
    assert len(decoded) == len(words)  # the vocabularies lack some: [UNK], one word still
    assert all(d in (w, tokenizer.unk_token) for d, w in zip(decoded, words, strict=True))
    for seed in range(10):  # every piece of a chosen word is chosen
        torch.manual_seed(seed)
        labels = mask_batch([window] * 4, tokenizer, 0.3, whole_word_mask=True)["labels"]
        for row in (labels[:, : len(window["input_ids"])] != -100).numpy():
            chosen = row[np.array(window["special_tokens_mask"]) == 0]
            for word in pieces:
                same = [c for c, (_, w) in zip(chosen, content, strict=True) if w == word]
                assert len(set(same)) == 1


@pytest.mark.parametrize("whole_word_mask", [False, True])
def test_masking_draws_as_transformers_collator_does(tiny_bert, whole_word_mask):
    """skbert's masking (which works with every supported transformers) chooses, for a
    seed, exactly what transformers' DataCollatorForLanguageModeling chooses (whole words: on
    texts whose words, the tokenizer's, are the collator's, pieces with adjoining spans)."""
    import inspect

    from transformers import AutoTokenizer, DataCollatorForLanguageModeling

    from skbert.truncation import split_chunks

    options = {"mlm_probability": 0.3}
    if whole_word_mask:
        if "whole_word_mask" not in inspect.signature(DataCollatorForLanguageModeling).parameters:
            pytest.skip("this transformers' collator has no offset-based whole-word masking")
        options.update(whole_word_mask=True, mask_replace_prob=1.0, random_replace_prob=0.0)
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    texts = [LONG_TEXT, "the cats sat", "a dog", "the dogs sat on the mat , love it"]
    rows = masked_lm_windows(tokenizer, texts, 16, whole_word_mask=whole_word_mask)
    given = rows
    if whole_word_mask:  # the collator reads character spans, padded here (it would not)
        spans = []
        for text in texts:
            encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
            chunks = split_chunks(encoded["offset_mapping"], 16 - 2)
            spans += [[(0, 0), *chunk, (0, 0)] for chunk in chunks]
        width = max(len(row["input_ids"]) for row in rows)
        given = []
        for row, span in zip(rows, spans, strict=True):
            n = width - len(row["input_ids"])
            given.append(
                {
                    "input_ids": row["input_ids"] + [tokenizer.pad_token_id] * n,
                    "attention_mask": row["attention_mask"] + [0] * n,
                    "special_tokens_mask": row["special_tokens_mask"] + [1] * n,
                    "offset_mapping": span + [(0, 0)] * n,
                }
            )
    collator = DataCollatorForLanguageModeling(tokenizer, **options)
    for seed in range(3):
        torch.manual_seed(seed)
        ours = mask_batch(rows, tokenizer, 0.3, whole_word_mask)
        torch.manual_seed(seed)
        theirs = collator(given)
        assert set(theirs) == set(ours)
        for key, value in ours.items():
            assert torch.equal(value, theirs[key]), (seed, key)
        chosen = ours["labels"] != -100
        assert chosen.any()
        if whole_word_mask:
            assert (ours["input_ids"][chosen] == tokenizer.mask_token_id).all()


@pytest.mark.parametrize("whole_word_mask", [False, True])
def test_every_batch_has_a_target(tiny_bert, whole_word_mask):
    """A batch in which no token is drawn would have a NaN loss: one token is chosen then."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    rows = masked_lm_windows(tokenizer, ["a dog", "the cats"], 8, whole_word_mask)
    for seed in range(20):
        torch.manual_seed(seed)
        batch = mask_batch(rows, tokenizer, 1e-6, whole_word_mask)
        chosen = (batch["labels"] != -100).nonzero().tolist()
        if whole_word_mask and chosen == [[1, 2], [1, 3]]:  # "cats": cat ##s
            continue
        assert len(chosen) == 1, chosen
        ((row, column),) = chosen
        assert rows[row]["special_tokens_mask"][column] == 0


def test_further_pretrain_validates_its_texts_and_rate(tiny_bert, tmp_path):
    out = tmp_path / "out"
    for missing in (None, float("nan"), np.nan):
        with pytest.raises(ValueError, match=r"texts\[1\] is missing"):
            further_pretrain(["the cat", missing], out, model=tiny_bert, max_steps=1, verbose=0)
    with pytest.raises(TypeError, match=r"texts\[0\] is an int"):
        further_pretrain([3, "the cat"], out, model=tiny_bert, max_steps=1, verbose=0)
    with pytest.raises(ValueError, match=r"texts\[0\] cannot be encoded as UTF-8"):
        further_pretrain(["the \ud800 cat"], out, model=tiny_bert, max_steps=1, verbose=0)
    for rate in (1.5, 1e38, 0.0):
        with pytest.raises(
            InvalidParameterError, match=r"'learning_rate' .* range \(0(\.0)?, 1(\.0)?\]"
        ):
            further_pretrain(["the cat"], out, model=tiny_bert, learning_rate=rate)
    assert not out.exists()


def test_further_pretrain_reads_both_sentences_of_pairs(tiny_bert, tmp_path, monkeypatch):
    import skbert.pretraining as module

    seen = []

    def recording(tokenizer, texts, *args, **kwargs):
        seen.append(list(texts))
        return masked_lm_windows(tokenizer, texts, *args, **kwargs)

    monkeypatch.setattr(module, "masked_lm_windows", recording)
    pairs = np.array([["the cat", "a dog"], ["the mat", "good film"]], dtype=object)
    further_pretrain(pairs, tmp_path / "out", model=tiny_bert, max_steps=1, verbose=0)
    assert seen == [["the cat", "the mat", "a dog", "good film"]]


def test_the_head_warning_says_whether_the_projection_is_tied(tiny_bert, tmp_path_factory):
    from conftest import SMALL, save_tiny
    from transformers import BertConfig, BertModel

    untied = save_tiny(
        tmp_path_factory, "bert-untied", BertModel, BertConfig(**SMALL, tie_word_embeddings=False)
    )
    for model, says in ((tiny_bert, "tied to the word"), (untied, "random too (not tied)")):
        with warnings.catch_warnings():
            warnings.resetwarnings()
            with pytest.warns(UserWarning, match=f"the output projection {re.escape(says)}"):
                load_masked_lm(model)


def test_warns_when_the_checkpoint_has_no_masked_lm_head(tiny_bert, tmp_path):
    with warnings.catch_warnings():
        warnings.resetwarnings()
        with pytest.warns(
            UserWarning, match="no trained masked-LM head: .* start from random"
        ) as w:
            load_masked_lm(tiny_bert)
    assert w[0].filename == __file__  # the user's line, not skbert's (a fixed stacklevel)
    path = pretrain(tiny_bert, tmp_path / "mlm", max_steps=1)
    with warnings.catch_warnings():
        warnings.resetwarnings()
        warnings.simplefilter("error")
        load_masked_lm(path)  # now it has one


def test_errors(tiny_bert, tmp_path):
    from transformers import GPT2Config, GPT2Model

    gpt = tmp_path / "gpt2"
    GPT2Model(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=31)).save_pretrained(gpt)
    write_tokenizer(gpt)
    with pytest.raises(ValueError, match="'gpt2' model, which has no masked-LM head"):
        further_pretrain(["a text"], tmp_path / "out", model=str(gpt))
    with pytest.raises(ValueError, match="needs non-empty texts"):
        further_pretrain(["", "  "], tmp_path / "out", model=tiny_bert)
    with pytest.raises(InvalidParameterError, match="'texts' parameter .* array-like"):
        further_pretrain("the cat sat", tmp_path / "out", model=tiny_bert)
    with pytest.raises(InvalidParameterError, match="mlm_probability"):
        further_pretrain(["a text"], tmp_path / "out", model=tiny_bert, mlm_probability=1.5)
    with pytest.raises(OSError, match="no such directory"):
        further_pretrain(["a text"], tmp_path / "out", model=str(tmp_path / "missing"))
    with pytest.raises(InvalidParameterError, match="mlm_steps"):
        BertTextClassifier(tiny_bert, mlm_steps=-1).fit(X, Y)


def test_within_task_pretraining_changes_the_encoder(tiny_model):
    original = load_backbone(tiny_model)[1].state_dict()  # what fit starts from
    # fine_tune="top" leaves the encoder as the masked-LM steps made it
    plain = BertTextClassifier(tiny_model, fine_tune="top", **FAST).fit(X, Y)
    itpt = BertTextClassifier(tiny_model, fine_tune="top", mlm_steps=6, **FAST).fit(X, Y)
    assert plain.mlm_loss_curve_ is None and len(itpt.mlm_loss_curve_) >= 1
    for name, value in plain.network_.backbone.state_dict().items():
        assert torch.equal(value, original[name])
    changed = [
        k for k, v in itpt.network_.backbone.state_dict().items() if not torch.equal(v, original[k])
    ]
    assert any("embeddings" in k for k in changed) and len(changed) > 5
    again = BertTextClassifier(tiny_model, fine_tune="top", mlm_steps=6, **FAST).fit(X, Y)
    np.testing.assert_array_equal(again.predict_proba(X), itpt.predict_proba(X))


def test_within_task_pretraining_in_grid_search(tiny_bert):
    grid = GridSearchCV(
        BertTextClassifier(tiny_bert, **FAST), {"mlm_steps": [0, 3]}, cv=2, error_score="raise"
    ).fit(X, Y)
    assert list(grid.cv_results_["param_mlm_steps"]) == [0, 3]


def test_fitted_estimator_as_model_starts_from_its_encoder(tiny_model, tmp_path):
    first = BertTextClassifier(tiny_model, **FAST).fit(X, Y)
    tuned = first.network_.backbone.state_dict()
    second = BertTextClassifier(first, fine_tune="top", **FAST).fit(X, 1 - Y)
    assert second.network_.backbone is not first.network_.backbone
    for name, value in second.network_.backbone.state_dict().items():
        assert torch.equal(value, tuned[name]), name
    # the same through an exported checkpoint, and into the other estimator
    path = first.save_pretrained(tmp_path / "task-a")
    via_path = BertTextClassifier(path, fine_tune="top", **FAST).fit(X, 1 - Y)
    np.testing.assert_allclose(via_path.predict_proba(X), second.predict_proba(X), atol=1e-6)
    sentence = BertSentenceTransformer(first, device="cpu").fit(X)
    from_path = BertSentenceTransformer(path, device="cpu").fit(X)
    np.testing.assert_allclose(sentence.transform(X), from_path.transform(X), atol=1e-6)


def test_exported_checkpoint_matches_the_fitted_encoder(tiny_bert, tmp_path):
    from transformers import AutoModel

    est = BertSentenceTransformer(tiny_bert, fine_tune="full", **FAST)
    est.fit(
        np.array([[a, b] for a, b in zip(POS, NEG, strict=True)], dtype=object),
        np.linspace(0, 5, 5),
    )
    path = est.save_pretrained(tmp_path / "sbert")
    reloaded = AutoModel.from_pretrained(path)
    for name, value in est.network_.backbone.state_dict().items():
        assert torch.equal(value, reloaded.state_dict()[name]), name
    again = BertSentenceTransformer(path, device="cpu").fit(X)
    np.testing.assert_allclose(again.transform(X), est.transform(X), atol=1e-6)
    with pytest.raises(NotFittedError):
        BertSentenceTransformer(tiny_bert).save_pretrained(tmp_path / "nothing")


@pytest.mark.parametrize("family", ["tiny_bert", "tiny_roberta", "tiny_albert"])
def test_exported_checkpoint_holds_the_trained_pooler(family, tmp_path, request):
    """pooling="pooler" trains a copy of the pooler's dense layer: save_pretrained wrote the
    backbone's untouched pooler, so the folder's pooler_output, and pooling="pooler" over
    model=folder, were the untrained ones (0.02 apart)."""
    from transformers import AutoModel

    est = BertTextClassifier(request.getfixturevalue(family), pooling="pooler", **FAST)
    est.fit(X, Y)
    path = est.save_pretrained(tmp_path / "cross-encoder")
    trained = est.network_.encoder.pooling.dense
    reloaded = AutoModel.from_pretrained(path)
    dense = reloaded.pooler if family == "tiny_albert" else reloaded.pooler.dense
    assert torch.equal(dense.weight, trained.weight) and torch.equal(dense.bias, trained.bias)
    for name, value in est.network_.backbone.state_dict().items():
        if "pooler" not in name:
            assert torch.equal(value, reloaded.state_dict()[name]), name
    vectors = BertSentenceTransformer(est, pooling="pooler", device="cpu").fit(X).transform(X)
    again = BertSentenceTransformer(path, pooling="pooler", device="cpu").fit(X).transform(X)
    np.testing.assert_allclose(again, vectors, atol=1e-6)


def test_clone_unfits_the_model_parameter_and_frozen_estimator_keeps_it(tiny_bert):
    first = BertTextClassifier(tiny_bert, **FAST).fit(X, Y)
    with pytest.raises(ValueError, match="is not fitted.*FrozenEstimator"):
        clone(BertTextClassifier(first, **FAST)).fit(X, Y)
    grid = GridSearchCV(
        BertTextClassifier(FrozenEstimator(first), **FAST),
        {"fine_tune": ["top", "full"]},
        cv=2,
        error_score="raise",
    ).fit(X, Y)
    assert grid.best_estimator_.network_.backbone is not first.network_.backbone


def test_fast_masked_lm_loss_equals_the_models_own(tiny_model):
    from skbert._nn.network import MaskedLMNetwork

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tokenizer, mlm = load_masked_lm(tiny_model)
    torch.manual_seed(0)
    batch = mask_batch(masked_lm_windows(tokenizer, TEXTS + REPEATED[:4], 32), tokenizer)
    network = MaskedLMNetwork(mlm).eval()
    assert network.single_head() is not None  # BERT's `cls`, ALBERT's `predictions`
    with torch.inference_mode():
        expected = mlm(**batch).loss
        fast = network(**dict(batch))
    torch.testing.assert_close(fast, expected, rtol=1e-5, atol=1e-6)


def test_saving_onto_an_existing_file_raises(tiny_bert, tmp_path):
    """save_pretrained and further_pretrain refuse a path that is a file (Hugging Face's
    save_pretrained would log and return, writing nothing); further_pretrain before training."""
    taken = tmp_path / "taken"
    taken.write_text("not a folder")
    fitted = BertTextClassifier(tiny_bert, **FAST).fit(X, Y)
    with pytest.raises(NotADirectoryError, match="path=.*is an existing file"):
        fitted.save_pretrained(taken)
    with pytest.raises(NotADirectoryError, match="output_dir=.*is an existing file"):
        further_pretrain(["the cat sat"], taken, model=tiny_bert, max_steps=1, verbose=0)
    assert taken.read_text() == "not a folder"
    # an existing folder is fine: its files are overwritten
    folder = tmp_path / "folder"
    folder.mkdir()
    assert fitted.save_pretrained(folder) == str(folder)
    assert (folder / "config.json").is_file()
