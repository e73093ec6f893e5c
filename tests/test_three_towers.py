"""Three Towers: each loss term against an independent formula (heads on the L2-normalised towers, Eq. 4,
leave-one-out as half the sum of the two remaining terms), heads really dropped at test time, no gradient into
the frozen features, and the variants' wiring."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from lib.methods import three_towers as tt
from lib.core.config import LossConfig, TrainSettings

VOCAB, CONTEXT, THIRD, EMBED = 50, 8, 24, 16
IMAGE = tt.ImageTowerConfig(kind="convnet", widths=(8, 16), image_size=16)
TEXT = tt.TextTowerConfig(tokenizer="unused", kind="transformer", width=16, depth=1, heads=2, context=CONTEXT)


def build(variant="3t", **kwargs):
    torch.manual_seed(0)
    kwargs.setdefault("text_tower", TEXT)
    return tt.ThreeTowers(variant, third_dim=THIRD, vocab_size=VOCAB, image_tower=IMAGE, embed_dim=EMBED,
                          loss=LossConfig(temperature=0.07, learnable=True), augment=False, **kwargs)


def batch(n=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, CONTEXT + 1, (n,), generator=g)
    mask = (torch.arange(CONTEXT)[None] < lengths[:, None]).long()
    return {
        "pixels": torch.randint(0, 256, (n, 3, 16, 16), generator=g, dtype=torch.uint8),
        "input_ids": torch.randint(0, VOCAB, (n, CONTEXT), generator=g) * mask,
        "attention_mask": mask,
        "third": torch.randn(n, THIRD, generator=g),
    }


def infonce(a, b, scale):
    """Independent symmetric InfoNCE: mean over rows of -log softmax of the matching pair, both ways."""
    a, b = F.normalize(a, dim=-1), F.normalize(b, dim=-1)
    sim = scale * a @ b.T
    n = sim.shape[0]
    i2t = -sum(sim[i, i] - torch.logsumexp(sim[i], 0) for i in range(n)) / n
    t2i = -sum(sim[i, i] - torch.logsumexp(sim[:, i], 0) for i in range(n)) / n
    return (i2t + t2i) / 2


def raw_outputs(method, b):
    """f(I) and g(T) L2-normalised (paper §2), h(I) = linear(p(I)) as it is."""
    with torch.no_grad():
        f = F.normalize(method.f(tt.normalise_pixels(b["pixels"])), dim=-1) if hasattr(method, "f") else None
        g = F.normalize(method.g(b["input_ids"], b["attention_mask"]), dim=-1)
        h = method.h(b["third"]) if hasattr(method, "h") else None
    return f, g, h


def test_3t_loss_is_the_mean_of_three_infonce_terms():
    method = build().eval()
    b = batch()
    f, g, h = raw_outputs(method, b)
    scale = method.criterion.scale.detach()
    expected = (infonce(f, g, scale)
                + infonce(method.f_h(f), method.h_f(h), scale)
                + infonce(method.g_h(g), method.h_g(h), scale)) / 3
    with torch.no_grad():
        assert torch.allclose(method.loss(b), expected, atol=1e-5)


def test_loss_weight_scales_only_the_third_tower_terms():
    b = batch()
    terms = {k: v.detach() for k, v in build().eval().term_losses(b).items()}
    method = build(weight=2.5).eval()
    with torch.no_grad():
        assert torch.allclose(method.loss(b), (terms["fg"] + 2.5 * (terms["fh"] + terms["gh"])) / 3, atol=1e-5)


def test_heads_act_on_the_normalised_towers():
    """Paper §3: f_h(I) = NL(f(I)) with ||f(I)|| = 1 (§2). Scaling the raw output of f or g (their last linear
    layer, weights and bias) changes nothing; a head on the raw output would see the scale (its bias)."""
    b = batch()
    method = build().eval()
    with torch.no_grad():
        before = {k: v.clone() for k, v in method.term_losses(b).items()}
        for tower in (method.f.proj, method.g.proj):
            tower.weight.mul_(7.0)
            tower.bias.mul_(7.0)
        after = method.term_losses(b)
        raw = method.f(tt.normalise_pixels(b["pixels"]))  # f(I) before normalisation
    for name in before:
        assert torch.allclose(before[name], after[name], atol=1e-5), name
    with torch.no_grad():  # ... and the head's input has unit norm
        f = method.tower_f(b["pixels"])
        assert torch.allclose(f.norm(dim=-1), torch.ones(len(f)), atol=1e-5)
        assert not torch.allclose(method.f_h(raw), method.f_h(f), atol=1e-3)  # the raw output would differ


@pytest.mark.parametrize("dropped", tt.TERMS)
def test_leave_one_out_averages_the_two_remaining_terms(dropped):
    """App. A.11: 'No L_f<->g': 1/2 (L_fh<->hf + L_gh<->hg), and likewise for the other two terms."""
    b = batch()
    full = {k: v.detach() for k, v in build().eval().term_losses(b).items()}
    kept = [t for t in tt.TERMS if t != dropped]
    method = build(terms=kept).eval()
    with torch.no_grad():
        assert set(method.term_losses(b)) == set(kept)
        assert torch.allclose(method.loss(b), (full[kept[0]] + full[kept[1]]) / 2, atol=1e-5)
    assert method.formula().endswith("/ 2")


def test_baselines_are_single_infonce_terms():
    b = batch()
    scratch = build("scratch").eval()
    f, g, _ = raw_outputs(scratch, b)
    with torch.no_grad():
        assert torch.allclose(scratch.loss(b), infonce(f, g, scratch.criterion.scale), atol=1e-5)
    lit = build("lit").eval()
    _, g, h = raw_outputs(lit, b)
    assert not hasattr(lit, "f"), "LiT has no trainable image tower"
    with torch.no_grad():
        assert torch.allclose(lit.loss(b), infonce(h, g, lit.criterion.scale), atol=1e-5)


def test_headless_aligns_towers_directly_and_mixes_at_test_time():
    method = build(headless=True).eval()
    assert not hasattr(method, "f_h")
    b = batch()
    f, g, h = raw_outputs(method, b)
    s = method.criterion.scale.detach()
    with torch.no_grad():
        expected = (infonce(f, g, s) + infonce(f, h, s) + infonce(g, h, s)) / 3
        assert torch.allclose(method.loss(b), expected, atol=1e-5)
        method.alpha = 0.3
        mixed = F.normalize(0.3 * F.normalize(h, dim=-1) + 0.7 * F.normalize(f, dim=-1), dim=-1)
        assert torch.allclose(method.embed_image(b["pixels"], b["third"]), mixed, atol=1e-6)
        method.alpha = 1.0  # all third tower: the image embedding is h's
        assert torch.allclose(method.embed_image(b["pixels"], b["third"]), F.normalize(h, dim=-1), atol=1e-6)


def test_one_temperature_is_shared_by_all_terms_and_learned():
    method = build()
    scales = [p for n, p in method.named_parameters() if "scale" in n]
    assert len(scales) == 1
    method.loss(batch()).backward()
    assert scales[0].grad is not None and scales[0].grad.abs() > 0
    assert math.isclose(float(method.criterion.scale.detach()), 1 / 0.07, rel_tol=1e-5)


def test_exported_model_does_not_depend_on_heads_or_third_tower():
    method = build().eval()
    b = batch()
    model = method.export()
    names = {n.split(".")[0] for n, _ in model.named_parameters()}
    assert names == {"f", "g"}
    before = (model.encode_image(b["pixels"]), model.encode_text(b["input_ids"], b["attention_mask"]))
    with torch.no_grad():  # scramble everything the export must not use
        for module in (method.h, method.f_h, method.g_h, method.h_f, method.h_g):
            for p in module.parameters():
                p.add_(torch.randn_like(p))
    after = (model.encode_image(b["pixels"]), model.encode_text(b["input_ids"], b["attention_mask"]))
    assert all(torch.equal(x, y) for x, y in zip(before, after))
    # ... and the method's own test-time embeddings equal the export's.
    assert torch.allclose(method.embed_image(b["pixels"], None), before[0], atol=1e-6)
    assert torch.allclose(method.embed_text(b["input_ids"], b["attention_mask"]), before[1], atol=1e-6)


def test_export_refuses_variants_that_need_the_third_tower():
    with pytest.raises(ValueError, match="third tower"):
        build("lit").export()
    method = build(headless=True)
    method.alpha = 0.5
    with pytest.raises(ValueError, match="third tower"):
        method.export()


@pytest.mark.parametrize("variant", ["lit", "3t"])
def test_no_gradient_reaches_the_frozen_features(variant):
    method = build(variant)
    b = batch()
    b["third"].requires_grad_(True)
    method.loss(b).backward()
    assert b["third"].grad is None
    assert method.h.weight.grad is not None  # ... while the third tower's linear map does learn


def test_gradients_reach_both_trained_towers_and_all_heads():
    method = build()
    method.loss(batch()).backward()
    for name in ("f", "g", "h", "f_h", "g_h", "h_f", "h_g"):
        grads = [p.grad for p in getattr(method, name).parameters()]
        assert all(g is not None for g in grads), name
        assert sum(float(g.abs().sum()) for g in grads) > 0, name


def test_text_tower_ignores_padding():
    method = build().eval()
    b = batch()
    noisy = b["input_ids"].clone()
    noisy[b["attention_mask"] == 0] = 7  # change only padded positions
    with torch.no_grad():
        assert torch.allclose(method.g(b["input_ids"], b["attention_mask"]), method.g(noisy, b["attention_mask"]),
                              atol=1e-5)
    bag = build(text_tower=tt.TextTowerConfig(tokenizer="unused", kind="bag", width=16, context=CONTEXT)).eval()
    with torch.no_grad():
        assert torch.allclose(bag.g(b["input_ids"], b["attention_mask"]), bag.g(noisy, b["attention_mask"]), atol=1e-6)


def test_text_longer_than_the_context_is_an_error():
    method = build()
    with pytest.raises(ValueError, match="exceed its context"):
        method.g(torch.zeros(2, CONTEXT + 1, dtype=torch.long), torch.ones(2, CONTEXT + 1, dtype=torch.long))


def test_augmentation_keeps_shape_and_range_and_is_seeded():
    images = tt.normalise_pixels(batch()["pixels"])
    a = tt.augment(images, torch.Generator().manual_seed(3))
    b = tt.augment(images, torch.Generator().manual_seed(3))
    assert a.shape == images.shape and torch.equal(a, b)
    assert a.min() >= images.min() - 1e-5 and a.max() <= images.max() + 1e-5  # bilinear: a convex mix


def test_training_with_fit_lowers_the_loss():
    from lib.core import train

    method = build()
    data = batch(n=32, seed=5)
    result = train.fit(method, data, None, TrainSettings(steps=40, batch_size=32, lr=3e-3, warmup_steps=0),
                       seed=0, progress=False)
    losses = [r["train_loss"] for r in result.history]
    assert losses[-1] < 0.5 * losses[0]


def test_pixels_are_uint8_rgb_on_white(emoji_images):
    out = tt.pixels(lambda i: emoji_images[i], len(emoji_images), 32)
    assert out.dtype == torch.uint8 and out.shape == (len(emoji_images), 3, 32, 32)
    assert (out[:, :, 0, 0] == 255).all()  # the transparent corner is the white page


def test_unknown_variants_terms_and_weights_are_errors():
    with pytest.raises(ValueError, match="variant"):
        build("clip")
    with pytest.raises(ValueError, match="subset"):
        build(terms=["fg", "fx"])
    with pytest.raises(ValueError, match="subset"):
        build(terms=[])
    with pytest.raises(ValueError, match="weight"):
        build(weight=-1.0)


def test_formula_and_parameter_counts_describe_the_built_model():
    method = build()
    assert method.formula() == "L = (L(f↔g) + L(f_h↔h_f) + L(g_h↔h_g)) / 3"
    assert build(weight=2.0).formula() == "L = (L(f↔g) + 2·L(f_h↔h_f) + 2·L(g_h↔h_g)) / 3"
    assert build("lit").formula() == "L = L(h↔g)"
    counts = method.parameter_counts()
    assert set(counts) == {"f", "g", "h", "f_h", "g_h", "h_f", "h_g", "criterion"}
    assert counts["h"] == (THIRD * EMBED + EMBED, 0) and counts["f_h"] == (EMBED * EMBED + EMBED, 0)
    assert counts["criterion"] == (1, 0)  # the one shared, learned temperature


def test_the_flame_chapter_names_stay_importable():
    from lib.methods.three_towers import (  # noqa: F401
        TextTowerConfig, ThreeTowers, embed_in_batches, load_tokenizer, retrieval, tokenize, zero_shot,
    )


def test_compact_vocabulary_renumbers_the_pieces_of_its_texts():
    from lib.methods.three_towers import CompactVocabulary, load_tokenizer

    base = load_tokenizer("offline/all-MiniLM-L6-v2")
    texts = ["grinning face", "flag: Japan", "red apple"]
    compact = CompactVocabulary(base, texts)
    assert compact.vocab_size < 30 and compact.vocab_size < base.vocab_size
    full, small = tt.tokenize(base, texts, 12), tt.tokenize(compact, texts, 12)
    assert torch.equal(full["attention_mask"], small["attention_mask"])
    assert int(small["input_ids"].max()) < compact.vocab_size
    assert torch.equal(compact.kept[small["input_ids"]], full["input_ids"])  # a renumbering, nothing lost
    assert compact.decode(small["input_ids"][1][small["attention_mask"][1].bool()], skip_special_tokens=True) \
        == "flag : japan"
    unknown = tt.tokenize(compact, ["zebra"], 4)["input_ids"][0, 1]  # a piece outside the texts
    assert compact.kept[unknown] == base.unk_token_id


def test_compact_vocabulary_memoises_the_padded_prompts():
    from lib.methods.three_towers import CompactVocabulary, load_tokenizer

    compact = CompactVocabulary(load_tokenizer("offline/all-MiniLM-L6-v2"), ["grinning face", "red apple"])
    first = compact.padded(["grinning face", "red apple"], 8)
    for key, value in tt.tokenize(compact, ["grinning face", "red apple"], 8).items():
        assert torch.equal(first[key], value)  # the same tokens as tokenize()
    assert compact.padded(("grinning face", "red apple"), 8) is first  # read again, not re-tokenised
    assert compact.padded(["grinning face", "red apple"], 6)["input_ids"].shape == (2, 6)  # context is in the key


# ---- the papers' towers from open_clip's model configs (the full configs) ----

def _open_clip_towers(checkpointing: bool):
    from lib.nn.towers import ImageTowerConfig, TextTowerConfig, build_image_tower, build_text_tower

    torch.manual_seed(0)
    image = build_image_tower(ImageTowerConfig(kind="open_clip", open_clip_model="ViT-B-16", image_size=32,
                                               vit_width=64, vit_layers=2, grad_checkpointing=checkpointing), 16)
    text = build_text_tower(TextTowerConfig(tokenizer="unused", kind="open_clip", width=32, depth=2, heads=2,
                                            context=8, grad_checkpointing=checkpointing), 50, 16, eos_id=49)
    return image, text


def test_open_clip_towers_keep_the_model_configs_shape_and_read_the_end_of_text_token():
    image, text = _open_clip_towers(False)
    assert image.body.transformer.width == 64 and len(image.body.transformer.resblocks) == 2  # ViT-B-16, shrunk
    assert image.body.patch_size == (16, 16)
    ids = torch.tensor([[5, 6, 49, 0, 0, 0, 0, 0], [7, 49, 0, 0, 0, 0, 0, 0]])
    out = text(ids, (ids != 0).long())
    padded = ids.clone()
    padded[:, -1] = 3  # a token after the end-of-text token changes nothing (causal attention, read at EOT)
    assert torch.allclose(out, text(padded, (padded != 0).long()), atol=1e-6)
    with pytest.raises(ValueError, match="no end-of-text token"):
        text(torch.tensor([[5, 6, 7, 0, 0, 0, 0, 0]]), torch.ones(1, 8, dtype=torch.long))


def test_gradient_checkpointing_changes_memory_not_the_gradients():
    """The pre-flight may name grad_checkpointing as the setting that fits: it must train the same model."""
    grads = []
    for checkpointing in (False, True):
        image, text = _open_clip_towers(checkpointing)
        image.train(), text.train()
        torch.manual_seed(1)
        pixels, ids = torch.randn(4, 3, 32, 32), torch.tensor([[5, 6, 49, 0, 0, 0, 0, 0]] * 4)
        loss = (image(pixels) @ text(ids, (ids != 0).long()).T).logsumexp(dim=1).mean()
        loss.backward()
        grads.append(torch.cat([p.grad.flatten() for p in [*image.parameters(), *text.parameters()]
                                if p.grad is not None]))
    assert torch.allclose(grads[0], grads[1], atol=1e-5)


def test_end_of_text_id_follows_a_compact_vocabulary():
    tokenizer = tt.load_tokenizer("offline/all-MiniLM-L6-v2")
    compact = tt.CompactVocabulary(tokenizer, ["a red apple"])
    assert tt.end_of_text_id(tokenizer) == tokenizer.sep_token_id
    assert compact.kept[tt.end_of_text_id(compact)] == tokenizer.sep_token_id
