"""The Three Towers chapter: its config, benchmark, feature plan, experiments and claims.

Kossen et al., *Three Towers: Flexible Contrastive Learning with Pretrained Image Models* (NeurIPS 2023): an image
tower f and a text tower g trained from scratch, a frozen pretrained third tower h = linear(p(I)), four heads and
three contrastive terms (:class:`lib.methods.three_towers.ThreeTowers`). This module holds what the notebook runs
and nothing it shows: the config schema, the features the chapter reads (the third tower's p(I) of every image set,
one plan shared with ``python -m lib.precompute --chapter three_towers``), the towers' resident inputs, one
training-and-evaluation run, the ablations, the data-size curve and the paper's claims with their verdicts
(:data:`lib.core.results.RULE`); the method diagram is ``lib.chapters.three_towers_diagram``. See
notebooks/three_towers.py, sections "The data", "Training", "More data" and "What reproduced, what did not".
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

import torch

from lib.core import config as configs, curves, features
from lib.core.config import LossConfig, StoreConfig, TrainSettings, VisionModelConfig
from lib.core.evaluate import prompt_texts
from lib.core.results import Claim, Runs, stuck, versus
from lib.core.train import fit, seed_everything
from lib.data import benchmarks, datasets, pixel_cache
from lib.data.datasets import Benchmark, DataConfig
from lib.methods import three_towers as tt
from lib.methods.three_towers import ImageTowerConfig, TextTowerConfig, ThreeTowers
from lib.chapters.three_towers_medium import group_accuracy, group_diagnosis  # noqa: F401  (re-exported)

__all__ = ["NAME", "Config", "load_config", "benchmark", "training_pairs", "feature_plan", "Inputs", "inputs",
           "build", "evaluate", "train_and_evaluate", "alpha_sweep", "claims", "findings",
           "group_accuracy", "ablations", "early_stopping_settings", "early_stopping_diagnosis", "diagnosis_protocols",
           "fixed_budget", "chance", "chance_checks", "shown_metrics", "test_sets",
           "stuck_runs", "data_size_curve", "group_diagnosis", "CURVE_METRIC"]

NAME = "three_towers"
RETRIEVAL_R1 = ("retrieval/image_retrieval_recall@1", "retrieval/text_retrieval_recall@1")


@dataclass(frozen=True)
class Config:
    """``notebooks/configs/three_towers.yaml``, validated field by field on load (``lib.core.config``).

    ``third`` is p, the frozen pretrained image model behind the third tower; ``train_styles`` the emoji
    drawing styles the towers train on (both: the towers trained from scratch need every image);
    ``weights`` the loss-weight ablation (w = 1 is the main run); ``alphas`` the headless convex combination
    ``alpha * h + (1 - alpha) * f``; ``ablation_seeds`` how many of ``seeds`` the ablations run on.
    The runs train a fixed budget (``train.steps``) and keep the final weights, as the paper does;
    ``diagnosis_eval_every`` is the validation interval of the early-stopping diagnosis
    (:func:`early_stopping_settings`). ``medium`` instead validates every ``train.eval_every`` steps and keeps
    the lowest validation loss (its 11,416 drawings are not memorised in a few epochs; see the chapter).
    ``curve_fractions``: the shares of the training pairs of the data-size curve (:func:`data_size_curve`).
    ``val_holdout`` > 0 (``medium``): validate on that share of the training pairs, held out from training
    (:func:`held_out_rows`), instead of on the validation concept families (see :func:`inputs`).
    """

    data: DataConfig
    third: VisionModelConfig
    image_tower: ImageTowerConfig
    text_tower: TextTowerConfig
    embed_dim: int = 128
    train_styles: tuple[Literal["google", "twitter"], ...] = ("google",)
    loss: LossConfig = field(default_factory=lambda: LossConfig(temperature=0.07, learnable=True))
    train: TrainSettings = field(default_factory=TrainSettings)
    store: StoreConfig = field(default_factory=StoreConfig)
    weights: tuple[float, ...] = (0.5, 2.0)
    alphas: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    augment: bool = True
    device: str = "cpu"
    seeds: tuple[int, ...] = (0,)
    ablation_seeds: int = 1
    diagnosis_eval_every: int = 25
    curve_fractions: tuple[float, ...] = (1.0,)
    val_holdout: float = 0.0

    def __post_init__(self) -> None:
        if self.embed_dim <= 0:
            raise ValueError(f"embed_dim must be a positive integer, got {self.embed_dim}")
        if any(not 0.0 <= a <= 1.0 for a in self.alphas):
            raise ValueError(f"alphas must lie in [0, 1] (a convex combination), got {list(self.alphas)}")
        if any(w < 0 for w in self.weights):
            raise ValueError(f"weights must be >= 0, got {list(self.weights)}")
        if not self.train_styles:
            raise ValueError("train_styles must name at least one drawing style")
        if self.ablation_seeds < 0:
            raise ValueError(f"ablation_seeds must be >= 0, got {self.ablation_seeds}")
        if self.diagnosis_eval_every < 1:
            raise ValueError(f"diagnosis_eval_every must be >= 1, got {self.diagnosis_eval_every}")
        curves.sizes(100, self.curve_fractions)  # each fraction in (0, 1], or one clear message
        if not 0.0 <= self.val_holdout < 0.5:
            raise ValueError(f"val_holdout is the share of training pairs held out for validation, in [0, 0.5); "
                             f"got {self.val_holdout}")


def load_config(name: str = "small", overrides: dict | None = None) -> Config:
    """``small`` / ``medium`` / ``full`` of ``notebooks/configs/three_towers.yaml`` (or a YAML path), validated."""
    return configs.load(NAME, name, Config, overrides)


def benchmark(cfg: Config) -> Benchmark:
    """Training, validation and retrieval pairs and the zero-shot sets (``lib.data.datasets``)."""
    return benchmarks.build(cfg.data)


def training_pairs(cfg: Config, bench: Benchmark) -> list:
    """The training image-caption sets: every drawing style of ``train_styles`` (emoji), or the pairs."""
    if cfg.data.corpus != "emoji":
        return [bench.train]
    return [bench.train if style == cfg.data.train_style else
            datasets.emoji_pairs("train", style, cfg.data.captions, cfg.data.limit) for style in cfg.train_styles]


def _image_sets(cfg: Config, bench: Benchmark) -> list:
    return [*training_pairs(cfg, bench), bench.val, bench.retrieval, *bench.zero_shot]


def feature_plan(cfg: Config, bench: Benchmark) -> features.Plan:
    """Every feature the chapter reads: the third tower's p(I) of every image set (training styles,
    validation, retrieval, each zero-shot set). The towers f and g read pixels and tokens, not features."""
    plan = features.Plan()
    for images in _image_sets(cfg, bench):
        plan.add(features.image(cfg.third, images, dtype=cfg.store.dtype, shard_rows=cfg.store.shard_rows))
    return plan


# --------------------------------------------------------------------------------------------
# The towers' inputs, resident: pixels (uint8), tokens and the cached p(I)
# --------------------------------------------------------------------------------------------
@dataclass
class Inputs:
    """What the runs train and test on: one dict of tensors per set (``pixels``, ``third`` and, for
    pairs, ``input_ids`` / ``attention_mask``), which ``lib.core.train.fit`` slices into batches."""

    train: dict[str, torch.Tensor]
    val: dict[str, torch.Tensor]
    retrieval: dict[str, torch.Tensor]
    test: dict[str, dict[str, torch.Tensor]]
    tokenizer: object
    train_names: tuple[str, ...]
    family_val: dict[str, torch.Tensor] | None = None  # the validation concept families, when ``val`` is held out

    @property
    def third_dim(self) -> int:
        return int(self.train["third"].shape[1])

    @property
    def vocab_size(self) -> int:
        return int(self.tokenizer.vocab_size)


HOLDOUT_SEED = 20240917  # one permutation for every training seed: the held-out pairs never change


def held_out_rows(total: int, fraction: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(training rows, held-out validation rows): a seeded ``fraction`` of ``total`` training pairs held out.

    Why (``medium``): towers trained from scratch learn the words of their training captions; on validation
    concept *families* (words they never saw) the validation loss rises from the first evaluation for every
    method, so early stopping there keeps an untrained model. Held-out pairs of the training distribution give a
    loss that falls while the towers learn. See notebooks/three_towers.py, section "Training"."""
    held = max(1, round(fraction * total))
    order = torch.randperm(total, generator=torch.Generator().manual_seed(HOLDOUT_SEED))
    return order[held:].sort().values, order[:held].sort().values


