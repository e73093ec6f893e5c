"""Tests of lib.core.train.fit: learning, determinism, schedule, clipping, accumulation, early stopping."""
import lib  # noqa: F401

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook
from transformers import get_cosine_schedule_with_warmup

from lib.nn.heads import LinearHead, ShareLockHead
from lib.nn.losses import ClipLoss
from lib.core.config import TrainSettings
from lib.core.train import TrainResult, cosine_with_warmup, fit, seed_everything



@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """These problems are tiny: one intra-op thread is faster and immune to a busy machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# --------------------------------------------------------------------------- toy methods and data


class PairMethod(nn.Module):
    """A text head against fixed (L2-normalised) image features, CLIP loss: ShareLock in miniature."""

    def __init__(self, head: nn.Module, temperature: float = 0.07):
        super().__init__()
        self.head = head
        self.clip = ClipLoss(temperature)

    def loss(self, batch):
        return self.clip(F.normalize(batch["image"], dim=-1), self.head(batch["text"]))


class RegressionMethod(nn.Module):
    """A plain mean-over-rows loss (no negatives): accumulation must be exact for it."""

    def __init__(self, d_in=6, d_out=3):
        super().__init__()
        self.lin = nn.Linear(d_in, d_out).double()

    def loss(self, batch):
        return ((self.lin(batch["x"]) - batch["y"]) ** 2).sum(-1).mean()


class PullMethod(nn.Module):
    """w is pulled towards the training rows; validation measures the distance to other rows.
    Records (val loss, w) at every validation call, and the flags it was called under."""

    def __init__(self, d=4):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(d))
        self.snapshots = []
        self.val_flags = []

    def loss(self, batch):
        loss = ((self.w - batch["x"]) ** 2).sum(-1).mean()
        if not self.training:
            self.snapshots.append((float(loss), self.w.detach().clone()))
            self.val_flags.append(torch.is_grad_enabled())
        return loss


class RecordingMethod(nn.Module):
    """Records which rows each call of loss() saw."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(1, 1)
        self.seen = []

    def loss(self, batch):
        if self.training:
            self.seen.append(batch["idx"].tolist())
        return (self.lin(batch["x"]) ** 2).mean()


def toy_pairs(n, seed, d_img=8, d_txt=16):
    """image = x, text = x @ W + noise with W fixed: a learnable alignment problem."""
    w = torch.randn(d_img, d_txt, generator=torch.Generator().manual_seed(123))
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d_img, generator=g)
    return {"image": x, "text": x @ w + 0.05 * torch.randn(n, d_txt, generator=g)}


def params_of(m):
    return {k: v.detach().clone() for k, v in m.state_dict().items()}


@pytest.fixture
def step_grads():
    """Capture the gradients each optimiser step sees (after clipping), via a global step pre-hook."""
    captured = []

    def hook(optimizer, args, kwargs):
        captured.append([p.grad.detach().clone() for g in optimizer.param_groups for p in g["params"]])

    handle = register_optimizer_step_pre_hook(hook)
    yield captured
    handle.remove()


# --------------------------------------------------------------------------- tests


def test_loss_decreases_on_learnable_toy_problem():
    train, val = toy_pairs(512, seed=1), toy_pairs(128, seed=2)
    seed_everything(0)
    method = PairMethod(LinearHead(16, 8))
    with torch.no_grad():
        method.eval()
        initial_val = float(method.loss(val))
    cfg = TrainSettings(steps=120, batch_size=64, lr=1e-2, warmup_steps=10, eval_every=40)
    result = fit(method, train, val, cfg, progress=False)
    assert isinstance(result, TrainResult)
    assert result.steps_run == 120 and len(result.history) == 120
    first = sum(h["train_loss"] for h in result.history[:10]) / 10
    last = sum(h["train_loss"] for h in result.history[-10:]) / 10
    assert last < 0.5 * first
    assert result.best_val_loss < 0.5 * initial_val
    # the learned head aligns held-out pairs: each image's own text is the nearest (top-1 > 80 %)
    method.eval()
    with torch.no_grad():
        sims = F.normalize(val["image"], dim=-1) @ method.head(val["text"]).T
    assert (sims.argmax(1) == torch.arange(128)).float().mean() > 0.8


def _run(seed, steps=30):
    seed_everything(seed)
    method = PairMethod(ShareLockHead(16, 8, hidden_dim=32, num_layers=3, dropout=0.2))
    cfg = TrainSettings(steps=steps, batch_size=32, micro_batch_size=16, lr=3e-3, warmup_steps=5, eval_every=10)
    result = fit(method, toy_pairs(200, seed=1), toy_pairs(64, seed=2), cfg, seed=seed, progress=False)
    return result, params_of(method)


