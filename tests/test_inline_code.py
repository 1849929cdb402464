"""Inline Python code of README.md, benchmarks/README.md and docs/ that calls skbert (or the
scikit-learn, joblib and torch API around it) is checked as a reader would paste it.

Which inline code (the spans of ``tests/doc_snippets.py``) is Python here: a span that calls

- a name of :data:`NAMES` (skbert's public names, the loaders of ``skbert.datasets``, the
  scorers of ``skbert.metrics``, the functions of ``skbert.pretraining``, and the scikit-learn
  names the documents use), or a dotted name under ``skbert``, ``sklearn``, ``joblib`` or
  ``torch``; or
- a public method of ``BertSentenceTransformer`` or ``BertTextClassifier`` (``fit(X, y)``,
  ``est.save(path)``), bare or as an attribute of anything.

Calls of other names (``cos(u, v)``, ``tokenizer(texts)``, a peer library's API) and code
without a call (``pooling="cls"``, ``12 * hidden * (layers + 1)``) are prose and not checked;
shell commands are ``test_shell_snippets.py``'s.

Each such span (test id ``FILE:LINE``):

1. parses as a Python expression (else as statements);
2. calls only what exists, with arguments it takes and one value each (no ``"a" or "b"``):
   each call of a resolvable name binds to its signature (``bind_partial``: prose may leave
   required arguments out, as ``GridSearchCV(scoring=...)``), and a method call to the method
   of one of the estimators;
3. builds every estimator whose arguments are literals (``BertTextClassifier(fine_tune="top")``,
   ``make_pipeline(BertSentenceTransformer(pooling="cnn", fine_tune="full"),
   LogisticRegression())``): it is constructed and cloned, a pipeline's steps are validated,
   and it and every estimator inside pass their parameter validation (``_validate_params()``)
   and skbert's fit-time check of renamed spellings, with FutureWarning an error, so that a
   stale or deprecated value in prose fails. ``set_params(...)`` with literal values is
   checked as each estimator that has those parameters, built with them. An argument that is
   not a literal (a variable, or ``...`` for "some value") leaves its call unbuilt; the call is
   still bound.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import re
import warnings

import pytest
from doc_snippets import all_spans
from sklearn.base import BaseEstimator, clone

import skbert
from skbert import BertSentenceTransformer, BertTextClassifier
from skbert._core.deprecations import warn_renamed

ESTIMATORS = (BertSentenceTransformer, BertTextClassifier)
ROOTS = {"skbert", "sklearn", "joblib", "torch"}
OPTIONAL = {"dask", "distributed"}  # the dask extra: a span that needs it is skipped without


@functools.cache
def names() -> dict[str, str]:
    """Bare names the documents call, by the dotted path they stand for."""
    table = {name: f"skbert.{name}" for name in skbert.__all__ if not name.startswith("_")}
    for module in ("skbert.datasets", "skbert.metrics", "skbert.pretraining"):
        table.update({name: f"{module}.{name}" for name in importlib.import_module(module).__all__})
    table.update(
        Pipeline="sklearn.pipeline.Pipeline",
        make_pipeline="sklearn.pipeline.make_pipeline",
        GridSearchCV="sklearn.model_selection.GridSearchCV",
        LogisticRegression="sklearn.linear_model.LogisticRegression",
        FrozenEstimator="sklearn.frozen.FrozenEstimator",
        clone="sklearn.base.clone",
    )
    return table


@functools.cache
def methods() -> frozenset[str]:
    return frozenset(
        name
        for cls in ESTIMATORS
        for name in dir(cls)
        if not name.startswith("_") and callable(getattr(cls, name))
    )


def is_python(text: str) -> bool:
    """Whether a span is Python code for this file (see the module docstring)."""
    for call in re.finditer(r"(?<![\w.])([A-Za-z_]\w*(?:\s*\.\s*[A-Za-z_]\w*)*)\s*\(", text):
        parts = re.split(r"\s*\.\s*", call[1])
        if parts[0] in names() or parts[0] in ROOTS or parts[-1] in methods():
            return True
    return False


class NotLiteral(Exception):
    """An argument that is not a literal: its call is bound, not built."""


def dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def resolve(name: str | None):
    """The object a dotted name stands for; None for a name of neither NAMES nor ROOTS."""
    if name is None:
        return None
    head, *rest = name.split(".")
    if head in names():
        path = names()[head].split(".") + rest
    elif head in ROOTS:
        path = [head, *rest]
    else:
        return None
    for i in range(len(path), 0, -1):
        try:
            obj = importlib.import_module(".".join(path[:i]))
        except ModuleNotFoundError as error:
            if error.name and error.name.split(".")[0] in OPTIONAL:
                pytest.skip(f"{name} needs {error.name}: the dask extra")
            continue
        for part in path[i:]:
            obj = getattr(obj, part)  # AttributeError: the documents name what is not there
        return obj
    raise LookupError(f"{name}: no such module")


def _bind(target, call: ast.Call, self_first: bool) -> None:
    if any(isinstance(a, ast.Starred) for a in call.args) or any(
        k.arg is None for k in call.keywords
    ):
        return
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):  # a builtin without a signature
        return
    args = [object()] * (len(call.args) + self_first)
    signature.bind_partial(*args, **{k.arg: object() for k in call.keywords})


def check_call(call: ast.Call) -> None:
    """Raise when a call's callee does not exist or does not take its arguments, or when an
    argument lists alternatives (``fine_tune="full" or "top"`` pastes as "full")."""
    for value in [*call.args, *(k.value for k in call.keywords)]:
        if isinstance(value, ast.BoolOp) and all(isinstance(v, ast.Constant) for v in value.values):
            raise TypeError(f"{ast.unparse(value)} lists alternatives: write one value")
    name = dotted(call.func)
    target = resolve(name)
    if target is not None:
        _bind(target, call, self_first=False)
        return
    method = call.func.attr if isinstance(call.func, ast.Attribute) else name
    if method not in methods():
        return
    errors = []
    for cls in ESTIMATORS:
        if hasattr(cls, method):
            try:
                _bind(getattr(cls, method), call, self_first=True)
                return
            except TypeError as error:
                errors.append(f"{cls.__name__}.{method}: {error}")
    raise TypeError("; ".join(errors))


def build(node: ast.AST):
    """The value of a literal, an estimator built from literals, or NotLiteral."""
    if isinstance(node, ast.Constant) and node.value is not Ellipsis:
        return node.value
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        items = [build(item) for item in node.elts]
        return {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)](items)
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {build(k): build(v) for k, v in zip(node.keys, node.values, strict=True)}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = build(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Call) and builds_estimator(node):
        if any(isinstance(a, ast.Starred) for a in node.args) or any(
            k.arg is None for k in node.keywords
        ):
            raise NotLiteral
        target = resolve(dotted(node.func))
        args = [build(arg) for arg in node.args]
        kwargs = {k.arg: build(k.value) for k in node.keywords}
        try:
            inspect.signature(target).bind(*args, **kwargs)
        except TypeError:  # arguments left out in prose, or a wrong call: check_call's finding
            raise NotLiteral from None
        return target(*args, **kwargs)
    raise NotLiteral


def builds_estimator(call: ast.Call) -> bool:
    try:
        target = resolve(dotted(call.func))
    except (LookupError, AttributeError):
        return False
    if inspect.isclass(target):
        return issubclass(target, BaseEstimator)
    return getattr(target, "__name__", "") in {"make_pipeline", "make_union"}


def validate(estimator) -> None:
    """Construction-time checks of a built estimator and of every estimator inside it."""
    clone(estimator)
    inner = [v for v in estimator.get_params(deep=True).values() if isinstance(v, BaseEstimator)]
    for each in [estimator, *inner]:
        for steps_check in ("_validate_steps", "_validate_transformers"):
            if hasattr(each, steps_check):
                getattr(each, steps_check)()
        each._validate_params()
        if isinstance(each, ESTIMATORS):
            warn_renamed(each.get_params(deep=False), stacklevel=1)


def built_estimators(node: ast.AST):
    """The outermost estimator calls built from literals, and the set_params calls as the
    estimators they would give."""
    if isinstance(node, ast.Call) and builds_estimator(node):
        try:
            yield ast.unparse(node), build(node)
            return
        except NotLiteral:
            pass
    if (
        isinstance(node, ast.Call)
        and dotted(node.func)
        and dotted(node.func).endswith("set_params")
    ):
        try:
            params = {k.arg: build(k.value) for k in node.keywords}
        except NotLiteral:
            params = None
        if params is not None:
            owners = [cls for cls in ESTIMATORS if set(params) <= set(cls().get_params())]
            if not owners:
                raise TypeError(f"no skbert estimator has all of {sorted(params)}")
            for cls in owners:
                yield f"{cls.__name__}().{ast.unparse(node)}", cls(**params)
    for child in ast.iter_child_nodes(node):
        yield from built_estimators(child)


def problems(text: str) -> list[str]:
    """What is wrong with a span of inline Python (empty: nothing)."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        try:
            tree = ast.parse(text)
        except SyntaxError as error:
            return [f"does not parse: {error.msg}"]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            try:
                check_call(node)
            except (TypeError, AttributeError, LookupError) as error:
                found.append(f"{ast.unparse(node)}: {type(error).__name__}: {error}")
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        try:
            for source, estimator in built_estimators(tree):
                try:
                    validate(estimator)
                except Exception as error:  # noqa: BLE001 (any failure is the finding)
                    found.append(f"{source}: {type(error).__name__}: {error}")
        except Exception as error:  # noqa: BLE001 (building raised: the finding too)
            found.append(f"{text}: {type(error).__name__}: {error}")
    return found


