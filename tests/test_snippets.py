"""Every Python snippet of README.md, benchmarks/README.md and docs/ runs as pasted.

The snippets are the code blocks of language python, python3 or py: the ```python fences of
the Markdown documents and the ``.. code-block:: python`` blocks of docs/*.rst
(``tests/doc_snippets.py`` says what a block is). Each one is a test case (id ``FILE:LINE``,
the line of its fence or directive), executed in a fresh namespace with the packaged
all-MiniLM-L6-v2, offline, with SKBERT_DATA pointing at the shared evaluation data (when
unset). All snippets run in one temporary working directory, as if pasted one after another in
one folder: they may write caches and checkpoints there, and the grid searches with
``memory="skbert-cache"`` share one frozen-feature cache (the first encodes the bundled
sentences, the others read them), which keeps the file quick. Snippets are compiled under their
file's name with their lines in place, so a traceback points into the document."""

from __future__ import annotations

import re

import pytest
from doc_snippets import PYTHON, all_blocks

# Imports of optional packages, by the extra that brings them: a snippet that needs one is
# skipped where the extra is not installed (scripts/test-oldest.sh installs models,test only).
EXTRAS = {"dask": "dask", "distributed": "dask", "onnxruntime": "onnx", "onnx": "onnx"}
EXTRA_IMPORT = re.compile(r"^\s*(?:from|import)\s+(" + "|".join(EXTRAS) + r")\b", re.MULTILINE)
# Loaders of the shared evaluation data (the bundled load_demo_sentiment is not one of them).
SHARED_DATA = re.compile(r"\bload_(stsb|sst2|imdb_sample|trec|snli)\b")


def collect():
    snippets = []
    for name, path, block in all_blocks(PYTHON):
        if block.code.lstrip().startswith(":"):  # MyST directive options
            raise AssertionError(f"{name}: snippet options are not supported")
        snippets.append((name, path, block.first, block.code))
    return snippets


SNIPPETS = collect()


def test_snippets_found():
    """The extraction finds the snippets (a changed fence style would otherwise skip them)."""
    names = [name for name, *_ in SNIPPETS]
    assert any(name.startswith("README.md:") for name in names), names
    assert any(name.startswith("docs/index.rst:") for name in names), names
    assert any(name.startswith("docs/user_guide.md:") for name in names), names
    assert all(code.strip() for *_, code in SNIPPETS), names


def _param(name, path, first, code):
    marks = [pytest.mark.real_model]
    if SHARED_DATA.search(code):
        marks.append(pytest.mark.shared_data)
    return pytest.param(path, first, code, id=name, marks=marks)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """The working directory that all snippets share."""
    return tmp_path_factory.mktemp("snippets")


@pytest.mark.parametrize(("path", "first", "code"), [_param(*s) for s in SNIPPETS])
def test_snippet_runs(path, first, code, packaged_model, request, workdir, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for module in sorted(set(EXTRA_IMPORT.findall(code))):
        reason = f"the snippet imports {module}: the {EXTRAS[module]} extra"
        pytest.importorskip(module, reason=reason)
    if SHARED_DATA.search(code):
        monkeypatch.setenv("SKBERT_DATA", str(request.getfixturevalue("data_home")))
    monkeypatch.chdir(workdir)
    # Padding with blank lines keeps the document's line numbers in tracebacks.
    compiled = compile("\n" * (first - 1) + code, str(path), "exec")
    exec(compiled, {"__name__": "__main__"})