def test_same_seed_is_bit_identical_and_different_seed_differs():
    r1, p1 = _run(0)
    r2, p2 = _run(0)
    assert r1.history == r2.history  # exact float equality, every step
    assert p1.keys() == p2.keys() and all(torch.equal(p1[k], p2[k]) for k in p1)
    r3, p3 = _run(1)
    assert [h["train_loss"] for h in r3.history] != [h["train_loss"] for h in r1.history]
    assert not torch.equal(p1["head.net.0.weight"], p3["head.net.0.weight"])


def test_warmup_cosine_lr_equals_closed_form_and_hf_scheduler():
    steps, warmup, base = 40, 7, 0.01
    seed_everything(0)
    cfg = TrainSettings(steps=steps, batch_size=16, lr=base, warmup_steps=warmup, eval_every=100)
    result = fit(RegressionMethod(), {"x": torch.randn(64, 6).double(), "y": torch.randn(64, 3).double()},
                 None, cfg, progress=False)
    lrs = [h["lr"] for h in result.history]

    def closed_form(t):  # t = optimiser steps already taken
        if t < warmup:
            return base * t / warmup
        return base * 0.5 * (1 + math.cos(math.pi * (t - warmup) / (steps - warmup)))

    for t in [0, 1, 3, 6, 7, 8, 20, 33, 39]:
        assert lrs[t] == pytest.approx(closed_form(t), rel=1e-12, abs=1e-15)
        assert cosine_with_warmup(t, warmup, steps) * base == pytest.approx(closed_form(t), rel=1e-12, abs=1e-15)
    assert lrs[0] == 0.0 and lrs[warmup] == pytest.approx(base)
    assert all(a > b for a, b in zip(lrs[warmup:], lrs[warmup + 1:]))  # strictly decreasing after warm-up

    # peer: HF's get_cosine_schedule_with_warmup, as ShareLock's official code uses
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=base)
    sched = get_cosine_schedule_with_warmup(opt, num_warmup_steps=warmup, num_training_steps=steps)
    hf = []
    for _ in range(steps):
        hf.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == pytest.approx(hf, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("clip", [0.5, None])
def test_grad_clip_bounds_the_step_gradient(clip, step_grads):
    class Big(RegressionMethod):
        def loss(self, batch):
            return 1000.0 * super().loss(batch)

    seed_everything(0)
    data = {"x": torch.randn(64, 6).double(), "y": torch.randn(64, 3).double()}
    cfg = TrainSettings(steps=10, batch_size=32, grad_clip=clip, warmup_steps=0, eval_every=100)
    result = fit(Big(), data, None, cfg, progress=False)
    pre = [h["grad_norm"] for h in result.history]
    post = [float(torch.linalg.vector_norm(torch.cat([g.flatten() for g in gs]))) for gs in step_grads]
    assert len(post) == 10
    assert min(pre) > 10.0  # clipping really had work to do
    for a, b in zip(pre, post):
        if clip is None:
            assert b == pytest.approx(a, rel=1e-9)
        else:
            assert b <= clip * (1 + 1e-6)
            assert b == pytest.approx(clip, rel=1e-5)


def test_micro_batch_equal_to_batch_is_no_accumulation():
    results = []
    for micro in (None, 32):
        seed_everything(3)
        method = PairMethod(ShareLockHead(16, 8, hidden_dim=32, num_layers=2))
        cfg = TrainSettings(steps=15, batch_size=32, micro_batch_size=micro, eval_every=5)
        res = fit(method, toy_pairs(100, seed=1), toy_pairs(40, seed=2), cfg, seed=3, progress=False)
        results.append((res, params_of(method)))
    (r1, p1), (r2, p2) = results
    assert r1.history == r2.history
    assert all(torch.equal(p1[k], p2[k]) for k in p1)
    assert r1.negatives_per_loss == r2.negatives_per_loss == 31


@pytest.mark.parametrize("micro", [16, 24, 5])  # divides 64; 24+24+16; 12 x 5 + 4
def test_accumulation_gives_full_batch_gradient_for_mean_loss(micro, step_grads):
    g = torch.Generator().manual_seed(0)
    data = {"x": torch.randn(200, 6, generator=g).double(), "y": torch.randn(200, 3, generator=g).double()}
    runs = []
    for m in (None, micro):
        step_grads.clear()
        seed_everything(0)
        method = RegressionMethod()
        cfg = TrainSettings(steps=6, batch_size=64, micro_batch_size=m, grad_clip=None, eval_every=100)
        res = fit(method, data, None, cfg, progress=False)
        runs.append(([list(gs) for gs in step_grads], res, params_of(method)))
    (g_full, r_full, p_full), (g_acc, r_acc, p_acc) = runs
    assert len(g_full) == len(g_acc) == 6
    for a_step, b_step in zip(g_full, g_acc):
        for a, b in zip(a_step, b_step):
            torch.testing.assert_close(b, a, atol=1e-6, rtol=0)
    for h_full, h_acc in zip(r_full.history, r_acc.history):
        assert h_acc["train_loss"] == pytest.approx(h_full["train_loss"], abs=1e-6)
    assert all(torch.allclose(p_full[k], p_acc[k], atol=1e-6) for k in p_full)
    assert r_acc.negatives_per_loss == micro - 1


def test_accumulated_gradient_equals_hand_computed_full_data_gradient(step_grads):
    """Fewer rows (48) than batch_size (64): one batch of all rows, accumulated over 20 + 20 + 8."""
    g = torch.Generator().manual_seed(5)
    data = {"x": torch.randn(48, 6, generator=g).double(), "y": torch.randn(48, 3, generator=g).double()}
    seed_everything(0)
    method = RegressionMethod()
    ref = RegressionMethod()
    ref.load_state_dict(method.state_dict())
    ref.loss(data).backward()  # the gradient of the mean over all 48 rows, at the initial weights
    result = fit(method, data, None, TrainSettings(steps=1, batch_size=64, micro_batch_size=20, grad_clip=None),
                 progress=False)
    assert result.batch_size == 48 and result.negatives_per_loss == 19
    for got, want in zip(step_grads[0], [ref.lin.weight.grad, ref.lin.bias.grad]):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=0)


