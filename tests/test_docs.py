"""The documentation's sources agree with themselves, without building the site.

Five checks, each on the files in the repository (the build itself is scripts/docs.sh, a
minute with the notebook and the demo; nothing here runs Sphinx):

* every guide page (the hand-written pages of the index's table of contents and the notebook)
  links to other pages or to the API reference, and a guide page that names an estimator links
  to its API page;
* docs/_static/skbert.css, applied to the markup of an API page's parameter list, leaves a
  parameter name unbroken and code blocks unwrapped (a small cascade over the style sheet's
  rules: selectors of tags, classes and the descendant and child combinators, specificity,
  inheritance; the markup chains below are those of a page built with numpydoc and
  pydata-sphinx-theme);
* every gallery card has a thumbnail of its own: a PNG named by the example, or a figure that
  the example draws when the build executes it;
* the figures that examples print: every example that the build does not execute records the
  output of a measured run in its docstring ("Measured here"), every table of the docs marked
  ``<!-- recorded output: examples/NAME.py -->`` shows that output's figures, and every
  thumbnail drawn by docs/_static/make_thumbnails.py holds the figures of the current recorded
  output;
* the API reference (docs/api.rst) has an entry for every name in a public module's
  ``__all__``.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
from pathlib import Path

import pytest
from conftest import REPO

DOCS = REPO / "docs"
EXAMPLES = REPO / "examples"
NOTEBOOK = EXAMPLES / "notebooks" / "getting_started.ipynb"


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


thumbnails = _load(DOCS / "_static" / "make_thumbnails.py", "make_thumbnails")


def _conf_value(name: str):
    """A literal assigned in docs/conf.py (which is read, not executed: it imports Sphinx)."""
    for node in ast.parse((DOCS / "conf.py").read_text("utf-8")).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise LookupError(f"docs/conf.py assigns no {name}")


# -- links -------------------------------------------------------------------------------------
def _toctree_pages() -> list[Path]:
    """The hand-written pages of the index's table of contents (generated ones left out)."""
    index = (DOCS / "index.rst").read_text("utf-8")
    tree = index.split(".. toctree::", 1)[1]
    names = [line.strip() for line in tree.splitlines()[1:] if line.startswith("   ")]
    pages = []
    for name in names:
        if name.startswith(":") or name.startswith("auto_examples/") or name == "api":
            continue
        (page,) = [p for p in (DOCS / f"{name}.md", DOCS / f"{name}.rst") if p.exists()]
        pages.append(page)
    return [DOCS / "index.rst", *pages]


GUIDE_PAGES = _toctree_pages()
# Cross-references that Sphinx resolves inside the site: roles (rst and MyST) and Markdown links
# to another page or to a heading.
RST_LINK = re.compile(r":(doc|ref|class|func|meth|mod|attr|download):`")
MD_LINK = re.compile(r"\{(doc|ref|class|func|meth|mod|attr|py:\w+)\}`|\]\((?![a-z]+://)[^)\s]+\)")


def internal_links(text: str, suffix: str) -> list[str]:
    pattern = RST_LINK if suffix == ".rst" else MD_LINK
    return [m.group(0) for m in pattern.finditer(text)]


def test_the_guide_pages_are_the_expected_ones():
    names = {page.name for page in GUIDE_PAGES}
    assert {"index.rst", "user_guide.md", "scaling.md", "getting_started.rst"} <= names


@pytest.mark.parametrize("page", GUIDE_PAGES, ids=lambda p: p.name)
def test_guide_page_links_to_other_pages(page):
    links = internal_links(page.read_text("utf-8"), page.suffix)
    assert len(links) >= 2, f"{page.name} links to no other page of the documentation"


@pytest.mark.parametrize("page", GUIDE_PAGES, ids=lambda p: p.name)
@pytest.mark.parametrize(
    "estimator", ["BertSentenceTransformer", "BertTextClassifier", "BertTextRegressor"]
)
def test_guide_page_naming_an_estimator_links_to_its_api_page(page, estimator):
    text = page.read_text("utf-8")
    if estimator not in text:
        pytest.skip(f"{page.name} does not name {estimator}")
    role = r":class:" if page.suffix == ".rst" else r"\{class\}"
    target = rf"{role}`[^`]*?~?skbert\.{estimator}>?`"
    assert re.search(target, text), f"{page.name} names {estimator} but never links its page"


