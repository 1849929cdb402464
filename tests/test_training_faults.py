"""Training faults: a non-finite loss, gradient, weight or validation score stops the loop at
the step where it appears; fp16 trains with loss scaling; every step has a non-zero learning
rate; the network is left usable whatever happens inside the loop."""

import math
import re
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import SMALL
from loop_helpers import Net, needs_cpu_loss_scaling, one_thread  # noqa: F401 (an autouse fixture)
from torch import nn

from skbert._training.checkpoint import TrainingCheckpoint
from skbert._training.loop import TrainingConfig, length_grouped_batches, linear_schedule, train
from skbert.exceptions import TrainingDivergedError

_GEN = torch.Generator().manual_seed(1)
IDS = torch.randint(5, SMALL["vocab_size"], (24, 6), generator=_GEN)
LABELS = (IDS[:, 1] > 17).long()


def loss_fn(net, batch):
    index = torch.as_tensor(batch)
    return F.cross_entropy(net(IDS[index]).float(), LABELS[index])


def make_batches(rng):
    return length_grouped_batches(np.zeros(24), 4, rng)  # 6 batches an epoch


def config(**changes):
    return TrainingConfig(**{"max_epochs": 2, "batch_size": 4, "learning_rate": 1e-3, **changes})


def weights(net):
    return {name: tensor.clone() for name, tensor in net.state_dict().items()}


def same_weights(a, b):
    return all(torch.equal(a[name], b[name]) for name in a)


class Fault:
    """``loss_fn`` that, at call ``at``, keeps a copy of the weights and then does ``fault``."""

    def __init__(self, at, fault):
        self.at, self.fault, self.calls, self.before = at, fault, 0, None

    def __call__(self, net, batch):
        self.calls += 1
        loss = loss_fn(net, batch)
        if self.calls == self.at:
            self.before = weights(net)
            loss = self.fault(net, loss)
        return loss


def nan_loss(net, loss):
    return loss * float("nan")


def inf_gradient(net, loss):
    """A finite loss (sqrt(0) = 0) whose gradient is infinite (d sqrt(x)/dx at 0)."""
    total = net.head.weight.sum()
    return loss + torch.sqrt(total - total.detach())


def overflow_weight(net, loss):
    """An overflow in the weights after the loss was computed: it shows only in later steps."""
    with torch.no_grad():
        net.head.bias.fill_(math.inf)
    return loss


def test_error_is_an_arithmetic_error():
    assert issubclass(TrainingDivergedError, FloatingPointError)
    assert issubclass(TrainingDivergedError, ArithmeticError)


def test_huge_learning_rate_stops_at_the_first_non_finite_loss():
    losses = []

    def recording(net, batch):
        loss = loss_fn(net, batch)
        losses.append(float(loss.detach()))
        return loss

    net = Net()
    with pytest.raises(ArithmeticError) as caught:
        train(net, recording, make_batches, config(learning_rate=1e6), desc="Fine-tuning")
    assert isinstance(caught.value, TrainingDivergedError)
    assert all(math.isfinite(v) for v in losses[:-1]) and not math.isfinite(losses[-1])
    message = str(caught.value)
    step = len(losses)
    epoch = (step - 1) // 6 + 1
    assert f"Fine-tuning diverged at step {step} of 12 (epoch {epoch} of 2)" in message
    assert "the training loss is nan" in message
    assert "learning_rate (it is 1e+06)" in message
    assert "precision" not in message  # trained in float32: nothing to say about it
    assert all(torch.isfinite(p).all() for p in net.parameters())  # never returned NaN


def test_non_finite_loss_is_caught_before_it_is_applied():
    fault = Fault(8, nan_loss)
    net = Net()
    with pytest.raises(TrainingDivergedError, match=r"at step 8 of 12 \(epoch 2 of 2\)"):
        train(net, fault, make_batches, config())
    assert same_weights(weights(net), fault.before)


def test_non_finite_gradient_is_caught_before_it_is_applied():
    fault = Fault(3, inf_gradient)
    net = Net()
    pattern = r"at step 3 of 12 \(epoch 1 of 2\): the gradient norm is (nan|inf)"
    with pytest.raises(TrainingDivergedError, match=pattern):
        train(net, fault, make_batches, config())
    assert same_weights(weights(net), fault.before)


def test_a_weight_overflow_at_the_last_step_is_caught():
    net = Net()
    pattern = r"at step 12 of 12 \(epoch 2 of 2\): weight 'head.bias' is not finite"
    with pytest.raises(TrainingDivergedError, match=pattern):
        train(net, Fault(12, overflow_weight), make_batches, config())


def test_a_non_finite_state_is_never_checkpointed(tmp_path):
    checkpoint = TrainingCheckpoint(tmp_path, 4, data_key="k")
    with pytest.raises(TrainingDivergedError, match="step 4 of 12.*'head.bias'"):
        train(Net(), Fault(4, overflow_weight), make_batches, config(), checkpoint=checkpoint)
    assert checkpoint.stored_seed() is None


def test_non_finite_validation_score_is_an_error():
    scores = iter([0.5, float("nan")])
    with pytest.raises(TrainingDivergedError, match="end of epoch 2 of 2.*validation score is nan"):
        train(Net(), loss_fn, make_batches, config(), validate=lambda net, share: (next(scores), 1))


def test_message_names_what_the_fit_can_change():
    with pytest.raises(TrainingDivergedError) as caught:
        train(
            Net(),
            Fault(2, nan_loss),
            make_batches,
            config(top_learning_rate=0.01, dtype=torch.bfloat16),
            desc="Within-task masked-LM",
        )
    message = str(caught.value)
    assert message.startswith("Within-task masked-LM diverged at step 2 of 12")
    assert "learning_rate (it is 0.001) or top_learning_rate (it is 0.01)" in message
    assert 'precision="fp32" (this fit trained in bfloat16)' in message


