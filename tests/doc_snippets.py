"""The code of the documentation: code blocks and inline code of README.md, benchmarks/README.md
and docs/ (one extractor for ``test_snippets.py``, ``test_shell_snippets.py`` and
``test_inline_code.py``).

Code blocks (:func:`markdown_blocks`, :func:`rst_blocks`):

- Markdown: fences of three or more backticks or tildes (CommonMark: a fence closes with the
  same character, at least as many, and nothing but spaces after). The language is the first
  word of the info string, or the second for MyST's ``{code-block} LANG``; a bare fence has the
  language ``""``. A fence that never closes runs to the end of the document, as CommonMark
  reads it, and is reported as a problem.
- reStructuredText: the directives ``code-block``, ``code`` and ``sourcecode`` (language: their
  argument, ``""`` without one), any other code-running directive (``doctest``, ``testcode``,
  ``ipython``, ``jupyter-execute``, ``code-cell``: language = the directive's name) and literal
  blocks introduced by ``::`` at the end of a paragraph (language ``"::"``). The content is the
  indented block after the options and the blank line.

Inline code (:func:`markdown_spans`, :func:`rst_spans`), outside code blocks, paragraph by
paragraph (a span never crosses a blank line):

- Markdown: CommonMark code spans, a run of N backticks up to the next run of exactly N; line
  ends inside become spaces, one space is stripped from each end when both ends have one, a
  backslash-escaped backtick opens nothing, and in a table row ``\\|`` reads ``|`` (GFM). The
  text of a MyST role (``{func}`skbert.load("m") <skbert.load>```) is a span too, without its
  explicit ``<target>``: the page shows that text as code.
- reStructuredText: ````literal```` and, since docs/conf.py sets ``default_role = "literal"``,
  ```literal```; a backtick text with a role (``:class:`x```) or a link (```x <url>`_``) is not
  code.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from conftest import REPO

MARKDOWN_DOCUMENTS = [
    REPO / "README.md",
    REPO / "benchmarks" / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
]
RST_DOCUMENTS = sorted((REPO / "docs").glob("*.rst"))
DOCUMENTS = [*MARKDOWN_DOCUMENTS, *RST_DOCUMENTS]

PYTHON = frozenset({"python", "python3", "py"})
SHELL = frozenset({"bash", "sh", "shell", "console"})
TEXT = frozenset({"text"})  # printed output: shown, never run
#: MyST directives written as fences that hold no code (``{include} FILE``, a note, ...): their
#: "language" is the directive's name in braces; the included files are checked themselves.
MYST_DIRECTIVES = frozenset(
    "{" + name + "}"
    for name in (
        "include", "toctree", "note", "warning", "tip", "important", "seealso",
        "admonition", "figure", "image", "contents",
    )
)  # fmt: skip
KNOWN_LANGUAGES = PYTHON | SHELL | TEXT | MYST_DIRECTIVES


@dataclass(frozen=True)
class Block:
    """A code block: the line of its fence or directive, of its first code line, its language
    (lower case) and its code (dedented)."""

    line: int
    first: int
    language: str
    code: str


@dataclass(frozen=True)
class Span:
    """Inline code: the line where it starts and its text."""

    line: int
    text: str


def relative(path: Path) -> str:
    return str(path.relative_to(REPO))


# -- Markdown ----------------------------------------------------------------------------------

_MD_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


def _md_language(info: str) -> str:
    words = info.split()
    if not words:
        return ""
    if words[0].startswith("{") and words[0].endswith("}"):  # MyST: {code-block} python
        if words[0].lower() in MYST_DIRECTIVES:  # {include} ../benchmarks/README.md
            return words[0].lower()
        return words[1].lower() if len(words) > 1 else ""
    return words[0].lower()


def _md_closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    return len(stripped) >= len(fence) and set(stripped) == {fence[0]}


def _md_fences(lines: list[str]):
    """``(opening index, closing index or None, language)`` of each fence."""
    i = 0
    while i < len(lines):
        opening = _MD_FENCE.match(lines[i])
        if not opening or (opening["fence"][0] == "`" and "`" in opening["info"]):
            i += 1
            continue
        fence = opening["fence"]
        end = next((j for j in range(i + 1, len(lines)) if _md_closes(lines[j], fence)), None)
        yield i, end, _md_language(opening["info"])
        if end is None:
            return
        i = end + 1


def markdown_blocks(text: str) -> tuple[list[Block], list[str]]:
    """The code blocks of a Markdown text, and its problems (a fence never closed)."""
    lines = text.splitlines()
    blocks, problems = [], []
    for start, end, language in _md_fences(lines):
        if end is None:
            problems.append(f"line {start + 1}: this fence is never closed")
        body = lines[start + 1 : len(lines) if end is None else end]
        blocks.append(Block(start + 1, start + 2, language, textwrap.dedent("\n".join(body))))
    return blocks, problems


def _paragraphs(lines: list[str]):
    """``(index of the first line, its lines without their indentation, joined)`` of each run
    of non-blank lines."""
    start = None
    for i, line in enumerate([*lines, ""]):
        if line.strip() and start is None:
            start = i
        elif not line.strip() and start is not None:
            yield start, "\n".join(line.strip() for line in lines[start:i])
            start = None


def _blank_out(lines: list[str], ranges) -> list[str]:
    lines = list(lines)
    for start, stop in ranges:
        lines[start:stop] = [""] * (stop - start)
    return lines


_BACKTICKS = re.compile(r"`+")
#: a MyST role right before a code span, as in {func}`skbert.load("x") <skbert.load>`
_MYST_ROLE = re.compile(r"\{[\w:.-]+\}$")
#: the explicit target of a role: the span's text is what the page shows (and a reader pastes)
_ROLE_TARGET = re.compile(r"\s*<[^<>]+>$")


def markdown_spans(text: str) -> list[Span]:
    """The inline code spans of a Markdown text, outside its code blocks."""
    lines = text.splitlines()
    fences = [(s, len(lines) if e is None else e + 1) for s, e, _ in _md_fences(lines)]
    spans = []
    for first, joined in _paragraphs(_blank_out(lines, fences)):
        table = all(line.startswith("|") for line in joined.split("\n"))
        runs = list(_BACKTICKS.finditer(joined))
        k = 0
        while k < len(runs):
            opening = runs[k]
            if joined[opening.start() - 1 : opening.start()] == "\\":  # an escaped backtick
                k += 1
                continue
            closing = next(
                (
                    j
                    for j in range(k + 1, len(runs))
                    if len(runs[j].group()) == len(opening.group())
                ),
                None,
            )
            if closing is None:
                k += 1
                continue
            content = joined[opening.end() : runs[closing].start()].replace("\n", " ")
            if len(content) > 1 and content[0] == content[-1] == " " and content.strip():
                content = content[1:-1]
            if _MYST_ROLE.search(joined, 0, opening.start()):  # {func}`text <target>`
                content = _ROLE_TARGET.sub("", content)
            if table:
                content = content.replace("\\|", "|")
            spans.append(Span(first + 1 + joined.count("\n", 0, opening.start()), content))
            k = closing + 1
    return spans


# -- reStructuredText --------------------------------------------------------------------------

_RST_DIRECTIVE = re.compile(r"^(?P<indent>\s*)\.\. (?P<name>[\w:-]+)::(?P<argument>.*)$")
_CODE_DIRECTIVES = {"code-block", "code", "sourcecode"}
_RUNNING_DIRECTIVES = {"doctest", "testcode", "ipython", "jupyter-execute", "code-cell"}


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _rst_body(lines: list[str], i: int, indent: int, options: bool) -> tuple[int, int]:
    """``(start, stop)`` of the block indented deeper than ``indent`` after line ``i``."""
    j = i + 1
    while j < len(lines) and (
        not lines[j].strip() or (options and lines[j].lstrip().startswith(":"))
    ):
        j += 1
    start = j
    while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > indent):
        j += 1
    while j > start and not lines[j - 1].strip():
        j -= 1
    return start, j


def _rst_code(lines: list[str]):
    """``(line index, start, stop, language)`` of each code block of reStructuredText."""
    for i, line in enumerate(lines):
        directive = _RST_DIRECTIVE.match(line)
        if directive:
            name = directive["name"]
            if name in _CODE_DIRECTIVES or name in _RUNNING_DIRECTIVES:
                language = (
                    directive["argument"].strip().lower() if name in _CODE_DIRECTIVES else name
                )
                start, stop = _rst_body(lines, i, len(directive["indent"]), options=True)
                yield i, start, stop, language
        elif line.rstrip().endswith("::") and not line.lstrip().startswith(".."):
            start, stop = _rst_body(lines, i, _indent(line), options=False)
            if stop > start:
                yield i, start, stop, "::"


def rst_blocks(text: str) -> tuple[list[Block], list[str]]:
    """The code blocks of a reStructuredText text (and no problems: rst has no unclosed
    blocks)."""
    lines = text.splitlines()
    blocks = [
        Block(i + 1, start + 1, language, textwrap.dedent("\n".join(lines[start:stop])))
        for i, start, stop, language in _rst_code(lines)
    ]
    return blocks, []


_RST_INLINE = re.compile(
    r"``(?P<literal>\S(?:.*?\S)?)``"
    r"|(?P<role>:[\w.+-]+(?::[\w.+-]+)*:)?`(?P<text>[^`]+)`(?P<link>__?)?",
    re.DOTALL,
)


def rst_spans(text: str) -> list[Span]:
    """The inline literals of a reStructuredText text, outside its code blocks."""
    lines = text.splitlines()
    code = [(start, stop) for _, start, stop, _ in _rst_code(lines)]
    spans = []
    for first, joined in _paragraphs(_blank_out(lines, code)):
        for match in _RST_INLINE.finditer(joined):
            if match["literal"] is not None:
                content = match["literal"]
            elif match["role"] is None and match["link"] is None:
                content = match["text"]
            else:
                continue
            line = first + 1 + joined.count("\n", 0, match.start())
            spans.append(Span(line, content.replace("\n", " ")))
    return spans


# -- Documents ---------------------------------------------------------------------------------

_RST_UNDERLINE = re.compile(r"^([=\-~^\"'`#*+]){3,}\s*$")


def section(path: Path, line: int) -> str:
    """The text of the section (from one heading to the next, code included) holding a line:
    Markdown headings ``#`` outside code blocks, rst titles underlined."""
    lines = path.read_text(encoding="utf-8").splitlines()
    if path.suffix == ".rst":
        headings = [
            i
            for i in range(len(lines) - 1)
            if lines[i].strip()
            and _RST_UNDERLINE.match(lines[i + 1])
            and len(lines[i + 1].strip()) >= len(lines[i].strip())
        ]
    else:
        fences = [(s, len(lines) if e is None else e + 1) for s, e, _ in _md_fences(lines)]
        prose = _blank_out(lines, fences)
        headings = [i for i, text in enumerate(prose) if re.match(r"^#{1,6} ", text)]
    start = max([i for i in headings if i < line] or [0])
    stop = min([i for i in headings if i >= line] or [len(lines)])
    return "\n".join(lines[start:stop])


def blocks(path: Path) -> tuple[list[Block], list[str]]:
    finder = rst_blocks if path.suffix == ".rst" else markdown_blocks
    return finder(path.read_text(encoding="utf-8"))


def spans(path: Path) -> list[Span]:
    finder = rst_spans if path.suffix == ".rst" else markdown_spans
    return finder(path.read_text(encoding="utf-8"))


def all_blocks(languages=None) -> list[tuple[str, Path, Block]]:
    """``(FILE:LINE, path, block)`` of every block of the documents (of ``languages``)."""
    return [
        (f"{relative(path)}:{block.line}", path, block)
        for path in DOCUMENTS
        for block in blocks(path)[0]
        if languages is None or block.language in languages
    ]


def all_spans() -> list[tuple[str, Span]]:
    """``(FILE:LINE, span)`` of every inline code span of the documents."""
    return [(f"{relative(path)}:{span.line}", span) for path in DOCUMENTS for span in spans(path)]
