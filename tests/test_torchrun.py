"""Data-parallel fine-tuning with ``torchrun --nnodes=1 --nproc_per_node=2`` (gloo, CPU).

The ranks of one launch train one model: they end with the same weights, which equal a
single process's within float tolerance (the tiny BERT has no dropout, so nothing random
differs), the loss curves are the global batch's, and only rank 0 writes or prints.

The launch talks over the loopback only: its rendezvous is 127.0.0.1 and gloo is bound to
``lo``. torch's TCPStore servers (the launcher's rendezvous and master stores) listen on every
interface, whatever the address given, so where the system allows it (``unshare -rn``: a user
and network namespace) the launch runs in a network namespace of its own, where ``lo`` is the
only interface; elsewhere those two stores listen on every interface for the launch's few
seconds.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import REPO, SMALL

import skbert._core.launch as launch
import skbert._training.distributed as distributed

WORKER = REPO / "tests" / "torchrun_fit.py"
#: the launch, two ranks on the loopback, is killed past this
TIMEOUT_S = 420


@pytest.fixture(scope="module")
def still_bert(tmp_path_factory):
    """The tiny BERT without dropout: a run's only randomness is then the data order."""
    from conftest import save_tiny
    from transformers import BertConfig, BertModel

    config = BertConfig(**SMALL, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return save_tiny(tmp_path_factory, "still-bert", BertModel, config)


def _loopback_namespace() -> list:
    """The command prefix that runs a command in a network namespace with only ``lo`` up, or
    none where user namespaces or ``ip`` are not available."""
    prefix = ["unshare", "-rn", "sh", "-c", 'ip link set lo up && exec "$@"', "sh"]
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return []
    probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=30)
    return prefix if probe.returncode == 0 else []


