"""Tests of lib.methods.fdt against independent formulas: masking, the official multiply-by-zero padding, the
embedding, the loss and its clamped logit scale, float32 weights under bf16 autocast, chunked relevance,
gradients, and that both heads train with lib.core.train.fit."""
from __future__ import annotations

import math

import entmax
import pytest
import torch
import torch.nn.functional as F

from lib.core.encoders import pool
from lib.core.sequences import pad_batch
from lib.core.train import TrainSettings, fit
from lib.methods import fdt
from lib.methods.fdt import (
    OFFICIAL,
    OFFICIAL_LOG_SCALE_BOUNDS,
    PAPER,
    FDTHead,
    PooledHead,
    code_weights,
    codebook_usage,
    embed_sequences,
    make_projector,
    relevance,
)
from lib.nn.sparsemax import sparsemax

DI, DT, K, D = 12, 10, 32, 8


def _batch(seed=0, b=4):
    g = torch.Generator().manual_seed(seed)
    image = torch.randn(b, 5, DI, generator=g)
    lengths = [3, 6, 1, 4][:b]
    text, text_mask = pad_batch([torch.randn(n, DT, generator=g) for n in lengths])
    return {"image": image, "text": text, "text_mask": text_mask}


def _head(**kw):
    torch.manual_seed(0)
    return FDTHead(DI, DT, num_codes=K, code_dim=D, **kw)


@pytest.mark.parametrize("projector", ["fc_gelu", "ln_mlp"])
def test_shapes_and_normalisation(projector):
    head, batch = _head(projector=projector), _batch()
    img = head.encode_image(batch["image"])
    txt = head.encode_text(batch["text"], batch["text_mask"])
    assert img.shape == (4, D) and txt.shape == (4, D)
    torch.testing.assert_close(txt.norm(dim=-1), torch.ones(4))
    codes = head.codes("text", batch["text"], batch["text_mask"])
    assert codes.weights.shape == codes.relevance.shape == codes.argmax.shape == (4, K)
    torch.testing.assert_close(codes.weights.sum(-1), torch.ones(4))
    assert codebook_usage(codes.weights).shape == (K,) and codes.active().shape == (4,)


def test_projectors_are_the_named_architectures():
    paper = make_projector("fc_gelu", DI, D)
    assert [type(m) for m in paper] == [torch.nn.Linear, torch.nn.GELU]
    code = make_projector("ln_mlp", DI, D)
    assert [type(m) for m in code] == [torch.nn.LayerNorm, torch.nn.Linear, torch.nn.GELU, torch.nn.LayerNorm,
                                       torch.nn.Linear]
    with pytest.raises(ValueError, match="projector"):
        make_projector("mlp", DI, D)


@pytest.mark.parametrize("weighting", ["sparsemax", "softmax"])
def test_masking_ignores_padding(weighting):
    head, batch = _head(weighting=weighting), _batch()
    before = head.codes("text", batch["text"], batch["text_mask"])
    noisy = batch["text"].clone()
    noisy[~batch["text_mask"]] = 1e3 * torch.randn(int((~batch["text_mask"]).sum()), DT)
    after = head.codes("text", noisy, batch["text_mask"])
    torch.testing.assert_close(after.embedding, before.embedding)
    torch.testing.assert_close(after.weights, before.weights)
    assert torch.equal(after.argmax, before.argmax)
    # ... and equals encoding each caption alone, without any padding.
    for b, n in enumerate(batch["text_mask"].sum(1).tolist()):
        alone = head.encode_text(batch["text"][b : b + 1, :n])
        torch.testing.assert_close(alone[0], before.embedding[b])
    assert (before.argmax < batch["text_mask"].sum(1, keepdim=True)).all()  # never a padded token