def test_early_stopping_restores_best_weights():
    torch.manual_seed(0)
    train = {"x": 1.0 + 0.01 * torch.randn(64, 4)}  # pulls w from 0 towards 1 ...
    val = {"x": torch.full((8, 4), 0.3)}  # ... past the validation optimum at 0.3
    method = PullMethod()
    cfg = TrainSettings(steps=300, batch_size=16, lr=0.02, warmup_steps=0, grad_clip=None, weight_decay=0.0,
                      eval_every=2, patience=3)
    result = fit(method, train, val, cfg, progress=False)
    vals = [(h["step"], h["val_loss"]) for h in result.history if h["val_loss"] is not None]
    assert result.stopped_early and result.steps_run < 300
    assert result.steps_run == len(result.history) == vals[-1][0]
    best_step, best_val = min(vals, key=lambda sv: sv[1])
    assert result.best_step == best_step and result.best_val_loss == best_val
    # the last `patience` evaluations did not improve, and the stop came right after them
    assert [s for s, _ in vals].index(best_step) == len(vals) - 1 - cfg.patience
    assert 1 < [s for s, _ in vals].index(best_step)  # the optimum was not at the start
    # restored weights are exactly those seen at the best evaluation, not the final ones
    snap_loss, snap_w = min(method.snapshots, key=lambda s: s[0])
    assert snap_loss == best_val
    assert torch.equal(method.w.detach(), snap_w)
    assert not torch.equal(method.w.detach(), method.snapshots[-1][1])
    # validation ran in eval mode without autograd
    assert method.val_flags and not any(method.val_flags)


def test_min_delta_counts_small_improvements_as_none():
    train = {"x": torch.ones(64, 4)}
    val = {"x": torch.full((8, 4), 5.0)}  # always improving, by less than min_delta
    method = PullMethod()
    cfg = TrainSettings(steps=300, batch_size=16, lr=0.01, warmup_steps=0, eval_every=5, patience=2,
                      min_delta=100.0, grad_clip=None)
    result = fit(method, train, val, cfg, progress=False)
    vals = [h["val_loss"] for h in result.history if h["val_loss"] is not None]
    assert result.stopped_early and result.steps_run == 3 * 5
    assert vals == sorted(vals, reverse=True)  # it did improve ...
    assert result.best_step == 15  # ... and the weights kept are still the lowest-loss ones


def test_batches_are_epoch_permutations_dropping_the_last_incomplete_batch():
    data = {"x": torch.randn(50, 1), "idx": torch.arange(50)}
    method = RecordingMethod()
    result = fit(method, data, None, TrainSettings(steps=9, batch_size=16, eval_every=100), progress=False)
    assert [len(b) for b in method.seen] == [16] * 9
    for epoch in range(3):  # 3 batches per epoch; 2 rows left out each epoch
        rows = sum(method.seen[3 * epoch : 3 * epoch + 3], [])
        assert len(set(rows)) == 48
    assert method.seen[0:3] != method.seen[3:6]  # a fresh permutation each epoch
    assert result.negatives_per_loss == 15

    small = RecordingMethod()
    result = fit(small, {"x": torch.randn(10, 1), "idx": torch.arange(10)}, None,
                 TrainSettings(steps=3, batch_size=16, eval_every=100), progress=False)
    assert all(sorted(b) == list(range(10)) for b in small.seen)
    assert result.batch_size == 10 and result.negatives_per_loss == 9

    micro = RecordingMethod()
    result = fit(micro, data, None, TrainSettings(steps=2, batch_size=16, micro_batch_size=4, eval_every=100),
                 progress=False)
    assert [len(b) for b in micro.seen] == [4] * 8
    assert len(set(sum(micro.seen[:4], []))) == 16  # the 4 micro-batches partition one batch
    assert result.negatives_per_loss == 3


