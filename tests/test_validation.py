import re

import numpy as np
import pandas as pd
import pytest

from skbert._estimator.validation import check_kernel_sizes, check_layers, check_texts


def test_list_of_texts():
    assert check_texts(["a", "", "b"]) == (["a", "", "b"], None)


@pytest.mark.parametrize(
    "X",
    [
        np.array(["a", "b"], dtype=object),
        np.array(["a", "b"]),
        pd.Series(["a", "b"]),
        np.array([["a"], ["b"]], dtype=object),
        pd.DataFrame({"text": ["a", "b"]}),
        ("a", "b"),
        (t for t in ["a", "b"]),
    ],
)
def test_single_text_containers(X):
    assert check_texts(X) == (["a", "b"], None)


@pytest.mark.parametrize(
    "X",
    [
        [("a", "b"), ("c", "d")],
        np.array([["a", "b"], ["c", "d"]], dtype=object),
        pd.DataFrame({"s1": ["a", "c"], "s2": ["b", "d"]}),
    ],
)
def test_pairs(X):
    assert check_texts(X) == (["a", "c"], ["b", "d"])


@pytest.mark.parametrize("n", [3, 5])
def test_a_tuple_of_two_columns_is_refused_with_the_way_to_pairs(n):
    """(sentences1, sentences2) was read as 2 rows: 'X has 3 columns' (2 sentences each read
    as 2 pairs cannot be told from that; 1 each is 2 rows of one text)."""
    first, second = [f"a{i}" for i in range(n)], [f"b{i}" for i in range(n)]
    with pytest.raises(ValueError, match=r"tuple of 2 lists .* list\(zip\(first, second\)\)"):
        check_texts((first, second))
    assert check_texts(list(zip(first, second, strict=True))) == (first, second)
    assert check_texts((("a", "b"), ("c", "d"))) == (["a", "c"], ["b", "d"])  # a tuple of pairs
    assert check_texts((["a"], ["b"])) == (["a", "b"], None)  # 2 rows of one column


def test_bare_string():
    with pytest.raises(TypeError, match=r"single str .*Wrap it in a list"):
        check_texts("a text")


def test_empty():
    with pytest.raises(ValueError, match="empty"):
        check_texts([])


def test_pandas_rows_are_named_by_their_index_label_too():
    # "X[5] is missing" named a position; s[5] is a KeyError for a Series indexed 100...
    series = pd.Series(["a", "b", None], index=[100, 101, 102])
    with pytest.raises(ValueError, match=r"^X\[2\] \(index label 102\) is missing \((nan|None)\)"):
        check_texts(series)
    frame = pd.DataFrame({"s1": ["x", "y"], "s2": ["z", 3]}, index=["r1", "r2"])
    with pytest.raises(TypeError, match=r"^X\[1, 1\] \(index label 'r2'\) is an int \(3\)"):
        check_texts(frame)
    with pytest.raises(ValueError, match=r"^X\[2\] is missing"):  # labels 0 ... n-1: no label
        check_texts(pd.Series(["a", "b", None]))


def test_a_sparse_matrix_is_named_as_such():
    from scipy import sparse

    with pytest.raises(TypeError, match=r"X is a sparse matrix of float64 .*take the texts"):
        check_texts(sparse.csr_matrix(np.eye(3)))


def test_a_spent_generator_says_it_is_read_once():
    texts = (t for t in ["a", "b"])
    assert check_texts(texts)[0] == ["a", "b"]
    with pytest.raises(ValueError, match=r"iterator with nothing left .*pass list\(X\)"):
        check_texts(texts)


@pytest.mark.parametrize("missing", [None, float("nan"), np.nan, pd.NA])
def test_missing_items_name_the_position(missing):
    with pytest.raises(ValueError, match=r"X\[2\] is missing"):
        check_texts(["a", "b", missing])


def test_missing_in_pair_names_row_and_column():
    with pytest.raises(ValueError, match=r"X\[1, 1\] is missing"):
        check_texts([("a", "b"), ("c", None)])


@pytest.mark.parametrize("bad", [3, 2.5, b"bytes", ["nested"]])
def test_non_string_items_name_the_position(bad):
    with pytest.raises(TypeError, match=r"X\[1\] is a"):
        check_texts(["a", bad])


def test_zero_dimensional_arrays_are_named_not_measured():
    # a list of 0-d arrays was taken for rows of pairs: "len() of unsized object"
    with pytest.raises(TypeError, match=r"X\[0\] is a ndarray \(array\('a'"):
        check_texts([np.array("a"), np.array("b")])


