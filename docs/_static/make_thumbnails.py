"""Draw the gallery thumbnails of the examples that the documentation build does not run.

sphinx-gallery makes a card's thumbnail from a figure the example draws when it is executed;
the build executes only the quick demo (``EXECUTED_EXAMPLES`` in docs/conf.py), and that one
prints a table rather than drawing. Each example below therefore names a PNG of this folder in a
``# sphinx_gallery_thumbnail_path = "_static/thumb_....png"`` comment. The charts plot the
figures measured by the example, as its docstring and the user guide report them (the demo's
from a run of ``examples/demo_grid_search.py``); re-run this script after those change::

    .venv/bin/python docs/_static/make_thumbnails.py

The two examples that save a chart of their own (choi2021_sentence_embeddings.py,
few_shot_sun2019.py) use that chart (choi2021_stsb.png, few_shot_sst2.png) instead.
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent
# sphinx-gallery's default thumbnail_size is (400, 280): draw at that size, text large enough to
# read on a card.
SIZE, DPI = (4.0, 2.8), 100
BLUE, ORANGE, GREEN = "tab:blue", "tab:orange", "tab:green"


def _bar_labels(ax, bars, fmt, errors=None):
    """Write each bar's value above it (above its error bar, if any).

    ``fmt`` formats every value, or is a list with each bar's text (the figures as reported).
    """
    for k, (bar, error) in enumerate(zip(bars, errors or [0] * len(bars), strict=True)):
        value = bar.get_height()
        ax.annotate(
            fmt[k] if isinstance(fmt, list) else fmt.format(value),
            (bar.get_x() + bar.get_width() / 2, value + error),
            xytext=(0, 3),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=10,
        )


def stsb_zero_shot(ax):
    # examples/stsb_zero_shot.py, last layer (user guide: "Pooling" and Choi et al. table,
    # no fine-tuning column): STS-B test Spearman x100 of frozen all-MiniLM-L6-v2 vectors.
    names, values = ["[CLS]", "mean", "max"], [73.50, 82.03, 78.80]
    bars = ax.bar(names, values, color=[BLUE, ORANGE, GREEN], width=0.6)
    _bar_labels(ax, bars, "{:.1f}")
    ax.set_ylim(60, 88)
    ax.set_ylabel("Spearman x100")
    ax.set_title("Zero-shot STS-B by pooling")


def demo_grid_search(ax):
    # examples/demo_grid_search.py: 3-fold CV accuracy of frozen all-MiniLM-L6-v2 features +
    # LogisticRegression on 300 of the 400 bundled SST-2 sentences, per pooling x layer.
    layers = ["2", "4", "-1", "last 4"]
    poolings = ["cls", "mean", "max"]
    accuracy = DEMO_ACCURACY
    image = ax.imshow(accuracy, cmap="viridis", aspect="auto")
    for i, row in enumerate(accuracy):
        for j, value in enumerate(row):
            light = value < (min(map(min, accuracy)) + max(map(max, accuracy))) / 2
            ax.text(
                j,
                i,
                f"{value:.2f}",
                ha="center",
                va="center",
                fontsize=11,
                color="white" if light else "black",
            )
    ax.set_xticks(range(len(layers)), layers)
    ax.set_yticks(range(len(poolings)), poolings)
    ax.set_xlabel("layer")
    ax.set_title("GridSearchCV: CV accuracy")
    ax.figure.colorbar(image, ax=ax, fraction=0.05)


def long_texts(ax):
    # examples/long_texts_sun2019.py (user guide table): IMDb-sample validation error %.
    names = ["head", "tail", "head+tail", "chunks\nmean", "chunks\nmax", "chunks\nattn"]
    values = [24.5, 20.5, 19.0, 15.0, 14.5, 15.5]
    colors = [BLUE] * 3 + [ORANGE] * 3
    bars = ax.bar(names, values, color=colors, width=0.65)
    _bar_labels(ax, bars, "{:.1f}")
    ax.set_ylim(0, 29)
    ax.set_ylabel("error %")
    ax.tick_params(axis="x", labelsize=8)
    ax.set_title("Long reviews: truncation vs chunks")


def layer_lr_decay(ax):
    # examples/layer_lr_decay_sun2019.py (user guide table): SST-2 dev accuracy, 3 seeds.
    names, means, stds = ["xi = 1.0", "xi = 0.95"], [0.817, 0.811], [0.003, 0.002]
    bars = ax.bar(names, means, yerr=stds, capsize=6, color=[BLUE, ORANGE], width=0.5)
    _bar_labels(ax, bars, "{:.3f}", stds)
    ax.set_ylim(0.78, 0.83)
    ax.set_ylabel("SST-2 dev accuracy")
    ax.set_title("Layer-wise learning-rate decay")


def itpt_imdb(ax):
    # examples/itpt_imdb_sun2019.py (docstring and user guide): IMDb error %, ours (2 seeds,
    # 200 validation reviews) beside Sun et al.'s (BERT-base, IMDb test).
    groups = ["here (MiniLM)", "Sun et al. (BERT)"]
    fit, fit_std = [20.7, 5.40], [1.8, 0]
    itpt, itpt_std = [23.5, 4.37], [3.0, 0]
    x = range(len(groups))
    width = 0.38
    a = ax.bar(
        [i - width / 2 for i in x],
        fit,
        width,
        yerr=fit_std,
        capsize=4,
        color=BLUE,
        label="BERT-FiT",
    )
    b = ax.bar(
        [i + width / 2 for i in x],
        itpt,
        width,
        yerr=itpt_std,
        capsize=4,
        color=ORANGE,
        label="BERT-ITPT-FiT",
    )
    _bar_labels(ax, a, ["20.7", "5.40"], fit_std)
    _bar_labels(ax, b, ["23.5", "4.37"], itpt_std)
    ax.set_xticks(list(x), groups)
    ax.set_ylim(0, 33)
    ax.set_ylabel("IMDb error %")
    ax.legend(fontsize=9, loc="upper right")
    ax.set_title("Within-task pre-training")


# 3-fold CV accuracy per pooling (rows: cls, mean, max) x layer (2, 4, -1, last four
# concatenated), as printed by examples/demo_grid_search.py (2 CPU cores, torch 2.13 CPU; the
# best: mean pooling of the last four layers, 0.793, and 0.770 on the held-out sentences).
DEMO_ACCURACY = [
    [0.500, 0.533, 0.603, 0.597],
    [0.723, 0.767, 0.780, 0.793],
    [0.693, 0.737, 0.703, 0.747],
]

THUMBNAILS = {
    "thumb_stsb_zero_shot.png": stsb_zero_shot,
    "thumb_demo_grid_search.png": demo_grid_search,
    "thumb_long_texts_sun2019.png": long_texts,
    "thumb_layer_lr_decay_sun2019.png": layer_lr_decay,
    "thumb_itpt_imdb_sun2019.png": itpt_imdb,
}


def main():
    for name, draw in THUMBNAILS.items():
        fig, ax = plt.subplots(figsize=SIZE, dpi=DPI, layout="constrained")
        draw(ax)
        ax.spines[["top", "right"]].set_visible(False)
        fig.savefig(HERE / name, dpi=DPI)
        plt.close(fig)
        print(HERE / name)


if __name__ == "__main__":
    main()
