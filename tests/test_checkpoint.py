"""Checkpoint and resume of the training loop: an interrupted fit, resumed in a fresh network
built the same way, ends bit for bit where an uninterrupted fit ends."""

import hashlib
import json
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import SMALL
from loop_helpers import Net, needs_cpu_loss_scaling, one_thread  # noqa: F401 (an autouse fixture)

from skbert._training.checkpoint import INFO_FILE, STATE_FILE, TrainingCheckpoint
from skbert._training.loop import TrainingConfig, length_grouped_batches, train

_GEN = torch.Generator().manual_seed(1)
IDS = torch.randint(5, SMALL["vocab_size"], (32, 6), generator=_GEN)
LABELS = (IDS[:, 1] > 17).long()
TRAIN_IDS, TRAIN_LABELS = IDS[:24], LABELS[:24]


def loss_fn(net, batch):
    index = torch.as_tensor(batch)
    return F.cross_entropy(net(TRAIN_IDS[index]).float(), TRAIN_LABELS[index])


def make_batches(rng):
    return length_grouped_batches(np.arange(24) % 3, 4, rng)  # 6 batches an epoch


#: validation scores by epoch, whatever the numerics of this torch version: the best at epoch
#: 2, then two stale epochs, so n_iter_no_change=2 stops after epoch 4
SCRIPT = [1.0, 3.0, 2.0, 2.5, 4.0, 5.0]
_SCORES = {}  # digest of the weights -> the score, in the order the weights first appear


def validate(net, share):
    """The scripted score of these weights, as a total over 1 row. Every run of the "early"
    setup follows one trajectory (the property under test), so a resumed run meets the same
    weights at the same epochs and gets the same scores; weights that differ get a new score
    and fail."""
    digest = hashlib.blake2b(digest_size=16)
    for tensor in net.state_dict().values():
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    key = digest.hexdigest()
    if key not in _SCORES:
        _SCORES[key] = SCRIPT[len(_SCORES)]
    return _SCORES[key], 1


# 6 batches an epoch: "plain" runs 3 epochs (18 steps); "early" stops after 4 of 6 epochs
# (24 steps; two stale epochs) and restores epoch 2's weights; "fp16" trains with autocast
# and loss scaling.
SETUPS = {
    "plain": ({"max_epochs": 3, "learning_rate": 1e-2}, None),
    "early": (
        {"max_epochs": 6, "learning_rate": 0.15, "early_stopping": True, "n_iter_no_change": 2},
        validate,
    ),
    "fp16": ({"max_epochs": 2, "learning_rate": 1e-2, "dtype": torch.float16}, None),
}
SEED = 3


def config_of(setup, **changes):
    return TrainingConfig(batch_size=4, **{**SETUPS[setup][0], **changes})


class Counted:
    """``loss_fn`` that counts its calls and raises KeyboardInterrupt at call ``stop_at``."""

    def __init__(self, stop_at=None):
        self.calls, self.stop_at = 0, stop_at

    def __call__(self, net, batch):
        self.calls += 1
        if self.calls == self.stop_at:
            raise KeyboardInterrupt
        return loss_fn(net, batch)


def run(setup, *, loss=loss_fn, checkpoint=None, net_seed=0, valid=None, **changes):
    net = Net(net_seed)
    history = train(
        net,
        loss,
        make_batches,
        config_of(setup, **changes),
        validate=valid or SETUPS[setup][1],
        seed=SEED,
        checkpoint=checkpoint,
    )
    return net, history


_REFERENCE = {}


def reference(setup):
    """The uninterrupted run: its weights, history and number of optimiser steps."""
    if setup not in _REFERENCE:
        counted = Counted()
        net, history = run(setup, loss=counted)
        if setup == "early":  # the premise: stale epochs, early stopping, best weights restored
            scores = history.validation_scores
            assert len(scores) == 4 and counted.calls == 24
            assert np.argmax(scores) == 1 and max(scores[2:]) < scores[1]
        _REFERENCE[setup] = (net.state_dict(), history, counted.calls)
    return _REFERENCE[setup]