def test_the_notebook_links_to_the_guide():
    nb = json.loads(NOTEBOOK.read_text("utf-8"))
    markdown = "\n".join(
        "".join(cell["source"]) for cell in nb["cells"] if cell["cell_type"] == "markdown"
    )
    links = re.findall(r"\]\(([^)\s]+)\)", markdown)
    local = [link for link in links if not re.match(r"[a-z]+://", link)]
    assert local, "the notebook links to no page of the documentation"
    for link in local:  # the same relative path works in Jupyter and in the built site
        target = (NOTEBOOK.parent / link.split("#")[0]).resolve()
        assert target.is_file() and DOCS in target.parents, link


def test_link_checks_see_a_link_less_page():
    assert internal_links("plain text with `code` only", ".md") == []
    assert internal_links("see :doc:`install`", ".rst") == [":doc:`"]
    assert internal_links("see [the guide](user_guide.md) or {class}`x`", ".md") == [
        "](user_guide.md)",
        "{class}`",
    ]
    assert internal_links("see [a site](https://example.org)", ".md") == []


# -- the style sheet ---------------------------------------------------------------------------
INHERITED = ("overflow-wrap", "word-break", "white-space")


def css_rules(css: str) -> list[tuple[str, dict[str, str]]]:
    """``(selector, declarations)`` for every rule, those inside ``@media`` blocks included
    (a rule that applies at some width applies)."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    css = re.sub(r"@media[^{]*\{((?:[^{}]*\{[^{}]*\})*)\s*\}", r"\1", css)
    rules = []
    for selectors, body in re.findall(r"([^{}]+)\{([^{}]*)\}", css):
        declarations = {}
        for declaration in body.split(";"):
            if ":" in declaration:
                key, value = declaration.split(":", 1)
                declarations[key.strip()] = value.strip()
        rules.extend((s.strip(), declarations) for s in selectors.split(",") if s.strip())
    return rules


def _compound(text: str) -> tuple[str | None, set[str]]:
    if re.search(r"[:#\[]", text):
        raise ValueError(f"selector part {text!r}: only tags and classes are handled")
    tag, *classes = text.split(".")
    return (tag or None), set(classes)


def _parse_selector(selector: str) -> list[tuple[str, tuple[str | None, set[str]]]]:
    """``[(combinator, compound), ...]`` from the left; the first combinator is ``""``."""
    tokens = re.findall(r">|[^\s>]+", selector)
    parts, combinator = [], ""
    for token in tokens:
        if token == ">":
            combinator = ">"
            continue
        parts.append((combinator or (" " if parts else ""), _compound(token)))
        combinator = ""
    return parts


def _matches_element(compound, element) -> bool:
    tag, classes = compound
    return (tag is None or tag == element[0]) and classes <= element[1]


def selector_matches(selector: str, chain: list[tuple[str, set[str]]]) -> bool:
    """Whether ``selector`` matches the last element of ``chain`` (root first)."""
    parts = _parse_selector(selector)

    def match(k: int, position: int) -> bool:
        combinator, compound = parts[k]
        if not _matches_element(compound, chain[position]):
            return False
        if k == 0:
            return True
        if combinator == ">":
            return position > 0 and match(k - 1, position - 1)
        return any(match(k - 1, p) for p in range(position - 1, -1, -1))

    return match(len(parts) - 1, len(chain) - 1)


def specificity(selector: str) -> tuple[int, int]:
    parts = _parse_selector(selector)
    return sum(len(c[1]) for _, c in parts), sum(c[0] is not None for _, c in parts)


def computed(rules, chain, prop: str) -> str:
    """The value of an inherited property on the last element of ``chain``."""
    for depth in range(len(chain), 0, -1):
        applying = [
            (specificity(selector), order, declarations[prop])
            for order, (selector, declarations) in enumerate(rules)
            if prop in declarations and selector_matches(selector, chain[:depth])
        ]
        if applying:
            return max(applying)[2]
    return "normal"


def _chain(spec: str) -> list[tuple[str, set[str]]]:
    return [_compound(part) for part in spec.split()]


# The markup around a parameter name of a class page (numpydoc's Parameters field list), and
# around a line of code in a Python block, as the built pages have them.
ARTICLE = "html body div.bd-container div.bd-main div.bd-content article.bd-article section"
PARAMETER_NAME = _chain(f"{ARTICLE} dl.py.class dd dl.field-list.simple dd.field-odd dl dt strong")
PARAMETER_TYPE = _chain(
    f"{ARTICLE} dl.py.class dd dl.field-list.simple dd.field-odd dl dt span.classifier"
)
CODE_LINE = _chain(f"{ARTICLE} div.highlight-python.notranslate div.highlight pre span.n")
OUTPUT_LINE = _chain(f"{ARTICLE} div.highlight-none.notranslate div.highlight pre")
STYLE_SHEET = css_rules((DOCS / "_static" / "skbert.css").read_text("utf-8"))


def test_the_style_sheet_never_breaks_a_parameter_name():
    assert computed(STYLE_SHEET, PARAMETER_NAME, "overflow-wrap") == "normal"
    assert computed(STYLE_SHEET, PARAMETER_NAME, "word-break") == "normal"
    assert computed(STYLE_SHEET, PARAMETER_NAME, "white-space") == "nowrap"
    # a long default may still break, rather than run past the column
    assert computed(STYLE_SHEET, PARAMETER_TYPE, "overflow-wrap") == "anywhere"


def test_the_style_sheet_keeps_code_lines_whole():
    for chain in (CODE_LINE, OUTPUT_LINE):
        assert computed(STYLE_SHEET, chain, "white-space") == "pre"


def test_the_cascade_sees_a_rule_that_breaks_names():
    # the rule that split "model" into "mod / el": inherited by the name
    breaking = "dl.field-list > dd { min-width: 0; overflow-wrap: anywhere; }"
    assert computed(css_rules(breaking), PARAMETER_NAME, "overflow-wrap") == "anywhere"
    # set on the name itself, a value wins over the inherited one
    fixed = breaking + " dl.field-list > dd > dl > dt > strong { overflow-wrap: normal }"
    assert computed(css_rules(fixed), PARAMETER_NAME, "overflow-wrap") == "normal"
    # a later but less specific rule on the name loses to it, a more specific one wins
    later = fixed + " @media (width < 500px) { dl.field-list strong { overflow-wrap: anywhere } }"
    assert computed(css_rules(later), PARAMETER_NAME, "overflow-wrap") == "normal"
    specific = fixed + " section dl.field-list.simple > dd dt > strong { overflow-wrap: anywhere }"
    assert computed(css_rules(specific), PARAMETER_NAME, "overflow-wrap") == "anywhere"


# -- gallery thumbnails ------------------------------------------------------------------------
GALLERY = sorted(p for p in EXAMPLES.glob("*.py") if p.name != "__init__.py")
THUMBNAIL = re.compile(r'^# sphinx_gallery_thumbnail_path = "([^"]+)"$', re.MULTILINE)
DRAWS = re.compile(r"\bplt\.(subplots|figure)\(")


def test_every_gallery_card_has_its_own_thumbnail():
    executed = set(_conf_value("EXECUTED_EXAMPLES"))
    owners = {}
    for example in GALLERY:
        source = example.read_text("utf-8")
        named = THUMBNAIL.findall(source)
        if named:
            (path,) = named
            assert (DOCS / path).is_file(), f"{example.name}: {path} does not exist"
            assert path not in owners, f"{example.name} and {owners[path]} share {path}"
            owners[path] = example.name
        else:
            assert example.name in executed and DRAWS.search(source), (
                f"{example.name} gets sphinx-gallery's placeholder thumbnail: name a PNG with "
                "`# sphinx_gallery_thumbnail_path = ...` or draw a figure in an executed example"
            )


# -- recorded figures --------------------------------------------------------------------------
def test_every_example_the_build_does_not_run_records_its_output():
    executed = set(_conf_value("EXECUTED_EXAMPLES"))
    for example in GALLERY:
        if example.name not in executed:
            assert thumbnails.recorded_output(example.stem), (
                f"{example.name}: its docstring shows no 'Measured here' output"
            )


MARKER = re.compile(r"^<!-- recorded output: examples/(\w+)\.py -->\n((?:\|[^\n]*\n)+)", re.M)


def marked_tables(text: str) -> list[tuple[str, dict[str, list[float]]]]:
    """``(example, {label: numbers})`` for every table right after a recorded-output marker."""
    tables = []
    for example, table in MARKER.findall(text):
        rows = {}
        for line in table.splitlines()[2:]:  # header and alignment rows
            label, *cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            rows[label] = [float(v) for v in re.findall(r"[-+]?\d+(?:\.\d+)?", " ".join(cells))]
        tables.append((example, rows))
    return tables


def differences(table: dict, recorded: dict) -> list[str]:
    """Rows of ``table`` whose numbers are not, in order, among the recorded row's."""
    wrong = []
    for row, numbers in table.items():
        label = thumbnails.label_key(row)
        if label not in recorded:
            label = thumbnails.full_key(row)  # one of the rows that label_key cannot tell apart
        if label not in recorded:
            wrong.append(f"row {row!r} is not in the recorded output")
            continue
        rest = iter(recorded[label])
        if not numbers or not all(any(v == r for r in rest) for v in numbers):
            wrong.append(f"row {label!r}: {numbers} against {recorded[label]}")
    return wrong


