"""What a launch's ranks do when a fit fails on one of them, or when their fits differ, without
a launch: the process group's timeout, leaving it after a failure, the values the ranks compare
(tests/test_torchrun.py runs them in a real launch)."""

from __future__ import annotations

import datetime

import numpy as np
import pytest
import torch
from loop_helpers import Net

import skbert._training.distributed as distributed
import skbert._training.loop as loop
import skbert._training.rank_failures as rank_failures
from skbert._core.launch import Launch, Share
from skbert.exceptions import TrainingDivergedError


@pytest.fixture
def fresh(monkeypatch):
    """A rank of a launch of 2 that has not joined its group yet (nothing joined for real)."""
    monkeypatch.setattr(distributed, "_JOINED", [])
    monkeypatch.setattr(distributed, "_JOINED_BY", [None])
    monkeypatch.setattr(distributed, "_ABANDONED", [])
    monkeypatch.setattr(distributed, "launch", lambda: Launch(rank=0, world=2, local_rank=0))
    monkeypatch.setattr(distributed, "switched_off", lambda: False)
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: False)
    monkeypatch.delenv(distributed.TIMEOUT_VARIABLE, raising=False)
    calls = []

    def init_process_group(**kwargs):
        calls.append(kwargs)
        raise ConnectionAbortedError("not joined in this test")

    monkeypatch.setattr(torch.distributed, "init_process_group", init_process_group)
    return calls


@pytest.mark.parametrize("value, seconds", [(None, 600.0), ("42", 42.0), (" 1.5 ", 1.5)])
def test_the_group_waits_a_bounded_time_in_a_collective(fresh, monkeypatch, value, seconds):
    if value is not None:
        monkeypatch.setenv("SKBERT_DISTRIBUTED_TIMEOUT", value)
    with pytest.raises(ConnectionAbortedError):
        distributed.join()
    assert fresh[0]["timeout"] == datetime.timedelta(seconds=seconds)  # not gloo's 30 minutes


@pytest.mark.parametrize("value", ["abc", "0", "-5", "nan", "inf"])
def test_a_bad_timeout_is_refused_naming_the_variable(fresh, monkeypatch, value):
    monkeypatch.setenv("SKBERT_DISTRIBUTED_TIMEOUT", value)
    with pytest.raises(ValueError) as caught:
        distributed.join()
    message = str(caught.value)
    assert f"SKBERT_DISTRIBUTED_TIMEOUT={value!r} is not allowed" in message
    assert "a number of seconds > 0" in message
    assert fresh == []


def test_a_process_that_left_the_group_refuses_later_fits(fresh, monkeypatch):
    monkeypatch.setattr(distributed, "_JOINED", [True])  # as if skbert had joined
    left = []
    monkeypatch.setattr(distributed, "_leave", lambda: left.append(True))
    distributed.abandon(OSError(28, "No space left on device"))
    assert left == [True]
    with pytest.raises(RuntimeError) as caught:
        distributed.join()
    message = str(caught.value)
    assert "left its torchrun launch's process group" in message
    assert "(OSError: [Errno 28] No space left on device)" in message
    assert "Restart the launch" in message and "error_score='raise'" in message
    assert fresh == []  # no second try to join


def test_a_group_the_user_initialised_is_not_left(fresh, monkeypatch):
    left = []
    monkeypatch.setattr(distributed, "_leave", lambda: left.append(True))
    distributed.abandon(OSError("disk full"))  # _JOINED empty: the user's group, or none
    assert left == [] and distributed._ABANDONED == []


def _fit_on_rank(monkeypatch, failure):
    """train() as rank 0 of 2, ``failure`` raised where the ranks compare their fits; the
    errors that made the rank leave the group."""
    monkeypatch.setattr(loop, "join", lambda device=None: Share(0, 2))
    left = []
    monkeypatch.setattr(rank_failures, "abandon", left.append)

    def check_agree(values):
        raise failure

    monkeypatch.setattr(loop, "check_agree", check_agree)
    batches = lambda rng: [np.arange(4)]  # noqa: E731
    loss = lambda net, batch: net.head.weight.sum()  # noqa: E731
    with pytest.raises(type(failure)):
        loop.train(Net(0), loss, batches, loop.TrainingConfig(max_epochs=1))
    return left


def test_a_failure_on_one_rank_leaves_the_group(monkeypatch):
    failure = OSError(28, "No space left on device")
    assert _fit_on_rank(monkeypatch, failure) == [failure]
    interrupt = KeyboardInterrupt()
    assert _fit_on_rank(monkeypatch, interrupt) == [interrupt]


