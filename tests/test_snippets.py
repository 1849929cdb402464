"""Every Python snippet of README.md and docs/ runs as pasted.

The snippets are the ```python fences of README.md and docs/*.md, and the
``.. code-block:: python`` blocks of docs/*.rst. Each one is a test case (id ``FILE:LINE``, the
line of its fence or directive), executed in a fresh namespace with the packaged
all-MiniLM-L6-v2, offline, with SKBERT_DATA pointing at the shared evaluation data (when
unset). All snippets run in one temporary working directory, as if pasted one after another in
one folder: they may write caches and checkpoints there, and the grid searches with
``memory="skbert-cache"`` share one frozen-feature cache (the first encodes the bundled
sentences, the others read them), which keeps the file quick. Snippets are compiled under their
file's name with their lines in place, so a traceback points into the document.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from conftest import REPO

DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
RST_DOCUMENTS = sorted((REPO / "docs").glob("*.rst"))

# Imports of optional packages, by the extra that brings them: a snippet that needs one is
# skipped where the extra is not installed (scripts/test-oldest.sh installs models,test only).
EXTRA_IMPORT = re.compile(r"^\s*(?:from|import)\s+(dask|distributed)\b", re.MULTILINE)
# Loaders of the shared evaluation data (the bundled load_demo_sentiment is not one of them).
SHARED_DATA = re.compile(r"\bload_(stsb|sst2|imdb_sample|trec|snli)\b")

MD_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*?)\s*$")
MD_PYTHON = re.compile(r"^(python3?|py|\{(code-block|code|code-cell|sourcecode)\}\s+python3?)$")
RST_DIRECTIVE = re.compile(r"^(?P<indent>\s*)\.\. (code-block|code|sourcecode)::\s+python3?\s*$")


def markdown_snippets(path: Path):
    """Yield ``(line of the fence, first code line, code)`` for each Python fence."""
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opening = MD_FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, info = opening["fence"], opening["info"]
        end = i + 1
        while end < len(lines):
            closing = MD_FENCE.match(lines[end])
            if (
                closing
                and not closing["info"]
                and closing["fence"][0] == fence[0]
                and len(closing["fence"]) >= len(fence)
            ):
                break
            end += 1
        if MD_PYTHON.match(info):
            body = lines[i + 1 : end]
            if body and body[0].lstrip().startswith(":"):  # MyST directive options
                raise AssertionError(f"{path.name}:{i + 1}: snippet options are not supported")
            yield i + 1, i + 2, textwrap.dedent("\n".join(body))
        i = end + 1


def rst_snippets(path: Path):
    """Yield ``(line of the directive, first code line, code)`` for each Python code-block."""
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        directive = RST_DIRECTIVE.match(line)
        if not directive:
            continue
        indent = len(directive["indent"])
        j = i + 1
        # options (":caption: ...") and the blank line before the content
        while j < len(lines) and (not lines[j].strip() or lines[j].lstrip().startswith(":")):
            j += 1
        start = j
        while j < len(lines) and (
            not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > indent
        ):
            j += 1
        body = lines[start:j]
        while body and not body[-1].strip():
            body.pop()
        yield i + 1, start + 1, textwrap.dedent("\n".join(body))


def collect():
    snippets = []
    for paths, finder in ((DOCUMENTS, markdown_snippets), (RST_DOCUMENTS, rst_snippets)):
        for path in paths:
            for line, first, code in finder(path):
                snippets.append((f"{path.relative_to(REPO)}:{line}", path, first, code))
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
        pytest.importorskip(module, reason=f"the snippet imports {module}: the dask extra")
    if SHARED_DATA.search(code):
        monkeypatch.setenv("SKBERT_DATA", str(request.getfixturevalue("data_home")))
    monkeypatch.chdir(workdir)
    # Padding with blank lines keeps the document's line numbers in tracebacks.
    compiled = compile("\n" * (first - 1) + code, str(path), "exec")
    exec(compiled, {"__name__": "__main__"})