def inputs(cfg: Config, bench: Benchmark, found: features.Features, tokenizer=None) -> Inputs:
    """Pixels at the image tower's resolution, tokenised captions and p(I) from the materialised plan. The
    tokenizer is restricted to the word pieces of the chapter's captions and prompts
    (:class:`lib.methods.three_towers.CompactVocabulary`)."""
    pairs = [*training_pairs(cfg, bench), bench.val, bench.retrieval]
    texts = [c for p in pairs for c in p.captions] + [t for s in bench.zero_shot for t in prompt_texts(s)]
    tokenizer = tt.CompactVocabulary(tokenizer or tt.load_tokenizer(cfg.text_tower.tokenizer), texts)
    cache: dict[str, dict] = {}

    def tensors(images, captions: bool) -> dict[str, torch.Tensor]:
        key = f"{images.name}:{captions}"
        if key not in cache:
            out = {"pixels": pixel_cache.cached_pixels(images, cfg.image_tower.image_size, tt.pixels),
                   "third": found.tensor(f"image:{cfg.third.name}:{images.name}")}
            if captions:
                out.update(tt.tokenize(tokenizer, images.captions, cfg.text_tower.context))
            cache[key] = out
        return cache[key]

    parts = [tensors(p, True) for p in training_pairs(cfg, bench)]
    train = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
    if cfg.val_holdout:
        keep, held = held_out_rows(len(train["pixels"]), cfg.val_holdout)
        train, val = {k: v[keep] for k, v in train.items()}, {k: v[held] for k, v in train.items()}
    else:
        val = tensors(bench.val, True)
    return Inputs(train=train, val=val, retrieval=tensors(bench.retrieval, True),
                  family_val=tensors(bench.val, True) if cfg.val_holdout else None,
                  test={s.name: {k: v for k, v in tensors(s, False).items()} for s in bench.zero_shot},
                  tokenizer=tokenizer, train_names=tuple(p.name for p in training_pairs(cfg, bench)))