DOC_PAGES = sorted(DOCS.glob("*.md"))


def test_marked_tables_show_the_recorded_figures():
    quoted = set()
    for page in DOC_PAGES:
        for example, table in marked_tables(page.read_text("utf-8")):
            recorded = thumbnails.recorded_output(example)
            assert recorded, f"{page.name} quotes examples/{example}.py, which records nothing"
            assert table, f"{page.name}: the table for {example} has no rows"
            wrong = differences(table, thumbnails.recorded_rows(recorded))
            assert not wrong, f"{page.name}, table of examples/{example}.py: {wrong}"
            quoted.add(example)
    tabular = {
        e.stem
        for e in GALLERY
        if thumbnails.recorded_output(e.stem)
        and thumbnails.recorded_rows(thumbnails.recorded_output(e.stem))
    }
    assert tabular <= quoted, f"recorded tables no docs page quotes: {sorted(tabular - quoted)}"


def test_a_changed_figure_is_a_difference():
    recorded = thumbnails.recorded_rows(
        "pooling     no fine-tuning   STS-B train\ncls     73.50    81.61\ncnn      n/a   78.52"
    )
    text = (
        "<!-- recorded output: examples/x.py -->\n| pooling | a | b |\n|---|---:|---:|\n"
        "| [CLS] | 73.50 | 81.61 |\n| CNN (kernels 1, 3) | n/a | 78.52 |\n"
    )
    ((_, table),) = marked_tables(text)
    assert differences(table, recorded) == []
    assert differences(marked_tables(text.replace("81.61", "81.62"))[0][1], recorded)
    assert differences({"mean": [1.0]}, recorded)  # a row the example does not print