def _kill_tree(pid: int) -> None:
    """Kill the launch: its process group, and the ranks, which torchrun starts in sessions
    of their own (found in /proc where there is one; they would hold the output open)."""
    children, tree = {}, [pid]
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry))
    for member in tree:  # grows as it goes: every descendant of the launch
        tree.extend(children.get(member, []))
    os.killpg(pid, signal.SIGKILL)
    for member in tree[1:]:
        try:
            os.kill(member, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _launch(model, out, watched, *options, timeout=TIMEOUT_S):
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or shutil.which(
        "torchrun"
    )
    if torchrun is None:
        pytest.fail("torchrun (installed with torch) is not on the PATH")
    env = {
        **os.environ,
        "GLOO_SOCKET_IFNAME": "lo",  # the ranks talk over the loopback only
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("SKBERT_DISTRIBUTED", None)
    command = [
        *_loopback_namespace(),
        torchrun,
        "--nnodes=1",
        "--nproc_per_node=2",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=127.0.0.1:0",  # a free port on the loopback
        "--max-restarts=0",
        str(WORKER),
        model,
        str(out),
        str(watched),
        *options,
    ]
    process = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: killed whole on a timeout
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_tree(process.pid)
        output, _ = process.communicate(timeout=30)
        pytest.fail(f"torchrun ran past {timeout} s:\n{output[-4000:]}")
    finally:
        if process.poll() is None:
            _kill_tree(process.pid)
    logs = "".join(
        f"\n--- rank {r} stderr ---\n" + (out / f"stderr-{r}.txt").read_text()
        for r in "01"
        if (out / f"stderr-{r}.txt").exists()
    )
    assert process.returncode == 0, f"torchrun failed:\n{output[-4000:]}{logs[-4000:]}"


@pytest.fixture(scope="module")
def runs(still_bert, tmp_path_factory):
    """The two ranks' results and the single process's."""
    import torchrun_fit

    out = tmp_path_factory.mktemp("torchrun-out")
    _launch(still_bert, out, tmp_path_factory.mktemp("torchrun-watched"))
    single = torchrun_fit.fit_all(still_bert, tmp_path_factory.mktemp("single-watched"))
    ranks = [torch.load(out / f"result-{r}.pt", weights_only=False) for r in "01"]
    writes = [json.loads((out / f"writes-{r}.json").read_text()) for r in "01"]
    stderr = [(out / f"stderr-{r}.txt").read_text() for r in "01"]
    threads = [json.loads((out / f"threads-{r}.json").read_text()) for r in "01"]
    return {
        "single": single,
        "ranks": ranks,
        "writes": writes,
        "stderr": stderr,
        "threads": threads,
    }


FITS = ("classifier", "sentence", "regressor", "pretrained")


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="lists threads from /proc")
def test_leaving_the_group_at_exit_ends_its_threads(runs):
    # Were the group still held (transformers' import of torch.distributed.nn binding it),
    # its gloo threads would outlive destroy_process_group() and could abort the exit.
    assert runs["threads"] == [[], []]


@pytest.mark.parametrize("fit", FITS)
def test_every_rank_ends_with_the_same_weights(runs, fit):
    first, second = (r[fit] for r in runs["ranks"])
    assert first.keys() == second.keys()
    for name in first:
        assert torch.equal(first[name], second[name]), name


@pytest.mark.parametrize("fit", FITS)
def test_two_ranks_train_as_one_process_with_the_same_global_batch(runs, still_bert, fit):
    from transformers import AutoModel

    launched, single = runs["ranks"][0][fit], runs["single"][fit]
    initial = {
        k.removeprefix("bert."): v
        for k, v in AutoModel.from_pretrained(still_bert).state_dict().items()
    }
    moved = 0.0
    for name, value in single.items():
        np.testing.assert_allclose(launched[name], value, rtol=1e-4, atol=2e-5, err_msg=name)
        start = next((w for k, w in initial.items() if name.endswith(k)), None)
        if start is not None and start.shape == value.shape:
            moved = max(moved, float((value - start).abs().max()))
    assert moved > 1e-3  # the fits changed the encoder far beyond the tolerance


def test_loss_curves_and_validation_are_the_global_ones(runs):
    single, (first, second) = runs["single"], runs["ranks"]
    for key in ("classifier_loss", "warm_start_loss", "sentence_loss", "regressor_loss"):
        assert first[key] == second[key]
        np.testing.assert_allclose(first[key], single[key], rtol=1e-5)
    assert len(first["classifier_loss"]) == 3
    assert first["classifier_scores"] == second["classifier_scores"] == single["classifier_scores"]
    assert first["resumed_same"] and second["resumed_same"]  # from rank 0's checkpoint
    np.testing.assert_allclose(first["proba"], single["proba"], atol=1e-5)
    np.testing.assert_allclose(first["vectors"], single["vectors"], atol=1e-5)
    # R^2 of every held-out row, scored on rank 0 and shared: the single process's score
    assert first["regressor_scores"] == second["regressor_scores"]
    assert len(first["regressor_scores"]) == 2
    np.testing.assert_allclose(first["regressor_scores"], single["regressor_scores"], atol=1e-5)
    np.testing.assert_allclose(first["ratings"], single["ratings"], rtol=1e-5, atol=1e-4)


def test_each_rank_trains_on_its_share_of_every_batch(runs):
    first, second = runs["ranks"]
    assert first["share"] == launch.Share(0, 2) and second["share"] == launch.Share(1, 2)
    assert [n for n, _ in first["rows"]] == [n for n, _ in second["rows"]]  # the same batches
    assert all(a + b == n for (n, a), (_, b) in zip(first["rows"], second["rows"], strict=True))
    assert all(
        a > 0 and b > 0 for (_, a), (_, b) in zip(first["rows"], second["rows"], strict=True)
    )
    # 30 classifier rows x 3 epochs, then 40 x 1 (warm start), 39 pairs x 2 epochs, 30
    # regressor rows x 2 epochs, 4 pre-training batches of 5
    assert sum(n for n, _ in first["rows"]) == 90 + 40 + 78 + 60 + 20


def test_only_rank_0_writes_and_prints(runs):
    rank0, rank1 = runs["writes"]
    assert rank1 == []
    assert any("checkpoints" in path for path in rank0)
    assert any("pretrained" in path for path in rank0)
    assert "Fine-tuning epoch 1/3" in runs["stderr"][0]
    assert "resumed from step 15 of 15 (finished" in runs["stderr"][0]
    assert "epoch" not in runs["stderr"][1]
    assert all(r["torch_threads"] == 1 for r in runs["ranks"])  # torchrun's OMP_NUM_THREADS


def test_outside_a_launch_or_in_a_child_of_a_rank_nothing_is_distributed(monkeypatch):
    for name, value in {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "1")
    assert launch.launch() == launch.Launch(rank=1, world=2, local_rank=1)
    assert launch.current_share() == launch.Share(rank=1, world=2)
    monkeypatch.setenv("SKBERT_DISTRIBUTED", "0")
    assert launch.launch() is None
    assert distributed.join() == launch.SINGLE
    monkeypatch.delenv("SKBERT_DISTRIBUTED")
    monkeypatch.setattr(launch.multiprocessing, "parent_process", lambda: object())
    assert launch.launch() is None  # a joblib or Dask worker started by a rank
    monkeypatch.delenv("MASTER_PORT")
    assert launch.current_share() == launch.SINGLE


def test_shares_cover_a_batch_in_order():
    batch = np.arange(10, 17)
    parts = [launch.Share(r, 3).of(batch) for r in range(3)]
    assert [p.tolist() for p in parts] == [[10, 11, 12], [13, 14], [15, 16]]
    assert launch.Share(2, 3).of(np.arange(2)).tolist() == []
    assert launch.SINGLE.of(batch) is batch


def test_ranks_with_different_data_fail_with_a_clear_error(still_bert, tmp_path):
    _launch(still_bert, tmp_path, tmp_path / "watched", "--other-data")
    for rank in "01":
        message = (tmp_path / f"error-{rank}.txt").read_text()
        assert "the 2 processes of this launch disagree on the number of batches" in message
        if os.path.isdir("/proc/self/task"):  # no gloo thread outlives leaving the group
            assert json.loads((tmp_path / f"threads-{rank}.json").read_text()) == []


def test_a_fit_that_fails_on_one_rank_stops_every_rank_at_once(still_bert, tmp_path):
    # (as GridSearchCV's error_score=nan catches it: the other rank waited 30 minutes in the
    # failed fit's gradient reduction, gloo's timeout, and the failing rank's next fit too)
    _launch(still_bert, tmp_path, tmp_path / "watched", "--failures", timeout=240)
    ranks = [json.loads((tmp_path / f"failures-{r}.json").read_text()) for r in "01"]
    for outcomes in ranks:  # errors that every rank raises leave the group as it is
        assert "disagree on" in outcomes["shuffled"]["message"]
        assert "the rows of the batches" in outcomes["shuffled"]["message"]
        assert "the training data (a digest" in outcomes["labels"]["message"]
        assert outcomes["after"]["message"] == "no error"
        assert outcomes["failing"]["seconds"] < 60
        refused = outcomes["refused"]["message"]
        assert refused.startswith("RuntimeError: this process left its torchrun launch's")
        assert "Restart the launch" in refused and "error_score='raise'" in refused
        assert outcomes["refused"]["seconds"] < 5
    assert ranks[0]["failing"]["message"] == "OSError: [Errno 28] No space left on device"
    assert "OSError: [Errno 28]" in ranks[0]["refused"]["message"]
    assert ranks[1]["failing"]["message"].startswith("RuntimeError")  # the peer left
    if os.path.isdir("/proc/self/task"):  # no gloo thread outlives the group
        for r in "01":
            assert json.loads((tmp_path / f"threads-{r}.json").read_text()) == []


def test_a_rank_takes_its_own_gpu_for_a_bare_cuda(monkeypatch):
    for name, value in {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "1")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert launch.local_device(torch.device("cuda")) == torch.device("cuda", 1)
    assert launch.local_device(torch.device("cuda", 0)) == torch.device("cuda", 0)
    assert launch.local_device(torch.device("cpu")) == torch.device("cpu")
    monkeypatch.delenv("RANK")
    assert launch.local_device(torch.device("cuda")) == torch.device("cuda")
