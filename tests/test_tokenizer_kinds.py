"""Each family's tiny checkpoint runs through its own kind of tokenizer (tests/conftest.py):
WordPiece (BERT, DistilBERT, MPNet), byte-level BPE (RoBERTa, ModernBERT) and
SentencePiece-style Unigram (DeBERTa-v3, ALBERT). The special-token templates skbert reads off
by probing (skbert._nn.backbone.SpecialTokens) build the tokenizer's own encodings of single
texts and pairs, token types included; a saved estimator passes the tokenizer's reload probe
(skbert._text.tokenizer_probe) and predicts pairs as before; pairs give each text its own bits
alone and in company."""

from __future__ import annotations

import numpy as np
import pytest
from transformers import AutoTokenizer

import skbert
from skbert import BertTextClassifier
from skbert._nn.backbone import SpecialTokens
from skbert._text.tokenizer_probe import read_tokenizer, tokenizer_probe

#: fixture -> (the tokenizers model class, the pair template: prefix, middle, suffix tokens)
KINDS = {
    "tiny_bert": ("WordPiece", (["[CLS]"], ["[SEP]"], ["[SEP]"])),
    "tiny_distilbert": ("WordPiece", (["[CLS]"], ["[SEP]"], ["[SEP]"])),
    "tiny_mpnet": ("WordPiece", (["[CLS]"], ["[SEP]"], ["[SEP]"])),
    "tiny_roberta": ("BPE", (["<s>"], ["</s>", "</s>"], ["</s>"])),
    "tiny_modernbert": ("BPE", (["[CLS]"], ["[SEP]"], ["[SEP]"])),
    "tiny_deberta": ("Unigram", (["[CLS]"], ["[SEP]"], ["[SEP]"])),
    "tiny_albert_unigram": ("Unigram", (["[CLS]"], ["[SEP]"], ["[SEP]"])),
}

PAIRS = [
    ("the cat sat on the mat", "a dog is good"),
    ("Great film, love it!", "the movie was very bad ."),
    ("", "it was a very very good film ."),
    ("café au lait , 3:45pm", "terrible"),
]


@pytest.mark.parametrize("name", list(KINDS))
def test_each_family_has_its_kind_and_its_templates_build_its_encodings(request, name):
    model_kind, template = KINDS[name]
    tokenizer = AutoTokenizer.from_pretrained(request.getfixturevalue(name))
    assert type(tokenizer.backend_tokenizer.model).__name__ == model_kind
    special = SpecialTokens.from_tokenizer(tokenizer)
    assert [tokenizer.convert_ids_to_tokens(list(part)) for part in special.pair] == list(template)
    for a, b in PAIRS:
        ids_a = tokenizer(a, add_special_tokens=False)["input_ids"]
        ids_b = tokenizer(b, add_special_tokens=False)["input_ids"]
        single = tokenizer(a, return_token_type_ids=True)
        pair = tokenizer(a, b, return_token_type_ids=True)
        assert special.build(ids_a) == (single["input_ids"], single["token_type_ids"])
        assert special.build(ids_a, ids_b) == (pair["input_ids"], pair["token_type_ids"])
    if model_kind == "Unigram":  # the second text has token type 1, as DeBERTa's and ALBERT's
        assert special.pair_types[3] == 1
    assert tokenizer.unk_token_id not in tokenizer(PAIRS[0][0])["input_ids"]


@pytest.mark.parametrize("name", ["tiny_roberta", "tiny_modernbert", "tiny_deberta"])
def test_pairs_predict_the_same_after_save_and_load(request, name, tmp_path):
    """A classifier fitted on pairs through the family's tokenizer: its tokenizer passes the
    reload probe (the probe encodes pairs and special tokens), and the loaded estimator
    predicts the pairs as the fitted one, each pair alone as in company."""
    first = [a for a, _ in PAIRS] * 2
    second = [b for _, b in PAIRS] * 2
    X = np.array([first, second], dtype=object).T
    y = np.arange(len(X)) % 2
    clf = BertTextClassifier(
        request.getfixturevalue(name), device="cpu", max_epochs=1, batch_size=4, random_state=0
    ).fit(X, y)
    proba = clf.predict_proba(X)
    alone = np.vstack([clf.predict_proba(X[i : i + 1]) for i in range(len(X))])
    np.testing.assert_array_equal(alone, proba)
    clf.save(tmp_path / "saved")
    (written,) = [file.parent for file in (tmp_path / "saved").rglob("tokenizer.json")]
    assert tokenizer_probe(read_tokenizer(written)) == tokenizer_probe(clf.tokenizer_)
    np.testing.assert_array_equal(skbert.load(tmp_path / "saved").predict_proba(X), proba)