# --------------------------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------------------------
def build(cfg: Config, data: Inputs, variant: str, **options) -> ThreeTowers:
    """A fresh method from the config; ``options``: ``weight``, ``terms``, ``headless``."""
    return ThreeTowers(variant, third_dim=data.third_dim, vocab_size=data.vocab_size, image_tower=cfg.image_tower,
                       text_tower=cfg.text_tower, embed_dim=cfg.embed_dim, loss=cfg.loss, augment=cfg.augment,
                       **options)


def is_ceiling(name: str) -> bool:  # the seen-concept ceiling: zero-shot among concepts the towers trained on
    return name.startswith("emoji-seen") or name.startswith("medium-concepts-train")


def test_sets(bench: Benchmark) -> list:
    """The zero-shot sets that test transfer (every set but the seen-concept ceiling)."""
    return [s for s in bench.zero_shot if not is_ceiling(s.name)]


@torch.no_grad()
def evaluate(cfg: Config, bench: Benchmark, data: Inputs, method: ThreeTowers) -> dict[str, float]:
    """Zero-shot on every labelled set, retrieval on the unseen pairs, the headline set split by whether
    ImageNet-1k covers its concepts, and two summaries: the mean R@1 of both retrieval directions and the
    mean top-1 over the test sets (the seen-concept ceiling left out)."""
    row: dict[str, float] = {}
    for labelled in bench.zero_shot:
        found = tt.zero_shot(method, data.test[labelled.name], labelled, data.tokenizer, cfg.text_tower.context)
        row.update({f"{labelled.name}/{k}": v for k, v in found.items()})
    row.update(group_accuracy(cfg, data, method, bench.zero_shot[0]))
    found = tt.retrieval(method, data.retrieval, data.retrieval)
    row.update({f"retrieval/{k}": v for k, v in found.items()})
    row["retrieval/mean_recall@1"] = sum(row[k] for k in RETRIEVAL_R1) / 2
    tests = test_sets(bench)
    row["zero_shot_average"] = sum(row[f"{s.name}/acc1"] for s in tests) / len(tests)
    return row


