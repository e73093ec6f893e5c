"""ShareLock as a method: the image side is only normalised, the loss is CLIP's, evaluation is CLIP's."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from lib.core.config import HeadConfig, LossConfig
from lib.core.evaluate import prompt_texts as prompts
from lib.core.evaluate import retrieval
from lib.core.evaluate import zero_shot as zero_shot_metrics
from lib.methods.sharelock import ShareLock


def _method(kind="mlp"):
    torch.manual_seed(0)
    return ShareLock(12, 8, HeadConfig(hidden_dim=16), LossConfig(), kind=kind).eval()


def test_image_side_has_no_parameters_and_only_normalises():
    method = _method()
    image = torch.randn(5, 8)
    assert torch.allclose(method.embed_image(image), F.normalize(image, dim=-1))
    assert all(name.startswith("text_head") for name, _ in method.named_parameters())


def test_loss_is_clip_loss_at_fixed_temperature():
    method = _method("linear")
    batch = {"image": torch.randn(6, 8), "text": torch.randn(6, 12)}
    logits = method.embed_image(batch["image"]) @ method.embed_text(batch["text"]).T / 0.07
    labels = torch.arange(6)
    expected = (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2
    assert torch.allclose(method.loss(batch), expected, atol=1e-5)
    assert not any(p.requires_grad for p in method.criterion.parameters())


def test_wrong_image_width_is_named():
    with pytest.raises(ValueError, match="width 8, got 5"):
        _method().embed_image(torch.randn(2, 5))


def test_unknown_head_kind_is_rejected():
    with pytest.raises(ValueError, match="head kind"):
        ShareLock(4, 4, HeadConfig(), LossConfig(), kind="transformer")


def test_zero_shot_metrics_equal_manual_prompt_ensemble():
    method = _method()
    labelled = SimpleNamespace(classnames=("cat", "dog", "cow"), templates=("a {c}.", "an emoji of {c}."),
                               labels=(0, 1, 2, 2))
    texts = prompts(labelled)
    assert texts == ["a cat.", "an emoji of cat.", "a dog.", "an emoji of dog.", "a cow.", "an emoji of cow."]
    prompt_features = torch.randn(len(texts), 12)
    images = torch.randn(4, 8)
    with torch.no_grad():
        per_prompt = method.embed_text(prompt_features).view(3, 2, -1)
        classifier = F.normalize(F.normalize(per_prompt, dim=-1).mean(1), dim=-1)
        predictions = (F.normalize(images, dim=-1) @ classifier.T).argmax(1)
    expected = (predictions == torch.tensor(labelled.labels)).float().mean().item()
    metrics = zero_shot_metrics(method, images, prompt_features, labelled)
    assert metrics["acc1"] == pytest.approx(expected)
    assert metrics["acc5"] == pytest.approx(1.0)  # k is clipped to the 3 classes


def test_retrieval_is_perfect_when_captions_map_onto_their_images():
    method = ShareLock(8, 8, HeadConfig(), LossConfig(), kind="linear").eval()
    with torch.no_grad():
        method.text_head.proj.weight.copy_(torch.eye(8))
        method.text_head.proj.bias.zero_()
    images = torch.eye(8) + 0.01 * torch.randn(8, 8)
    metrics = retrieval(method, images, images.clone())
    assert metrics["image_retrieval_recall@1"] == 1.0
    assert metrics["text_retrieval_recall@1"] == 1.0


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.float32])
def test_embedding_accepts_any_float_dtype(dtype):
    method = ShareLock(6, 4, HeadConfig(hidden_dim=8, num_layers=2), LossConfig()).eval()
    image = method.embed_image(torch.randn(3, 4, dtype=dtype))
    text = method.embed_text(torch.randn(3, 6, dtype=dtype))
    assert image.dtype == text.dtype == torch.float32 and image.shape == text.shape == (3, 4)
    assert torch.allclose(image.norm(dim=-1), torch.ones(3)) and torch.allclose(text.norm(dim=-1), torch.ones(3))


@pytest.mark.parametrize("kind", ["mlp", "linear"])
def test_host_features_follow_a_head_on_another_device(kind):
    """``fit`` moves the head to the GPU while cached features stay on the host; the GPU check found a host feature
    reaching a cuda head. The meta device stands in for cuda here: the text embedding lands where the head is."""
    method = ShareLock(6, 4, HeadConfig(hidden_dim=8, num_layers=2), LossConfig(), kind=kind).to("meta").eval()
    text = method.embed_text(torch.randn(3, 6, dtype=torch.float64))
    assert text.device.type == "meta" and text.shape == (3, 4) and text.dtype == torch.float32


@pytest.mark.parametrize("kind,hidden,layers", [("mlp", 16, 4), ("mlp", 32, 2), ("linear", 16, 4)])
def test_method_diagram_is_drawn_from_the_built_head(kind, hidden, layers):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from chapters import sharelock as chapter
    from lib.core.config import TextModelConfig, VisionModelConfig

    method = ShareLock(12, 8, HeadConfig(hidden_dim=hidden, num_layers=layers), LossConfig(0.05), kind=kind)
    ax = chapter.method_diagram(method, VisionModelConfig("org/some-vision", "timm"),
                                TextModelConfig("org/some-llm", "last_token", layer=-2))
    texts = " ".join(t.get_text() for t in ax.texts)
    trained = sum(p.numel() for p in method.parameters())
    assert f"trained · {trained:,} parameters" in texts  # the count is the module's
    linears = [m for m in method.text_head.modules() if isinstance(m, torch.nn.Linear)]
    assert texts.count("Linear ") == len(linears) == (layers if kind == "mlp" else 1)
    assert f"Linear {linears[-1].in_features}→8" in texts and "layer -2" in texts and "last token" in texts
    assert "some-vision" in texts and "some-llm" in texts and "12-d" in texts and "8-d" in texts
    assert "τ = 0.05" in ax.get_title() and ("ShareLock MLP" in texts) == (kind == "mlp")
    plt.close("all")


# ---------------------------------------------------------------------------------- the chapter's experiments
def test_grid_is_the_text_ladder_on_the_main_image_model_plus_the_vision_comparison():
    from chapters import sharelock as chapter

    cfg = chapter.load_config("medium")
    settings = chapter.grid(cfg)
    assert settings[0] == (cfg.text[0], cfg.vision[0], "mlp"), "the main pair comes first"
    pairs = {(t.name, v.name) for t, v, _ in settings}
    assert pairs == {(t.name, cfg.vision[0].name) for t in cfg.text} | {(cfg.text[0].name, v.name) for v in cfg.vision}
    assert {(t.name, v.name) for t, v, kind in settings if kind == "mlp"} == pairs, "the MLP head on every pair"
    # the linear head (the book's ablation) on the main image model, for the main decoder and the first encoder
    linear = [(t, v) for t, v, kind in settings if kind == "linear"]
    assert [t.name for t, _ in linear] == [t.name for t in chapter.curve_texts(cfg)] == [cfg.text[0].name,
                                                                                         "offline/all-MiniLM-L6-v2"]
    assert all(v == cfg.vision[0] for _, v in linear) and len(settings) == len(pairs) + 2


def test_curve_seeds_are_the_first_seeds_and_validated():
    from chapters import sharelock as chapter
    from lib.core.config import ConfigError

    medium = chapter.load_config("medium")
    assert medium.curve_run_seeds == tuple(medium.seeds[:medium.curve_seeds]) and len(medium.seeds) >= 5
    assert chapter.load_config("small").curve_run_seeds == chapter.load_config("small").seeds  # None: every seed
    for bad in (1, len(medium.seeds) + 1):
        with pytest.raises(ConfigError, match="curve_seeds"):
            chapter.load_config("medium", {"curve_seeds": bad})


def test_curve_fractions_outside_zero_one_are_refused():
    from chapters import sharelock as chapter
    from lib.core.config import ConfigError

    with pytest.raises(ConfigError, match=r"curve_fractions must be shares of the training pairs in \(0, 1\]"):
        chapter.load_config("small", {"curve_fractions": [0.5, 1.5]})


def _row(text, head, seed, size, acc, best=100, control=""):
    return {"text": text, "vision": "v", "head": head, "seed": seed, "control": control, "train_pairs": size,
            "curve_size": size, "best_step": best, "first_eval": 20, "u/acc1": acc}


def test_stuck_runs_are_those_whose_best_step_is_the_first_evaluation():
    from chapters.sharelock import stuck_runs
    from lib.core.results import Runs

    runs = Runs([_row("t", "mlp", 0, 10, 0.5, best=20), _row("t", "mlp", 1, 10, 0.5, best=40),
                 _row("t", "mlp", 0, 10, 0.0, best=20, control="shuffled captions")])
    assert [r["seed"] for r in stuck_runs(runs)] == [0], "controls may stay untrained; methods may not"


def test_curve_table_and_trend_follow_the_rule_at_every_size():
    from chapters.sharelock import HEADS, curve_frame
    from lib.core import curves
    from lib.core.results import Runs

    rows = [_row("t", "mlp", s, 100, 0.10 + 0.001 * s) for s in range(3)]
    rows += [_row("t", "linear", s, 100, 0.20 + 0.001 * s) for s in range(3)]  # linear clearly ahead with little data
    rows += [_row("t", "mlp", s, 400, 0.30 + 0.001 * s) for s in range(3)]
    rows += [_row("t", "linear", s, 400, 0.20 + 0.001 * s) for s in range(3)]  # the gap flips with more data
    curve = Runs(rows)
    table = curve_frame(curve, "u/acc1")
    assert table["training pairs"].tolist() == [100, 400]
    assert table["outcome"].tolist() == ["linear ahead", "MLP ahead"]
    assert table["MLP − linear (points)"].tolist() == [-10.0, 10.0]
    assert table.columns[0] == "text model" and set(table["text model"]) == {"t"}
    trend = curves.trend(curve.where(text="t"), "u/acc1", *HEADS, context="t")
    assert trend == "MLP − linear in points, t, by training pairs: 100: -10.0 (linear ahead); 400: +10.0 (MLP ahead)"


def _labelled(names, labels):
    from corpora.datasets import Labelled

    return Labelled(name="set", ids=tuple(str(i) for i in range(len(labels))), labels=tuple(labels),
                    classnames=tuple(names), templates=("{c}",), load_image=lambda i: None, source={})


def test_matched_rows_pair_one_image_per_shared_concept():
    from chapters.sharelock import matched_rows

    drawings = _labelled(["ant", "cow", "owl"], [0, 1, 1, 2])      # two drawings of "cow": the first is used
    stamps = _labelled(["owl", "cow", "tank"], [0, 1, 1, 2])        # "tank" has no drawing; "cow" twice
    assert matched_rows(drawings, stamps) == ([3, 1], [0, 1])
    with pytest.raises(ValueError, match="share no class name"):
        matched_rows(drawings, _labelled(["tank"], [0]))


def test_style_diagnostics_on_known_features():
    from chapters.sharelock import style_diagnostics

    a = torch.eye(3)
    assert style_diagnostics(a, a * 2) == {"cross_style_nearest_same": 1.0, "mean_cosine": pytest.approx(1 / 3)}
    assert style_diagnostics(a, a[[1, 2, 0]])["cross_style_nearest_same"] == 0.0


def test_share_words_describe_the_curve_fractions():
    from chapters.sharelock import share_words

    assert share_words([0.125, 0.25, 0.5, 1.0]) == "an eighth, a quarter, half and all of the training pairs"
    assert share_words([0.25, 1.0]) == "a quarter and all of the training pairs"
    assert share_words([0.3]) == "30 % of the training pairs"
