"""precision="auto": what it resolves to per device and, for training on CUDA, per model size."""

import pytest
import torch
from transformers import BertConfig, BertModel

from skbert._core.devices import BF16_TRAINING_MIN_FLOPS, resolve_precision
from skbert._core.flops import training_flops


def _model(hidden, layers, inner):
    config = BertConfig(
        hidden_size=hidden,
        num_hidden_layers=layers,
        intermediate_size=inner,
        num_attention_heads=2,
        vocab_size=50,
    )
    return BertModel(config)


def test_training_flops_from_the_config():
    minilm_like = _model(384, 6, 1536)
    assert training_flops(minilm_like) == 2 * 6 * (4 * 384 * 384 + 2 * 384 * 1536)
    assert training_flops(torch.nn.Linear(2, 2)) is None  # no config: unknown
    holder = torch.nn.Module()
    holder.backbone = minilm_like  # a skbert network: its backbone counts
    assert training_flops(holder) == training_flops(minilm_like)
    assert BF16_TRAINING_MIN_FLOPS == 2 * 12 * (4 * 768**2 + 2 * 768 * 3072)  # BERT-base


def test_auto_on_cuda_trains_small_models_in_fp32(monkeypatch):
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, **k: (9, 0))  # H100
    cuda = torch.device("cuda")
    small = training_flops(_model(384, 6, 1536))
    assert resolve_precision("auto", cuda, training_flops=small) is None
    assert resolve_precision("auto", cuda, training_flops=BF16_TRAINING_MIN_FLOPS) is (
        torch.bfloat16
    )
    assert resolve_precision("auto", cuda) is torch.bfloat16  # inference: bf16
    assert resolve_precision("auto", cuda, training_flops=None) is torch.bfloat16
    assert resolve_precision("bf16", cuda, training_flops=small) is torch.bfloat16  # asked
    # a T4 (7.5) or V100 (7.0): torch.cuda.is_bf16_supported() says yes (emulated), but
    # bf16 is slower than fp16 there
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    for capability in (7, 5), (7, 0):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, c=capability: c)
        assert resolve_precision("auto", cuda, training_flops=10**12) is torch.float16
        assert resolve_precision("auto", cuda) is torch.float16
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, **k: (8, 0))  # A100
    assert resolve_precision("auto", cuda) is torch.bfloat16


@pytest.mark.parametrize("device", ["cpu", "mps"])
def test_auto_is_fp32_off_cuda(device):
    assert resolve_precision("auto", torch.device(device), training_flops=10**12) is None


def test_a_bad_precision_names_the_allowed_values():
    with pytest.raises(ValueError, match=r"precision='half' is not allowed; use 'auto'"):
        resolve_precision("half", torch.device("cpu"))