def test_wrong_width():
    with pytest.raises(ValueError, match="3 columns"):
        check_texts(np.array([["a", "b", "c"]], dtype=object))


def test_ragged_pairs():
    with pytest.raises(ValueError, match="different lengths"):
        check_texts([("a", "b"), ("c",)])


def test_three_dimensions():
    with pytest.raises(ValueError, match="3 dimensions"):
        check_texts(np.empty((2, 2, 2), dtype=object))


def test_nan_detection_does_not_flag_strings():
    assert check_texts(["nan", "None"]) == (["nan", "None"], None)


@pytest.mark.parametrize(
    ("X", "where"),
    [
        (["a", "ok \ud800 here"], r"X\[1\]"),
        (np.array(["a", "b", "\udfff"], dtype=object), r"X\[2\]"),
        ([("a", "b"), ("c", "\ud800")], r"X\[1, 1\]"),
        (pd.DataFrame({"text": ["\ud800x", "b"]}, dtype=object), r"X\[0, 0\]"),
    ],
)
def test_lone_surrogate_names_the_position(X, where):
    with pytest.raises(ValueError, match=where + r" cannot be encoded as UTF-8: .*surrogate"):
        check_texts(X)


def test_only_lone_surrogates_are_refused():
    texts = ["café", "日本語", "emoji \U0001f600", "\u00a0"]
    assert check_texts(texts) == (texts, None)
    with pytest.raises(ValueError, match=r"X\[4\] .* lone surrogate '\\ud83d' at character 6"):
        check_texts([*texts, "emoji \ud83d"])  # half of the pair that encodes U+1F600


@pytest.mark.parametrize("X", [{"a": "text one", "b": "text two"}, pd.Series(["x"]).to_dict()])
def test_mapping_is_refused_with_what_to_pass(X):
    with pytest.raises(TypeError, match=r"X is a dict: .*its keys.*list\(X.values\(\)\)"):
        check_texts(X)


@pytest.mark.parametrize("X", [{"a", "b"}, frozenset({"a"})])
def test_set_is_refused_as_unordered(X):
    with pytest.raises(TypeError, match=r"X is a \w+, which is unordered.*Pass a list"):
        check_texts(X)
    # a dict's keys or values are ordered: taken as they come
    assert check_texts({"a": "x", "b": "y"}.keys()) == (["a", "b"], None)


@pytest.mark.parametrize(
    ("value", "expected"),
    [((1, 3, 5), (1, 3, 5)), ([2], (2,)), ((np.int64(3), np.int32(1)), (3, 1))],
)
def test_kernel_sizes_accepted(value, expected):
    sizes = check_kernel_sizes(value)
    assert sizes == expected and all(type(s) is int for s in sizes)


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        ((), ValueError, r"cnn_kernel_sizes=\(\) is empty"),
        ((0,), ValueError, r"cnn_kernel_sizes=\(0,\) holds 0; .* int >= 1"),
        ((3, -1), ValueError, r"holds -1"),
        (("a",), TypeError, r"cnn_kernel_sizes=\('a',\) holds 'a', a str"),
        ((True,), TypeError, r"holds True, a bool"),
        ((2.0,), TypeError, r"holds 2.0, a float"),
        (3, TypeError, r"cnn_kernel_sizes=3 must be a tuple or list of ints"),
        ("135", TypeError, r"must be a tuple or list of ints .* not a str"),
    ],
)
def test_bad_kernel_sizes_name_the_parameter_and_value(value, error, match):
    with pytest.raises(error, match=match):
        check_kernel_sizes(value)


def test_kernel_sizes_error_names_the_given_parameter():
    with pytest.raises(ValueError, match=r"^sizes=\[\] is empty"):
        check_kernel_sizes([], name="sizes")


@pytest.mark.parametrize("layer", [1.5, None, {1: 2}])
def test_layers_refuse_what_is_no_int_nor_sequence(layer):
    with pytest.raises(TypeError, match=r"layer=.* must be an int or a tuple of ints"):
        check_layers(layer, n_hidden_states=3)