def test_thumbnails_plot_the_recorded_figures():
    matplotlib = pytest.importorskip("matplotlib", reason="matplotlib (extra 'test')")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for name, draw in thumbnails.THUMBNAILS.items():
        fig, ax = plt.subplots()
        try:
            expected = json.loads(json.dumps(draw(ax)))
        finally:
            plt.close(fig)
        stored = thumbnails.png_text(DOCS / "_static" / name).get(thumbnails.FIGURES_KEY)
        assert stored is not None, f"{name} was not drawn by make_thumbnails.py"
        assert json.loads(stored) == expected, (
            f"{name} plots older figures than its example's recorded output: run "
            "docs/_static/make_thumbnails.py"
        )


def test_few_shot_curves_file_holds_the_recorded_figures():
    """docs/_static/few_shot_sst2.json, the curves behind few_shot_sst2.png that each recorded
    run of few_shot_sun2019.py merged itself into (``--results``), holds the figures of the
    docstring's recorded table: per size, its draws, then each curve's mean and spread in the
    example's order of methods."""
    source = (REPO / "examples" / "few_shot_sun2019.py").read_text("utf-8")
    (methods,) = [
        ast.literal_eval(node.value)
        for node in ast.parse(source).body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "METHODS"
    ]
    curves = json.loads((DOCS / "_static" / "few_shot_sst2.json").read_text("utf-8"))
    shown = [m for m in methods if m in curves]
    assert shown == list(curves), "the file holds curves the example does not know"
    recorded = thumbnails._rows("few_shot_sun2019")
    sizes = sorted(int(size) for size in curves[shown[0]])
    assert sorted(int(label) for label in recorded) == sizes
    for size in sizes:
        draws = {curves[m][str(size)][2] for m in shown}
        assert len(draws) == 1, f"size {size}: the curves have different numbers of draws"
        stored = [draws.pop()]
        for method in shown:
            mean, spread, _ = curves[method][str(size)]
            stored += [round(mean, 3), round(spread, 3)]
        assert stored == recorded[str(size)], (size, stored, recorded[str(size)])