def fixed_budget(cfg: Config) -> bool:
    """True when the runs validate once, at the end, and keep their final weights (``small``, the paper)."""
    return cfg.train.eval_every >= cfg.train.steps


def early_stopping_settings(cfg: Config) -> TrainSettings:
    """The protocol the chapter's runs do *not* use, for the diagnosis: under a fixed budget, validation every
    ``diagnosis_eval_every`` steps with the lowest validation loss kept; under early stopping on held-out pairs
    (``medium``), the same rule on the validation concept families (:func:`early_stopping_diagnosis`)."""
    if fixed_budget(cfg):
        return dataclasses.replace(cfg.train, eval_every=cfg.diagnosis_eval_every)
    return cfg.train


def train_and_evaluate(cfg: Config, bench: Benchmark, data: Inputs, variant: str, seed: int = 0,
                       label: str | None = None, settings: TrainSettings | None = None,
                       train_pairs: int | None = None, val: dict | None = None,
                       **options) -> tuple[dict, object, ThreeTowers]:
    """Train one method for the config's budget, then evaluate it.

    With ``eval_every = steps`` (``small``) the validation loss is measured once, at the end, and the final
    weights are kept; with a shorter ``eval_every`` (``medium``) the lowest validation loss is kept.
    ``settings`` (e.g. :func:`early_stopping_settings`) replaces ``cfg.train``; ``train_pairs`` trains on the
    first pairs of a fixed permutation (:func:`lib.core.curves.nested_subset`); ``val`` replaces the validation
    pairs (the diagnosis: :attr:`Inputs.family_val`). Returns the run's row (for
    :class:`lib.core.results.Runs`), the :class:`~lib.core.train.TrainResult` and the method.
    """
    total = len(data.train["pixels"])
    subset = curves.nested_subset(total, train_pairs)
    train = data.train if subset is None else {k: v[subset] for k, v in data.train.items()}
    seed_everything(seed)
    method = build(cfg, data, variant, **options)
    result = fit(method, train, data.val if val is None else val, settings or cfg.train, seed=seed,
                 device=cfg.device, progress=False)
    method.to("cpu")
    evaluations = [r["step"] for r in result.history if r["val_loss"] is not None]
    row = {"method": label or variant, "variant": variant, "seed": seed, "train_pairs": len(train["pixels"]),
           "best_step": result.best_step,
           "first_eval": evaluations[0] if evaluations else None, "steps_run": result.steps_run,
           "val_loss": result.best_val_loss, "temperature": round(method.criterion.temperature, 4),
           "train_s": round(result.seconds, 1)}
    row.update(evaluate(cfg, bench, data, method))
    return row, result, method


def diagnosis_protocols(cfg: Config) -> tuple[str, str]:  # (the chapter's protocol, the diagnosis's)
    return ("fixed budget", "validation concepts") if fixed_budget(cfg) else ("held-out pairs", "validation families")