@pytest.mark.parametrize("kind", ["disagree", "diverged"])
def test_a_failure_that_every_rank_raises_keeps_the_group(monkeypatch, kind):
    # (a GridSearchCV candidate that diverges: the next one trains with the same group)
    if kind == "disagree":
        failure = distributed.RanksDisagree("the ranks disagree")
    else:
        failure = TrainingDivergedError("diverged")
    assert _fit_on_rank(monkeypatch, failure) == []


def test_a_process_forked_from_a_rank_trains_alone_even_after_the_rank_left(fresh, monkeypatch):
    """A joblib or Dask worker forked from a rank is no rank: it was refused once the rank
    had left the group, and (before) joined the rank's inherited group, waiting for ever."""
    import os

    monkeypatch.setattr(distributed, "launch", lambda: None)  # a child: not a rank
    monkeypatch.setattr(distributed, "_JOINED_BY", [os.getpid() + 1])  # its parent joined
    monkeypatch.setattr(distributed, "_ABANDONED", ["the rank left"])
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)  # inherited
    assert distributed.join() == distributed.SINGLE
    monkeypatch.setattr(distributed, "launch", lambda: Launch(rank=0, world=2, local_rank=0))
    with pytest.raises(RuntimeError, match="the rank left"):  # the rank itself refuses
        distributed.join()


def test_a_fit_failing_before_training_leaves_the_group_too(monkeypatch, tmp_path):
    """A failure between the fit's first collective (the shared seed) and train() (encoding,
    loading the encoder) left the other ranks waiting for the whole timeout."""
    from skbert import BertTextClassifier

    left = []
    monkeypatch.setattr(rank_failures, "abandon", left.append)
    with pytest.raises(OSError, match="no such directory"):
        BertTextClassifier(str(tmp_path / "no-model")).fit(["a", "b"], [0, 1])
    assert len(left) == 1 and isinstance(left[0], OSError)
    every = TrainingDivergedError("diverged on every rank")
    rank_failures.leave_after(every)
    assert len(left) == 1  # the ranks stay in step


class _Checkpoint:
    def __init__(self, outcome):
        self.outcome = outcome

    def load(self, identity):
        if self.outcome == "refused":
            raise ValueError("holds the training state of another run")
        return {"step": 3} if self.outcome == "resumed" else None


@pytest.mark.parametrize("outcome, code", [("none", 0), ("resumed", 1), ("refused", 2)])
def test_the_ranks_agree_on_the_checkpoint_before_they_train(monkeypatch, outcome, code):
    """One rank refusing the checkpoint (a key of per-rank strings) while another resumed left
    that one training alone, waiting for the other in the first step."""
    compared = []
    monkeypatch.setattr(rank_failures, "check_agree", compared.append)
    share = Share(1, 2)
    if outcome == "refused":
        with pytest.raises(rank_failures.CheckpointRefused, match="another run"):
            rank_failures.agreed_load(_Checkpoint(outcome), "identity", share)
    else:
        stored = rank_failures.agreed_load(_Checkpoint(outcome), "identity", share)
        assert (stored is None) == (outcome == "none")
    assert list(compared[0].values()) == [code]
    assert rank_failures.agreed_load(None, "identity", Share(0, 1)) is None


def test_the_ranks_compare_the_data_the_batches_and_the_plan():
    batches = [np.array([3, 0, 1]), np.array([2, 4])]
    settings = {"learning_rate": 1e-3, "batch_size": 3}
    values = distributed.run_values(7, batches, 4, settings, "data-1")
    assert values["the total optimiser steps"] == 4 and values["the seed"] == 7
    for value in values.values():  # float64 holds each exactly: the all_reduce compares them
        assert float(value) == value and 0 <= value < 2**53
    changes = {
        "the rows of the batches": ([np.array([0, 3, 1]), batches[1]], 4, settings, "data-1"),
        "the total optimiser steps": (batches, 5, settings, "data-1"),
        "the training settings": (batches, 4, {**settings, "batch_size": 4}, "data-1"),
        "the training data (a digest of its texts, targets and parameters)": (
            batches,
            4,
            settings,
            "data-2",
        ),
    }
    for name, args in changes.items():
        other = distributed.run_values(7, *args)
        assert [k for k in values if values[k] != other[k]] == [name]
    assert "the training data" not in " ".join(distributed.run_values(7, batches, 4, {}, None))
