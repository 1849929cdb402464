"""A tiny network and a thread setting shared by the training-loop tests."""

import pytest
import torch
from conftest import SMALL
from torch import nn
from transformers import BertConfig, BertModel

#: float16 loss scaling on the CPU needs torch.amp.GradScaler (torch >= 2.3)
needs_cpu_loss_scaling = pytest.mark.skipif(
    not hasattr(torch.amp, "GradScaler"), reason="torch < 2.3 has no CPU GradScaler"
)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models train several times faster on one thread on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class Net(nn.Module):
    """A tiny random BERT (dropout on in train mode) with a two-class head on [CLS]."""

    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.backbone = BertModel(BertConfig(**SMALL), add_pooling_layer=False)
        self.head = nn.Linear(SMALL["hidden_size"], 2)

    def forward(self, ids):
        return self.head(self.backbone(input_ids=ids).last_hidden_state[:, 0])
