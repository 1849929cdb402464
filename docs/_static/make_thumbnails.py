"""Draw the gallery thumbnails of the examples that the documentation build does not run.

sphinx-gallery makes a card's thumbnail from a figure the example draws when it is executed;
the build executes only the quick demo (``EXECUTED_EXAMPLES`` in docs/conf.py), which draws
its own. Each other example names a PNG of this folder in a
``# sphinx_gallery_thumbnail_path = "_static/thumb_....png"`` comment, and its docstring holds
the output of a measured run ("Measured here", a ``text`` code block). The charts below plot
the figures read from that recorded output, never typed again, and store them in the PNG
(text chunk ``skbert-figures``, JSON), so that tests/test_docs.py can tell a thumbnail drawn
from an older run. Re-run this script after a recorded output changes::

    .venv/bin/python docs/_static/make_thumbnails.py

The two examples that save a chart of their own (choi2021_sentence_embeddings.py,
few_shot_sun2019.py) use that chart (choi2021_stsb.png, few_shot_sst2.png) instead.
"""

from __future__ import annotations

import ast
import json
import re
import struct
import textwrap
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parents[1] / "examples"
# sphinx-gallery's default thumbnail_size is (400, 280): draw at that size, text large enough to
# read on a card.
SIZE, DPI = (4.0, 2.8), 100
BLUE, ORANGE, GREEN = "tab:blue", "tab:orange", "tab:green"
#: the PNG text chunk that holds the figures a thumbnail plots
FIGURES_KEY = "skbert-figures"

_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")


# -- the recorded outputs ----------------------------------------------------------------------
def recorded_output(example: str) -> str | None:
    """The text block after "Measured here" in an example's docstring, or None.

    ``example`` is a file name of examples/ without ``.py``. The file is parsed, not imported.
    """
    source = (EXAMPLES / f"{example}.py").read_text(encoding="utf-8")
    doc = ast.get_docstring(ast.parse(source)) or ""
    match = re.search(
        r"^Measured here[^\n]*(?:\n[^\n]+)*\n\n\.\. code-block:: text\n\n((?:(?: {4}[^\n]*)?\n)+)",
        doc + "\n",
        re.MULTILINE,
    )
    return textwrap.dedent(match.group(1)).strip("\n") if match else None


def label_key(label: str) -> str:
    """A row label as the docs and the examples both write it, reduced to compare them.

    Lower case, without markup, parenthesised notes, thousands separators or commas:
    "[CLS]" and "cls", "BERT-FiT (`mlm_steps=0`)" and "BERT-FiT", "1,000" and "1000",
    "chunks, mean" and "chunks mean" are the same rows.
    """
    label = re.sub(r"\([^)]*\)", " ", label)
    label = re.sub(r"(?<=\d),(?=\d{3}\b)", "", label)
    label = re.sub(r"[`*\[\],]", " ", label)
    return " ".join(label.lower().split())


def full_key(label: str) -> str:
    """:func:`label_key` with the parenthesised notes kept: "bi-encoder, fine-tuned (CNN)" and
    "bi-encoder, fine-tuned (SBERT mean)", the same row for :func:`label_key`, differ here."""
    label = re.sub(r"(?<=\d),(?=\d{3}\b)", "", label)
    label = re.sub(r"[`*\[\](),]", " ", label)
    return " ".join(label.lower().split())


def recorded_rows(text: str) -> dict[str, list[float]]:
    """The table rows of a recorded output: ``{label_key(label): [numbers...]}``.

    A row is a line whose columns are set apart by two spaces or more; the first column is its
    label and every number of the others is read (a "± 1.8" spread too), in order. Lines with
    no number after the label (headings, prose) are left out.
    """
    found = []
    for line in text.splitlines():
        columns = re.split(r"\s{2,}", line.strip())
        numbers = [float(v) for v in _NUMBER.findall(" ".join(columns[1:]))]
        if len(columns) > 1 and numbers:
            found.append((columns[0], numbers))
    keys = [label_key(label) for label, _ in found]
    # rows that read as one label_key are told apart by their notes (full_key)
    return {
        (key if keys.count(key) == 1 else full_key(label)): numbers
        for key, (label, numbers) in zip(keys, found, strict=True)
    }


def _rows(example: str) -> dict[str, list[float]]:
    text = recorded_output(example)
    if text is None:
        raise LookupError(f"examples/{example}.py has no 'Measured here' output")
    return recorded_rows(text)