def test_multiply_by_zero_padding_is_a_max_with_zero_on_padded_rows():
    masked, zero = _head(padding="mask"), _head(padding="zero")
    batch = _batch()
    r_mask = masked.codes("text", batch["text"], batch["text_mask"]).relevance
    r_zero = zero.codes("text", batch["text"], batch["text_mask"]).relevance
    padded = (~batch["text_mask"]).any(dim=1)
    assert padded.any() and (~padded).any()
    torch.testing.assert_close(r_zero[padded], r_mask[padded].clamp_min(0))  # padding adds a logit of 0 to the max
    torch.testing.assert_close(r_zero[~padded], r_mask[~padded])  # rows without padding: identical
    assert (r_mask[padded] < 0).any()  # so the difference is real in this batch
    # changing padded *values* still has no effect (they are multiplied by 0)
    noisy = batch["text"].clone()
    noisy[~batch["text_mask"]] = 7.0
    torch.testing.assert_close(zero.codes("text", noisy, batch["text_mask"]).relevance, r_zero)


def test_relevance_and_embedding_reference_formula():
    head, batch = _head(projector="ln_mlp", scaled_dot=True, temperature=3.0), _batch()
    seq, mask = batch["text"], batch["text_mask"]
    q = head.text_projector(seq)
    C = head.codebook
    expected_r = torch.empty(4, K)
    expected_idx = torch.empty(4, K, dtype=torch.long)
    for b in range(4):
        n = int(mask[b].sum())
        for i in range(K):
            dots = torch.stack([q[b, j] @ C[i] for j in range(n)]) / math.sqrt(D) / 3.0
            expected_r[b, i], expected_idx[b, i] = dots.max(), dots.argmax()
    codes = head.codes("text", seq, mask)
    torch.testing.assert_close(codes.relevance, expected_r)
    assert torch.equal(codes.argmax, expected_idx)
    w = entmax.sparsemax(expected_r, dim=-1)
    torch.testing.assert_close(codes.weights, w)
    emb = w @ C
    torch.testing.assert_close(codes.embedding, emb / emb.norm(dim=-1, keepdim=True))
    soft = _head(weighting="softmax", temperature=2.0)
    r = relevance(soft.text_projector(seq), soft.codebook, mask, scale=0.5)[0]
    torch.testing.assert_close(soft.codes("text", seq, mask).weights, torch.softmax(r, dim=-1))


def test_loss_equals_independent_infonce_and_scale_is_clamped():
    head, batch = _head(), _batch()
    img = head.encode_image(batch["image"])
    txt = head.encode_text(batch["text"], batch["text_mask"])
    logits = (1 / 0.07) * img @ txt.T
    n = len(logits)
    li = -torch.stack([logits[i].log_softmax(0)[i] for i in range(n)]).mean()
    lt = -torch.stack([logits.T[i].log_softmax(0)[i] for i in range(n)]).mean()
    torch.testing.assert_close(head.loss(batch), (li + lt) / 2)
    with torch.no_grad():
        head.criterion.log_scale.fill_(10.0)
    assert float(head.criterion.scale.detach()) == pytest.approx(100.0)


def test_gradients_reach_codebook_projectors_and_scale():
    head = _head(projector="ln_mlp")
    head.loss(_batch()).backward()
    for name, p in head.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert head.codebook.grad.abs().sum() > 0
    assert head.image_projector[1].weight.grad.abs().sum() > 0 and head.text_projector[4].weight.grad.abs().sum() > 0
    assert head.criterion.log_scale.grad != 0


