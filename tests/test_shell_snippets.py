"""Every shell snippet of README.md, benchmarks/README.md and docs/ is checked as pasted.

The snippets (test id ``FILE:LINE``, the line of the fence, directive or inline code):

- the code blocks of language bash, sh, shell or console (``tests/doc_snippets.py`` says what a
  block is); in a console block the commands are the lines after a ``$`` prompt (and their
  ``>`` continuations), the rest is output;
- inline code that starts with ``pip``, ``python``, ``python3``, ``bash``, ``export`` or
  ``torchrun`` and a space, with a tool of a ``.venv*/bin/`` folder, or with an environment
  assignment ``NAME=value`` of a capitalised name (alone, as ``HF_HUB_OFFLINE=1``, or before a
  command). Other inline code is not a command (``--rounds N`` names an option, ``.venv`` a
  folder).

Each must:

1. pass ``bash -n`` and split into commands (balanced quotes);
2. run only the commands of :data:`COMMANDS` (or a tool of :data:`VENV_TOOLS` in a
   ``.venv*/bin/`` folder that set-up makes): a word that slipped in from prose fails;
3. name only repository paths that exist: every script that ``python``, ``torchrun`` or
   ``bash`` runs, and every argument whose first part is a top-level folder of the repository
   (``scripts/``, ``examples/``, ``docs/``, ...; build output under ``docs/_build`` excepted);
4. ``pip install`` only extras that pyproject.toml's ``[project.optional-dependencies]``
   defines (for ``.``, ``-e .`` and ``skbert``);
5. pass a Python script of the repository only arguments its argparse accepts: the parser is
   rebuilt from the script's ``add_argument`` calls (option strings, and the ``action``,
   ``nargs``, builtin ``type``, literal ``choices``, ``required`` and ``dest`` given as
   literals) and parses them, so an unknown option, a missing value or a value of the wrong
   type fails without running the script; a script without ``add_argument`` takes no
   arguments, a shell script only if it passes on ``"$@"``; ``torchrun``'s own options go
   through torchrun's parser;
6. set only environment variables that something reads, spelled as it reads them: skbert (the
   capitalised string constants of its modules that touch ``os.environ``), the script the
   command runs (and the scripts that one runs; for a bare assignment, any of ``scripts/``) or
   the libraries of :data:`THIRD_PARTY_VARIABLES`;
7. hold no placeholder: ``<name>``, ``...``, ``path/to``, an example.com host, or an argument
   in capitals such as ``N`` or ``DIR``: a snippet is pasted as it stands.

Inline code that starts with ``--`` names options (``--rounds N``: a metavar is fine there): each
must be an option of a script that its section (heading to heading) names, ``bench_x.py``,
``benchmarks/...`` or ``examples/...``, or of torchrun when the section names torchrun.

``python -c`` code that only imports is also run for real (``python -c "import skbert"``), in
a subprocess from the repository root.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import contextlib
import functools
import io
import os
import re
import shlex
import subprocess
import sys

import pytest
from conftest import REPO
from doc_snippets import DOCUMENTS, SHELL, all_blocks, all_spans, relative, section, spans

COMMANDS = {"pip", "python", "python3", "bash", "sh", "torchrun", "export", "cd"}
VENV_TOOLS = {"pip", "python", "python3", "jupyter"}
#: Variables read by libraries underneath skbert, which the documents may set.
THIRD_PARTY_VARIABLES = {
    "HF_HUB_OFFLINE": "huggingface_hub",
    "TOKENIZERS_PARALLELISM": "tokenizers",
    "OMP_NUM_THREADS": "OpenMP (torch)",
    "CUDA_VISIBLE_DEVICES": "CUDA (torch)",
}
SHELL_SPAN = re.compile(
    r"^(?:(?:pip|python3?|bash|export|torchrun)\s|\.venv[\w-]*/bin/\S|[A-Z][A-Z0-9_]*=)"
)
ASSIGNMENT = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)$", re.DOTALL)
SEPARATORS = {";", "&&", "||", "|", "&", "(", ")", ";;"}
PLACEHOLDER = re.compile(r"<[^<>\s]+>|\.\.\.|\bpath/to\b|\bexample\.(?:com|org|net)\b")
METAVAR = re.compile(r"^[A-Z]+(?:_[A-Z]+)*$")
BUILD_OUTPUT = ("docs/_build",)


# -- What the repository accepts ---------------------------------------------------------------


@functools.cache
def extras() -> frozenset[str]:
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11")
    with open(REPO / "pyproject.toml", "rb") as file:
        return frozenset(tomllib.load(file)["project"]["optional-dependencies"])


ENV_NAME = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*_?$")


def _python_variables(path) -> set[str]:
    """The capitalised string constants of a module that touches ``os.environ``."""
    source = path.read_text(encoding="utf-8")
    if "environ" not in source and "getenv" not in source:
        return set()
    return {
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        if ENV_NAME.match(node.value)
    }


@functools.cache
def skbert_variables() -> frozenset[str]:
    names = set()
    for path in (REPO / "skbert").rglob("*.py"):
        names |= _python_variables(path)
    return frozenset(names)


SHELL_READ = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
SHELL_CALL = re.compile(r"\bbash\s+(scripts/[\w.-]+\.sh)")


@functools.cache
def script_variables(script: str) -> frozenset[str]:
    """What a script of the repository reads (a shell script: also the scripts it runs)."""
    path = REPO / script
    if not path.is_file():
        return frozenset()
    if path.suffix == ".py":
        return frozenset(_python_variables(path))
    text = path.read_text(encoding="utf-8")
    names = set(SHELL_READ.findall(text))
    for called in set(SHELL_CALL.findall(text)) - {script}:
        names |= script_variables(called)
    return frozenset(names)


def _literal(node):
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


@functools.cache
def rebuilt_parser(script: str) -> argparse.ArgumentParser | None:
    """The argparse parser of a Python script, rebuilt from its ``add_argument`` calls
    (None when it has none)."""
    tree = ast.parse((REPO / script).read_text(encoding="utf-8"))
    parser = argparse.ArgumentParser(prog=script)
    found = False
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr != "add_argument":
            continue
        names = [_literal(arg) for arg in node.args]
        kwargs = {}
        for keyword in node.keywords:
            if keyword.arg in {"action", "nargs", "required", "dest"}:
                kwargs[keyword.arg] = _literal(keyword.value)
            elif keyword.arg == "choices" and _literal(keyword.value) is not None:
                kwargs["choices"] = _literal(keyword.value)
            elif keyword.arg == "type" and isinstance(keyword.value, ast.Name):
                if keyword.value.id in {"int", "float", "str"}:
                    kwargs["type"] = getattr(builtins, keyword.value.id)
        parser.add_argument(*names, **kwargs)
        found = True
    return parser if found else None


def parse_problem(parser: argparse.ArgumentParser, args: list[str]) -> str | None:
    """argparse's error for ``args``, or None when it accepts them."""
    message = io.StringIO()
    try:
        with contextlib.redirect_stderr(message):
            parser.parse_args(args)
    except SystemExit:
        return message.getvalue().strip().splitlines()[-1]
    return None