# -- the charts, from the recorded figures -----------------------------------------------------
def _bar_labels(ax, bars, texts, errors=None):
    """Write each bar's text above it (above its error bar, if any)."""
    for bar, text, error in zip(bars, texts, errors or [0] * len(bars), strict=True):
        ax.annotate(
            text,
            (bar.get_x() + bar.get_width() / 2, bar.get_height() + error),
            xytext=(0, 3),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=10,
        )


def stsb_zero_shot(ax):
    # STS-B test Spearman x100 of frozen all-MiniLM-L6-v2 vectors, last layer, per pooling
    last = _rows("stsb_zero_shot")["-1"]
    names, values = ["[CLS]", "mean", "max"], last[:3]
    bars = ax.bar(names, values, color=[BLUE, ORANGE, GREEN], width=0.6)
    _bar_labels(ax, bars, [f"{v:.1f}" for v in values])
    ax.set_ylim(min(60, min(values) - 5), max(values) + 6)
    ax.set_ylabel("Spearman x100")
    ax.set_title("Zero-shot STS-B by pooling")
    return {"-1": values}


def stsb_cross_encoder(ax):
    # STS-B test Spearman x100 of the four ways to score a pair (the "here" column, in order)
    table = recorded_output("stsb_cross_encoder").split("published", 1)[1]
    rows = [re.split(r"\s{2,}", line.strip()) for line in table.splitlines()]
    names = ["frozen\nbi-enc.", "SBERT\nmean", "SBERT\nCNN", "cross-\nencoder"]
    # a row is "label  here  published"; a wrapped published text has no "here" of its own
    values = [float(row[1]) for row in rows if len(row) > 2 and _NUMBER.fullmatch(row[1])]
    if len(values) != len(names):
        raise LookupError(f"stsb_cross_encoder: {len(values)} rows recorded, {len(names)} drawn")
    bars = ax.bar(names, values, color=[BLUE, ORANGE, ORANGE, GREEN], width=0.6)
    _bar_labels(ax, bars, [f"{v:.1f}" for v in values])
    ax.set_ylim(min(60, min(values) - 5), max(values) + 6)
    ax.set_ylabel("Spearman x100")
    ax.set_title("STS-B: bi-encoders and a cross-encoder")
    return {"values": values}


def long_texts(ax):
    # IMDb-sample validation error % per truncation method (the "ours" column)
    rows = _rows("long_texts_sun2019")
    methods = ["head", "tail", "head+tail", "chunks mean", "chunks max", "chunks attention"]
    names = ["head", "tail", "head+tail", "chunks\nmean", "chunks\nmax", "chunks\nattn"]
    values = [rows[m][0] for m in methods]
    bars = ax.bar(names, values, color=[BLUE] * 3 + [ORANGE] * 3, width=0.65)
    _bar_labels(ax, bars, [f"{v:.1f}" for v in values])
    ax.set_ylim(0, max(values) * 1.2)
    ax.set_ylabel("error %")
    ax.tick_params(axis="x", labelsize=8)
    ax.set_title("Long reviews: truncation vs chunks")
    return dict(zip(methods, values, strict=True))


def layer_lr_decay(ax):
    # SST-2 dev accuracy, mean and std over 3 seeds, per xi
    rows = _rows("layer_lr_decay_sun2019")
    (mean1, std1, _), (mean2, std2, _) = rows["1.0"], rows["0.95"]  # [mean, std, paper]
    means, stds = [mean1, mean2], [std1, std2]
    bars = ax.bar(["xi = 1.0", "xi = 0.95"], means, yerr=stds, capsize=6, color=[BLUE, ORANGE])
    _bar_labels(ax, bars, [f"{v:.3f}" for v in means], stds)
    ax.set_ylim(min(means) - 0.03, max(means) + 0.015)
    ax.set_ylabel("SST-2 dev accuracy")
    ax.set_title("Layer-wise learning-rate decay")
    return {"1.0": [means[0], stds[0]], "0.95": [means[1], stds[1]]}


def itpt_imdb(ax):
    # IMDb error %: ours (mean ± spread over seeds, the sample's validation reviews) beside the
    # paper's (BERT-base, IMDb test)
    rows = _rows("itpt_imdb_sun2019")
    fit, itpt = rows["bert-fit"], rows["bert-itpt-fit"]  # [error, spread, paper]
    width, x = 0.38, [0, 1]
    drawn = []
    for offset, values, color, label in (
        (-width / 2, fit, BLUE, "BERT-FiT"),
        (width / 2, itpt, ORANGE, "BERT-ITPT-FiT"),
    ):
        heights, spreads = [values[0], values[2]], [values[1], 0]
        positions = [i + offset for i in x]
        bars = ax.bar(positions, heights, width, yerr=spreads, capsize=4, color=color, label=label)
        _bar_labels(ax, bars, [f"{values[0]:.1f}", f"{values[2]:.2f}"], spreads)
        drawn.append(values)
    ax.set_xticks(x, ["here (MiniLM)", "Sun et al. (BERT)"])
    ax.set_ylim(0, max(fit[0] + fit[1], itpt[0] + itpt[1]) * 1.35)
    ax.set_ylabel("IMDb error %")
    ax.legend(fontsize=9, loc="upper right")
    ax.set_title("Within-task pre-training")
    return {"bert-fit": drawn[0], "bert-itpt-fit": drawn[1]}