def test_param_groups_decay_matrices_only():
    head = _head(projector="ln_mlp")
    decay, no_decay = head.param_groups(0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert any(p is head.codebook for p in decay["params"])
    assert any(p is head.criterion.log_scale for p in no_decay["params"])
    assert all(p.ndim < 2 for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(head.parameters()))


def test_presets_and_bad_inputs():
    assert OFFICIAL["padding"] == "zero" and OFFICIAL["temperature"] == 1000.0 and PAPER["padding"] == "mask"
    assert OFFICIAL["log_scale_bounds"] == OFFICIAL_LOG_SCALE_BOUNDS == (3.0, 6.0) and PAPER["log_scale_bounds"] is None
    head = FDTHead(DI, DT, num_codes=K, code_dim=D, **OFFICIAL)
    assert head.scale == pytest.approx(1 / math.sqrt(D) / 1000)
    with pytest.raises(ValueError, match="width|tokens"):
        head.encode_text(torch.randn(2, 3, DI))
    with pytest.raises(ValueError, match="no real token"):
        head.encode_text(torch.randn(2, 3, DT), torch.tensor([[True, False, False], [False] * 3]))


def test_pooled_baseline():
    torch.manual_seed(0)
    head = PooledHead(DI, DT, embed_dim=D, image_pool="first", text_pool="mean")
    batch = _batch()
    txt = head.encode_text(batch["text"], batch["text_mask"])
    expected = F.normalize(head.text_proj(pool(batch["text"], batch["text_mask"], "mean")), dim=-1)
    torch.testing.assert_close(txt, expected)
    b1 = batch["text_mask"][1].sum()
    torch.testing.assert_close(pool(batch["text"], batch["text_mask"], "mean")[1], batch["text"][1, :b1].mean(0))
    img = head.encode_image(batch["image"])
    torch.testing.assert_close(img, F.normalize(head.image_proj(batch["image"][:, 0]), dim=-1))
    head.loss(batch).backward()
    assert head.text_proj.weight.grad is not None


@pytest.mark.parametrize("kind", ["fdt", "pooled"])
def test_trains_with_lib_train_fit(kind):
    g = torch.Generator().manual_seed(1)
    n = 32
    text, text_mask = pad_batch([torch.randn(int(k), DT, generator=g) for k in torch.randint(1, 7, (n,), generator=g)])
    image = torch.randn(n, 5, DI, generator=g)
    data = {"image": image, "image_mask": torch.ones(n, 5, dtype=torch.bool), "text": text, "text_mask": text_mask}
    torch.manual_seed(0)
    head = (FDTHead(DI, DT, num_codes=K, code_dim=D) if kind == "fdt" else PooledHead(DI, DT, embed_dim=D))
    result = fit(head, data, data, TrainSettings(steps=30, batch_size=16, lr=1e-2, warmup_steps=0, eval_every=10),
                 progress=False)
    assert result.history[-1]["train_loss"] < result.history[0]["train_loss"]


def test_embed_sequences_batches_like_one_call(tmp_path):
    from lib.core.sequences import sequence_features
    from lib.core.store import FeatureStore

    g = torch.Generator().manual_seed(2)
    seqs = [torch.randn(n, DT, generator=g) for n in (2, 5, 3)]
    store = FeatureStore(tmp_path, dtype="float32")
    feats = sequence_features(store, {"t": 1}, ["a", "b", "c"], lambda rows: [len(seqs[i]) for i in rows],
                              lambda rows: [seqs[i] for i in rows], progress=False)
    head = _head().eval()
    out = embed_sequences(head.encode_text, feats, batch_size=2)
    torch.testing.assert_close(out, head.encode_text(*pad_batch(seqs)).detach())


# --- the official logit-scale clamp (train_solver.py L339-340, L355-356) ----------------------------------------


@pytest.mark.parametrize("kind", ["fdt", "pooled"])
def test_official_log_scale_bounds_clamp_the_parameter(kind):
    torch.manual_seed(0)
    make = (lambda **kw: FDTHead(DI, DT, num_codes=K, code_dim=D, **kw)) if kind == "fdt" else \
        (lambda **kw: PooledHead(DI, DT, embed_dim=D, **kw))
    free, clamped = make(), make(log_scale_bounds=OFFICIAL_LOG_SCALE_BOUNDS)
    # 2.66, below the official floor
    assert float(free.criterion.log_scale.detach()) == pytest.approx(math.log(1 / 0.07))
    batch = _batch()
    # The first loss lifts the parameter to 3 (scale e^3 = 20.1), so the loss is the InfoNCE at that scale.
    loss = clamped.loss(batch)
    assert float(clamped.criterion.log_scale.detach()) == 3.0
    img = clamped.encode_image(batch["image"])
    txt = clamped.encode_text(batch["text"], batch["text_mask"])
    logits = math.exp(3.0) * img @ txt.T
    labels = torch.arange(len(logits))
    torch.testing.assert_close(loss, (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2)
    # Above the ceiling: the parameter is clamped to 6 and the scale then capped at 100 (e^6 = 403).
    with torch.no_grad():
        clamped.criterion.log_scale.fill_(9.0)
    assert (float(clamped.criterion.scale.detach()) == pytest.approx(100.0)
            and float(clamped.criterion.log_scale.detach()) == 6.0)
    # Without bounds nothing is clamped (the paper states no clamp).
    free.loss(batch)
    assert float(free.criterion.log_scale.detach()) == pytest.approx(math.log(1 / 0.07))


def test_clamped_scale_stays_within_bounds_through_training():
    g = torch.Generator().manual_seed(3)
    n = 32
    text, text_mask = pad_batch([torch.randn(int(k), DT, generator=g) for k in torch.randint(1, 7, (n,), generator=g)])
    data = {"image": torch.randn(n, 5, DI, generator=g), "text": text, "text_mask": text_mask}
    torch.manual_seed(0)
    head = FDTHead(DI, DT, num_codes=K, code_dim=D, log_scale_bounds=(3.0, 3.5))
    raw, used = [], []
    original = head.criterion.forward

    def spy(image, text):
        raw.append(float(head.criterion.log_scale.detach()))  # where the optimiser left it
        used.append(float(head.criterion.scale.detach().log()))  # what the loss uses, after the clamp
        return original(image, text)

    head.criterion.forward = spy
    fit(head, data, None, TrainSettings(steps=40, batch_size=16, lr=0.5, warmup_steps=0, eval_every=10), progress=False)
    assert used and all(3.0 - 1e-6 <= v <= 3.5 + 1e-6 for v in used)
    assert any(not 3.0 <= v <= 3.5 for v in raw)  # a large lr pushes it out of bounds: the clamp was needed


# --- float32 weights under bf16 autocast ------------------------------------------------------------------------


def _official_relevance(rows=4, seed=0):
    """Relevances as a freshly initialised official-size head (16,384 codes, d 512, T 1000) gives them."""
    torch.manual_seed(seed)
    head = FDTHead(768, 512, 16384, 512, **OFFICIAL).eval()
    with torch.no_grad():
        return head, head.codes("image", torch.randn(rows, 49, 768)).relevance


def test_bf16_sparsemax_misses_the_simplex_and_the_float32_cast_fixes_it():
    _, r = _official_relevance()
    low = r.bfloat16()  # what a bf16 matrix product hands over
    assert (sparsemax(low, -1).float().sum(-1) - 1).abs().max() > 5e-3  # the bug: weights off a sum of 1 by %
    with torch.autocast("cpu", dtype=torch.bfloat16):
        w = code_weights(low)
        w32 = code_weights(r)
    assert w.dtype == w32.dtype == torch.float32
    assert torch.equal(w, sparsemax(low.float(), -1))  # the same numbers as float32 on the same relevance
    assert torch.equal(w32, sparsemax(r, -1))
    torch.testing.assert_close(w.double(), entmax.sparsemax(low.double(), dim=-1), atol=1e-7, rtol=0)
    torch.testing.assert_close(w.sum(-1), torch.ones(len(r)), atol=1e-6, rtol=0)
    assert (w > 0).float().mean() < 0.5  # sparse at this size: about 29 % of the codes on


def test_head_weights_under_bf16_autocast_are_a_float32_simplex_close_to_float32():
    head, _ = _official_relevance()
    x = torch.randn(4, 49, 768, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = head.codes("image", x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = head.codes("image", x)
    assert low.weights.dtype == low.relevance.dtype == torch.float32
    torch.testing.assert_close(low.weights.sum(-1), torch.ones(4), atol=1e-6, rtol=0)
    # The relevance itself comes out of a bf16 product (rounded at 2^-9 relative); the weights then agree with
    # float32 to a few 1e-5 (mean non-zero weight: ~2e-4) on >= 99 % of the support.
    torch.testing.assert_close(low.weights, ref.weights, atol=5e-5, rtol=0)
    assert ((low.weights > 0) == (ref.weights > 0)).float().mean() > 0.99
    with torch.autocast("cpu", dtype=torch.bfloat16):
        head.train()
        loss = head.loss({"image": x, "text": torch.randn(4, 7, 512)})
    loss.backward()
    assert torch.isfinite(head.codebook.grad).all() and head.codebook.grad.abs().sum() > 0


# --- chunked relevance and the official padding under sparsemax -------------------------------------------------


def test_relevance_in_row_chunks_equals_one_pass(monkeypatch):
    g = torch.Generator().manual_seed(4)
    q = torch.randn(9, 6, D, generator=g, requires_grad=True)
    codebook = torch.randn(K, D, generator=g, requires_grad=True)
    mask = torch.rand(9, 6, generator=g) > 0.3
    mask[:, 0] = True
    for padding in ("mask", "zero"):
        r, index = relevance(q, codebook, mask, padding=padding, scale=0.3)
        grads = torch.autograd.grad(r.square().sum(), (q, codebook))
        monkeypatch.setattr(fdt, "MAX_LOGITS", 2 * 6 * K)  # two rows per chunk: five chunks
        r2, index2 = relevance(q, codebook, mask, padding=padding, scale=0.3)
        grads2 = torch.autograd.grad(r2.square().sum(), (q, codebook))
        monkeypatch.undo()
        torch.testing.assert_close(r2, r)
        assert torch.equal(index2, index)
        for a, b in zip(grads, grads2):
            torch.testing.assert_close(a, b)


def test_zero_padding_changes_no_sparsemax_weight_while_the_threshold_is_positive():
    """The official multiply-by-zero only raises negative relevances to 0; with a positive sparsemax
    threshold those codes are off either way (notebooks/fdt.py, "What the official code does, measured")."""
    masked, zero = _head(padding="mask", temperature=0.05), _head(padding="zero", temperature=0.05)
    batch = _batch()
    a = masked.codes("text", batch["text"], batch["text_mask"])
    b = zero.codes("text", batch["text"], batch["text_mask"])
    support = a.weights > 0
    tau = (a.relevance - a.weights).masked_fill(~support, float("nan")).nanmean(dim=1)  # r_i - w_i on the support
    padded = (~batch["text_mask"]).any(dim=1)
    assert (tau > 0).all() and padded.any() and (a.relevance[padded] < 0).any()  # a real test
    torch.testing.assert_close(b.weights, a.weights)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_codes_work_in_the_heads_own_dtype_without_autocast(dtype):
    """A float64 head (for reference comparisons) and a bfloat16 head (no autocast) give embeddings in their own
    dtype, close to the float32 head's: the weights are float32, the product is taken in the codebook's dtype."""
    head, batch = _head(), _batch()
    with torch.no_grad():
        ref = head.codes("text", batch["text"], batch["text_mask"])
        other = _head().to(dtype)
        got = other.codes("text", batch["text"], batch["text_mask"])
    assert got.weights.dtype == torch.float32 and got.embedding.dtype == dtype
    tol = 1e-5 if dtype == torch.float64 else 5e-2
    torch.testing.assert_close(got.embedding.float(), ref.embedding, atol=tol, rtol=0)
    torch.testing.assert_close(got.embedding.float().norm(dim=-1), torch.ones(4), atol=tol, rtol=0)
