"""Every ``>>>`` example of skbert's public docstrings runs as written, and prints what it shows.

The examples that load a model or train one carry ``# doctest: +SKIP``, so that a user's
``pytest --doctest-modules`` does not start minute-long fits; this test clears the directive and
runs them all. Each docstring runs in a namespace of its own (``{"__name__": "__main__"}``: an
example imports what it uses) and in a temporary working directory (examples write folders).

The output is compared as doctest compares it, exactly, with one allowance: an expected output
that is a single float written with 3 decimals (an example prints ``round(score, 3)``) matches
a printed float of at most 3 decimals within 0.01 of it. A seeded fit repeats itself on one
machine, but on other CPU kinds (Zen 3/4/5, Intel AMX), or with another number of threads, the
matrix products can differ in their last float bits, and after training that can flip a
prediction near the decision boundary: 0.01 is 2 of the 200 held-out predictions of an accuracy.
The figures are those of the versions the docs name (transformers 5, torch 2.13); under the
oldest supported versions (scripts/test-oldest.sh: transformers 4, torch 2.2), whose layers
and initialisation compute otherwise, a fit trains to another score (the regressor's example
0.619 against 0.648), so there a 3-decimal figure must be a printed float, of any value, and
every other output is still compared exactly.

A guard test holds the list of the docstrings with examples, so that one gaining or losing its
examples is noticed, and the examples' test cannot pass by finding none.
"""

from __future__ import annotations

import doctest
import functools
import hashlib
import importlib
import importlib.util
import io
import math
import os
import re
import shutil
from pathlib import Path

import pytest

#: the public modules whose docstrings are searched (``skbert.load`` is in the last one)
MODULES = (
    "skbert.sentence",
    "skbert.classifier",
    "skbert.regressor",
    "skbert.metrics",
    "skbert.datasets",
    "skbert.pretraining",
    "skbert.onnx",
    "skbert.exceptions",
    "skbert.optim",
    "skbert.pooling",
    "skbert.truncation",
    "skbert.dask",
    "skbert._estimator.persistence.folder",
    "skbert._estimator.base",  # the estimators' save
)

#: modules that import an optional extra: searched where it is installed (none has examples)
NEEDS = {"skbert.dask": "dask"}

#: every docstring of those modules (their functions, classes and methods) with examples
EXPECTED = (
    "skbert._estimator.base.BertEstimatorBase.save",
    "skbert._estimator.persistence.folder.load",
    "skbert.classifier.BertTextClassifier",
    "skbert.exceptions.TrainingDivergedError",
    "skbert.metrics.spearman_scorer",
    "skbert.metrics.sts_spearman_scorer",
    "skbert.onnx.export_onnx",
    "skbert.pretraining.further_pretrain",
    "skbert.pretraining.within_task_pretrain",
    "skbert.regressor.BertTextRegressor",
    "skbert.sentence.BertSentenceTransformer",
)

#: what an example needs beyond skbert itself: the optional modules it imports, and whether it
#: loads the packaged all-MiniLM-L6-v2, reads the shared data (SKBERT_DATA), or loads the model
#: by its hub id from the Hugging Face cache
OPTIONAL_MODULES = {"skbert.onnx.export_onnx": ("onnx", "onnxscript", "onnxruntime")}
NO_MODEL = {"skbert.exceptions.TrainingDivergedError"}
SHARED_DATA = {
    "skbert.metrics.spearman_scorer",
    "skbert.metrics.sts_spearman_scorer",
    "skbert.regressor.BertTextRegressor",
}
HUB_CACHE = {"skbert.pretraining.within_task_pretrain"}

HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"

#: an expected output of a float written with 3 decimals, and a printed float of at most 3
ROUNDED = re.compile(r"-?\d+\.\d{3}")
PRINTED = re.compile(r"-?\d+(?:\.\d{1,3})?")
#: 2 of 200 predictions; the 1e-9 absorbs the float error of the difference itself
TOLERANCE = 0.01 + 1e-9


class RoundedFloatChecker(doctest.OutputChecker):
    """doctest's exact comparison, but a 3-decimal float matches within ``tolerance``."""

    def __init__(self, tolerance: float = TOLERANCE):
        self.tolerance = tolerance

    def check_output(self, want, got, optionflags):
        if super().check_output(want, got, optionflags):
            return True
        want, got = want.strip(), got.strip()
        if ROUNDED.fullmatch(want) and PRINTED.fullmatch(got):
            return abs(float(want) - float(got)) <= self.tolerance
        return False


def figures_tolerance() -> float:
    """:data:`TOLERANCE` under the versions the docs' figures were measured with; any value
    under transformers 4 (the oldest supported versions), which trains to other scores."""
    import transformers

    return TOLERANCE if int(transformers.__version__.split(".")[0]) >= 5 else math.inf