def early_stopping_diagnosis(cfg: Config, bench: Benchmark, data: Inputs, runs: Runs, seed: int,
                             histories: dict | None = None):
    """Each main method trained again under the other protocol (:func:`early_stopping_settings`; ``medium``: on
    the validation concept families, :attr:`Inputs.family_val`), beside the chapter's run of the same seed.
    Returns (table: step kept, unseen top-1 and R@1 under each protocol; validation curves per protocol,
    ``{protocol: {method: history}}``, from the diagnosis runs and ``histories``, the main runs'
    ``history_frame()``, wherever a protocol validated more than once)."""
    import pandas as pd

    ours, other = diagnosis_protocols(cfg)
    rows, val_curves = [], {ours: {}, other: {}}
    for variant in tt.VARIANTS:
        row, result, _ = train_and_evaluate(cfg, bench, data, variant, seed, settings=early_stopping_settings(cfg),
                                            val=data.family_val)
        main = runs.where(method=variant, seed=seed).rows[0]
        for label, history in ((ours, (histories or {}).get(variant)), (other, result.history_frame())):
            if history is not None and history["val_loss"].notna().sum() > 1:
                val_curves[label][variant] = history.dropna(subset=["val_loss"])
        table_row = {"method": variant, "first evaluation": row["first_eval"]}
        for label, r in ((ours, main), (other, row)):
            table_row.update({f"step kept, {label}": r["best_step"],
                              f"unseen top-1 %, {label}": f"{100 * r[f'{bench.zero_shot[0].name}/acc1']:.2f}",
                              f"R@1 %, {label}": f"{100 * r['retrieval/mean_recall@1']:.2f}"})
        rows.append(table_row)
    return pd.DataFrame(rows).set_index("method"), {k: v for k, v in val_curves.items() if v}


def stuck_runs(cfg: Config, runs: Runs) -> list[dict]:
    """Runs that kept their first evaluation although later ones followed: a model that never improved on what
    it knew after ``eval_every`` steps has not trained, and its numbers are not a method's. Empty under a fixed
    budget (one evaluation, at the end: ``small``)."""
    return [r for r in runs if r["first_eval"] is not None and r["first_eval"] < r["steps_run"] and stuck(r)]


CURVE_METRIC = "retrieval/mean_recall@1"  # the curve's metric: the paper's retrieval claims (Table 2)


def data_size_curve(cfg: Config, bench: Benchmark, data: Inputs, runs: Runs) -> Runs:
    """Scratch, LiT and 3T at each share of the training pairs in ``cfg.curve_fractions``, every seed: does 3T's
    lead (or lag) open, close or flip as the data grow? Rows of ``runs`` at the whole set are reused. See
    notebooks/three_towers.py, section "More data"."""
    curve, total = Runs(), len(data.train["pixels"])
    for size in curves.sizes(total, cfg.curve_fractions):  # early stopping: validated once an epoch of the subset
        settings = None if fixed_budget(cfg) else curves.subset_settings(cfg.train, size)
        for variant in tt.VARIANTS:
            for seed in cfg.seeds:
                done = [r for r in runs.where(method=variant, seed=seed) if r["train_pairs"] == size]
                curve.add(done[0] if done else train_and_evaluate(cfg, bench, data, variant, seed, train_pairs=size,
                                                                  settings=settings)[0])
    return curve


def ablations(cfg: Config) -> list[tuple[str, dict]]:
    """The paper's 3T ablations as (label, options): the loss weights, leave-one-out, headless."""
    out = [(f"3t, w = {w:g}", {"weight": w}) for w in cfg.weights]
    out += [(f"3t without L_{dropped}", {"terms": [t for t in tt.TERMS if t != dropped]}) for dropped in tt.TERMS]
    return out + [("3t headless", {"headless": True})]