class SpyScaler(getattr(torch.amp, "GradScaler", object)):
    """A GradScaler that logs its calls (and the clipping between them) to ``LOG``."""

    def scale(self, outputs):
        LOG.append("scale")
        return super().scale(outputs)

    def unscale_(self, optimizer):
        LOG.append("unscale_")
        return super().unscale_(optimizer)

    def step(self, optimizer, *args, **kwargs):
        LOG.append("step")
        return super().step(optimizer, *args, **kwargs)

    def update(self, new_scale=None):
        LOG.append("update")
        return super().update(new_scale)


LOG = []


@needs_cpu_loss_scaling
@pytest.mark.parametrize("dtype, enabled", [(torch.float16, True), (None, False)])
def test_fp16_trains_with_loss_scaling_unscaled_before_clipping(monkeypatch, dtype, enabled):
    LOG.clear()
    scalers = []

    def make_scaler(*args, **kwargs):
        scalers.append(SpyScaler(*args, **kwargs))
        return scalers[-1]

    clip = torch.nn.utils.clip_grad_norm_

    def logged_clip(*args, **kwargs):
        LOG.append("clip")
        return clip(*args, **kwargs)

    monkeypatch.setattr(torch.amp, "GradScaler", make_scaler)
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", logged_clip)
    net = Net()
    start = weights(net)
    history = train(net, loss_fn, make_batches, config(max_steps=3, dtype=dtype))
    assert len(scalers) == 1 and scalers[0].is_enabled() is enabled
    assert LOG == ["scale", "unscale_", "clip", "step", "update"] * 3
    assert not same_weights(weights(net), start)
    assert all(math.isfinite(v) for v in history.loss_curve)
    assert all(torch.isfinite(p).all() for p in net.parameters())


@needs_cpu_loss_scaling
@pytest.mark.parametrize("at", [1, 3])
def test_fp16_skips_a_step_with_an_infinite_gradient_instead_of_failing(at):
    fault = Fault(at, inf_gradient)
    after = {}

    def loss(net, batch):  # the weights as the next step begins
        if fault.calls == at:
            after.update(weights(net))
        return fault(net, batch)

    net = Net()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = train(net, loss, make_batches, config(dtype=torch.float16))
    assert same_weights(after, fault.before)  # the scaler skipped that step
    assert history.n_iter == 2 and all(torch.isfinite(p).all() for p in net.parameters())
    assert not [w for w in caught if "lr_scheduler.step()" in str(w.message)]
    with pytest.raises(TrainingDivergedError, match=f"step {at} of 12.*gradient norm"):
        train(Net(), Fault(at, inf_gradient), make_batches, config(dtype=torch.bfloat16))


def test_schedule_factors_are_as_specified():
    parameter = nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([parameter], lr=1.0)
    scheduler = linear_schedule(optimizer, total_steps=10, warmup_fraction=0.2)
    rates = []
    for _ in range(10):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    # warm-up of ceil(0.2 * 10) = 2 steps: (s + 1) / 3, then (10 - s) / 8
    assert rates == [1 / 3, 2 / 3, 8 / 8, 7 / 8, 6 / 8, 5 / 8, 4 / 8, 3 / 8, 2 / 8, 1 / 8]


@pytest.mark.parametrize("total_steps", [1, 2, 3, 7, 40])
@pytest.mark.parametrize("warmup_fraction", [0.1, 0.5, 1.0])
def test_every_step_has_a_positive_rate(total_steps, warmup_fraction):
    parameter = nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([parameter], lr=2e-5)
    scheduler = linear_schedule(optimizer, total_steps, warmup_fraction)
    rates = []
    for _ in range(total_steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    warmup = math.ceil(warmup_fraction * total_steps)
    assert min(rates) > 0 and max(rates) <= 2e-5
    assert all(a < b for a, b in zip(rates[:warmup], rates[1 : warmup + 1], strict=False))
    decay = rates[warmup:]  # from the peak down to the smallest rate of the decay, not 0
    assert all(a > b for a, b in zip(decay, decay[1:], strict=False))
    if decay:
        assert decay[0] == 2e-5 and decay[-1] == pytest.approx(2e-5 / len(decay), rel=1e-12)


def test_a_one_step_fit_trains():
    net = Net()
    start = weights(net)
    history = train(net, loss_fn, make_batches, config(max_steps=1, warmup_fraction=0.1))
    assert history.n_iter == 1
    moved = [name for name in start if not torch.equal(start[name], net.state_dict()[name])]
    assert "head.weight" in moved
    assert any(name.startswith("backbone.encoder") for name in moved)


@pytest.mark.parametrize(
    "fault", [KeyboardInterrupt, RuntimeError("boom")], ids=["interrupt", "error"]
)
def test_the_network_is_left_usable_whatever_happens(fault):
    def failing(net, batch):
        if failing.calls == 1:
            raise fault
        failing.calls += 1
        return loss_fn(net, batch)

    failing.calls = 0
    net = Net()
    with pytest.raises(type(fault) if isinstance(fault, Exception) else fault):
        train(net, failing, make_batches, config(train_backbone=False))
    assert all(p.requires_grad for p in net.backbone.parameters())
    assert not any(module.training for module in net.modules())


def test_empty_data_is_refused_and_leaves_the_network_usable():
    net = Net()
    with pytest.raises(ValueError, match=re.escape("no training batches")):
        train(net, loss_fn, lambda rng: [], config(train_backbone=False))
    assert all(p.requires_grad for p in net.backbone.parameters())
