"""The training loop, skbert/_training/ module by module (its checkpoint and resume are in
tests/test_checkpoint.py, its torchrun launches in tests/test_torchrun.py).

loop: a non-finite loss, gradient, weight or validation score stops the loop at the step where
it appears; fp16 trains with loss scaling; every step has a non-zero learning rate; the network
is left usable whatever happens inside the loop. fault_checks: the one step function reads its
checks every N steps, N = 1 (the host, as on the CPU) or N = 4 (kept on the device, as CUDA
runs them with fused AdamW, exercised on the CPU, whose fused AdamW, torch >= 2.4, skips a step
on the same found_inf flag): the same errors at the same steps, weights left as before the bad
step. snapshot: the RNG state's encoding.
"""

import itertools
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

import skbert._training.loop as loop
from skbert._training.checkpoint import TrainingCheckpoint
from skbert._training.fault_checks import DeferredChecks, HostChecks
from skbert._training.loop import TrainingConfig, length_grouped_batches, linear_schedule, train
from skbert._training.snapshot import decode_numpy_state, encode_numpy_state
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


def _cpu_has_fused_adamw():
    try:
        torch.optim.AdamW([torch.nn.Parameter(torch.ones(1))], fused=True)
    except (RuntimeError, ValueError, TypeError):
        return False
    return True


@pytest.fixture(params=[1, 4], ids=["N=1", "N=4"])
def every(request, monkeypatch):
    """The fault checks' N: 1, the host's check of each step (the CPU); or 4, the checks kept
    on the device and read every 4 steps, as on CUDA (fused AdamW skipping on the CPU here).
    Returns ``(N, reads)``, ``reads`` the number of steps pending at each read."""
    n = request.param
    if n > 1:
        if not _cpu_has_fused_adamw():
            pytest.skip("fused AdamW on the CPU needs torch >= 2.4")
        monkeypatch.setattr(loop, "DEFERRED_CHECK_DEVICES", ("cuda", "cpu"))
        monkeypatch.setattr(loop, "READ_EVERY", n)
    reads = []
    for checks in (HostChecks, DeferredChecks):
        monkeypatch.setattr(checks, "read", _counting(checks.read, reads))
    return n, reads


def _counting(read, reads):
    def counting(self):
        reads.append(self.pending)
        return read(self)

    return counting


# ------------------------------------------------------------------ divergence
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


@pytest.mark.parametrize(
    ("top_rate", "advice"),
    [(0.01, "Try a lower top_learning_rate (it is 0.01)."), (None, "Try a lower learning_rate")],
)
def test_with_the_encoder_frozen_the_message_names_the_rate_of_the_top(top_rate, advice):
    """Only the weights on top train: their rate is the one to lower (learning_rate where
    top_learning_rate is None), not the frozen encoder's."""
    with pytest.raises(TrainingDivergedError) as caught:
        settings = config(top_learning_rate=top_rate, train_backbone=False)
        train(Net(), Fault(2, nan_loss), make_batches, settings)
    assert advice in str(caught.value)


# ------------------------------------------------------------------ one step, N steps a read
def test_the_checks_are_read_every_n_steps_and_at_each_epochs_end(every):
    n, reads = every
    history = train(Net(), loss_fn, make_batches, config())  # 2 epochs of 6 steps
    assert reads == ([1] * 12 if n == 1 else [4, 2, 4, 2])
    assert len(history.loss_curve) == 2
    if n > 1:  # the same optimiser, checked by the host at each step: the losses are summed
        # on the device in float32 there, by the host in float64 here: the same within rounding
        loop.DEFERRED_CHECK_DEVICES = ()  # N = 1 again (restored by monkeypatch)
        per_step = train(Net(), loss_fn, make_batches, config())
        assert history.loss_curve == pytest.approx(per_step.loss_curve, rel=1e-6)


def test_a_non_finite_loss_stops_at_its_step_with_the_weights_before_it(every):
    n, _ = every
    fault = Fault(8, nan_loss)
    net = Net()
    pattern = r"at step 8 of 12 \(epoch 2 of 2\): the training loss is nan"
    with pytest.raises(TrainingDivergedError, match=pattern):
        train(net, fault, make_batches, config())
    # N = 1: the host stopped at that step; N = 4: it went on queueing steps until its next
    # read, all skipped on the device
    assert fault.calls == 8 if n == 1 else fault.calls > 8
    assert same_weights(weights(net), fault.before)


