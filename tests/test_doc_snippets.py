"""The extraction of the documents' code (``tests/doc_snippets.py``), and what every code block of
the documents must be: closed, and of a language that a test checks.

A block is Python (run by ``test_snippets.py``), shell (checked by ``test_shell_snippets.py``)
or text (printed output, which holds no command line); any other language, a bare fence and an
rst ``::`` literal block are refused, so that no new snippet slips past the tests unchecked.
"""

from __future__ import annotations

import re

import pytest
from doc_snippets import (
    DOCUMENTS,
    KNOWN_LANGUAGES,
    TEXT,
    Block,
    Span,
    blocks,
    markdown_blocks,
    markdown_spans,
    relative,
    rst_blocks,
    rst_spans,
    section,
)

COMMAND_LINE = re.compile(r"^\s*(?:\$ |(?:pip|python3?|bash|torchrun|export)\s)")


@pytest.mark.parametrize("path", DOCUMENTS, ids=relative)
def test_blocks_are_closed_and_known(path):
    found, problems = blocks(path)
    for block in found:
        if block.language not in KNOWN_LANGUAGES:
            problems.append(
                f"line {block.line}: a block of language {block.language or '(none)'!r}: "
                f"tag it {', '.join(sorted(KNOWN_LANGUAGES))} (.. code-block:: in rst)"
            )
        elif block.language in TEXT:
            problems += [
                f"line {block.line}: a command in a text block ({line.strip()!r}): tag it bash"
                for line in block.code.splitlines()
                if COMMAND_LINE.match(line)
            ]
    assert not problems, "\n".join(problems)


MARKDOWN = """\
# Title with `code`

A paragraph with `BertTextClassifier(fine_tune="top")` and ``a `tick` inside``, one
`spanning
two lines`, an escaped \\`backtick\\` and a lone ` backtick.

| a | `pooling="cls" \\| "mean"` |

A role {func}`skbert.load("m") <skbert.load>` and {class}`~skbert.BertTextRegressor`.

```{include} ../other.md
:start-line: 1
```

```python
x = "`not a span`"
```

~~~~bash
```
echo inside
```
~~~~

```{code-block} sh
ls
```

```
output
```
````text
never closed
"""


def test_markdown_spans():
    assert markdown_spans(MARKDOWN) == [
        Span(1, "code"),
        Span(3, 'BertTextClassifier(fine_tune="top")'),
        Span(3, "a `tick` inside"),
        Span(4, "spanning two lines"),
        Span(7, 'pooling="cls" | "mean"'),
        Span(9, 'skbert.load("m")'),
        Span(9, "~skbert.BertTextRegressor"),
    ]


RST = """\
Title
=====

A paragraph with ``pip install -e .``, `default role` and :class:`~skbert.X`, a
`link <https://example.org>`_ and ``a literal
across lines``.

.. code-block:: bash
   :caption: set-up

   bash scripts/setup.sh
     indented more

after the block ``x = 1``::

    a literal block ``not a span``

.. list-table::

   * - ``pooling="cls" | "mean"``

.. code-block::

   no language
"""


def test_rst_spans():
    assert rst_spans(RST) == [
        Span(4, "pip install -e ."),
        Span(4, "default role"),
        Span(5, "a literal across lines"),
        Span(14, "x = 1"),
        Span(20, 'pooling="cls" | "mean"'),
    ]


@pytest.mark.parametrize(
    ("finder", "text", "expected", "problems"),
    [
        (
            markdown_blocks,
            MARKDOWN,
            [
                Block(11, 12, "{include}", ":start-line: 1"),
                Block(15, 16, "python", 'x = "`not a span`"'),
                Block(19, 20, "bash", "```\necho inside\n```"),
                Block(25, 26, "sh", "ls"),
                Block(29, 30, "", "output"),
                Block(32, 33, "text", "never closed"),
            ],
            ["line 32: this fence is never closed"],
        ),
        (
            rst_blocks,
            RST,
            [
                Block(8, 11, "bash", "bash scripts/setup.sh\n  indented more"),
                Block(14, 16, "::", "a literal block ``not a span``"),
                Block(22, 24, "", "no language"),
            ],
            [],
        ),
    ],
    ids=["markdown", "rst"],
)
def test_blocks(finder, text, expected, problems):
    assert finder(text) == (expected, problems)


MD_SECTIONS = "intro\n# One\none `x`\n```bash\n# a comment\n```\n## Two\ntwo\n"
RST_SECTIONS = (
    "intro\n\nOne\n===\n\none ``x``\n\n.. code-block:: bash\n\n   # a comment\n\nTwo\n---\n"
)


@pytest.mark.parametrize(
    ("name", "text", "line"), [("a.md", MD_SECTIONS, 3), ("a.rst", RST_SECTIONS, 6)]
)
def test_section(tmp_path, name, text, line):
    """A section runs from its heading to the next; a comment in a code block is no heading."""
    path = tmp_path / name
    path.write_text(text)
    one = section(path, line)
    assert "One" in one and "# a comment" in one, one
    assert "Two" not in one and "intro" not in one, one
