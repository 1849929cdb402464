"""Seeded blocks put back every generator they seed, and seed a GPU's only when it runs there.

No GPU is needed: torch's CUDA generator calls are replaced by a fake device's, which records
what a fit would have done to the user's GPU stream."""

import pytest
import torch

from skbert import BertSentenceTransformer, BertTextClassifier
from skbert._core.rng import reseed, seeded

X = ["good film", "great plot", "awful film", "bad plot", "fine cast", "dull cast"] * 2
Y = [1, 1, 0, 0, 1, 0] * 2


@pytest.fixture
def fake_gpu(monkeypatch):
    """One CUDA device's generator: its state is the last seed given to it."""
    gpu = {"state": "the user's stream", "seeds": []}

    def manual_seed(seed):
        gpu["state"] = f"seeded {seed}"
        gpu["seeds"].append(seed)

    def set_rng_state(state, device="cuda"):
        gpu["state"] = state

    monkeypatch.setattr(torch.cuda, "manual_seed", manual_seed)
    monkeypatch.setattr(torch.cuda, "manual_seed_all", manual_seed)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device="cuda": gpu["state"])
    monkeypatch.setattr(torch.cuda, "set_rng_state", set_rng_state)
    monkeypatch.setattr(torch.cuda, "device", lambda device: torch.random.fork_rng(devices=[]))
    return gpu


def test_seeded_block_seeds_the_gpu_it_runs_on_and_puts_both_streams_back(fake_gpu):
    torch.random.default_generator.manual_seed(5)
    expected = torch.rand(2)
    torch.random.default_generator.manual_seed(5)
    with seeded(11, torch.device("cuda:0")):
        assert fake_gpu["state"] == "seeded 11"
        first = torch.rand(3)
        reseed(12, torch.device("cuda:0"))
        assert fake_gpu["state"] == "seeded 12"
    assert fake_gpu["state"] == "the user's stream"
    assert torch.equal(torch.rand(2), expected)  # the CPU's stream too
    with seeded(11):  # the CPU's generator only
        assert torch.equal(torch.rand(3), first)
    assert fake_gpu["seeds"] == [11, 12]


@pytest.mark.parametrize("what", ["classifier with mlm_steps", "sentence transformer"])
def test_a_cpu_fit_leaves_the_gpu_stream_alone(fake_gpu, tiny_bert, what):
    """torch.manual_seed (under fork_rng(devices=[])) reseeded every GPU and did not put the
    streams back: twice per fit and once per masked-LM batch, whose seed all ranks share."""
    if what == "sentence transformer":
        est = BertSentenceTransformer(
            tiny_bert, fine_tune="full", device="cpu", max_epochs=1, batch_size=4
        )
        est.fit(X, Y)
    else:
        est = BertTextClassifier(
            tiny_bert, device="cpu", max_epochs=1, batch_size=4, mlm_steps=2, random_state=0
        )
        est.fit(X, Y)
    assert fake_gpu["seeds"] == [] and fake_gpu["state"] == "the user's stream"