def test_a_non_finite_gradient_stops_at_its_step_with_the_weights_before_it(every):
    fault = Fault(3, inf_gradient)
    net = Net()
    pattern = r"at step 3 of 12 \(epoch 1 of 2\): the gradient norm is (nan|inf)"
    with pytest.raises(TrainingDivergedError, match=pattern):
        train(net, fault, make_batches, config())
    assert same_weights(weights(net), fault.before)
    assert all(bool(torch.isfinite(p).all()) for p in net.parameters())


def test_the_checks_are_read_before_a_checkpoint_is_written(every, tmp_path):
    n, reads = every
    checkpoint = TrainingCheckpoint(tmp_path, 2, data_key="k")
    with pytest.raises(TrainingDivergedError, match="at step 1 of 12"):
        train(Net(), Fault(1, nan_loss), make_batches, config(), checkpoint=checkpoint)
    # N = 1: read at step 1 itself; N = 4: at the first checkpoint, step 2; nothing written
    assert reads == ([1] if n == 1 else [2])
    assert checkpoint.stored_seed() is None


def test_n_is_1_under_loss_scaling(every):
    """float16 loss scaling skips steps itself (through the same flag): there the loop
    checks every step, as on the CPU's foreach AdamW."""
    n, _ = every
    net = Net()
    scaled = loop._optimisation(net, config(dtype=torch.float16), 12)
    assert scaled.check_every == (1 if scaled.scaler.is_enabled() else n)
    assert loop._optimisation(net, config(), 12).check_every == n


def test_host_checks_record_and_read():
    checks = HostChecks(10)
    for loss, norm in [(1.0, 0.5), (3.0, 2.0)]:
        assert checks.record(torch.tensor(loss), torch.tensor(norm)) is None
    assert checks.read() == (4.0, 2, None)
    checks.record(torch.tensor(2.0), torch.tensor(math.inf))  # step 13: the first bad one
    checks.record(torch.tensor(math.nan), torch.tensor(1.0))
    assert checks.read()[1:] == (2, (13, "the gradient norm is inf"))
    scaled = HostChecks(0, check_norm=False)  # under loss scaling: the scaler skips the step
    scaled.record(torch.tensor(2.0), torch.tensor(math.inf))
    assert scaled.read() == (2.0, 1, None)


def test_deferred_checks_record_and_read():
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


# ------------------------------------------------------------------ loss scaling
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


# ------------------------------------------------------------------ schedule, robustness
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


# ------------------------------------------------------------------ snapshot
def test_the_numpy_rng_state_survives_its_encoding():
    rng = np.random.RandomState(3)
    rng.standard_normal()  # a cached Gaussian, too
    state = rng.get_state()
    encoded = encode_numpy_state(state)
    assert all(isinstance(v, torch.Tensor | str | int | float) for v in encoded.values())
    other = np.random.RandomState(0)
    other.set_state(decode_numpy_state(encoded))
    assert other.random_sample(5).tolist() == rng.random_sample(5).tolist()


def test_cpu_training_uses_fused_adamw_where_torch_has_it():
    network = Net()
    opt = loop._optimisation(network, config(), total_steps=4)
    assert opt.optimizer.defaults.get("fused") is (True if _cpu_has_fused_adamw() else None)
    assert opt.check_every == 1  # the host checks each CPU step before its update


@pytest.mark.parametrize("fused", [True, False])
def test_every_step_counts_a_version_of_the_weights_it_changes(monkeypatch, fused):
    """What caches a weight by its version (the CPU inference plans) sees each update, also
    fused AdamW's, which writes in place without counting one."""
    if fused and not _cpu_has_fused_adamw():
        pytest.skip("fused AdamW on the CPU needs torch >= 2.4")
    monkeypatch.setattr(loop, "_cpu_fused_adamw", lambda: fused)
    network = Net()
    versions = []

    def recorded(net, batch):
        versions.append([p._version for p in net.parameters()])
        return loss_fn(net, batch)

    train(network, recorded, make_batches, config())
    versions.append([p._version for p in network.parameters()])
    assert len(versions) > 2
    for before, after in itertools.pairwise(versions):
        assert all(b < a for b, a in zip(before, after, strict=True))


def test_fused_and_unfused_adamw_train_to_the_same_weights_within_rounding(monkeypatch):
    if not _cpu_has_fused_adamw():
        pytest.skip("fused AdamW on the CPU needs torch >= 2.4")
    fused = Net()
    train(fused, loss_fn, make_batches, config())
    monkeypatch.setattr(loop, "_cpu_fused_adamw", lambda: False)
    plain = Net()
    train(plain, loss_fn, make_batches, config())
    for a, b in zip(fused.state_dict().values(), plain.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
