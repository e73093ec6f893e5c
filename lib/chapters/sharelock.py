"""The ShareLock chapter: its config, benchmark, feature plan, experiments and claims.

Ruthardt et al., *Do better language models have crisper vision?*: frozen DINOv2 image features, frozen
decoder-LLM last-token text features, a 4-layer MLP on the text side (:class:`lib.methods.sharelock.ShareLock`)
trained with the CLIP loss at a fixed temperature. This module holds what the notebook runs and nothing it
shows: the schema of ``notebooks/configs/sharelock.yaml``, the features the chapter needs (one plan, shared
with ``python -m lib.precompute --chapter sharelock``), one training-and-evaluation run, and the paper's
claims with their verdicts, and the method diagram drawn from a built model. See notebooks/sharelock.py,
sections "The data", "The projection head", "Training the head" and "What reproduced, what did not".
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from lib.core import config as configs
from lib.core import curves, features
from lib.core.config import HeadConfig, LossConfig, StoreConfig, TextModelConfig, TrainSettings, VisionModelConfig
from lib.core.evaluate import prompt_texts, retrieval, zero_shot
from lib.core.results import Claim, Runs, compare, stuck, versus
from lib.core.train import fit, seed_everything
from lib.data import benchmarks, datasets
from lib.data.datasets import Benchmark, DataConfig
from lib.methods.lit import LiT, token_ids
from lib.methods.sharelock import ShareLock

__all__ = ["NAME", "Config", "LiTConfig", "load_config", "benchmark", "feature_plan", "ChapterFeatures", "grid",
           "train_and_evaluate", "train_lit", "data_size_curve", "curve_frame", "stuck_runs", "held_out_groups",
           "prompt_sets", "style_diagnostics", "claims", "findings", "short", "metric_labels", "setting_label",
           "method_diagram"]

NAME = "sharelock"


@dataclass(frozen=True)
class LiTConfig:
    """The paper's baseline (§6.1): a pretrained text encoder trained end to end, with a linear projection, on the
    same locked image features and pairs (:class:`lib.methods.lit.LiT`). ``train``: its own settings, since a tuned
    transformer needs a smaller learning rate than a head on frozen features; the budget rule (``eval_every``,
    ``patience``) is the heads'."""

    enabled: bool = False  # a config's `lit:` section sets it; absent, the baseline is not trained
    text: TextModelConfig = field(default_factory=lambda: TextModelConfig("offline/all-MiniLM-L6-v2", "mean"))
    train: TrainSettings = field(default_factory=TrainSettings)