@pytest.mark.parametrize(
    ("X", "where", "example"),
    [
        (
            pd.DataFrame({"text": ["a", "b"], "label": [0, 1]}),
            r"X\[0, 1\]",
            "X['text'], X['label']",
        ),
        (
            pd.DataFrame({"label": [0, 1], "text": ["a", "b"]}),
            r"X\[0, 0\]",
            "X['text'], X['label']",
        ),
        ([("a", 1), ("b", 0)], r"X\[0, 1\]", "texts, labels"),
    ],
)
def test_label_column_in_X_says_it_belongs_in_y(X, where, example):
    """2 columns are sentence pairs: a label column among them is pointed to y."""
    with pytest.raises(TypeError) as info:
        check_texts(X)
    message = str(info.value)
    assert re.match(where + r" is an int \(\d\); every item must be a str\.", message), message
    assert "2 columns, which are read as sentence pairs (text, text)" in message
    assert "a label column belongs in y" in message and f"fit({example})" in message


def test_one_column_errors_speak_of_no_pairs():
    with pytest.raises(TypeError, match=r"^X\[1\] is an int \(3\); every item must be a str\.$"):
        check_texts(["a", 3])
    with pytest.raises(TypeError, match=r"X\[0\] is a float"):
        check_texts([1.5])


# --- a bool where a number is meant (scikit-learn's Interval counts True as the int 1) ------
def _numeric_parameters(cls):
    from skbert._estimator.constraints import Number

    return sorted(
        name
        for name, constraints in cls._parameter_constraints.items()
        if isinstance(constraints, list)
        and any(isinstance(c, Number) for c in constraints)
        and not any(c in ("boolean", "verbose", bool) for c in constraints)
    )


@pytest.mark.parametrize(
    "cls_name", ["BertSentenceTransformer", "BertTextClassifier", "BertTextRegressor"]
)
def test_a_bool_for_a_number_is_refused_before_the_model_loads(cls_name, tmp_path):
    """batch_size=True trained one text a batch, max_chunks=True cut texts to one window,
    learning_rate=True trained the sentence transformer at 1.0: all without a word."""
    import numpy as np
    from sklearn.utils._param_validation import InvalidParameterError

    import skbert

    cls = getattr(skbert, cls_name)
    names = _numeric_parameters(cls)
    assert {"batch_size", "max_length", "random_state"} <= set(names)  # the sweep is not empty
    X, y = ["a dog", "a cat"], [0, 1]
    for name in names:
        for value in (True, np.bool_(False)):
            est = cls(str(tmp_path / "no-model"), **{name: value})  # refused before loading
            with pytest.raises(InvalidParameterError, match=rf"'{name}' .*\(not a bool\)"):
                est.fit(X) if cls_name == "BertSentenceTransformer" else est.fit(X, y)
    with pytest.raises(OSError, match="no such directory"):  # numpy ints are ints
        cls(str(tmp_path / "no-model"), batch_size=np.int64(4), random_state=np.int64(3)).fit(X, y)


def test_pretraining_refuses_a_bool_for_a_number(tmp_path):
    from sklearn.utils._param_validation import InvalidParameterError

    from skbert.pretraining import further_pretrain

    for name in ("max_steps", "batch_size", "warmup_fraction", "learning_rate", "random_state"):
        with pytest.raises(InvalidParameterError, match=rf"'{name}' .*\(not a bool\)"):
            further_pretrain(["a dog"], tmp_path / "out", **{name: True})
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("weight", [-1.0, float("nan"), float("inf"), "2", None, True])
def test_class_weight_values_must_be_finite_numbers_at_least_zero(weight, tmp_path):
    """A negative weight trained away from its class (or, balanced, summed batches to a loss
    of 0); NaN and inf 'diverged' at the first step advising a lower learning rate; a str
    raised torch's error after the model loaded."""
    from skbert import BertTextClassifier

    clf = BertTextClassifier(str(tmp_path / "no-model"), class_weight={0: weight, 1: 1.0})
    with pytest.raises(ValueError, match=r"class_weight\[0\] is .*; a class's weight must be a"):
        clf.fit(["a dog", "a cat"], [0, 1])


def test_within_task_pretrain_takes_numpy_seeds_and_refuses_seeds_numpy_cannot(tiny_bert):
    """seed=np.int64(3) raised torch's 'an integer is required' naming nothing; 2**32 was
    allowed and failed in numpy after the whole masked-LM training."""
    import numpy as np
    from sklearn.utils._param_validation import InvalidParameterError
    from transformers import AutoModel

    from skbert.pretraining import within_task_pretrain

    backbone = AutoModel.from_pretrained(tiny_bert)
    texts = ["the dog sat on the mat", "a good film"]
    run = {"model": tiny_bert, "max_steps": 1, "max_length": 16}
    assert len(within_task_pretrain(backbone, texts, seed=np.int64(3), **run)) == 1
    for seed in (2**32, True):
        with pytest.raises(InvalidParameterError, match="'seed' parameter"):
            within_task_pretrain(backbone, texts, seed=seed, **run)