def alpha_sweep(cfg: Config, bench: Benchmark, data: Inputs, headless: ThreeTowers, seed: int) -> list[dict]:
    """The headless model evaluated with image embedding ``alpha * h + (1 - alpha) * f`` for each alpha."""
    rows = []
    for alpha in cfg.alphas:
        headless.alpha = alpha
        rows.append({"alpha": alpha, "seed": seed, **evaluate(cfg, bench, data, headless)})
    headless.alpha = 0.0
    return rows


def shown_metrics(bench: Benchmark) -> dict[str, str]:
    """The metrics the chapter's tables show, with their labels (the full config has no emoji sets)."""
    labels = {"emoji-unseen-google": "unseen emoji", "emoji-unseen-twitter": "unseen emoji, other style",
              "fashion-mnist": "Fashion-MNIST", "emoji-seen-google": "seen emoji (ceiling)",
              "medium-concepts-unseen": "unseen concepts", "tuxpaint-photo-unseen": "Tux Paint photos (unseen)"}
    labels.update({s.name: "seen concepts (ceiling)" for s in bench.zero_shot
                   if s.name.startswith("medium-concepts-train")})
    out = {f"{s.name}/acc1": f"{labels.get(s.name, s.name)} top-1" for s in bench.zero_shot}
    out.update({"retrieval/image_retrieval_recall@1": "text→image R@1",
                "retrieval/text_retrieval_recall@1": "image→text R@1"})
    return out


def chance(bench: Benchmark) -> dict[str, float]:
    """Chance level of each zero-shot set (one over its classes) and of retrieval (one over its images)."""
    return {**{s.name: 1 / len(s.classnames) for s in bench.zero_shot}, "retrieval": 1 / len(bench.retrieval)}


def chance_checks(bench: Benchmark, runs: Runs) -> list[dict]:
    """Each main method on each test set against chance, by :data:`lib.core.results.RULE`."""
    levels, out = chance(bench), []
    for variant in tt.VARIANTS:
        for s in test_sets(bench):
            comparison = versus(runs.values(f"{s.name}/acc1", method=variant), levels[s.name])
            out.append({"method": variant, "set": s.name, "top-1 %": comparison.a.text(), "chance %":
                        f"{100 * levels[s.name]:.2f}",
                        "above chance": {"a": "yes", "b": "below", "tie": "no", "unclear": "no",
                                         "unknown": "too few seeds"}[comparison.outcome]})
    return out


# --------------------------------------------------------------------------------------------
# Claims and findings (verdicts by lib.core.results.RULE)
# --------------------------------------------------------------------------------------------
TABLE2 = "§4.1, Table 2 (L scale, IN-21k third tower, unfiltered WebLI; top-1 recall)"
TABLE3 = "§4.2, Table 3 (IN-21k third tower, L scale, unfiltered WebLI)"