@functools.cache
def top_level_folders() -> frozenset[str]:
    return frozenset(
        p.name
        for p in REPO.iterdir()
        if p.is_dir() and not p.name.startswith((".", "_")) and "egg-info" not in p.name
    )


# -- The checks --------------------------------------------------------------------------------


def command_lines(code: str, console: bool) -> list[str]:
    """The command lines of a snippet: continuations joined, console output left out."""
    if console:
        kept, taking = [], False
        for line in code.splitlines():
            if line.startswith("$ "):
                kept.append(line[2:])
                taking = True
            elif taking and line.startswith("> "):
                kept.append(line[2:])
            else:
                taking = False
        code = "\n".join(kept)
    return [line for line in code.replace("\\\n", " ").splitlines() if line.strip()]


def split_commands(line: str) -> list[list[str]]:
    """The simple commands of one line, as lists of words (comments dropped)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars="();&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    commands, current = [], []
    for token in lexer:
        if token in SEPARATORS:
            commands.append(current)
            current = []
        else:
            current.append(token)
    return [command for command in [*commands, current] if command]


class Checker:
    """The problems of one snippet, gathered command by command."""

    def __init__(self):
        self.problems: list[str] = []
        self.runs: list[list[str]] = []  # commands cheap and safe to run for real

    def fail(self, message: str) -> None:
        if message not in self.problems:
            self.problems.append(message)

    def snippet(self, code: str, *, console: bool = False) -> None:
        syntax = subprocess.run(
            ["bash", "-n"],
            input=code if not console else "\n".join(command_lines(code, console)),
            capture_output=True,
            text=True,
        )
        if syntax.returncode:
            self.fail(f"bash -n: {syntax.stderr.strip()}")
        for line in command_lines(code, console):
            try:
                commands = split_commands(line)
            except ValueError as error:
                self.fail(f"{line!r}: {error}")
                continue
            for words in commands:
                self.command(words)

    def command(self, words: list[str]) -> None:
        env = {}
        while words and ASSIGNMENT.match(words[0]):
            match = ASSIGNMENT.match(words[0])
            env[match["name"]] = match["value"]
            words = words[1:]
        if not words:
            self.variables(env, None)
            return
        word, args = words[0], words[1:]
        self.placeholders(args)
        self.paths(args)
        venv = re.fullmatch(r"\.venv[\w-]*/bin/(?P<tool>.+)", word)
        tool = venv["tool"] if venv else word
        if tool not in (VENV_TOOLS if venv else COMMANDS):
            self.fail(f"{word!r} is not a command the documents may run ({' '.join(words)!r})")
            return
        script = None
        if tool == "export":
            for arg in args:
                match = ASSIGNMENT.match(arg)
                if match:
                    env[match["name"]] = match["value"]
        elif tool == "pip":
            self.pip(args)
        elif tool in {"python", "python3"}:
            script = self.python(args)
        elif tool in {"bash", "sh"}:
            script = self.shell_script(args)
        elif tool == "torchrun":
            script = self.torchrun(args)
        self.variables(env, script)

    def placeholders(self, args: list[str]) -> None:
        for arg in args:
            value = arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else arg
            if PLACEHOLDER.search(arg) or METAVAR.match(value):
                self.fail(f"{arg!r} is a placeholder: write what a reader can paste")

    def paths(self, args: list[str]) -> None:
        for arg in args:
            value = arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else arg
            path = value.removeprefix("./")
            if "://" in path or path.split("/")[0] not in top_level_folders():
                continue
            if path.startswith(BUILD_OUTPUT):
                continue
            if not (REPO / path).exists():
                self.fail(f"{value!r} does not exist in the repository")

    def pip(self, args: list[str]) -> None:
        takes_value = {"-r", "--requirement", "-c", "--constraint", "-i", "--index-url"}
        takes_value |= {"--extra-index-url", "-f", "--find-links", "-t", "--target"}
        if not args or args[0] != "install":
            return
        i = 1
        while i < len(args):
            arg = args[i]
            if arg in takes_value:
                i += 2
                continue
            i += 1
            if arg.startswith("-"):
                continue
            target = re.fullmatch(r"(?P<name>[^\[\]]+)\[(?P<extras>[^\]]*)\]", arg)
            name = target["name"] if target else arg
            if name == "." or name.startswith("./"):
                if not (REPO / name).exists():
                    self.fail(f"pip install {arg!r}: no such folder")
            elif name != "skbert":
                continue
            for extra in target["extras"].split(",") if target else []:
                if extra.strip() not in extras():
                    self.fail(
                        f"pip install {arg!r}: pyproject.toml defines no extra {extra.strip()!r}"
                        f" (it has {', '.join(sorted(extras()))})"
                    )

    def python(self, args: list[str]) -> str | None:
        i = 0
        while i < len(args) and args[i].startswith("-") and args[i] != "-":
            option = args[i]
            if option == "-c" and i + 1 < len(args):
                self.python_code(args[i + 1])
                return None
            if option == "-m" and i + 1 < len(args):
                if args[i + 1] == "pip":
                    self.pip(args[i + 2 :])
                return None
            if option in {"-X", "-W"}:
                i += 2
            elif re.fullmatch(r"-[bBdEhiIOqsSuvV]+", option):
                i += 1
            else:
                self.fail(f"python has no option {option!r}")
                return None
        if i == len(args):
            return None
        self.script(args[i], args[i + 1 :])
        return args[i]

    def python_code(self, code: str) -> None:
        try:
            tree = ast.parse(code)
        except SyntaxError as error:
            self.fail(f"python -c {code!r} does not parse: {error}")
            return
        if all(isinstance(node, (ast.Import, ast.ImportFrom)) for node in tree.body):
            self.runs.append([sys.executable, "-c", code])

    def script(self, script: str, args: list[str]) -> None:
        path = REPO / script
        if not path.is_file():
            self.fail(f"{script!r} does not exist in the repository")
            return
        if path.suffix != ".py":
            return
        parser = rebuilt_parser(script)
        if parser is None:
            if args:
                self.fail(f"{script} takes no arguments (no argparse), given {args}")
            return
        problem = parse_problem(parser, args)
        if problem:
            self.fail(f"{script} {' '.join(args)}: {problem}")

    def shell_script(self, args: list[str]) -> str | None:
        while args and args[0].startswith("-"):
            args = args[1:]
        if not args:
            return None
        script, rest = args[0], args[1:]
        path = REPO / script
        if not path.is_file():
            self.fail(f"{script!r} does not exist in the repository")
            return None
        if rest and '"$@"' not in path.read_text(encoding="utf-8"):
            self.fail(f'{script} takes no arguments (it does not pass on "$@"), given {rest}')
        return script

    def torchrun(self, args: list[str]) -> str | None:
        from torch.distributed.run import get_args_parser

        parser = get_args_parser()
        problem = parse_problem(parser, args)
        if problem:
            self.fail(f"torchrun {' '.join(args)}: {problem}")
            return None
        launched = parser.parse_args(args)
        self.script(launched.training_script, launched.training_script_args)
        return launched.training_script

    def variables(self, env: dict, script: str | None) -> None:
        if script is None:
            scripts = [str(p.relative_to(REPO)) for p in (REPO / "scripts").glob("*.sh")]
        else:
            scripts = [script]
        readers = set(skbert_variables()) | set(THIRD_PARTY_VARIABLES)
        for name in scripts:
            readers |= script_variables(name)
        for name in env:
            if name not in readers:
                where = f"skbert, {' '.join(scripts)} or {', '.join(THIRD_PARTY_VARIABLES)}"
                self.fail(f"{name} is read by none of {where}: a misspelling?")


def check(code: str, *, console: bool = False) -> Checker:
    checker = Checker()
    checker.snippet(code, console=console)
    return checker


# -- The snippets of the documents -------------------------------------------------------------


def shell_snippets():
    cases = [
        pytest.param(block.code, block.language == "console", False, id=name)
        for name, _, block in all_blocks(SHELL)
    ]
    cases += [
        pytest.param(span.text, False, True, id=name)
        for name, span in all_spans()
        if SHELL_SPAN.match(span.text)
    ]
    return cases


SNIPPETS = shell_snippets()


@pytest.mark.parametrize(("code", "console", "inline"), SNIPPETS)
def test_shell_snippet(code, console, inline):
    checker = check(code, console=console)
    assert not checker.problems, "\n".join(checker.problems)
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    for command in checker.runs:
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"{command} failed:\n{done.stderr[-2000:]}"


def test_shell_snippets_found():
    """Blocks and inline commands of every kind are found (a changed style would skip them)."""
    ids = [param.id for param in SNIPPETS]
    for prefix in ["README.md:", "benchmarks/README.md:", "docs/install.rst:", "docs/scaling.md:"]:
        assert any(name.startswith(prefix) for name in ids), (prefix, ids)
    spans = [param.values[0] for param in SNIPPETS if param.values[2]]
    assert 'python -c "import skbert"' in spans, spans
    assert any(span.startswith("pip install") for span in spans), spans


SCRIPT_NAME = re.compile(r"\b((?:benchmarks|examples)/[\w-]+\.py|bench_[\w-]+\.py)")


def named_parsers(text: str) -> dict:
    """The parsers of the scripts a text names (``bench_x.py`` is benchmarks/'s), and
    torchrun's when it names torchrun."""
    parsers = {}
    for name in SCRIPT_NAME.findall(text):
        script = name if "/" in name else f"benchmarks/{name}"
        if (REPO / script).is_file() and rebuilt_parser(script) is not None:
            parsers[script] = rebuilt_parser(script)
    if re.search(r"\btorchrun\b", text):
        from torch.distributed.run import get_args_parser

        parsers["torchrun"] = get_args_parser()
    return parsers


OPTION_SPANS = [
    pytest.param(path, span, id=f"{relative(path)}:{span.line}")
    for path in DOCUMENTS
    for span in spans(path)
    if span.text.startswith("--")
]


@pytest.mark.parametrize(("path", "span"), OPTION_SPANS)
def test_inline_options(path, span):
    """Inline code that names options (``--rounds N``, a metavar allowed) names options of a
    script that its section names (``bench_transform.py``, ``examples/x.py``, torchrun)."""
    parsers = named_parsers(section(path, span.line))
    assert parsers, f"{span.text!r}: its section names no script that takes options"
    for word in span.text.split():
        option = word.split("=", 1)[0]
        if option.startswith("-"):
            known = [name for name, p in parsers.items() if option in p._option_string_actions]
            assert known, f"{option} is an option of none of {sorted(parsers)}"


def test_inline_options_found():
    assert len(OPTION_SPANS) >= 5, OPTION_SPANS


def test_named_parsers():
    parsers = named_parsers("run `bench_transform.py` (or examples/no_such.py), then torchrun")
    assert sorted(parsers) == ["benchmarks/bench_transform.py", "torchrun"]
    options = parsers["benchmarks/bench_transform.py"]._option_string_actions
    assert "--memory" in options and "--memroy" not in options


# -- The checks themselves ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("bash scripts/demo.sh     # a comment", []),
        ("bash scripts/no-such.sh", ["'scripts/no-such.sh' does not exist"]),
        ("bash scripts/demo.sh --fast", ["takes no arguments"]),
        ("bash scripts/test.sh -k snippets", []),
        ('pip install -e ".[models,bench]"', []),
        ("pip install 'skbert[models,gpu]'", ["no extra 'gpu'"]),
        ("python benchmarks/bench_transform.py --rounds 3 --memory", []),
        ("python benchmarks/bench_transform.py --rundos 3", ["unrecognized arguments"]),
        ("python benchmarks/bench_transform.py --rounds x", ["invalid int value"]),
        ("python benchmarks/bench_transform.py --rounds N", ["placeholder", "invalid int"]),
        ("python examples/stsb_zero_shot.py --quick", ["takes no arguments"]),
        ("torchrun --nproc_per_node=2 examples/fine_tune_torchrun.py --max-epochs 1", []),
        ("torchrun --nproc_per_node=2 script.py", ["'script.py' does not exist"]),
        ("torchrun --nproc-per-node=2", ["training_script"]),
        ("TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu bash scripts/setup.sh", []),
        ("TORCH_INDEX=https://download.pytorch.org/whl/cpu bash scripts/setup.sh", ["TORCH_INDEX"]),
        ("SKBERT_CPU_PRODUCTS=blas", []),
        ("SKBERT_CPU_PRODUCT=blas python -c 'import skbert'", ["SKBERT_CPU_PRODUCT is read"]),
        ("export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false", []),
        (
            "pip install torch --index-url https://download.pytorch.org/whl/cpu   # CPU build\n"
            "first pip install -e .",
            ["'first' is not a command"],
        ),
        ("python benchmarks/bench_grid.py  # with and without\ncache python x.py", ["'cache'"]),
        ("python benchmarks/bench_grid.py  # the dask extra) ```", []),
        ("python benchmarks/bench_grid.py\n`", ["bash -n", "'`' is not a command"]),
        ("pip install --index-url https://<your-index>/simple torch", ["placeholder"]),
        ("python docs/nowhere.md", ["'docs/nowhere.md' does not exist"]),
        ("python -m sphinx -b html docs docs/_build/html", []),
        ("python -c 'import skbert' && python -c 'import skbert(' ", ["does not parse"]),
    ],
)
def test_checks(code, expected):
    """Each check finds what it should and nothing else (see the module docstring)."""
    problems = check(code).problems
    assert len(problems) == len(expected), problems
    for problem, text in zip(problems, expected, strict=True):
        assert text in problem, (problem, text)


def test_console_blocks_check_the_commands_only():
    code = "$ python benchmarks/bench_grid.py --n-texts 100 \\\n> --data-home data\nsearch  one\n"
    assert check(code, console=True).problems == []
    code = "$ python benchmarks/bench_grid.py --texts 100\nsearch  one\n"
    assert "unrecognized arguments" in check(code, console=True).problems[0]


def test_import_only_code_runs_for_real():
    assert check("python -c 'import skbert'").runs == [[sys.executable, "-c", "import skbert"]]
    assert check("python -c 'import skbert; skbert.load(\"x\")'").runs == []


def test_shell_span_rule():
    commands = ["pip install x", "python -X importtime", "HF_HUB_OFFLINE=1", ".venv/bin/pip x"]
    prose = ['pooling="cls"', ".venv", "python", "--rounds N", "bashful", "TORCH_SPEC"]
    assert [bool(SHELL_SPAN.match(s)) for s in commands + prose] == [True] * 4 + [False] * 6