SPANS = [pytest.param(span.text, id=name) for name, span in all_spans() if is_python(span.text)]


@pytest.mark.parametrize("text", SPANS)
def test_inline_python(text):
    if "skbert.dask" in text:  # resolving skbert.dask's names imports Dask
        pytest.importorskip("dask.dataframe", reason="the span calls skbert.dask: the dask extra")
    found = problems(text)
    assert not found, "\n".join(found)


def test_inline_python_found():
    """Spans of each kind are found (a changed rule or extractor would otherwise skip them)."""
    texts = [param.values[0] for param in SPANS]
    assert 'BertSentenceTransformer(fine_tune="full")' in texts, texts
    assert any(t.startswith("skbert.pretraining.further_pretrain(") for t in texts), texts
    assert "est.save(path)" in texts, texts
    assert 'set_output(transform="pandas")' in texts, texts


def test_python_span_rule():
    python = ['BertTextClassifier(fine_tune="top")', "fit(X, y)", "est.save(path)"]
    python += ["skbert.load(path)", "GridSearchCV(cv=3)", "torch.load(weights_only=True)"]
    prose = ['pooling="cls"', "cos(u, v)", "tokenizer(texts)", "12 * hidden * (layers + 1)"]
    prose += ["bash scripts/demo.sh", 'SentenceTransformer(path, device="cpu")']
    assert [is_python(t) for t in python + prose] == [True] * 6 + [False] * 6


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('BertTextClassifier(fine_tune="top", pooling="cnn")', []),
        ('BertTextClassifier(fine_tune="head")', ["FutureWarning"]),
        ('BertTextClassifier(fine_tune="everything")', ["InvalidParameterError"]),
        ("BertSentenceTransformer(poolling='mean')", ["unexpected keyword argument"]),
        ("BertTextClassifier(mlm_steps=...)", []),
        ("BertTextClassifier(mlm_step=...)", ["unexpected keyword argument"]),
        ("BertSentenceTransformer(layer=(-4, -3, -2, -1), layer_combine='mean')", []),
        ('make_pipeline(BertSentenceTransformer(pooling="cnn", fine_tune="full"))', []),
        ('make_pipeline(BertSentenceTransformer(pooling="cnnn"))', ["InvalidParameterError"]),
        ("Pipeline([BertSentenceTransformer(), LogisticRegression()])", ["is not iterable"]),
        ("Pipeline(BertSentenceTransformer, LogisticRegression)", ["too many positional"]),
        ('set_params(device="cpu")', []),
        ('set_params(precision="fp64")', ["InvalidParameterError"] * 2),  # both estimators
        ("set_params(pooling='mean', mlm_steps=3)", []),
        ("set_params(objective='cosine', mlm_steps=3)", ["no skbert estimator has all"]),
        ("est.save(path)", []),
        ("est.save(path, overwrite=True, compress=True)", ["unexpected keyword argument"]),
        ("skbert.lode(path)", ["AttributeError"]),
        ("GridSearchCV(scoring=...)", []),
        ('BertSentenceTransformer(fine_tune="full" or "top")', ["lists alternatives"]),
        ("BertTextClassifier(mlm_steps=300", ["does not parse"]),
    ],
)
def test_checks(text, expected):
    """Each check finds what it should and nothing else (see the module docstring)."""
    found = problems(text)
    assert len(found) == len(expected), found
    for problem, part in zip(found, expected, strict=True):
        assert part in problem, (problem, part)
