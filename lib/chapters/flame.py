"""The FLAME chapter: its config, benchmark, feature plan, experiments, claims and method diagram.

Cao, Wei and Ma, *FLAME* (CVPR 2025): a frozen decoder LLM read through K facet prompts (``lib.core.facets``),
an image-side MLP trained into the LLM's space (:class:`lib.methods.flame.Flame`), Eq. 1 or the official
multi-positive sigmoid loss; against a ShareLock head on plain features of the same captions and a text tower
trained from scratch (``lib.methods.three_towers``, LiT recipe). The paper's inference rules (§4.1) are the
defaults: a caption is embedded under all K facets; a short text (class name, label in another language)
under ONE prompt, "this image description" (the K-facet average is the measured variant ``zero-shot-avg``).
See notebooks/flame.py, sections "The data: long, multi-facet captions", "Three ways to align the same data"
and "What reproduced, what did not".
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from lib.core import config as configs
from lib.core import features
from lib.core.config import HeadConfig, LossConfig, StoreConfig, TextModelConfig, TrainSettings, VisionModelConfig
from lib.core.evaluate import prompt_texts, retrieval, zero_shot
from lib.core.facets import FLAME_TEMPLATE, FacetConfig, decoupled_inputs
from lib.core.results import Claim, Runs
from lib.core.train import fit, seed_everything
from lib.data import benchmarks, datasets, emoji
from lib.data.datasets import Benchmark, DataConfig
from lib.methods.flame import OFFICIAL_TEMPLATE, SHORT_TEXT_FACET, Flame, official_caption
from lib.methods.sharelock import ShareLock
from lib.methods.three_towers import TextTowerConfig, ThreeTowers, load_tokenizer, tokenize

__all__ = ["NAME", "Config", "load_config", "benchmark", "sizes", "text_sets", "label_sets", "feature_plan",
           "ChapterFeatures", "train_and_evaluate", "run_key", "main_setting", "claims", "findings", "facet_similarity",
           "main_runs", "coincidences", "facet_mask_figure", "equivalence_table", "speed_table", "short"]

NAME = "flame"
@dataclass(frozen=True)
class Config:
    """``notebooks/configs/flame.yaml``, validated field by field on load (``lib.core.config``).

    ``text`` is the frozen LLM read through FLAME's prompt (its ``facets`` are the K of the main run);
    ``facet_counts`` the prompt ablation (the first k facets, sliced from the K cached ones: with reset
    positions a facet's embedding does not depend on the others); ``short_text_facet`` the one prompt for
    short texts. ``prompt: official`` uses the official code's template and caption ending instead of the
    paper's (changes ``text.template`` unless the config set its own). ``baselines`` are ShareLock heads on
    plain features (the first: the same LLM as ``text``); ``scratch`` a text tower trained from scratch
    against the frozen image features. ``val_limit`` / ``retrieval_limit``: the first N validation /
    unseen pairs (``data.limit``: training pairs). ``locales``: CLDR labels in other languages (emoji only).
    """

    data: DataConfig
    vision: VisionModelConfig
    text: FacetConfig
    baselines: tuple[TextModelConfig, ...]
    scratch: TextTowerConfig
    scratch_embed_dim: int = 128
    projector_hidden: int | None = None  # None: the official max(LLM width, 4096)
    loss: Literal["facet_infonce", "mp_sigmoid"] = "facet_infonce"
    temperature: float | None = None  # None: 0.07 (facet_infonce) / 0.1 (mp_sigmoid)
    positives: int | None = None  # mp_sigmoid: positives drawn per image (official 6 of 11); None = all K
    compare_losses: bool = True
    facet_counts: tuple[int, ...] = (1,)
    short_text_facet: str = SHORT_TEXT_FACET
    prompt: Literal["paper", "official"] = "paper"
    head: HeadConfig = field(default_factory=HeadConfig)  # the ShareLock baseline's text head
    sharelock_loss: LossConfig = field(default_factory=LossConfig)
    train: TrainSettings = field(default_factory=TrainSettings)
    store: StoreConfig = field(default_factory=StoreConfig)
    val_limit: int | None = None
    retrieval_limit: int | None = None
    locales: tuple[str, ...] = ()
    device: str = "cpu"
    seeds: tuple[int, ...] = (0,)

    def __post_init__(self) -> None:
        k = len(self.text.facets)
        if any(not 1 <= c <= k for c in self.facet_counts):
            raise ValueError(f"facet_counts {list(self.facet_counts)} must lie in 1..{k} (the facets of `text`)")
        if self.short_text_facet not in self.text.facets:
            raise ValueError(f"short_text_facet {self.short_text_facet!r} is not one of the facets of `text`")
        if not self.baselines:
            raise ValueError("baselines must name at least one text model (the first: the same LLM as `text`)")
        if self.positives is not None and self.positives > k:
            raise ValueError(f"positives ({self.positives}) cannot exceed the {k} facets")
        unknown = [loc for loc in self.locales if loc not in emoji.LOCALES]
        if unknown:
            raise ValueError(f"locales {unknown} are not in the emoji corpus ({', '.join(emoji.LOCALES)})")
        for name in ("val_limit", "retrieval_limit", "projector_hidden", "scratch_embed_dim"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be a positive integer or null, got {value}")
        if self.prompt == "official" and self.text.template == FLAME_TEMPLATE:
            object.__setattr__(self, "text", dataclasses.replace(self.text, template=OFFICIAL_TEMPLATE))


def load_config(name: str = "small", overrides: dict | None = None) -> Config:
    """``small`` / ``medium`` (:class:`lib.chapters.flame_medium.MediumConfig`) / ``full`` of the YAML, validated."""
    if name == "medium":
        from lib.chapters import flame_medium  # it builds on this module
        return flame_medium.load_config(name, overrides)
    return configs.load(NAME, name, Config, overrides)


def short(name: str) -> str:
    return name.split("/")[-1]  # a model's display name: the last part of its id

# --- data ------------------------------------------------------------------------------------------------------
def benchmark(cfg: Config) -> Benchmark:
    """The whole splits (emoji: so the image features are the ShareLock chapter's store entries; the chapter
    then uses the first :func:`sizes` rows), or the manifest's pairs with ``data.limit`` training rows."""
    data = cfg.data if cfg.data.corpus == "pairs" else dataclasses.replace(cfg.data, limit=None)
    return benchmarks.build(data)


def sizes(cfg: Config, bench: Benchmark) -> dict[str, int]:
    """Rows used of each pair set: the first ``data.limit`` / ``val_limit`` / ``retrieval_limit``."""
    limits = {"train": cfg.data.limit, "val": cfg.val_limit, "retrieval": cfg.retrieval_limit}
    return {role: min(limit or len(getattr(bench, role)), len(getattr(bench, role))) for role, limit in limits.items()}


def label_sets(cfg: Config, bench: Benchmark) -> dict[str, datasets.Labelled]:
    """The unseen concepts with their CLDR labels in English and each of ``locales`` as class names (one
    prompt, the bare label); empty for a pairs corpus or without locales."""
    if cfg.data.corpus != "emoji" or not cfg.locales:
        return {}
    unseen = bench.zero_shot[0]
    out = {}
    for locale in ("en", *[loc for loc in cfg.locales if loc != "en"]):
        labels = tuple(emoji.locale_labels("unseen", locale))
        assert len(labels) == len(unseen.classnames), "the unseen labelled set and its CLDR labels disagree"
        out[locale] = dataclasses.replace(unseen, name=f"{unseen.name}:{locale}", classnames=labels, templates=("{c}",))
    return out


def _label_set_name(cfg: Config, bench: Benchmark, locale: str) -> str:
    """The text set holding a locale's labels: English labels are the zero-shot prompts when those are bare names."""
    same = locale == "en" and tuple(prompt_texts(bench.zero_shot[0])) == label_sets(cfg, bench)["en"].classnames
    return "zero-shot" if same else f"labels:{locale}"


def text_sets(cfg: Config, bench: Benchmark) -> dict[str, tuple[list[str], dict]]:
    """Every text the chapter embeds, by set name: ``(texts, source)``. Captions (the first :func:`sizes`
    rows), the zero-shot prompts (class-major, :func:`lib.core.evaluate.prompt_texts`) and the labels in
    other languages."""
    rows = sizes(cfg, bench)
    out = {}
    for role, n in rows.items():
        pairs = getattr(bench, role)
        out[role] = (list(pairs.captions[:n]), {**pairs.source, "captions": cfg.data.captions, "rows": n})
    if bench.zero_shot:
        labelled = bench.zero_shot[0]
        out["zero-shot"] = (prompt_texts(labelled),
                            {"prompts_for": labelled.source, "templates": list(labelled.templates)})
    for locale, labelled in label_sets(cfg, bench).items():
        name = _label_set_name(cfg, bench, locale)
        if name not in out:
            out[name] = (list(labelled.classnames), {"cldr_labels": locale, "split": "unseen"})
    return out


def feature_plan(cfg: Config, bench: Benchmark) -> features.Plan:
    """Every feature the notebook reads: the image features of the training, validation, retrieval and
    zero-shot images; the LLM's K facet embeddings of every text set; each baseline's features of the same
    texts. The text tower from scratch reads tokens, not features. Medium: ``lib.chapters.flame_medium``."""
    if hasattr(cfg, "tux_locales"):
        return __import__("lib.chapters.flame_medium", fromlist=["x"]).feature_plan(cfg, bench)
    plan, store = features.Plan(), dict(dtype=cfg.store.dtype, shard_rows=cfg.store.shard_rows)
    for images in [bench.train, bench.val, bench.retrieval, *bench.zero_shot[:1]]:
        plan.add(features.image(cfg.vision, images, **store))
    for name, (texts, source) in text_sets(cfg, bench).items():
        prompted = [official_caption(t) for t in texts] if cfg.prompt == "official" else texts
        plan.add(features.facets(cfg.text, prompted, source=source, name=f"facets:{cfg.text.name}:{name}", **store))
        for baseline in cfg.baselines:
            plan.add(features.text(baseline, texts, source=source, name=f"text:{baseline.name}:{name}", **store))
    return plan


class ChapterFeatures:
    """The materialised plan, read by role: ``image(role)``, ``facets(set)`` ``(N, K, D)``, ``text(model, set)``,
    ``tokens(set)`` (the scratch tower's ``(N, 2, context)`` ids and mask)."""

    def __init__(self, cfg: Config, bench: Benchmark, found: features.Features) -> None:
        self.cfg, self.bench, self.found = cfg, bench, found
        self.rows = sizes(cfg, bench)
        self._cache: dict[str, torch.Tensor] = {}
        self._tokenizer = None

    def _tensor(self, name: str) -> torch.Tensor:
        if name not in self._cache:
            self._cache[name] = self.found.tensor(name)
        return self._cache[name]

    def image(self, role: str) -> torch.Tensor:
        images = self.bench.zero_shot[0] if role == "zero-shot" else getattr(self.bench, role)
        return self._tensor(f"image:{self.cfg.vision.name}:{images.name}")[: self.rows.get(role)]

    def set_name(self, name: str) -> str:
        return _label_set_name(self.cfg, self.bench, name.split(":")[1]) if name.startswith("labels:") else name

    def facets(self, name: str) -> torch.Tensor:
        return self._tensor(f"facets:{self.cfg.text.name}:{self.set_name(name)}")

    def text(self, model: TextModelConfig, name: str) -> torch.Tensor:
        return self._tensor(f"text:{model.name}:{self.set_name(name)}")

    @property
    def tokenizer(self):
        """The scratch tower's tokenizer (only its vocabulary is used)."""
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.cfg.scratch.tokenizer)
        return self._tokenizer

    def tokens(self, name: str) -> torch.Tensor:
        key = f"tokens:{self.set_name(name)}"
        if key not in self._cache:
            found = tokenize(self.tokenizer, text_sets(self.cfg, self.bench)[self.set_name(name)][0],
                             self.cfg.scratch.context)
            self._cache[key] = torch.stack([found["input_ids"], found["attention_mask"]], dim=1)
        return self._cache[key]


