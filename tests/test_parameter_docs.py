"""The estimators' Parameters and Attributes sections, from skbert/_estimator/parameter_docs.py.

Each estimator's class docstring is filled in when the class is defined, from the entries the
estimators share and its own. What every reader of a docstring sees is checked here: numpydoc's
parser (which the Sphinx build uses) finds every ``__init__`` parameter documented once, in
signature order, and nothing else; ``inspect.getdoc`` and ``help()`` show the same entries;
numpydoc's validation (the checks docs/conf.py applies) passes. And the table keeps its rule: a
shared entry is used by two or more estimators, and an estimator's own entry of a shared name
says something else than the shared one (it is not a copy).
"""

from __future__ import annotations

import inspect
import pydoc

import pytest
from numpydoc.docscrape import ClassDoc
from numpydoc.validate import validate

from skbert import (
    BertSentenceTransformer,
    BertTextClassifier,
    BertTextRegressor,
    classifier,
    regressor,
    sentence,
)
from skbert._estimator.parameter_docs import ATTRIBUTES, PARAMETERS, document, numpydoc_entries

ESTIMATORS = {
    BertSentenceTransformer: sentence,
    BertTextClassifier: classifier,
    BertTextRegressor: regressor,
}
# the checks docs/conf.py leaves out of numpydoc_validation_checks
NOT_CHECKED = {"ES01", "SA01", "EX01"}


def signature_names(cls) -> list[str]:
    return [name for name in inspect.signature(cls.__init__).parameters if name != "self"]


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda cls: cls.__name__)
def test_numpydoc_finds_each_parameter_once_in_signature_order(cls):
    documented = [parameter.name for parameter in ClassDoc(cls)["Parameters"]]
    assert documented == signature_names(cls)


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda cls: cls.__name__)
def test_every_reader_sees_the_same_entries(cls):
    module = ESTIMATORS[cls]
    own = module._OWN_PARAMETERS
    entries = [own.get(name, PARAMETERS.get(name)) for name in signature_names(cls)]
    section = "Parameters\n----------\n" + "\n".join(entries) + "\n\nAttributes\n----------\n"
    assert section in inspect.getdoc(cls)
    shown = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    for entry in entries:
        assert entry.replace("\n", "\n |  ") in shown
    assert "$" not in cls.__doc__
    scraped = ClassDoc(cls)
    for parameter, entry in zip(scraped["Parameters"], entries, strict=True):
        head, *description = entry.split("\n")
        assert head == f"{parameter.name} : {parameter.type}"
        assert [line.removeprefix("    ") for line in description] == parameter.desc


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda cls: cls.__name__)
def test_numpydoc_validation_passes(cls):
    errors = validate(f"skbert.{cls.__name__}")["errors"]
    assert [error for error in errors if error[0] not in NOT_CHECKED] == []


def test_a_shared_entry_serves_two_estimators_and_an_own_entry_differs():
    for shared, kind in ((PARAMETERS, "Parameters"), (ATTRIBUTES, "Attributes")):
        readers = {name: [] for name in shared}
        for cls, module in ESTIMATORS.items():
            own = module._OWN_PARAMETERS if kind == "Parameters" else module._OWN_ATTRIBUTES
            for item in ClassDoc(cls)[kind]:
                if item.name in own:
                    assert own[item.name] != shared.get(item.name), (cls.__name__, item.name)
                elif item.name in readers:
                    readers[item.name].append(cls.__name__)
        lonely = {name: users for name, users in readers.items() if len(users) < 2}
        assert lonely == {}, f"shared {kind} entries that fewer than two estimators read"


def test_entries_are_split_at_unindented_lines():
    entries = numpydoc_entries(
        """
        alpha : float, default=1.0
            The first.
            Two lines.
        beta : {"a", "b"}, default="a"
            The second.
        """
    )
    assert entries == {
        "alpha": "alpha : float, default=1.0\n    The first.\n    Two lines.",
        "beta": 'beta : {"a", "b"}, default="a"\n    The second.',
    }
    with pytest.raises(ValueError, match="two numpydoc entries of 'alpha'"):
        numpydoc_entries("alpha : int\n    One.\nalpha : int\n    Two.")
    with pytest.raises(ValueError, match="before any entry"):
        numpydoc_entries("    stray description\nalpha : int")


def _toy_class(doc: str):
    class Toy:
        def __init__(self, model=None, *, alpha=1.0):
            self.model = model
            self.alpha = alpha

    Toy.__doc__ = doc
    return Toy


TOY_DOC = """A toy.

    Parameters
    ----------
    $parameters

    Attributes
    ----------
    $attributes
    """


def test_document_fills_both_sections_with_the_class_indentation():
    own = numpydoc_entries("alpha : float, default=1.0\n    Its own text.")
    cls = document(attributes=("layers_",), own_parameters=own)(_toy_class(TOY_DOC))
    expected_model = PARAMETERS["model"].replace("\n", "\n    ")
    assert cls.__doc__ == (
        "A toy.\n\n    Parameters\n    ----------\n"
        f"    {expected_model}\n    alpha : float, default=1.0\n        Its own text.\n\n"
        "    Attributes\n    ----------\n"
        f"    {ATTRIBUTES['layers_'].replace(chr(10), chr(10) + '    ')}\n    "
    )
    assert [item.name for item in ClassDoc(cls)["Parameters"]] == ["model", "alpha"]


def test_document_refuses_a_missing_or_a_stray_entry():
    with pytest.raises(ValueError, match=r"no entry, shared or own, for \['alpha'\]"):
        document(attributes=())(_toy_class(TOY_DOC))
    stray = numpydoc_entries("alpha : float\n    Alpha.\nbeta : int\n    Not a parameter.")
    with pytest.raises(ValueError, match=r"names the section does not hold: \['beta'\]"):
        document(attributes=(), own_parameters=stray)(_toy_class(TOY_DOC))


def test_skbert_imports_with_docstrings_stripped():
    """``python -OO`` (PYTHONOPTIMIZE=2) strips docstrings; ``import skbert`` filled them in
    and failed there with a TypeError. (transformers 5 itself then fails to build a BERT
    model, in its auto_docstring: loading a model under -OO is transformers' to allow.)"""
    import subprocess
    import sys

    code = (
        "import skbert\n"
        "from sklearn.base import clone\n"
        "assert skbert.BertTextClassifier.__doc__ is None\n"
        "print(repr(clone(skbert.BertTextRegressor(max_epochs=2))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-OO", "-c", code], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "BertTextRegressor(max_epochs=2)", done.stdout