@dataclass(frozen=True)
class Config:
    """``notebooks/configs/sharelock.yaml``, validated field by field on load (``lib.core.config``).

    The first vision and the first text model are the chapter's main pair; the others are comparisons.
    """

    data: DataConfig
    vision: tuple[VisionModelConfig, ...]
    text: tuple[TextModelConfig, ...]
    head: HeadConfig = field(default_factory=HeadConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    train: TrainSettings = field(default_factory=TrainSettings)
    store: StoreConfig = field(default_factory=StoreConfig)
    device: str = "cpu"
    seeds: tuple[int, ...] = (0,)
    curve_fractions: tuple[float, ...] = (0.125, 0.25, 0.5, 1.0)  # the data-size curve's shares of the training pairs
    lit: LiTConfig = field(default_factory=LiTConfig)  # the LiT baseline (trained when ``lit.enabled``)

    def __post_init__(self) -> None:
        if not self.curve_fractions or any(not 0 < f <= 1 for f in self.curve_fractions):
            raise ValueError(f"curve_fractions must be shares of the training pairs in (0, 1], e.g. [0.25, 1.0]; "
                             f"got {list(self.curve_fractions)}")


def load_config(name: str = "small", overrides: dict | None = None) -> Config:
    """``small`` / ``medium`` / ``full`` of ``notebooks/configs/sharelock.yaml`` (or a YAML path), validated."""
    return configs.load(NAME, name, Config, overrides)


def benchmark(cfg: Config) -> Benchmark:
    """Training, validation and retrieval pairs and the zero-shot sets (``lib.data.datasets``)."""
    return benchmarks.build(cfg.data)


def short(name: str) -> str:
    """A model's display name: the last part of its id."""
    return name.split("/")[-1]


_SHORT_SETS = {"emoji-unseen": "unseen", "emoji-seen": "seen", "fashion-mnist": "Fashion-MNIST",
               "medium-concepts-unseen": "unseen", "medium-concepts-train": "seen",
               "tuxpaint-photo": "Tux Paint photos"}


def metric_labels(bench: Benchmark) -> dict[str, str]:
    """Short column names for the chapter's results table: metric key -> label (all in %)."""
    labels = {}
    for labelled in bench.zero_shot:
        name = labelled.name
        style = " (other style)" if labelled is not bench.zero_shot[0] and name.startswith("emoji-unseen") else ""
        base = next((v for k, v in _SHORT_SETS.items() if name.startswith(k)), name)
        labels[f"{name}/acc1"] = f"{base}{style} top-1"
    labels[f"{bench.retrieval.name}/image_retrieval_recall@1"] = "text→image R@1"
    labels[f"{bench.retrieval.name}/text_retrieval_recall@5"] = "image→text R@5"
    return labels


HEAD_LABELS = {"mlp": "MLP", "linear": "linear", "lit": "LiT (encoder tuned)"}


def setting_label(row: dict) -> str:
    """``"gemma-3-270m + efficientnet-lite0, MLP"`` (and the control) for one row of a results table."""
    label = f"{row['text']} + {row['vision']}, {HEAD_LABELS[row['head']]}"
    return f"{label}, {row['control']}" if row.get("control") else label


def prompt_sets(cfg: Config, bench: Benchmark) -> list:
    """The unseen concepts with sentence templates and with the bare name (the prompt ablation), for the
    emoji and the medium corpus; empty for a pairs corpus."""
    if cfg.data.corpus == "emoji":
        return [datasets.emoji_labelled("unseen", cfg.data.train_style, prompts="sentences"),
                datasets.emoji_labelled("unseen", cfg.data.train_style, prompts="name")]
    if cfg.data.corpus == "medium":
        from lib.data import medium

        return [medium.labelled("unseen", prompts="sentences"), medium.labelled("unseen", prompts="name")]
    return []


def _prompt_source(labelled) -> dict:
    return {"prompts_for": labelled.source["dataset"], "templates": list(labelled.templates)}


def feature_plan(cfg: Config, bench: Benchmark) -> features.Plan:
    """Every feature the chapter reads: each vision model on every image set; each text model on the
    captions of every pair set, the prompts of every zero-shot set, and the prompt ablation's prompts."""
    plan, store = features.Plan(), dict(dtype=cfg.store.dtype, shard_rows=cfg.store.shard_rows)
    image_sets = [bench.train, bench.val, bench.retrieval, *bench.zero_shot]
    for vision in cfg.vision:
        for images in image_sets:
            plan.add(features.image(vision, images, **store))
    for text in cfg.text:
        for pairs in (bench.train, bench.val, bench.retrieval):
            plan.add(features.text(text, pairs.captions, source=pairs.source, name=f"text:{text.name}:{pairs.name}",
                                   ids=pairs.ids, **store))
        for labelled in [*bench.zero_shot, *prompt_sets(cfg, bench)]:
            plan.add(features.text(text, prompt_texts(labelled), source=_prompt_source(labelled),
                                   name=f"text:{text.name}:prompts:{labelled.name}:{len(labelled.templates)}", **store))
    return plan


class ChapterFeatures:
    """The materialised plan, read by role: ``image(vision, images)``, ``captions(text, pairs)``,
    ``prompts(text, set)``."""

    def __init__(self, found: features.Features) -> None:
        self.found = found
        self._cache: dict[str, torch.Tensor] = {}

    def _tensor(self, name: str) -> torch.Tensor:
        if name not in self._cache:
            self._cache[name] = self.found.tensor(name)
        return self._cache[name]

    def image(self, vision: VisionModelConfig, images) -> torch.Tensor:
        return self._tensor(f"image:{vision.name}:{images.name}")

    def captions(self, text: TextModelConfig, pairs) -> torch.Tensor:
        return self._tensor(f"text:{text.name}:{pairs.name}")

    def prompts(self, text: TextModelConfig, labelled) -> torch.Tensor:
        return self._tensor(f"text:{text.name}:prompts:{labelled.name}:{len(labelled.templates)}")


def grid(cfg: Config) -> list[tuple[TextModelConfig, VisionModelConfig, str]]:
    """The (text, vision, head) settings the chapter trains, main pair first: every text model with the main
    vision model and every other vision model with the main text model, each with the MLP and the linear head.

    Not the full product: the text ladder is the chapter's question, the vision models a side comparison, and
    each extra pair costs a feature pass and three seeds of training (notebooks/sharelock.py, "Zero-shot
    evaluation")."""
    pairs = [(t, cfg.vision[0]) for t in cfg.text] + [(cfg.text[0], v) for v in cfg.vision[1:]]
    return [(t, v, kind) for t, v in pairs for kind in ("mlp", "linear")]


def build(cfg: Config, feats: ChapterFeatures, bench: Benchmark, text: TextModelConfig, vision: VisionModelConfig,
          kind: str = "mlp") -> ShareLock:
    """A fresh ShareLock (``kind="mlp"``) or linear (``"linear"``) head for this pair of models."""
    text_dim = feats.captions(text, bench.train).shape[1]
    image_dim = feats.image(vision, bench.train).shape[1]
    return ShareLock(text_dim, image_dim, cfg.head, cfg.loss, kind=kind)


def train_and_evaluate(cfg: Config, bench: Benchmark, feats: ChapterFeatures, text: TextModelConfig,
                       vision: VisionModelConfig, kind: str = "mlp", seed: int = 0, *,
                       shuffle_captions: bool = False,
                       train_pairs: int | None = None) -> tuple[dict, object, ShareLock]:
    """Train one head on the training pairs (early stopping on the validation concepts), then evaluate it
    zero-shot on every labelled set and by retrieval on the unseen pairs.

    ``shuffle_captions``: the control, captions permuted among the training images (the pairing is broken,
    everything else kept). ``train_pairs``: train on that many pairs only (:func:`lib.core.curves.nested_subset`; the
    data-size curve). Returns the run's row (for :class:`lib.core.results.Runs`), the
    :class:`~lib.core.train.TrainResult` and the trained method.
    """
    seed_everything(seed)
    method = build(cfg, feats, bench, text, vision, kind)
    text_train, image_train = feats.captions(text, bench.train), feats.image(vision, bench.train)
    subset = curves.nested_subset(len(text_train), train_pairs)
    if subset is not None:
        text_train, image_train = text_train[subset], image_train[subset]
    if shuffle_captions:
        text_train = text_train[torch.randperm(len(text_train), generator=torch.Generator().manual_seed(seed))]
    result = fit(method, {"image": image_train, "text": text_train},
                 {"image": feats.image(vision, bench.val), "text": feats.captions(text, bench.val)},
                 cfg.train, seed=seed, device=cfg.device)
    row = {"text": short(text.name), "vision": short(vision.name), "head": kind, "seed": seed,
           "control": "shuffled captions" if shuffle_captions else "", "train_pairs": len(text_train),
           "best_step": result.best_step, "first_eval": min(cfg.train.eval_every, cfg.train.steps),
           "steps_run": result.steps_run, "negatives": result.negatives_per_loss, "train_s": round(result.seconds, 1)}
    row.update(_evaluate(method, cfg, bench, lambda s: feats.image(vision, s),
                         lambda s, prompts: feats.prompts(text, s) if prompts else feats.captions(text, s)))
    return row, result, method


def _evaluate(method, cfg: Config, bench: Benchmark, image, text_of) -> dict:
    """Zero-shot on every labelled set and retrieval on the unseen pairs; ``text_of(labelled_or_pairs, prompts)``
    gives the text side's input (cached features for a head, token ids for LiT)."""
    row = {}
    for labelled in bench.zero_shot:
        found = zero_shot(method, image(labelled), text_of(labelled, True), labelled)
        row.update({f"{labelled.name}/{k}": v for k, v in found.items()})
    found = retrieval(method, image(bench.retrieval), text_of(bench.retrieval, False))
    row.update({f"{bench.retrieval.name}/{k}": v for k, v in found.items()})
    return row


def train_lit(cfg: Config, bench: Benchmark, feats: ChapterFeatures, vision: VisionModelConfig,
              seed: int = 0) -> tuple[dict, object, LiT]:
    """The paper's LiT baseline on the same locked image features, pairs and seed as the heads: a pretrained text
    encoder (``cfg.lit.text``) and a linear projection, all trained (:class:`lib.methods.lit.LiT`), early-stopped
    on the validation concepts by the heads' rule. See notebooks/sharelock.py, section "The LiT baseline"."""
    from transformers import AutoModel, AutoTokenizer

    from lib.core.models import resolve

    if not cfg.lit.enabled:
        raise ValueError("this config's `lit` section is not enabled: the LiT baseline is not configured")
    text = cfg.lit.text
    path = resolve(text.name, "transformers", text.revision).load_path
    tokenizer = AutoTokenizer.from_pretrained(path, revision=text.revision)
    seed_everything(seed)
    encoder = AutoModel.from_pretrained(path, revision=text.revision, dtype=torch.float32)
    method = LiT(encoder, feats.image(vision, bench.train).shape[1], cfg.loss, pooling=text.pooling,
                 pad_id=tokenizer.pad_token_id)
    ids = {}

    def text_of(items, prompts: bool) -> torch.Tensor:
        key = (items.name, prompts)
        if key not in ids:
            ids[key] = token_ids(tokenizer, prompt_texts(items) if prompts else items.captions, text.max_length)
        return ids[key]

    result = fit(method, {"image": feats.image(vision, bench.train), "text": text_of(bench.train, False)},
                 {"image": feats.image(vision, bench.val), "text": text_of(bench.val, False)},
                 cfg.lit.train, seed=seed, device=cfg.device)
    row = {"text": short(text.name), "vision": short(vision.name), "head": "lit", "seed": seed, "control": "",
           "train_pairs": len(bench.train), "best_step": result.best_step,
           "first_eval": min(cfg.lit.train.eval_every, cfg.lit.train.steps), "steps_run": result.steps_run,
           "negatives": result.negatives_per_loss, "train_s": round(result.seconds, 1)}
    row.update(_evaluate(method, cfg, bench, lambda s: feats.image(vision, s), text_of))
    return row, result, method


def held_out_groups(cfg: Config, pairs) -> tuple[str, list[str]]:
    """What to break the unseen pairs down by, and each pair's group: the CLDR group for emoji, the source
    (Openclipart, OpenMoji, Fluent UI, game-icons) for the medium corpus, nothing for a pairs corpus."""
    if cfg.data.corpus == "emoji":
        from lib.data import emoji

        groups = {c.key: c.group for c in emoji.load_concepts()}
        return "CLDR group", [groups[c] for c in pairs.concepts]
    if cfg.data.corpus == "medium":
        return "source", [i.split("/")[0] for i in pairs.ids]
    return "", []


def stuck_runs(runs: Runs) -> list[dict]:
    """Runs (controls aside) whose best validation step is their first evaluation: a head that never improved
    on what it knew after ``eval_every`` steps has not trained, and its numbers must not be reported as a
    method's (notebooks/sharelock.py, "Training the head")."""
    return [r for r in runs if not r["control"] and stuck(r)]


def data_size_curve(cfg: Config, bench: Benchmark, feats: ChapterFeatures, runs: Runs,
                    texts: list[TextModelConfig]) -> Runs:
    """The head comparison (MLP vs linear, main vision model) at growing shares of the training pairs, every
    seed: does the paper's gap open, close or flip as data grows? Rows already in ``runs`` at the whole set
    are reused, not retrained. See notebooks/sharelock.py, "More data"."""
    total, vision = len(bench.train), cfg.vision[0]
    curve = Runs()
    for t in texts:
        for fraction in cfg.curve_fractions:
            size = max(2, round(fraction * total))
            for kind in ("mlp", "linear"):
                for seed in cfg.seeds:
                    done = [r for r in runs.where(text=short(t.name), vision=short(vision.name), head=kind, seed=seed,
                                                  control="") if r["train_pairs"] == size]
                    curve.add(done[0] if done else
                              train_and_evaluate(cfg, bench, feats, t, vision, kind, seed, train_pairs=size)[0])
    return curve


HEADS = ({"head": "mlp"}, {"head": "linear"}, ("MLP", "linear"))  # the curve's comparison: A, B and their names


def curve_frame(curve: Runs, metric: str):
    """One row per (text model, training pairs): MLP and linear mean ± sd and the rule's outcome."""
    import pandas as pd

    tables = [curves.table(curve.where(text=text), metric, *HEADS).assign(**{"text model": text})
              for text in sorted({r["text"] for r in curve})]
    return pd.concat([t[["text model", *t.columns[:-1]]] for t in tables], ignore_index=True)


@torch.no_grad()
def style_diagnostics(a: torch.Tensor, b: torch.Tensor) -> dict[str, float]:
    """Two properties of frozen image features, before any head, that predict how well a head can align
    them: how often a drawing's nearest neighbour among the other style's drawings (row i of ``b`` is the
    same concept as row i of ``a``) is the same concept, and the mean cosine between drawings of one style
    (a high value: one shared direction dominates, which a fixed-temperature loss without an image head
    cannot remove)."""
    a, b = F.normalize(a.float(), dim=-1), F.normalize(b.float(), dim=-1)
    nearest = (a @ b.T).argmax(1) == torch.arange(len(a))
    return {"cross_style_nearest_same": float(nearest.float().mean()), "mean_cosine": float((a @ a.T).mean())}


def claims(cfg: Config, bench: Benchmark, runs: Runs, curve: Runs | None = None) -> list[Claim]:
    """The paper's claims that the chapter's runs can test, and the book's own head ablation, each with its verdict
    (``lib.core.results.RULE``); with the data-size ``curve``, the ablation's diagnosis says how the gap moves as
    the data grow."""
    headline, chance = bench.zero_shot[0].name, 1 / len(bench.zero_shot[0].classnames)
    metric = f"{headline}/acc1"
    text, vision = short(cfg.text[0].name), short(cfg.vision[0].name)
    main = dict(text=text, vision=vision, control="")
    out = []
    if cfg.lit.enabled and runs.where(head="lit"):
        lit = short(cfg.lit.text.name)
        out.append(Claim(
            "sharelock_beats_lit", "ShareLock (a frozen LLM and an MLP head) beats LiT (a pretrained text encoder "
            "tuned end to end) on the same locked image features and pairs",
            "Table 3, ImageNet-1k top-1 at 563k CC3M-LLaVA pairs",
            runs.compare(metric, {**main, "head": "mlp"}, dict(text=lit, vision=vision, control="", head="lit")),
            (f"ShareLock ({text} frozen, MLP head)", f"LiT ({lit} tuned)"), paper_value="ShareLock 50.5 vs LiT 41.7",
            paper_pair=(50.5, 41.7), diagnosis=_lit_budget(runs.where(head="lit"))))
    out.append(Claim(
        "zero_shot_above_chance", "frozen features and a small head transfer zero-shot to classes never seen in "
        "training", "ViTeRB, Table 1 (unseen classes)", versus(runs.values(metric, **main, head="mlp"), chance),
        ("ShareLock head on unseen concepts", "chance"),
        paper_value="Llama-3-8B 40.2 (ViTeRB score, class names)"))
    if len(cfg.text) > 1:
        decoders = [short(t.name) for t in cfg.text if t.pooling == "last_token"]
        encoders = [short(t.name) for t in cfg.text if t.pooling != "last_token"]
        if decoders and encoders:
            dec, enc = decoders[0], encoders[0]
            out.append(Claim(
                "decoder_beats_encoder", "decoder LLM features (last token) are better text representations for "
                "vision than encoder features", "abstract; ViTeRB, Table 1",
                runs.compare(metric, dict(text=dec, vision=vision, control="", head="mlp"),
                             dict(text=enc, vision=vision, control="", head="mlp")),
                (dec, enc), paper_value="Llama-3 8B 40.2 vs BERT-Large 18.3 (class names)", paper_pair=(40.2, 18.3)))
    out.append(Claim(
        "mlp_beats_linear", "the book's ablation: the MLP head beats one linear map on the same frozen LLM features "
        "(the paper never compares the two; its head ablation is MLP vs Q-Former vs attention pooling)",
        "the book's own question (the paper's head ablation: App. A.3, Table 9)",
        runs.compare(metric, {**main, "head": "mlp"}, {**main, "head": "linear"}),
        ("MLP head", "linear head"), paper_value=None, origin="book",
        diagnosis="; ".join(filter(None, (curves.trend(curve.where(text=t), metric, *HEADS, context=t)
                                          for t in sorted({r["text"] for r in curve}))))
        if curve is not None else None))
    return out


def _lit_budget(lit: Runs) -> str | None:
    """Said when LiT was still improving at its last evaluation: the comparison is then bounded by LiT's budget."""
    rows = list(lit)
    last = [r for r in rows if r["best_step"] is not None and r["best_step"] >= r["steps_run"]]
    if not last:
        return None
    return (f"LiT's best validation step was its last on {len(last)} of {len(rows)} seeds "
            f"(step {last[0]['steps_run']}): "
            "it was still improving when its step budget ended, so this verdict is bounded by LiT's budget on this "
            "CPU and says less than the paper's comparison")


def findings(cfg: Config, bench: Benchmark, runs: Runs) -> dict[str, float | None]:
    """The chapter's headline numbers (means over seeds, fractions) for metrics.json and the results page."""
    headline = bench.zero_shot[0].name
    metric = f"{headline}/acc1"
    text, vision = short(cfg.text[0].name), short(cfg.vision[0].name)
    main = dict(text=text, vision=vision, control="")
    out = {
        "sharelock_unseen_acc1": runs.summary(metric, **main, head="mlp").mean,
        "linear_unseen_acc1": runs.summary(metric, **main, head="linear").mean,
        "lit_unseen_acc1": (runs.summary(metric, text=short(cfg.lit.text.name), vision=vision, control="",
                                         head="lit").mean if cfg.lit.enabled and runs.where(head="lit") else None),
        "shuffled_unseen_acc1": runs.summary(metric, text=text, vision=vision, head="mlp",
                                             control="shuffled captions").mean,
        "chance_unseen": 1 / len(bench.zero_shot[0].classnames),
    }
    for t in cfg.text:
        out[f"text/{short(t.name)}"] = runs.summary(metric, text=short(t.name), vision=vision, control="",
                                                    head="mlp").mean
    for v in cfg.vision:
        out[f"vision/{short(v.name)}"] = runs.summary(metric, text=text, vision=short(v.name), control="",
                                                      head="mlp").mean
    for labelled in bench.zero_shot[1:]:
        out[f"{labelled.name}/acc1"] = runs.summary(f"{labelled.name}/acc1", **main, head="mlp").mean
    for key in ("image_retrieval_recall@1", "text_retrieval_recall@1", "image_retrieval_recall@5",
                "text_retrieval_recall@5"):
        out[f"retrieval/{key}"] = runs.summary(f"{bench.retrieval.name}/{key}", **main, head="mlp").mean
    return out


def head_comparison(runs: Runs, metric: str, cfg: Config):
    """MLP vs linear on the main pair (a :class:`lib.core.results.Comparison`)."""
    main = dict(text=short(cfg.text[0].name), vision=short(cfg.vision[0].name), control="")
    return compare(runs.values(metric, **main, head="mlp"), runs.values(metric, **main, head="linear"))


# --------------------------------------------------------------------------------------------
# The method diagram, read from a built model
# --------------------------------------------------------------------------------------------
def _layer_lines(head: torch.nn.Module) -> list[str]:
    """One line per block of the text head, read from its modules (so the drawing cannot drift from the code)."""
    lines, block = [], []
    for module in (m for m in head.modules() if not any(m.children())):  # the layers, in order
        kind = type(module).__name__
        if isinstance(module, torch.nn.Linear):
            if block:
                lines.append(" → ".join(block))
            block = [f"Linear {module.in_features}→{module.out_features}"]
        elif isinstance(module, torch.nn.Dropout):
            block.append(f"Dropout {module.p:g}")
        else:
            block.append({"BatchNorm1d": "BN"}.get(kind, kind))
    if block:
        lines.append(" → ".join(block))
    return lines + ["L2 normalise"]


def method_diagram(method: ShareLock, vision: VisionModelConfig, text: TextModelConfig, ax=None):
    """Draw ShareLock as built: what is frozen and read from the feature store, what trains (with its
    parameter count and layers, read from ``method.text_head``), and the loss with its temperature.

    Grey boxes are frozen models whose outputs are computed once and cached (``lib.core.store``); blue
    boxes train. See notebooks/sharelock.py, section "The projection head".
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    if ax is None:
        fig, ax = plt.subplots(figsize=(9.8, 3.9))
        fig.subplots_adjust(left=0.01, right=0.99, bottom=0.01, top=0.9)
    trained = sum(p.numel() for p in method.parameters() if p.requires_grad)
    spots = {}

    def box(name, x, y, w, h, text, kind):
        colours = {"frozen": ("#e0e0e0", "#555"), "trained": ("#cfe3f7", "#1f5f99"),
                   "store": ("#f4f4f4", "#888"), "input": ("white", "#888")}[kind]
        ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.06", linewidth=1.3,
                                    facecolor=colours[0], edgecolor=colours[1], zorder=2,
                                    linestyle=":" if kind == "store" else "-"))
        ax.text(x, y, text, ha="center", va="center", fontsize=9, zorder=3)
        spots[name] = (x, y, w)

    def arrow(a, b):
        (x0, y0, w0), (x1, y1, w1) = spots[a], spots[b]
        ax.annotate("", xy=(x1 - w1 / 2 - 0.05, y1), xytext=(x0 + w0 / 2 + 0.05, y0),
                    arrowprops=dict(arrowstyle="->", color="#444", lw=1.1), zorder=1)

    pool = {"last_token": "last token", "mean": "mean of tokens", "cls": "[CLS]"}[text.pooling]
    box("image", 0.55, 3.0, 0.9, 0.6, "image", "input")
    box("caption", 0.55, 0.9, 0.9, 0.6, "caption", "input")
    box("vision", 2.3, 3.0, 2.2, 0.9, f"{short(vision.name)}\nfrozen", "frozen")
    box("llm", 2.3, 0.9, 2.2, 1.0, f"{short(text.name)}\nfrozen\n{pool}, layer {text.layer}", "frozen")
    box("vstore", 4.35, 3.0, 1.3, 0.7, f"feature store\n{method.image_dim}-d, once", "store")
    box("tstore", 4.35, 0.9, 1.3, 0.7, f"feature store\n{method.text_head.in_dim}-d, once", "store")
    box("norm", 6.95, 3.0, 3.3, 0.7, "L2 normalise (no image head)", "frozen")
    lines = _layer_lines(method.text_head)
    label = "ShareLock MLP" if method.kind == "mlp" else "linear head (LiT-style baseline)"
    box("head", 6.95, 0.9, 3.5, 0.55 + 0.2 * len(lines),
        f"{label}\ntrained · {trained:,} parameters\n" + "\n".join(lines), "trained")
    arrow("image", "vision")
    arrow("caption", "llm")
    arrow("vision", "vstore")
    arrow("llm", "tstore")
    arrow("vstore", "norm")
    arrow("tstore", "head")
    tau = method.criterion.temperature
    ax.add_patch(plt.Circle((9.6, 1.95), 0.45, facecolor="#fde8c8", edgecolor="#b36b00", lw=1.4, zorder=2))
    ax.text(9.6, 1.95, "CLIP\nloss", ha="center", va="center", fontsize=9, zorder=3)
    for name in ("norm", "head"):
        x, y, w = spots[name]
        ax.plot([x + w / 2 + 0.05, 9.6 - 0.45], [y, 1.95], color="#b36b00", lw=1.0, zorder=1)
    ax.set_title(f"{label}: frozen encoders run once into the store; only the text head trains "
                 f"(τ = {tau:.2g}, {'learned' if method.criterion.learnable else 'fixed'})", fontsize=10)
    ax.set(xlim=(0, 10.1), ylim=(-0.05, 3.55))
    ax.axis("off")
    return ax