# --- experiments -----------------------------------------------------------------------------------------------
class _ScratchTower(nn.Module):
    """The LiT-recipe text tower behind the ``embed_image(features)`` / ``embed_text(features)`` interface of
    ``lib.core.evaluate``: image features are the frozen ones, text "features" are ``(N, 2, context)`` tokens."""

    def __init__(self, method: ThreeTowers) -> None:
        super().__init__()
        self.method = method

    def embed_image(self, image_features: torch.Tensor) -> torch.Tensor:
        return self.method.embed_image(None, image_features)

    def embed_text(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.method.embed_text(tokens[:, 0], tokens[:, 1])


def run_key(row: dict, cfg: Config) -> str:
    """A run's name in the findings: ``flame``, ``flame_1facets``, ``flame_mp_sigmoid``, ``sharelock/<model>``,
    ``scratch``."""
    if row["method"] != "flame":
        return row["method"]
    if row["facets"] != len(cfg.text.facets):
        return f"flame_{row['facets']}facets"
    return "flame" if row["loss"] == cfg.loss else f"flame_{row['loss']}"


def train_and_evaluate(cfg: Config, bench: Benchmark, feats: ChapterFeatures, kind: str, seed: int = 0, *,
                       k: int | None = None, loss: str | None = None) -> tuple[dict, object, nn.Module]:
    """Train one method on the training pairs (best weights on the validation pairs) and evaluate it on the
    unseen concepts: zero-shot, caption retrieval, and zero-shot with the labels of every locale.

    ``kind``: ``"flame"`` (its first ``k`` facets, ``loss``), ``"scratch"`` or a baseline's model name. FLAME
    embeds short texts under :data:`SHORT_TEXT_FACET` only (paper §4.1) and reports the average over its k
    facets as ``zero-shot-avg``. Returns the row (for :class:`lib.core.results.Runs`), the
    :class:`~lib.core.train.TrainResult` and the trained method.
    """
    K = len(cfg.text.facets)
    k, loss = (k or K, loss or cfg.loss) if kind == "flame" else (None, None)
    seed_everything(seed)
    image = {role: feats.image(role) for role in ("train", "val")}
    if kind == "flame":
        method = Flame(image["train"].shape[1], feats.facets("train").shape[2], loss=loss,
                       hidden_dim=cfg.projector_hidden, temperature=cfg.temperature,
                       positives=cfg.positives if loss == "mp_sigmoid" else None)
        data = {r: {"image": image[r], "text": feats.facets(r)[:, :k]} for r in image}
        one = cfg.text.facets.index(cfg.short_text_facet)
        long_text, short_text = (lambda name: feats.facets(name)[:, :k]), (lambda name: feats.facets(name)[:, [one]])
        model, label = method, "flame"
    elif kind == "scratch":
        method = ThreeTowers("lit", third_dim=image["train"].shape[1], vocab_size=feats.tokenizer.vocab_size,
                             image_tower=None, text_tower=cfg.scratch, embed_dim=cfg.scratch_embed_dim,  # lit: no f
                             loss=LossConfig(0.07, learnable=True))
        data = {r: {"third": image[r], "input_ids": feats.tokens(r)[:, 0], "attention_mask": feats.tokens(r)[:, 1]}
                for r in image}
        long_text = short_text = feats.tokens
        model, label = _ScratchTower(method), "scratch"
    else:
        baseline = next(b for b in cfg.baselines if b.name == kind)
        method = ShareLock(feats.text(baseline, "train").shape[1], image["train"].shape[1], cfg.head,
                           cfg.sharelock_loss)
        data = {r: {"image": image[r], "text": feats.text(baseline, r)} for r in image}
        long_text = short_text = (lambda name: feats.text(baseline, name))
        model, label = method, f"sharelock/{short(kind)}"
    result = fit(method, data["train"], data["val"], cfg.train, seed=seed, device=cfg.device, progress=False)
    model.cpu()
    row = {"method": label, "facets": k, "loss": loss, "seed": seed, "best_step": result.best_step,
           "train_s": round(result.seconds, 1)}
    if bench.zero_shot:
        labelled = bench.zero_shot[0]
        found = zero_shot(model, feats.image("zero-shot"), short_text("zero-shot"), labelled)
        row.update({f"zero-shot/{m}": v for m, v in found.items()})
        if kind == "flame":
            found = zero_shot(model, feats.image("zero-shot"), long_text("zero-shot"), labelled)
            row.update({f"zero-shot-avg/{m}": v for m, v in found.items()})
    found = retrieval(model, feats.image("retrieval"), long_text("retrieval"))
    row.update({f"retrieval/{m}": v for m, v in found.items()})
    with torch.no_grad():  # hubness: the share of captions whose nearest image is the most often retrieved one
        nearest = (model.embed_text(long_text("retrieval")) @ model.embed_image(feats.image("retrieval")).T).argmax(1)
    row["retrieval/hub_share"] = float(nearest.bincount().max()) / len(nearest)
    others = []
    for locale, labelled in label_sets(cfg, bench).items():
        row[f"labels:{locale}/acc1"] = zero_shot(model, feats.image("zero-shot"), short_text(f"labels:{locale}"),
                                                 labelled)["acc1"]
        others += [row[f"labels:{locale}/acc1"]] if locale != "en" else []
    if others:
        row["labels:other/acc1"] = sum(others) / len(others)
    return row, result, method


# --- results ---------------------------------------------------------------------------------------------------
def main_setting(cfg: Config) -> dict:
    """The main FLAME run's columns: all K facets, the config's loss."""
    return dict(method="flame", facets=len(cfg.text.facets), loss=cfg.loss)


@torch.no_grad()
def facet_similarity(facet_features: torch.Tensor) -> torch.Tensor:
    """``(K, K)`` mean cosine between facet i and facet j of the same caption, after removing each facet's mean
    over the captions (a decoder's states share one large direction: raw cosines are near 1 for any two texts)."""
    unit = F.normalize((facet_features - facet_features.mean(0, keepdim=True)).float(), dim=-1)
    return torch.einsum("nid,njd->ij", unit, unit) / len(unit)


# Table 6 of the paper: Urban-1k text-to-image R@1 against the number of facet prompts (1 prompt: 41.3).
_TABLE6 = {3: "3 prompts 46.0 vs 1 prompt 41.3", 5: "5 prompts 57.0 vs 1 prompt 41.3",
           7: "7 prompts 66.6 vs 1 prompt 41.3"}
_TABLE6_PAIRS = {3: (46.0, 41.3), 5: (57.0, 41.3), 7: (66.6, 41.3)}


def claims(cfg: Config, bench: Benchmark, runs: Runs, *, diagnosis: dict | None = None) -> list[Claim]:
    """The paper's claims that the runs can test, each with its verdict (``lib.core.results.RULE``)."""
    main, diagnosis = main_setting(cfg), diagnosis or {}
    K = len(cfg.text.facets)
    out = [Claim(
        "frozen_llm_beats_scratch", "a frozen LLM read through facet prompts is a better text side than a text "
        "tower trained from scratch on the same pairs (zero-shot on unseen concepts)",
        "Table 3 (CC3M, ImageNet-1k zero-shot top-1)",
        runs.compare("zero-shot/acc1", main, dict(method="scratch")), ("FLAME", "text tower from scratch"),
        paper_value="FLAME 36.0 vs CLIP 16.0", diagnosis=diagnosis.get("frozen_llm_beats_scratch"),
        paper_pair=(36.0, 16.0))]
    if 1 in cfg.facet_counts and K > 1 and runs.where(method="flame", facets=1):
        out.append(Claim(
            "more_facets_help", f"more facet prompts per caption improve text-to-image retrieval with long "
            f"captions ({K} facets vs 1)", "Table 6 (Urban-1k text-to-image R@1)",
            runs.compare("retrieval/image_retrieval_recall@1", main, dict(method="flame", facets=1, loss=cfg.loss)),
            (f"{K} facets", "1 facet"), paper_value=_TABLE6.get(K, "see Table 6") + " (Table 6 for 1/3/5/7/9 prompts: "
            "41.3 / 46.0 / 57.0 / 66.6 / 67.1)",
            diagnosis=diagnosis.get("more_facets_help"), paper_pair=_TABLE6_PAIRS.get(K)))
    if label_sets(cfg, bench):
        others = ", ".join(loc for loc in cfg.locales if loc != "en")
        out.append(Claim(
            "multilingual_transfer", f"trained on English captions only, FLAME classifies with labels in other "
            f"languages ({others}) better than a text tower trained on the same English pairs",
            "Table 4 (multilingual ImageNet-1k, FLAME trained on YFCC15M)",
            runs.compare("labels:other/acc1", main, dict(method="scratch")), ("FLAME", "text tower from scratch"),
            paper_value="FLAME 40.6 vs CLIP 19.2 (average of ar, en, it, jp, zh; CLIP trained on WIT-400M)",
            diagnosis=diagnosis.get("multilingual_transfer"), paper_pair=(40.6, 19.2)))
    return out


def main_runs(cfg: Config, runs: Runs) -> Runs:
    """The rows of the main comparison: FLAME with all K facets and the config's loss, the baselines, scratch."""
    return Runs(r for r in runs if run_key(r, cfg) in ("flame", "scratch") or r["method"].startswith("sharelock/"))


def coincidences(cfg: Config, bench: Benchmark, runs: Runs) -> list[dict]:
    """Results that look degenerate, with their per-seed values (%): two settings whose means agree to 0.1 point
    (facet counts on one metric; two locales of one method), and a metric with one value on every seed. A tie
    on a coarse metric (R@1 among 381 moves in steps of 0.26 points) is a coincidence when the seeds differ."""
    K, pairs, out = len(cfg.text.facets), [], []
    kinds = {run_key(r, cfg): {k: r[k] for k in ("method", "facets", "loss")} for r in runs}
    metrics = {**METRICS, **{f"labels:{loc}/acc1": f"labels_{loc}_acc1" for loc in label_sets(cfg, bench)}}
    for k in sorted({r["facets"] for r in runs.where(method="flame", loss=cfg.loss)} - {K}):
        pairs += [(f"FLAME {K} vs {k} facets, {metrics[m]}", m, main_setting(cfg), m,
                   dict(method="flame", facets=k, loss=cfg.loss)) for m in TIES]
    locales = list(label_sets(cfg, bench))
    for key in {run_key(r, cfg) for r in main_runs(cfg, runs)}:
        pairs += [(f"{key}, labels {a} vs {b}", f"labels:{a}/acc1", kinds[key], f"labels:{b}/acc1", kinds[key])
                  for i, a in enumerate(locales) for b in locales[i + 1:]]
    for label, metric_a, a, metric_b, b in pairs:
        va, vb = runs.values(metric_a, **a), runs.values(metric_b, **b)
        if va and vb and round(100 * sum(va) / len(va), 1) == round(100 * sum(vb) / len(vb), 1):
            out.append({"results": label, "per seed (%)": " / ".join(f"{100 * v:.1f}" for v in va),
                        "the other, per seed (%)": " / ".join(f"{100 * v:.1f}" for v in vb),
                        "identical per seed": va == vb})
    for key, where in kinds.items():
        for metric, name in metrics.items():
            values = runs.values(metric, **where)
            if len(values) > 1 and len(set(values)) == 1 and metric != "labels:other/acc1":  # that one is a mean
                out.append({"results": f"{key}, {name}: one value on every seed", "the other, per seed (%)": "",
                            "per seed (%)": " / ".join(f"{100 * v:.1f}" for v in values), "identical per seed": True})
    return out


TIES = ("zero-shot/acc1", "zero-shot-avg/acc1", "retrieval/image_retrieval_recall@1",
        "retrieval/text_retrieval_recall@1")
METRICS = {"zero-shot/acc1": "zero_shot_acc1", "zero-shot/acc5": "zero_shot_acc5",
           "zero-shot-avg/acc1": "zero_shot_avg_acc1", "retrieval/image_retrieval_recall@1": "t2i_r1",
           "retrieval/image_retrieval_recall@5": "t2i_r5", "retrieval/text_retrieval_recall@1": "i2t_r1",
           "retrieval/text_retrieval_recall@5": "i2t_r5", "retrieval/hub_share": "hub_share",
           "labels:other/acc1": "labels_other_acc1"}


def findings(cfg: Config, bench: Benchmark, runs: Runs) -> dict[str, float | None]:
    """The chapter's headline numbers (means over seeds, fractions) for metrics.json and the results page:
    ``<run>/<metric>`` for every run kind (:func:`run_key`), and the chance levels."""
    out: dict[str, float | None] = {}
    metrics = dict(METRICS, **{f"labels:{loc}/acc1": f"labels_{loc}_acc1" for loc in label_sets(cfg, bench)})
    keys = {}
    for row in runs:
        keys.setdefault(run_key(row, cfg), {k: row[k] for k in ("method", "facets", "loss")})
    for key, where in keys.items():
        for metric, name in metrics.items():
            summary = runs.summary(metric, **where)
            if summary.n:
                out[f"{key}/{name}"] = summary.mean
    if bench.zero_shot:
        out["chance_zero_shot"] = 1 / len(bench.zero_shot[0].classnames)
    out["chance_retrieval"] = 1 / sizes(cfg, bench)["retrieval"]
    return out


# --- figures and tables ----------------------------------------------------------------------------------------
def _gap(a: torch.Tensor, b: torch.Tensor) -> dict:
    d = a - b
    return {"max |difference|": float(d.abs().max()), "largest |value|": float(a.abs().max()),
            "relative L2 (worst row)": float((d.norm(dim=-1) / a.norm(dim=-1).clamp_min(1e-12)).max()),
            "min cosine": float(F.cosine_similarity(a.flatten(0, -2), b.flatten(0, -2), dim=-1).min())}


@torch.no_grad()
def equivalence_table(cfg: Config, captions: list[str], device: str = "cpu"):
    """Facet-decoupled attention against K separate passes over ``prefix + suffix_k``, in float32 (where the two
    must agree to float rounding) and, when the run computes in a lower precision, in that precision beside the
    precision's own spread: two separate passes that differ only in their batch size. See notebooks/flame.py,
    section "Facet-decoupled attention"."""
    import pandas as pd

    from lib.core.precision import resolve_dtype

    dtype = resolve_dtype(cfg.text.dtype) if cfg.text.dtype == "auto" else cfg.text.dtype
    rows = []
    for precision in dict.fromkeys(["float32", dtype]):
        text = dataclasses.replace(cfg.text, dtype=precision)
        encoder = features.ENCODERS.get(text, device)
        decoupled = encoder.encode(captions, method="decoupled", progress=False)
        separate = encoder.encode(captions, method="separate", progress=False)
        rows.append({"precision": precision, "comparison": "decoupled vs separate passes", **_gap(decoupled, separate)})
        if precision != "float32":
            one = features.ENCODERS.get(dataclasses.replace(text, batch_size=1), device)
            rows.append({"precision": precision, "comparison": f"separate passes, batch {text.batch_size} vs batch 1",
                         **_gap(separate, one.encode(captions, method="separate", progress=False))})
    return pd.DataFrame(rows).set_index(["precision", "comparison"])


def facet_mask_figure(encoder, caption: str):
    """FLAME's facet-decoupled attention, drawn from the very inputs ``lib.core.facets`` builds for one caption
    (:func:`lib.core.facets.decoupled_inputs` on the encoder's own tokens): which key (column) each query
    (row) may see, coloured by the key's segment, the facets' read-out tokens, and the position ids."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    prefix = encoder.tokenize_prefixes([caption])[0]
    inputs = decoupled_inputs([prefix], encoder.suffix_ids, pad_id=encoder.tokenizer.pad_token_id,
                              positions=encoder.positions)
    visible = inputs["mask"][0, 0] == 0
    bounds = [0, len(prefix)] + [len(prefix) + sum(map(len, encoder.suffix_ids[: i + 1]))
                                 for i in range(len(encoder.suffix_ids))]
    segment = torch.zeros(bounds[-1], dtype=torch.long)
    for s in range(len(bounds) - 1):
        segment[bounds[s]:bounds[s + 1]] = s + 1
    colours = ["white", "#9aa5b1", *plt.get_cmap("tab10").colors[: len(encoder.suffix_ids)]]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.2, 8.2), height_ratios=[5, 1.2], sharex=True)
    top.grid(False)
    top.imshow(torch.where(visible, segment[None, :], 0).numpy(), cmap=ListedColormap(colours), interpolation="nearest",
               vmin=0, vmax=len(colours) - 1)
    finals = inputs["final"].tolist()
    top.scatter(finals, finals, marker="*", s=120, color="black", zorder=3, label="read-out token (one per facet)")
    names = ["caption prompt", *[f"facet {i + 1}: " + (f if len(f) < 30 else f[:f.rfind(" ", 0, 28)] + " …")
                                 for i, f in enumerate(encoder.facets)]]
    middles = [(bounds[s] + bounds[s + 1] - 1) / 2 for s in range(len(bounds) - 1)]
    top.set_yticks(middles, names)
    top.set(ylabel="query token", title=f"One pass, {len(encoder.facets)} facets of \"{caption[:40]}"
            f"{'…' if len(caption) > 40 else ''}\" ({len(prefix)} + {bounds[-1] - len(prefix)} tokens)")
    top.legend(loc="lower left", fontsize=9)
    positions = inputs["position_ids"][0]
    for s in range(len(bounds) - 1):
        cols = torch.arange(bounds[s], bounds[s + 1])
        bottom.plot(cols, positions[cols], color=colours[s + 1], lw=2.5)
    bottom.set(xlabel="key token (column in the one sequence)", ylabel="position id")
    for axis in (top, bottom):
        for b in bounds[1:-1]:
            axis.axvline(b - 0.5, color="black", lw=0.6, alpha=0.5)
    fig.tight_layout()
    return fig


def speed_table(path):
    """``bench/results/facets.json`` (written by ``bench/facets.py``) as a table, and the file's contents."""
    import pandas as pd

    speed = json.loads(path.read_text())
    table = pd.DataFrame([{
        "model": short(r["model"]), "captions x facets": f"{r['captions']} x {r['facets']}",
        **{f"{m} emb/s": round(r["embeddings_per_s"][m], 1) for m in ("decoupled", "separate", "stacked")},
        "speed-up vs K passes": round(r["speedup_vs_separate"], 2),
        "speed-up vs K-times batch": round(r["speedup_vs_stacked"], 2),
        "max |diff| vs separate": f"{r['max_abs_difference_vs_separate']:.1e}",
        "token positions, separate / decoupled": round(r["token_slots"]["separate"] / r["token_slots"]["decoupled"], 2),
    } for r in speed["results"]])
    return speed, table