def assert_same_result(net, history, setup):
    weights, expected, _ = reference(setup)
    assert history.loss_curve == expected.loss_curve
    assert history.validation_scores == expected.validation_scores
    state = net.state_dict()
    assert state.keys() == weights.keys()
    for name, tensor in weights.items():
        assert torch.equal(state[name], tensor), name


def stored_info(directory):
    with open(os.path.join(directory, INFO_FILE)) as handle:
        return json.load(handle)


@pytest.mark.parametrize(
    "setup, stop_at, saved_step",
    [
        ("plain", 1, None),  # interrupted before anything was written: starts anew
        ("plain", 5, 4),  # mid-epoch, every_n_steps
        ("plain", 7, 6),  # first batch of epoch 2: the epoch-end state
        ("plain", 13, 12),  # first batch of epoch 3
        ("plain", 18, 16),  # the last step
        ("early", 8, 6),
        ("early", 19, 18),  # after a stale epoch: best weights and stale count stored
        ("early", 22, 20),
        pytest.param("fp16", 10, 8, marks=needs_cpu_loss_scaling),  # the scaler's state too
    ],
)
def test_resume_gives_the_uninterrupted_result(tmp_path, setup, stop_at, saved_step):
    checkpoint = TrainingCheckpoint(tmp_path / "state", 4, data_key="data-1")
    with pytest.raises(KeyboardInterrupt):
        run(setup, loss=Counted(stop_at), checkpoint=checkpoint)
    if saved_step is None:
        assert not os.path.exists(checkpoint.state_path)
    else:
        assert stored_info(checkpoint.directory)["step"] == saved_step
    counted = Counted()
    net, history = run(setup, loss=counted, checkpoint=checkpoint)
    assert_same_result(net, history, setup)
    total_steps = reference(setup)[2]
    assert counted.calls == total_steps - (saved_step or 0)  # resumed, not started again


def test_resume_after_an_interrupted_validation(tmp_path):
    calls = []

    def interrupted_validate(net, share):
        calls.append(1)
        if len(calls) == 3:  # end of epoch 3, before its checkpoint is written
            raise KeyboardInterrupt
        return validate(net, share)

    checkpoint = TrainingCheckpoint(tmp_path, 4, data_key="data-1")
    with pytest.raises(KeyboardInterrupt):
        run("early", checkpoint=checkpoint, valid=interrupted_validate)
    assert stored_info(tmp_path)["step"] == 16
    net, history = run("early", checkpoint=checkpoint)
    assert_same_result(net, history, "early")


def test_finished_run_resumes_to_its_result_without_training(tmp_path):
    checkpoint = TrainingCheckpoint(tmp_path, 4, data_key="data-1")
    run("early", checkpoint=checkpoint)
    info = stored_info(tmp_path)
    assert info["finished"] and info["step"] == 24

    def must_not_train(net, batch):
        raise AssertionError("a finished run trained again")

    net, history = run("early", loss=must_not_train, checkpoint=checkpoint)
    assert_same_result(net, history, "early")


@pytest.mark.parametrize(
    "change, message",
    [
        ({"data_key": "data-2"}, "training data or task"),
        ({"learning_rate": 5e-3}, "learning_rate (stored 0.01, now 0.005)"),
        ({"max_epochs": 4}, "max_epochs (stored 3, now 4)"),
        ({"net_seed": 1}, "initial weights"),
        ({"seed": 4}, "the seed (random_state)"),
    ],
)
def test_a_state_of_another_run_is_refused_and_kept(tmp_path, change, message):
    change = dict(change)
    folder = tmp_path / "fit-state"
    with pytest.raises(KeyboardInterrupt):
        run("plain", loss=Counted(8), checkpoint=TrainingCheckpoint(folder, 4, "data-1"))
    before = (folder / STATE_FILE).read_bytes()
    checkpoint = TrainingCheckpoint(folder, 4, change.pop("data_key", "data-1"))
    net_seed = change.pop("net_seed", 0)
    seed = change.pop("seed", SEED)
    with pytest.raises(ValueError) as caught:
        train(
            Net(net_seed),
            Counted(),
            make_batches,
            config_of("plain", **change),
            seed=seed,
            checkpoint=checkpoint,
        )
    text = str(caught.value)
    assert str(folder) in text and "another run" in text and message in text
    assert "Delete that folder, or pick another checkpoint_dir" in text
    assert (folder / STATE_FILE).read_bytes() == before


