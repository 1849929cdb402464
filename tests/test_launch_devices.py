"""A torchrun rank's GPU: ``cuda:LOCAL_RANK``, and a clear error where two ranks of one
launch would share a GPU (NCCL refuses that: "Duplicate GPU detected"). No GPU is needed:
the number of GPUs is patched."""

from __future__ import annotations

import pytest
import torch

from skbert._core import launch


@pytest.fixture
def rank_2_of_4(monkeypatch):
    """This process as rank 2 of a launch of 4, its LOCAL_RANK 2."""
    variables = {"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "2"}
    variables.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="1")
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SKBERT_DISTRIBUTED", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    return monkeypatch


@pytest.mark.parametrize("gpus", [1, 2])
def test_more_ranks_than_gpus_is_refused_with_what_to_do(rank_2_of_4, gpus):
    """LOCAL_RANK 2 on a host of 2 GPUs took cuda:0 (2 % 2), the GPU of LOCAL_RANK 0."""
    rank_2_of_4.setattr(torch.cuda, "device_count", lambda: gpus)
    with pytest.raises(RuntimeError, match=rf"LOCAL_RANK=2 but this host shows {gpus} GPU") as e:
        launch.local_device(torch.device("cuda"))
    assert "Duplicate GPU" in str(e.value) and "--nproc_per_node" in str(e.value)
    assert "device='cpu'" in str(e.value)
    from skbert._core.devices import resolve_device

    with pytest.raises(RuntimeError, match="LOCAL_RANK=2"):
        resolve_device("auto")
    assert launch.local_device(torch.device("cuda", 0)) == torch.device("cuda", 0)  # chosen
    assert launch.local_device(torch.device("cpu")) == torch.device("cpu")  # CPU fits share


def test_enough_gpus_or_one_of_its_own_or_no_launch(rank_2_of_4):
    rank_2_of_4.setattr(torch.cuda, "device_count", lambda: 4)
    assert launch.local_device(torch.device("cuda")) == torch.device("cuda", 2)
    # each rank shown one GPU of its own (SLURM's --gpus-per-task=1): cuda:0 is its own
    rank_2_of_4.setattr(torch.cuda, "device_count", lambda: 1)
    rank_2_of_4.setenv("CUDA_VISIBLE_DEVICES", "2")
    assert launch.local_device(torch.device("cuda")) == torch.device("cuda", 0)
    rank_2_of_4.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with pytest.raises(RuntimeError, match="LOCAL_RANK=2"):
        launch.local_device(torch.device("cuda"))
    rank_2_of_4.setenv("SKBERT_DISTRIBUTED", "0")  # every process alone: no group, no check
    assert launch.local_device(torch.device("cuda")) == torch.device("cuda")