def fine_tune_torchrun(ax):
    # the training loss per epoch of the same script in one process and under torchrun, from its
    # recorded runs (the fit times depended on the machine's load, the losses do not)
    text = recorded_output("fine_tune_torchrun")
    if text is None:
        raise LookupError("examples/fine_tune_torchrun.py has no 'Measured here' output")
    runs = re.findall(r"^(\d+) process\(es\): .*loss per epoch ([\d., ]+)$", text, re.MULTILINE)
    figures = {}
    for (processes, losses), color, marker in zip(runs, [BLUE, ORANGE], "os", strict=True):
        curve = [float(v) for v in losses.split(", ")]
        label = f"{processes} process" + ("es (torchrun)" if processes != "1" else "")
        epochs = range(1, len(curve) + 1)
        ax.plot(epochs, curve, marker=marker, color=color, label=label, markersize=8)
        figures[processes] = curve
    ax.set_xticks(list(epochs))
    ax.set_xlabel("epoch")
    ax.set_ylabel("training loss")
    ax.legend(fontsize=9)
    ax.set_title("One model, one or two processes")
    return figures


def layer_grid(ax):
    # mean pooling of each layer of frozen all-mpnet-base-v2: STS-B Spearman x100 (left axis)
    # and SST-2 accuracy % (right axis); row 0 has no [CLS] figures (n/a)
    rows = _rows("layer_grid")
    layers = sorted(int(label) for label in rows if label.isdigit())
    sts = [rows[str(i)][-5] if len(rows[str(i)]) == 6 else rows[str(i)][0] for i in layers]
    sst = [100 * rows[str(i)][-2] for i in layers]
    ax.plot(layers, sts, marker="o", color=BLUE, label="STS-B (Spearman)")
    ax.set_ylabel("STS-B Spearman x100", color=BLUE)
    right = ax.twinx()
    right.plot(layers, sst, marker="s", color=ORANGE, label="SST-2 (accuracy)")
    right.set_ylabel("SST-2 accuracy %", color=ORANGE)
    ax.set_xticks(layers[::2])
    ax.set_xlabel("layer (mean pooling)")
    ax.set_title("Every layer of all-mpnet-base-v2")
    return {"sts": sts, "sst": sst}


THUMBNAILS = {
    "thumb_layer_grid.png": layer_grid,
    "thumb_stsb_zero_shot.png": stsb_zero_shot,
    "thumb_stsb_cross_encoder.png": stsb_cross_encoder,
    "thumb_long_texts_sun2019.png": long_texts,
    "thumb_layer_lr_decay_sun2019.png": layer_lr_decay,
    "thumb_itpt_imdb_sun2019.png": itpt_imdb,
    "thumb_fine_tune_torchrun.png": fine_tune_torchrun,
}


def png_text(path) -> dict[str, str]:
    """The tEXt chunks of a PNG file, as ``{key: text}``."""
    data = Path(path).read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path} is not a PNG file")
    chunks, position = {}, 8
    while position < len(data):
        (length,) = struct.unpack(">I", data[position : position + 4])
        kind = data[position + 4 : position + 8]
        body = data[position + 8 : position + 8 + length]
        if kind == b"tEXt":
            key, _, text = body.partition(b"\0")
            chunks[key.decode("latin-1")] = text.decode("latin-1")
        elif kind == b"zTXt":
            key, _, rest = body.partition(b"\0")
            chunks[key.decode("latin-1")] = zlib.decompress(rest[1:]).decode("latin-1")
        position += 12 + length
    return chunks


def main():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for name, draw in THUMBNAILS.items():
        fig, ax = plt.subplots(figsize=SIZE, dpi=DPI, layout="constrained")
        figures = draw(ax)
        ax.spines[["top", "right"]].set_visible(False)
        fig.savefig(HERE / name, dpi=DPI, metadata={FIGURES_KEY: json.dumps(figures)})
        plt.close(fig)
        print(HERE / name)


if __name__ == "__main__":
    main()