# -- the API reference -------------------------------------------------------------------------
PUBLIC_MODULES = (
    "skbert",
    "skbert.optim",
    "skbert.truncation",
    "skbert.pooling",
    "skbert.pretraining",
    "skbert.dask",
    "skbert.datasets",
    "skbert.metrics",
    "skbert.exceptions",
    "skbert.onnx",
)


def api_reference_names(text: str) -> set:
    """The dotted names that docs/api.rst documents: the entries of its autosummary tables,
    each under the ``currentmodule`` above it, and its ``autodata`` directives."""
    names, module, in_table = set(), "", False
    for line in text.splitlines():
        if match := re.match(r"\.\. currentmodule:: (\S+)", line):
            module = match.group(1)
        elif match := re.match(r"\.\. autodata:: (\S+)", line):
            name = match.group(1)
            names.add(name if "." in name else f"{module}.{name}")
        elif line.startswith(".. autosummary::"):
            in_table = True
        elif in_table and re.match(r"   [A-Za-z_]\w*$", line):
            names.add(f"{module}.{line.strip()}")
        elif in_table and line and not line.startswith(" "):
            in_table = False
    return names


def test_api_reference_parser_reads_tables_and_data():
    text = (
        ".. currentmodule:: pkg.mod\n\n.. autosummary::\n   :toctree: generated/\n\n"
        "   first\n   Second\n\nProse naming   third\n\n.. autodata:: CONST\n"
        ".. autodata:: other.NAME\n"
    )
    assert api_reference_names(text) == {
        "pkg.mod.first",
        "pkg.mod.Second",
        "pkg.mod.CONST",
        "other.NAME",
    }


def _resolve(dotted: str):
    """The object ``dotted`` names, or None where its module needs an extra not installed
    (``skbert.dask`` without Dask: the oldest versions' CI)."""
    module, _, name = dotted.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError:
        return None


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_the_api_reference_lists_every_public_name(module):
    """Every name in a public module's ``__all__`` has an entry in docs/api.rst, under that
    module or another one that exports the same object (``skbert.export_onnx`` is
    ``skbert.onnx.export_onnx``); the package's ``__version__`` aside."""
    if module == "skbert.dask":
        pytest.importorskip("dask.dataframe", reason="needs the 'dask' extra")
    documented = api_reference_names((DOCS / "api.rst").read_text("utf-8"))
    objects = [_resolve(name) for name in sorted(documented)]
    public = importlib.import_module(module)
    missing = sorted(
        name
        for name in set(public.__all__) - {"__version__"}
        if not any(getattr(public, name) is obj for obj in objects)
    )
    assert not missing, f"docs/api.rst lists no entry for {module}: {missing}"