@pytest.mark.parametrize(
    ("params", "error", "match"),
    [
        ({"layer": ()}, ValueError, r"layer=\(\) is empty"),
        ({"layer": (1, True)}, TypeError, r"layer=\(1, True\) must be an int or a tuple"),
        ({"cnn_kernel_sizes": ()}, ValueError, r"cnn_kernel_sizes=\(\) is empty"),
        ({"cnn_kernel_sizes": (3, 0)}, ValueError, r"cnn_kernel_sizes=\(3, 0\) holds 0"),
        (
            {"pooling": "pooler", "layer": (-2, -1), "layer_combine": "concat"},
            ValueError,
            "pooling='pooler' reads one hidden state per token",
        ),
    ],
)
@pytest.mark.parametrize("cls_name", ["BertSentenceTransformer", "BertTextClassifier"])
def test_readout_parameters_are_checked_before_the_model_loads(
    cls_name, params, error, match, tmp_path
):
    """They need no model, but failed only after its weights had loaded (or downloaded)."""
    import skbert

    est = getattr(skbert, cls_name)(str(tmp_path / "no-model"), **params)
    with pytest.raises(error, match=match):
        est.fit(["a dog", "a cat"]) if cls_name == "BertSentenceTransformer" else est.fit(
            ["a dog", "a cat"], [0, 1]
        )


@pytest.mark.skipif(
    __import__("torch").cuda.is_available(),
    reason="checks the refusal of device='cuda' where CUDA is missing; this machine has it",
)
@pytest.mark.parametrize("cls_name", ["BertSentenceTransformer", "BertTextClassifier"])
def test_a_fit_that_trains_refuses_a_missing_device_before_the_model_loads(cls_name, tmp_path):
    """It raised after the model had loaded (or downloaded); a fit that trains nothing
    (fine_tune='none') still takes device='cuda', for predicting on a GPU elsewhere."""
    import skbert

    cls = getattr(skbert, cls_name)
    params = {"fine_tune": "full"} if cls_name == "BertSentenceTransformer" else {}
    est = cls(str(tmp_path / "no-model"), device="cuda", **params)
    with pytest.raises(RuntimeError, match="device='cuda' but CUDA is not available"):
        est.fit(["a dog", "a cat"], [0, 1])
    if cls_name == "BertSentenceTransformer":
        with pytest.raises(OSError, match="no such directory"):  # got as far as the model
            est.set_params(fine_tune="none").fit(["a dog", "a cat"])


def test_within_task_pretrain_checks_its_texts_and_backbone_before_training(
    tiny_bert, tiny_albert, monkeypatch
):
    """None was dropped silently and an int failed in the tokenizer after the model loaded;
    a backbone of another architecture failed only after the whole masked-LM training."""
    from transformers import AutoModel

    import skbert.pretraining as pretraining
    from skbert.pretraining import within_task_pretrain

    backbone = AutoModel.from_pretrained(tiny_bert)
    run = {"model": tiny_bert, "max_steps": 1, "max_length": 16}
    with pytest.raises(ValueError, match=r"texts\[1\] is missing \(None\)"):
        within_task_pretrain(backbone, ["a dog", None], **run)
    with pytest.raises(TypeError, match=r"texts\[0\] is an int"):
        within_task_pretrain(backbone, [3, "a dog"], **run)
    pairs = np.array([["a dog", "a cat"], ["the mat", "a film"]], dtype=object)
    assert len(within_task_pretrain(backbone, pairs, **run)) == 1  # array-like, as documented
    monkeypatch.setattr(pretraining, "train_masked_lm", lambda *a, **k: pytest.fail("trained"))
    other = AutoModel.from_pretrained(tiny_albert)
    with pytest.raises(ValueError, match=r"backbone \(a AlbertModel\) is not the encoder of"):
        within_task_pretrain(other, ["a dog", "a cat"], **run)


@pytest.mark.parametrize(
    "params", [{"pooling": "cnn"}, {"truncation": "chunks", "chunk_pooling": "attention"}]
)
def test_a_frozen_fit_refuses_a_pooling_with_weights_before_the_model_loads(params, tmp_path):
    """It was refused after the model had loaded (or downloaded): it needs the parameters
    alone."""
    from skbert import BertSentenceTransformer

    est = BertSentenceTransformer(str(tmp_path / "no-model"), **params)
    with pytest.raises(ValueError, match="has weights of its own that must be trained"):
        est.fit(["a dog", "a cat"])