def test_history_frame_and_validation_schedule():
    seed_everything(0)
    cfg = TrainSettings(steps=25, batch_size=32, eval_every=10)
    result = fit(PairMethod(LinearHead(16, 8)), toy_pairs(100, 1), toy_pairs(40, 2), cfg, progress=False)
    frame = result.history_frame()
    assert list(frame.columns) == ["step", "lr", "train_loss", "grad_norm", "val_loss"]
    assert frame["step"].tolist() == list(range(1, 26))
    assert frame.dropna(subset=["val_loss"])["step"].tolist() == [10, 20, 25]  # every 10 and at the end
    assert not result.stopped_early and result.seconds > 0


def test_progress_bar_silent_under_ci(monkeypatch, capsys):
    data = {"x": torch.randn(20, 1), "idx": torch.arange(20)}
    monkeypatch.setenv("CI", "true")
    fit(RecordingMethod(), data, None, TrainSettings(steps=3, batch_size=8), progress=None)
    assert capsys.readouterr().err == ""
    monkeypatch.delenv("CI")
    monkeypatch.delenv("LIB_PROGRESS", raising=False)
    fit(RecordingMethod(), data, None, TrainSettings(steps=3, batch_size=8), progress=None)
    assert "3/3" in capsys.readouterr().err
    for value, silent in (("0", True), ("off", True), ("1", False)):  # make book's switch (tools/run_notebooks.py)
        monkeypatch.setenv("LIB_PROGRESS", value)
        fit(RecordingMethod(), data, None, TrainSettings(steps=3, batch_size=8), progress=None)
        assert ("3/3" not in capsys.readouterr().err) is silent


def test_config_and_input_validation():
    with pytest.raises(ValueError, match="optimizer"):
        TrainSettings(optimizer="sgd")
    with pytest.raises(ValueError, match="micro_batch_size"):
        TrainSettings(batch_size=8, micro_batch_size=16)
    with pytest.raises(ValueError, match="same number of rows"):
        fit(RecordingMethod(), {"x": torch.randn(5, 1), "idx": torch.arange(4)}, None, TrainSettings(steps=1),
            progress=False)

    class Vector(RecordingMethod):
        def loss(self, batch):
            return self.lin(batch["x"]).squeeze(-1)

    with pytest.raises(ValueError, match="scalar"):
        fit(Vector(), {"x": torch.randn(5, 1)}, None, TrainSettings(steps=1), progress=False)


def test_betas_reach_the_optimiser_and_bad_values_are_refused():
    config = TrainSettings(steps=1, batch_size=8, betas=[0.9, 0.95])  # a YAML list becomes a tuple
    assert config.betas == (0.9, 0.95)
    torch.manual_seed(0)
    method = PairMethod(LinearHead(16, 8))
    seen = {}
    original = torch.optim.Adam.__init__

    def spy(self, params, **kwargs):
        seen.update(kwargs)
        original(self, params, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.optim.Adam, "__init__", spy)
        fit(method, toy_pairs(32, seed=1), None, config, progress=False)
    assert seen["betas"] == (0.9, 0.95)
    with pytest.raises(ValueError, match=r"betas must be two numbers in \[0, 1\)"):
        TrainSettings(betas=(0.9, 1.0))


def test_bf16_precision_runs_the_loss_under_autocast_and_tracks_fp32():
    with pytest.raises(ValueError, match="precision must be 'fp32', 'bf16'"):
        TrainSettings(precision="fp16")
    dtypes = []
    runs = {}
    for precision in ("fp32", "bf16"):
        torch.manual_seed(0)
        method = PairMethod(LinearHead(16, 8))
        if precision == "bf16":
            method.head.proj.register_forward_hook(lambda module, args, out: dtypes.append(out.dtype))
        result = fit(method, toy_pairs(64, seed=1), None, TrainSettings(steps=20, batch_size=16, warmup_steps=0,
                                                                     precision=precision), progress=False)
        runs[precision] = [r["train_loss"] for r in result.history]
        assert all(p.dtype == torch.float32 for p in method.parameters())  # weights stay fp32
    assert dtypes and set(dtypes) == {torch.bfloat16}
    assert runs["bf16"] != runs["fp32"]  # autocast really changed the arithmetic ...
    assert runs["bf16"] == pytest.approx(runs["fp32"], rel=5e-2)  # ... and only by bf16 rounding