@pytest.mark.parametrize(
    ("want", "got", "matches"),
    [
        ("0.685\n", "0.685\n", True),
        ("0.685\n", "0.675\n", True),  # 2 of 200 predictions
        ("0.685\n", "0.69\n", True),
        ("0.685\n", "0.674\n", False),
        ("0.685\n", "0.6851\n", False),  # not rounded to 3 decimals
        ("0.685\n", "np.float64(0.685)\n", False),
        ("0.68\n", "0.685\n", False),  # only a 3-decimal expected output has the allowance
        ("1\n", "2\n", False),
        ("array([0, 1])\n", "array([0, 1])\n", True),
    ],
)
def test_rounded_float_checker(want, got, matches):
    assert RoundedFloatChecker().check_output(want, got, 0) is matches


@functools.cache
def docstrings() -> dict[str, doctest.DocTest]:
    """The docstrings with examples in :data:`MODULES`, by name."""
    finder = doctest.DocTestFinder(exclude_empty=True)
    found = {}
    for name in MODULES:
        if name in NEEDS and importlib.util.find_spec(NEEDS[name]) is None:
            continue
        for test in finder.find(importlib.import_module(name)):
            if test.examples:  # exclude_empty leaves out empty docstrings, not example-less
                found.setdefault(test.name, test)
    return found


def test_docstrings_with_examples_are_the_expected_ones():
    assert sorted(docstrings()) == sorted(EXPECTED)


def marks(name: str) -> list:
    """The markers of the test of the docstring ``name``."""
    found = [] if name in NO_MODEL else [pytest.mark.real_model]
    return found + ([pytest.mark.shared_data] if name in SHARED_DATA else [])


@pytest.fixture
def minilm_hub_cache(packaged_model, tmp_path_factory, monkeypatch) -> Path:
    """A Hugging Face hub cache holding all-MiniLM-L6-v2 under its hub id, as a download
    leaves it (``models--org--name/refs/main`` naming a snapshot folder), its snapshot's files
    links to the packaged model's; ``huggingface_hub.constants.HF_HUB_CACHE`` points at it
    (transformers reads it at each call)."""
    import huggingface_hub.constants
    from huggingface_hub import try_to_load_from_cache

    from skbert._nn.backbone import resolve_model

    cache = tmp_path_factory.mktemp("hub")
    repo = cache / ("models--" + HUB_ID.replace("/", "--"))
    revision = hashlib.sha1(b"packaged all-MiniLM-L6-v2").hexdigest()
    snapshot = repo / "snapshots" / revision
    source = Path(packaged_model)
    for file in sorted(path for path in source.rglob("*") if path.is_file()):
        link = snapshot / file.relative_to(source)
        link.parent.mkdir(parents=True, exist_ok=True)
        try:
            link.symlink_to(file)
        except OSError:  # no symbolic links (Windows without the privilege)
            shutil.copyfile(file, link)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    import transformers.utils.hub

    if hasattr(transformers.utils.hub, "TRANSFORMERS_CACHE"):  # transformers 4 read this one
        monkeypatch.setattr(transformers.utils.hub, "TRANSFORMERS_CACHE", str(cache))
    assert try_to_load_from_cache(HUB_ID, "config.json") == str(snapshot / "config.json")
    # skbert itself still takes the hub id from the packaged copy
    assert resolve_model(HUB_ID) == packaged_model
    return cache


@pytest.mark.parametrize("name", [pytest.param(n, marks=marks(n)) for n in EXPECTED])
def test_docstring_examples(name, request, monkeypatch, tmp_path):
    for module in OPTIONAL_MODULES.get(name, ()):
        pytest.importorskip(module, reason=f"{name}'s example needs the onnx extra")
    if name not in NO_MODEL:
        request.getfixturevalue("packaged_model")
    if name in SHARED_DATA:
        monkeypatch.setenv("SKBERT_DATA", os.fspath(request.getfixturevalue("data_home")))
    if name in HUB_CACHE:
        request.getfixturevalue("minilm_hub_cache")
    if name not in docstrings():
        pytest.fail(f"{name} has no examples any more (see the guard test)")
    found = docstrings()[name]
    examples = []
    for example in found.examples:
        options = {flag: on for flag, on in example.options.items() if flag != doctest.SKIP}
        examples.append(
            doctest.Example(
                example.source,
                example.want,
                exc_msg=example.exc_msg,
                lineno=example.lineno,
                indent=example.indent,
                options=options,
            )
        )
    test = doctest.DocTest(
        examples,
        {"__name__": "__main__"},
        found.name,
        found.filename,
        found.lineno,
        found.docstring,
    )
    monkeypatch.chdir(tmp_path)
    report = io.StringIO()
    runner = doctest.DocTestRunner(checker=RoundedFloatChecker(figures_tolerance()))
    results = runner.run(test, out=report.write)
    assert results.attempted == len(examples)
    if results.failed:
        pytest.fail(
            f"{results.failed} of {results.attempted} examples of {name} failed:\n"
            + report.getvalue(),
            pytrace=False,
        )