@needs_cpu_loss_scaling
def test_state_is_one_file_that_loads_with_weights_only(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        run("fp16", loss=Counted(6), checkpoint=TrainingCheckpoint(tmp_path, 4, "data-1"))
    assert set(os.listdir(tmp_path)) == {STATE_FILE, INFO_FILE}  # no temporary left
    stored = torch.load(tmp_path / STATE_FILE, weights_only=True)
    assert stored["loop"]["step"] == 4 and stored["loop"]["position"] == 4
    assert len(stored["optimizer"]["state"]) == len(list(Net().parameters()))
    assert stored["scaler"]["scale"] > 0 and stored["seed"] == SEED
    assert stored["numpy_rng"]["keys"].shape == (624,)
    info = stored_info(tmp_path)
    assert info["seed"] == SEED and info["write_id"] == stored["write_id"]


def test_stored_seed_reads_the_summary_and_falls_back_to_the_state(tmp_path, monkeypatch):
    checkpoint = TrainingCheckpoint(tmp_path / "new", 4, "data-1")
    assert checkpoint.stored_seed() is None
    with pytest.raises(KeyboardInterrupt):
        run("plain", loss=Counted(6), checkpoint=checkpoint)
    with monkeypatch.context() as patch:  # the summary answers: the weights are not read
        patch.setattr(torch, "load", lambda *a, **k: pytest.fail("the state file was read"))
        assert checkpoint.stored_seed() == SEED
    info = stored_info(checkpoint.directory)
    info["seed"], info["state_file"] = 99, [0, 0]  # a summary of another write
    with open(checkpoint.info_path, "w") as handle:
        json.dump(info, handle)
    assert checkpoint.stored_seed() == SEED
    os.remove(checkpoint.info_path)
    assert checkpoint.stored_seed() == SEED


class FirstSummaryKept(Counted):
    """``Counted`` that also keeps the first summary written (the one of step 4)."""

    def __init__(self, checkpoint, stop_at):
        super().__init__(stop_at)
        self.path, self.summary = checkpoint.info_path, None

    def __call__(self, net, batch):
        if self.summary is None and os.path.exists(self.path):
            with open(self.path) as handle:
                self.summary = handle.read()
        return super().__call__(net, batch)


def test_a_stale_summary_is_repaired_and_the_run_resumes(tmp_path):
    # as if a crash came between writing the state (step 12) and its summary
    checkpoint = TrainingCheckpoint(tmp_path, 4, "data-1")
    kept = FirstSummaryKept(checkpoint, stop_at=14)
    with pytest.raises(KeyboardInterrupt):
        run("plain", loss=kept, checkpoint=checkpoint)
    assert json.loads(kept.summary)["step"] == 4 and stored_info(tmp_path)["step"] == 12
    with open(checkpoint.info_path, "w") as handle:
        handle.write(kept.summary)
    assert checkpoint.stored_seed() == SEED
    counted = Counted()
    net, history = run("plain", loss=counted, checkpoint=checkpoint)
    assert_same_result(net, history, "plain")
    assert counted.calls == 18 - 12
    stored = torch.load(checkpoint.state_path, weights_only=True)
    assert stored_info(tmp_path)["write_id"] == stored["write_id"]


def test_an_interrupted_write_keeps_the_previous_state(tmp_path, monkeypatch):
    checkpoint = TrainingCheckpoint(tmp_path, 4, "data-1")
    with pytest.raises(KeyboardInterrupt):
        run("plain", loss=Counted(6), checkpoint=checkpoint)
    before = (tmp_path / STATE_FILE).read_bytes()
    real_save = torch.save

    def save_then_crash(obj, handle):
        real_save(obj, handle)
        handle.truncate(100)
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", save_then_crash)
    with pytest.raises(KeyboardInterrupt):
        run("plain", checkpoint=checkpoint)
    assert (tmp_path / STATE_FILE).read_bytes() == before
    assert set(os.listdir(tmp_path)) == {STATE_FILE, INFO_FILE}


def test_an_unreadable_state_is_reported(tmp_path):
    (tmp_path / STATE_FILE).write_bytes(b"not a checkpoint")
    checkpoint = TrainingCheckpoint(tmp_path, 4, "data-1")
    pattern = "checkpoint_dir=.*cannot be read.*Delete that folder"
    with pytest.raises(ValueError, match=pattern):
        checkpoint.stored_seed()
    with pytest.raises(ValueError, match=pattern):
        run("plain", checkpoint=checkpoint)


def test_resume_is_reported_when_verbose(tmp_path, capsys):
    checkpoint = TrainingCheckpoint(tmp_path, 4, "data-1")
    with pytest.raises(KeyboardInterrupt):
        run("plain", loss=Counted(9), checkpoint=checkpoint)
    capsys.readouterr()
    run("plain", checkpoint=checkpoint, verbose=1)
    assert "Training: resumed from step 8 of 18." in capsys.readouterr().err


@pytest.mark.parametrize(
    "every_n_steps, error, message",
    [
        (0, ValueError, "every_n_steps=0 is not allowed; it must be >= 1"),
        (-2, ValueError, "every_n_steps=-2"),
        (1.5, TypeError, "every_n_steps=1.5 must be an int >= 1"),
        (True, TypeError, "every_n_steps=True"),
        ("2", TypeError, "every_n_steps='2'"),
    ],
)
def test_every_n_steps_is_checked(tmp_path, every_n_steps, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(")):
        TrainingCheckpoint(tmp_path, every_n_steps, "data-1")


def test_directory_and_data_key_are_checked(tmp_path):
    assert TrainingCheckpoint(tmp_path, np.int64(3), "k").every_n_steps == 3
    existing = tmp_path / "a-file"
    existing.write_text("x")
    with pytest.raises(NotADirectoryError, match="checkpoint_dir=.*a-file.*existing file"):
        TrainingCheckpoint(existing, 4, "k")
    with pytest.raises(TypeError, match="data_key must be a str, got int"):
        TrainingCheckpoint(tmp_path, 4, 5)


def test_numpy_settings_resume_like_python_ones(tmp_path):
    # a grid search hands numpy scalars (np.arange): they identify the same run
    checkpoint = TrainingCheckpoint(tmp_path, 4, "data-1")
    numpy_settings = {"max_epochs": np.int64(3), "learning_rate": np.float64(1e-2)}
    with pytest.raises(KeyboardInterrupt):
        run("plain", loss=Counted(13), checkpoint=checkpoint, **numpy_settings)
    counted = Counted()
    net, history = run("plain", loss=counted, checkpoint=checkpoint)
    assert_same_result(net, history, "plain")
    assert counted.calls == 18 - 12


def test_a_state_that_weights_only_loading_would_refuse_is_not_written(tmp_path):
    checkpoint = TrainingCheckpoint(tmp_path, 4, "data-1")
    snapshot = {"loop": {"step": 1, "finished": False}, "extra": {"kept": {1, 2}}}
    identity = checkpoint.identity(Net(), {}, SEED)
    with pytest.raises(TypeError, match=r"snapshot\['extra'\]\['kept'\] is a set"):
        checkpoint.save(snapshot, identity)
    assert checkpoint.stored_seed() is None and os.listdir(tmp_path) == []


def test_a_run_started_before_an_unrepeatable_phase_resumes_from_its_start(tmp_path):
    # mlm_steps: a masked-LM phase, before the loop, whose weights another number of threads
    # (or CUDA) does not repeat bit for bit; the run's identity is taken before that phase
    folder = tmp_path / "fit-state"

    def fit(noise, stop_at=None, folder=folder):
        net = Net(0)
        checkpoint = None if folder is None else TrainingCheckpoint(folder, 4, "data-1")
        if checkpoint is not None:
            checkpoint.start_from(net)  # as loaded
        with torch.no_grad():  # the phase, which gives other weights each time
            net.head.weight.add_(noise)
        config = config_of("plain")
        history = train(
            net, Counted(stop_at), make_batches, config, seed=SEED, checkpoint=checkpoint
        )
        return net, history

    with pytest.raises(KeyboardInterrupt):
        fit(1e-3, stop_at=8)
    assert stored_info(folder)["step"] == 6  # the end of epoch 1
    net, history = fit(2e-3)  # refused as "other initial weights" before
    assert stored_info(folder)["finished"]
    # it continued the interrupted run, from the weights that run's phase gave
    expected_net, expected = fit(1e-3, folder=None)
    assert history.loss_curve == expected.loss_curve
    for name, tensor in expected_net.state_dict().items():
        assert torch.equal(net.state_dict()[name], tensor), name


def test_a_fit_with_mlm_steps_resumes_when_that_phase_does_not_repeat(
    tiny_bert, tmp_path, monkeypatch
):
    import skbert._training.loop as loop
    from skbert import BertTextClassifier

    def make():
        return BertTextClassifier(
            model=tiny_bert,
            device="cpu",
            batch_size=4,
            max_epochs=1,
            random_state=0,
            mlm_steps=2,
            checkpoint_dir=str(tmp_path / "fit-state"),
            checkpoint_steps=1,
        )

    phase, calls = BertTextClassifier._within_task_pretrain, []

    def unrepeatable(backbone, *args, **kwargs):  # as another number of threads, or CUDA
        curve = phase(backbone, *args, **kwargs)
        calls.append(len(calls))
        with torch.no_grad():
            backbone.embeddings.word_embeddings.weight.add_(1e-4 * len(calls))
        return curve

    monkeypatch.setattr(BertTextClassifier, "_within_task_pretrain", staticmethod(unrepeatable))
    texts = [f"the {w} film was {v}" for w in ("cat", "dog", "movie") for v in ("good", "bad")]
    labels = ["pos" if "good" in t else "neg" for t in texts]
    step = loop._step

    def interrupted(*args, **kwargs):  # the 2 masked-LM steps, 1 of fine-tuning, then stop
        if interrupted.calls == 3:
            raise KeyboardInterrupt
        interrupted.calls += 1
        return step(*args, **kwargs)

    interrupted.calls = 0
    monkeypatch.setattr(loop, "_step", interrupted)
    with pytest.raises(KeyboardInterrupt):
        make().fit(texts, labels)
    monkeypatch.setattr(loop, "_step", step)
    assert stored_info(tmp_path / "fit-state")["step"] == 1
    make().fit(texts, labels)  # refused before: "differs in the initial weights"
    assert stored_info(tmp_path / "fit-state")["finished"]


def test_a_checkpoint_is_the_same_for_every_rank_of_a_launch(tiny_bert, tmp_path):
    """Ranks given device=f"cuda:{LOCAL_RANK}", or one folder spelled two ways, hashed their
    own strings into the checkpoint's key: one rank refused the folder while the other
    resumed from it. The device (its type is the loop's own identity) is left out, and a
    model folder is keyed by its real path."""
    import shutil

    from skbert import BertTextClassifier

    model = shutil.copytree(tiny_bert, tmp_path / "model")
    texts, targets = ["a", "b"], np.array([0, 1])

    def key(**params):
        params = {"checkpoint_dir": tmp_path / "ckpt", **params}
        return BertTextClassifier(**params)._checkpoint(texts, None, targets).data_key

    first = key(model=str(model), device="cuda:0")
    assert key(model=str(model), device="cuda:1") == first
    assert key(model=f"{model}/", device="cpu") == first
    assert key(model=str(model), device="cpu", learning_rate=1e-3) != first