def claims(cfg: Config, bench: Benchmark, runs: Runs, curve: Runs | None = None) -> list[Claim]:
    """The paper's claims that the chapter's runs can test, each with its verdict (``lib.core.results.RULE``);
    with the data-size ``curve``, each retrieval claim that is not reproduced says how its gap moves with data."""
    retrieval, headline = "retrieval/mean_recall@1", bench.zero_shot[0].name
    out = [
        Claim("3t_beats_scratch_retrieval", "3T beats the from-scratch baseline on retrieval (mean R@1 of both "
              "directions)", TABLE2, runs.compare(retrieval, {"method": "3t"}, {"method": "scratch"}),
              ("3T", "from scratch"), paper_value="COCO image→text 54.4 vs 51.0, text→image 37.7 vs 34.2; "
              "Flickr 80.0 vs 75.6, 60.9 vs 57.1", paper_pair=(54.4, 51.0)),
        Claim("3t_beats_scratch_average", "3T beats the from-scratch baseline on average classification accuracy "
              f"(zero-shot top-1 averaged over {', '.join(s.name for s in test_sets(bench))})", TABLE3,
              runs.compare("zero_shot_average", {"method": "3t"}, {"method": "scratch"}), ("3T", "from scratch"),
              paper_value="average 71.4 vs 68.4", paper_pair=(71.4, 68.4)),
        Claim("3t_beats_lit_retrieval", "3T beats LiT on retrieval (mean R@1 of both directions)", TABLE2,
              runs.compare(retrieval, {"method": "3t"}, {"method": "lit"}), ("3T", "LiT"),
              paper_value="COCO image→text 54.4 vs 46.1, text→image 37.7 vs 27.8", paper_pair=(54.4, 46.1)),
    ]
    if f"{headline}/acc1_covered" in (runs.rows[0] if len(runs) else {}):
        out += [
            Claim("lit_beats_3t_where_labels_cover", "LiT is strong where the pretrained model's labels cover the "
                  "task: LiT beats 3T on unseen concepts of groups ImageNet-1k names (animals, food, places, objects)",
                  TABLE3 + "; 10-shot linear probes, here zero-shot",
                  runs.compare(f"{headline}/acc1_covered", {"method": "lit"}, {"method": "3t"}), ("LiT", "3T"),
                  paper_value="IN-1k 10-shot LiT 79.0 vs 3T 68.0; Birds 83.4 vs 65.0", paper_pair=(79.0, 68.0)),
            Claim("3t_beats_lit_where_labels_do_not_cover", "LiT is weak where they do not: 3T beats LiT on unseen "
                  "concepts of groups ImageNet-1k has no class for (flags, symbols, faces, people)",
                  TABLE3 + "; 10-shot linear probes, here zero-shot",
                  runs.compare(f"{headline}/acc1_not_covered", {"method": "3t"}, {"method": "lit"}), ("3T", "LiT"),
                  paper_value="Cars 10-shot 3T 84.9, from scratch 81.5, LiT 41.9 (IN-21k has no car brand)",
                  paper_pair=(84.9, 41.9)),
        ]
    if curve is not None and len(curve):
        for claim, other, name in ((out[0], "scratch", "from scratch"), (out[2], "lit", "LiT")):
            if claim.verdict != "reproduced":
                claim.diagnosis = curves.trend(curve, CURVE_METRIC, {"method": "3t"}, {"method": other},
                                               ("3T", name)) or None
    for claim in out[3:]:
        if claim.verdict == "not reproduced":
            claim.diagnosis = group_diagnosis(runs, curve, headline)
    return out


def findings(cfg: Config, bench: Benchmark, runs: Runs, found_claims: list[Claim]) -> dict[str, float | bool | None]:
    """The chapter's headline numbers (means over seeds, fractions) for metrics.json and the results page, and
    each claim's outcome as ``<claim id>``: True when the paper's side is clearly ahead by the one rule."""
    headline, levels = bench.zero_shot[0].name, chance(bench)
    out: dict[str, float | bool | None] = {}
    for variant in tt.VARIANTS:
        where = {"method": variant}
        out[f"{variant}/unseen_acc1"] = runs.summary(f"{headline}/acc1", **where).mean
        out[f"{variant}/retrieval_r1"] = runs.summary("retrieval/mean_recall@1", **where).mean
        out[f"{variant}/zero_shot_average"] = runs.summary("zero_shot_average", **where).mean
        for s in test_sets(bench)[1:]:
            out[f"{variant}/{s.name}/acc1"] = runs.summary(f"{s.name}/acc1", **where).mean
        for part in ("covered", "not_covered"):
            out[f"{variant}/unseen_acc1_{part}"] = runs.summary(f"{headline}/acc1_{part}", **where).mean
    out["chance_unseen"], out["chance_retrieval"] = levels[headline], levels["retrieval"]
    for claim in found_claims:
        out[claim.id] = claim.comparison.outcome == claim.expected
    return out
