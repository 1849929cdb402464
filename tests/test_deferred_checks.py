"""The training loop's checks kept on the device (skbert._training.fault_checks), as CUDA runs them
with fused AdamW, exercised on the CPU (whose fused AdamW, torch >= 2.4, skips a step on the
same found_inf flag): the same errors at the same steps, weights left as before the bad step,
the host reading the device every few steps only."""

import math

import pytest
import torch
from loop_helpers import Net, one_thread  # noqa: F401 (an autouse fixture)
from test_training_faults import (
    Fault,
    config,
    inf_gradient,
    loss_fn,
    make_batches,
    nan_loss,
    same_weights,
    weights,
)

import skbert._training.loop as _training
from skbert._training.checkpoint import TrainingCheckpoint
from skbert._training.fault_checks import DeferredChecks
from skbert._training.loop import train
from skbert.exceptions import TrainingDivergedError


def _cpu_has_fused_adamw():
    try:
        torch.optim.AdamW([torch.nn.Parameter(torch.ones(1))], fused=True)
    except (RuntimeError, ValueError, TypeError):
        return False
    return True


pytestmark = pytest.mark.skipif(
    not _cpu_has_fused_adamw(), reason="fused AdamW on the CPU needs torch >= 2.4"
)


@pytest.fixture
def deferred(monkeypatch):
    """Train on the CPU as on CUDA: fused AdamW, checks read back every 4 steps."""
    monkeypatch.setattr(_training, "FUSED_ADAMW_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(_training, "READ_EVERY", 4)
    reads = []
    read = DeferredChecks.read

    def counting(self):
        reads.append(self.pending)
        return read(self)

    monkeypatch.setattr(DeferredChecks, "read", counting)
    return reads


def test_the_device_is_read_every_few_steps_and_the_loss_curve_is_the_same(deferred):
    history = train(Net(), loss_fn, make_batches, config())  # 2 epochs of 6 steps
    assert deferred == [4, 2, 4, 2]  # every 4 steps and at each epoch's end
    deferred.clear()
    _training.FUSED_ADAMW_DEVICES = ()  # the per-step checks (restored by monkeypatch)
    per_step = train(Net(), loss_fn, make_batches, config())
    assert deferred == []
    assert len(history.loss_curve) == 2
    # fused AdamW rounds differently from foreach AdamW: the same curve within rounding
    assert history.loss_curve == pytest.approx(per_step.loss_curve, rel=1e-4)


def test_a_non_finite_loss_stops_at_its_step_with_the_weights_before_it(deferred):
    fault = Fault(8, nan_loss)
    net = Net()
    pattern = r"at step 8 of 12 \(epoch 2 of 2\): the training loss is nan"
    with pytest.raises(TrainingDivergedError, match=pattern):
        train(net, fault, make_batches, config())
    assert fault.calls > 8  # the host went on queueing steps until its next read...
    assert same_weights(weights(net), fault.before)  # ...all skipped on the device


def test_a_non_finite_gradient_stops_at_its_step_with_the_weights_before_it(deferred):
    fault = Fault(3, inf_gradient)
    net = Net()
    pattern = r"at step 3 of 12 \(epoch 1 of 2\): the gradient norm is (nan|inf)"
    with pytest.raises(TrainingDivergedError, match=pattern):
        train(net, fault, make_batches, config())
    assert same_weights(weights(net), fault.before)
    assert all(bool(torch.isfinite(p).all()) for p in net.parameters())


def test_the_device_is_read_before_a_checkpoint_is_written(deferred, tmp_path):
    checkpoint = TrainingCheckpoint(tmp_path, 2, data_key="k")
    with pytest.raises(TrainingDivergedError, match="at step 1 of 12"):
        train(Net(), Fault(1, nan_loss), make_batches, config(), checkpoint=checkpoint)
    assert deferred == [2]  # read at the first checkpoint, step 2: nothing written
    assert checkpoint.stored_seed() is None


def test_loss_scaling_keeps_the_per_step_checks(deferred):
    """float16 loss scaling skips steps itself (through the same flag): there the loop
    checks every step, as before."""
    net = Net()
    opt = _training._optimisation(net, config(dtype=torch.float16), 12)
    assert opt.deferred is (opt.scaler.is_enabled() is False)
    assert _training._optimisation(net, config(), 12).deferred


def test_record_and_read():
    checks = DeferredChecks(torch.device("cpu"), 10)
    for loss, norm in [(1.0, 0.5), (3.0, 2.0)]:
        assert float(checks.record(torch.tensor(loss), torch.tensor(norm))) == 0.0
    assert checks.read() == (4.0, 2, None)
    checks.record(torch.tensor(2.0), torch.tensor(math.inf))  # step 13: the first bad one
    flag = checks.record(torch.tensor(math.nan), torch.tensor(1.0))
    assert float(flag) == 1.0
    loss_sum, n_steps, failure = checks.read()
    assert (loss_sum, n_steps) == (0.0, 2)
    assert failure == (13, "the gradient norm is inf")
