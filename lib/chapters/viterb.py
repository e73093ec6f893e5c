"""The ViTeRB chapter: which language model's features align best with a frozen vision model, on *unseen* classes.

The benchmark of Ruthardt et al. (*Do better language models have crisper vision?*, §4-5): each dataset's
classes are split into *seen* and *unseen*; a ShareLock head (:class:`lib.methods.sharelock.ShareLock`) is
trained on (image feature, class-text feature) pairs of the seen classes only and scored by the mean
per-class accuracy on images of the unseen classes, whose texts it has never seen. A class is represented
by *all* its texts (80 name templates, several descriptions, the sentences of an article): in training every
text is a target, at test time a class's score is the mean of its texts' scores (paper, A.2).

This module holds what the notebook runs and nothing it shows: the schema of ``notebooks/configs/viterb.yaml``,
the benchmarks (:mod:`lib.data.class_splits`, :mod:`lib.data.full_sets`) and class texts
(:mod:`lib.data.class_texts`), the feature plan (shared with ``python -m lib.precompute --chapter viterb``),
the runs, a decoder's perplexity on held-out text, the paper's Table 1 and the claims.
See notebooks/viterb.py, sections "Seen and unseen classes, as data", "Text per class" and
"Train on seen classes, score on unseen ones".
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, Sequence

import torch

from lib.core import config as configs
from lib.core import curves, features
from lib.core.config import HeadConfig, LossConfig, StoreConfig, TextModelConfig, TrainSettings, VisionModelConfig
from lib.core.evaluate import mean_per_class_recall
from lib.core.capability import capability
from lib.core.ranks import rank_comparison, rank_correlation
from lib.core.results import Claim, Runs, stuck, versus
from lib.core.train import fit, seed_everything
from lib.data import class_splits, class_texts, full_sets
from lib.data.class_splits import ClassBenchmark, FashionImages
from lib.data.class_texts import ClassTexts
from lib.methods.class_text_pairs import ClassTextPairs
from lib.methods.sharelock import ShareLock

__all__ = ["NAME", "Config", "load_config", "benchmark", "RunSpec", "run_specs", "texts_of", "feature_plan",
           "ChapterFeatures", "ClassTextPairs", "unseen_score", "train_and_score", "capability", "PAPER_TABLE_1",
           "paper_table", "score_table", "outcome", "claims", "findings", "label", "family", "short", "stuck_runs",
           "rank_correlation", "same_as_name"]

NAME = "viterb"
TextKind = Literal["name", "description", "encyclopedia", "reference"]


@dataclass(frozen=True)
class Config:
    """``notebooks/configs/viterb.yaml``, validated field by field on load (``lib.core.config``).

    ``score_datasets`` are averaged into the ViTeRB score (the paper: AWA2, CUB, FGVC-Aircraft, ImageNet+);
    ``check_datasets`` run the same grid but are reported on their own. ``encoders`` names the text models
    that are encoders (Table 1's "Enc." rows); the others are decoders. ``pooling_ablation``: text models
    run again with another pooling (reported apart from the main table). ``bare_name``: also run the class
    name without templates. ``curve_fractions``: shares of the first score dataset's training images at which
    every text model is trained again on the class names (the data-size curve, :func:`data_size_curve`; empty:
    none).
    """

    score_datasets: tuple[str, ...]
    text_kinds: tuple[TextKind, ...]
    vision: tuple[VisionModelConfig, ...]  # the first is the chapter's main image model
    text: tuple[TextModelConfig, ...]  # the first is the main model (the shuffled-text control)
    encoders: tuple[str, ...] = ()
    check_datasets: tuple[str, ...] = ()
    name_templates: Literal["imagenet80", "imagenet7", "bare"] = "imagenet80"
    bare_name: bool = False
    pooling_ablation: tuple[TextModelConfig, ...] = ()
    head: HeadConfig = field(default_factory=HeadConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    train: TrainSettings = field(default_factory=TrainSettings)
    store: StoreConfig = field(default_factory=StoreConfig)
    fashion: FashionImages = field(default_factory=FashionImages)
    vision_check_seeds: int = 1  # the other vision models run only the first N seeds ...
    vision_check_kinds: tuple[TextKind, ...] = ("name", "reference")  # ... and only these text types
    perplexity_texts: int = 200  # held-out WordNet glosses for each decoder's own perplexity
    curve_fractions: tuple[float, ...] = ()
    device: str = "cpu"
    seeds: tuple[int, ...] = (0,)

    @property
    def datasets(self) -> tuple[str, ...]:
        return self.score_datasets + self.check_datasets


def load_config(name: str = "small", overrides: dict | None = None) -> Config:
    """``small`` / ``medium`` / ``full`` of ``notebooks/configs/viterb.yaml`` (or a YAML path), validated."""
    cfg = configs.load(NAME, name, Config, overrides)
    names = {t.name for t in cfg.text + cfg.pooling_ablation}
    unknown = [e for e in cfg.encoders if e not in names]
    if unknown:
        raise configs.ConfigError(f"{name}.encoders: {unknown[0]!r} is not a text model of this config")
    return cfg


def short(name: str) -> str:
    """A model's display name: the last part of its id."""
    return name.split("/")[-1]


def label(cfg: Config, text: TextModelConfig) -> str:
    """A text model's row label: its short name, with the pooling for a pooling-ablation model."""
    return short(text.name) if text in cfg.text else f"{short(text.name)} ({text.pooling})"


def family(cfg: Config, text: TextModelConfig) -> str:
    return "encoder" if text.name in cfg.encoders else "decoder"


def benchmark(cfg: Config) -> dict[str, ClassBenchmark]:
    """Every dataset of the config (small: emoji and Fashion-MNIST; medium: the medium corpus's concepts and
    emoji; full: the paper's four), leak-checked."""
    out = {}
    for dataset in cfg.datasets:
        if dataset == "medium":
            bench = class_splits.medium_benchmark()
        elif dataset == "emoji":
            bench = class_splits.emoji_benchmark()
        elif dataset == "fashion-mnist":
            bench = class_splits.fashion_benchmark(cfg.fashion)
        else:
            bench = full_sets.load_full(dataset)
        bench.check_no_leak()
        out[dataset] = bench
    return out


# ------------------------------------------------------------------------------------------- the runs
@dataclass(frozen=True)
class RunSpec:
    """One head to train: which study it belongs to, on which dataset, text model, text kind, vision model, seed."""

    study: str  # main, pooling, bare name, control, vision check
    dataset: str
    text: TextModelConfig
    kind: str
    vision: VisionModelConfig
    seed: int
    shuffle: bool = False  # the control: class texts permuted among the seen classes
    train_images: int | None = None  # the data-size curve: the first N of a fixed permutation of the training images


def run_specs(cfg: Config, quick: bool = False) -> list[RunSpec]:
    """Every head the chapter trains. ``quick``: the main grid on the first seed only (a first look)."""
    seeds, main = (cfg.seeds[:1] if quick else cfg.seeds), cfg.vision[0]
    out = []
    for seed in seeds:
        for d in cfg.datasets:
            out += [RunSpec("main", d, t, k, main, seed) for t in cfg.text for k in cfg.text_kinds]
            if quick:
                continue
            if d in cfg.score_datasets:  # the two ablations are read on the score only
                out += [RunSpec("pooling", d, t, k, main, seed) for t in cfg.pooling_ablation for k in cfg.text_kinds]
                out += [RunSpec("bare name", d, t, "bare-name", main, seed) for t in cfg.text if cfg.bare_name]
            out.append(RunSpec("control", d, cfg.text[0], "name", main, seed, shuffle=True))
    for vision in [] if quick else cfg.vision[1:]:
        out += [RunSpec("vision check", d, t, k, vision, seed) for seed in cfg.seeds[:cfg.vision_check_seeds]
                for d in cfg.score_datasets for t in cfg.text for k in cfg.vision_check_kinds]
    return out


def texts_of(cfg: Config, benches: dict[str, ClassBenchmark]) -> dict[tuple[str, str], ClassTexts]:
    """(dataset, kind) -> the class texts of every kind any run reads."""
    kinds = {(s.dataset, s.kind) for s in run_specs(cfg)}
    return {(d, k): class_texts.class_texts(benches[d], k, templates=cfg.name_templates)
            for d in cfg.datasets for k in (*class_texts.TEXT_KINDS, "bare-name") if (d, k) in kinds}


def _text_name(text: TextModelConfig, dataset: str, kind: str) -> str:
    return f"text:{text.name}:{text.pooling}:{dataset}/{kind}"


def feature_plan(cfg: Config, benches: dict[str, ClassBenchmark]) -> features.Plan:
    """Every feature the notebook reads: each vision model of a run on every image source of its dataset,
    and each text model of a run on every text of its dataset and kind (one entry per model, dataset, kind)."""
    plan, store = features.Plan(), dict(dtype=cfg.store.dtype, shard_rows=cfg.store.shard_rows)
    texts = texts_of(cfg, benches)
    specs = run_specs(cfg)
    for vision in dict.fromkeys(s.vision for s in specs):
        for dataset in dict.fromkeys(s.dataset for s in specs if s.vision == vision):
            for source in benches[dataset].image_sources:
                plan.add(features.image(vision, source, **store))
    for text, dataset, kind in dict.fromkeys((s.text, s.dataset, s.kind) for s in specs):
        found = texts[(dataset, kind)]
        plan.add(features.text(text, found.texts, source=found.source, name=_text_name(text, dataset, kind),
                               ids=found.ids, **store))
    return plan


class ChapterFeatures:
    """The materialised plan, read by role: ``image(vision, bench)`` one row per benchmark image,
    ``text(model, dataset, kind)`` one row per class text (owners in ``texts[(dataset, kind)].owner``)."""

    def __init__(self, found: features.Features, benches: dict[str, ClassBenchmark],
                 texts: dict[tuple[str, str], ClassTexts]) -> None:
        self.found, self.benches, self.texts = found, benches, texts
        self._cache: dict[str, torch.Tensor] = {}

    def _tensor(self, name: str) -> torch.Tensor:
        if name not in self._cache:
            self._cache[name] = self.found.tensor(name)
        return self._cache[name]

    def image(self, vision: VisionModelConfig, bench: ClassBenchmark) -> torch.Tensor:
        key = f"image:{vision.name}:{bench.name}"
        if key not in self._cache:
            parts = [self._tensor(f"image:{vision.name}:{s.name}") for s in bench.image_sources]
            self._cache[key] = torch.stack([parts[s][row] for s, row in bench.image_rows])
        return self._cache[key]

    def text(self, model: TextModelConfig, dataset: str, kind: str) -> torch.Tensor:
        return self._tensor(_text_name(model, dataset, kind))


@torch.no_grad()
def unseen_score(method, image_features: torch.Tensor, text_features: torch.Tensor, owner: Sequence[int],
                 bench: ClassBenchmark) -> float:
    """ViTeRB's score: mean per-class accuracy of the test images, classified among the unseen classes only.

    A class's score for an image is the **mean over its texts** of the image-text cosine (the paper
    averages class scores over all class-specific texts). The mean of dot products is the dot product with
    the mean text embedding (unnormalised), which is computed instead: no (images x texts) matrix is built.
    """
    method.eval()
    device = next(method.parameters()).device
    unseen, test = bench.classes("unseen"), bench.images("test")
    position = {c: i for i, c in enumerate(unseen)}
    keep = [t for t, c in enumerate(owner) if c in position]
    classes = torch.tensor([position[owner[t]] for t in keep], device=device)
    embedded = method.embed_text(text_features[keep].to(device)).float()
    means = torch.zeros(len(unseen), embedded.shape[1], device=device).index_add_(0, classes, embedded)
    means /= torch.bincount(classes, minlength=len(unseen)).clamp_min(1)[:, None]
    logits = method.embed_image(image_features[test].to(device)) @ means.T
    labels = torch.tensor([position[bench.image_labels[i]] for i in test])
    return mean_per_class_recall(logits.cpu(), labels)


def train_and_score(cfg: Config, bench: ClassBenchmark, feats: ChapterFeatures, spec: RunSpec) -> dict:
    """Train a ShareLock head on the seen classes' (image, class text) pairs, early-stop on the val images,
    score on the unseen classes. Returns the run's row for :class:`lib.core.results.Runs`."""
    texts = feats.texts[(spec.dataset, spec.kind)]
    text_features = feats.text(spec.text, spec.dataset, spec.kind)
    images = feats.image(spec.vision, bench)
    n_classes = len(bench.class_keys)
    seed_everything(spec.seed)
    method = ShareLock(text_features.shape[1], images.shape[1], cfg.head, cfg.loss, kind="mlp")
    model = ClassTextPairs(method, text_features, texts.owner, n_classes, spec.seed)
    source = torch.arange(n_classes)  # whose texts each class is trained with
    if spec.shuffle:
        seen = torch.tensor(bench.classes("seen"))
        source[seen] = seen[torch.randperm(len(seen), generator=torch.Generator().manual_seed(spec.seed))]
    labels = source[torch.tensor(bench.image_labels)]
    train_rows, val_rows = torch.tensor(bench.images("train")), torch.tensor(bench.images("val"))
    settings = cfg.train
    subset = curves.nested_subset(len(train_rows), spec.train_images)
    if subset is not None:  # a point of the data-size curve: validated once an epoch of the subset
        train_rows, settings = train_rows[subset], curves.subset_settings(cfg.train, len(subset))
    val_text = model.draw(labels[val_rows], torch.Generator().manual_seed(10_000 + spec.seed))
    result = fit(model, {"image": images[train_rows], "label": labels[train_rows]},
                 {"image": images[val_rows], "text": val_text}, settings, seed=spec.seed, device=cfg.device)
    role = "score" if spec.dataset in cfg.score_datasets else "check"
    return {"study": spec.study, "dataset": spec.dataset, "role": role, "model": label(cfg, spec.text),
            "family": family(cfg, spec.text), "pooling": spec.text.pooling, "kind": spec.kind,
            "vision": short(spec.vision.name), "seed": spec.seed, "texts_per_class": round(len(texts) / n_classes, 2),
            "score": unseen_score(method, images, text_features, texts.owner, bench),
            "chance": 1 / len(bench.classes("unseen")), "best_step": result.best_step, "steps_run": result.steps_run,
            "first_eval": min(settings.eval_every, settings.steps), "train_images": len(train_rows),
            "train_s": round(result.seconds, 2)}


def stuck_runs(cfg: Config, runs: Runs) -> list[dict]:
    """Runs whose best validation step is their first evaluation (``eval_every``): a head that never improved
    on what it knew after its first evaluation has not trained, and its score must not be reported as a
    language model's. The shuffled-text controls are left out (they are meant not to learn)."""
    return [r for r in runs if r["study"] != "control" and stuck(r, min(cfg.train.eval_every, cfg.train.steps))]


def same_as_name(found: ClassTexts, bench: ClassBenchmark) -> float:
    """Share of the classes whose every text is just the class name (a reference text that adds nothing)."""
    alone = [True] * len(bench.class_keys)
    for text, c in zip(found.texts, found.owner):
        alone[c] = alone[c] and text.strip().lower() == bench.class_names[c].strip().lower()
    return sum(alone) / len(alone)


# ------------------------------------------------------------------------------ the paper and the claims
# Table 1 of the paper (file 000, §5): ViTeRB score (%) per language model and text type. Caption: "Decoder-based
# language models outperform encoder-based architectures across all types of input data. Llama-3 8B is used for
# LLM generated Wikipedia articles and descriptions." The book's kinds map onto its columns in this order.
PAPER_COLUMNS = {"name": "Class Names", "description": "LLM Description", "encyclopedia": "LLM Wikip. Articles",
                 "reference": "Wikip. Articles"}
PAPER_TABLE_1 = {  # model: (type, class names, LLM description, LLM Wikipedia articles, Wikipedia articles)
    "BERT-Large": ("Enc.", 18.3, 15.9, 20.8, 22.9), "T5-XL": ("Enc.", 33.6, 37.8, 37.9, 40.7),
    "Flan-UL2": ("Enc.", 37.0, 43.4, 42.6, 41.9), "SentenceT5-XXL": ("Enc.", 39.5, 44.7, 44.3, 41.6),
    "NV-Embed": ("Dec.", 40.5, 42.9, 47.5, 45.9), "Gemma 7B": ("Dec.", 39.7, 33.7, 45.1, 43.4),
    "Llama-3 8B": ("Dec.", 40.2, 43.8, 44.9, 44.3),
}


def paper_table():
    """Table 1 as printed (a DataFrame: one row per language model, one column per text type)."""
    import pandas as pd

    return pd.DataFrame([{"language model": m, "type": row[0], **dict(zip(PAPER_COLUMNS.values(), row[1:]))}
                         for m, row in PAPER_TABLE_1.items()]).set_index("language model")


def _paper_mean(types: Sequence[str] = ("Enc.", "Dec."), kinds: Sequence[str] = tuple(PAPER_COLUMNS)) -> float:
    cells = [row[1 + list(PAPER_COLUMNS).index(k)] for row in PAPER_TABLE_1.values() if row[0] in types for k in kinds]
    return sum(cells) / len(cells)


def score_table(runs: Runs, cfg: Config, **where):
    """Models x text types, ``"mean ± sd"`` in %, plus the mean over text types (one row per model)."""
    import pandas as pd

    selected = runs.where(**where)
    models = list(dict.fromkeys(r["model"] for r in selected))
    kinds = list(dict.fromkeys(r["kind"] for r in selected))
    rows = [{"language model": m, **{k: selected.summary("score", model=m, kind=k).text() for k in kinds},
             "all types": selected.summary("score", model=m).text()} for m in models]
    return pd.DataFrame(rows).set_index("language model")


def outcome(comparison, name_a: str, name_b: str) -> str:
    """The rule's outcome of a :class:`lib.core.results.Comparison` in words (for a table cell)."""
    return {"a": f"{name_a} clearly ahead", "b": f"{name_b} clearly ahead", "tie": "no clear difference",
            "unclear": "no clear difference", "unknown": "too few seeds to judge"}[comparison.outcome]


def _main(**extra) -> dict:
    return {"study": "main", "role": "score", **extra}


def _capability_claim(cfg: Config, runs: Runs, perplexity: dict[str, float | None]) -> Claim | None:
    ranked = sorted((p, m) for m, p in perplexity.items() if p is not None)  # most capable (lowest) first
    if len(ranked) < 2:
        return None
    models = [m for _, m in ranked]
    if len(models) == 2:
        comparison = runs.compare("score", _main(model=models[0]), _main(model=models[1]))
        names = (f"{models[0]} (perplexity {ranked[0][0]:.0f})", f"{models[1]} (perplexity {ranked[1][0]:.0f})")
        note = ("two decoders: a rank correlation of two points is +1 or -1 by construction, so the evidence is "
                "this one pair, by the rule; it says nothing about a trend")
    else:  # Spearman's rho per seed between capability (minus perplexity) and score, against no correlation
        found = rank_correlation(runs, {m: -p for p, m in ranked}, **_main())
        comparison = rank_comparison(found["per_seed"], found["measure"], found["score"])
        names = (f"Spearman rho over {len(models)} decoders", "no correlation")
        note = (f"{len(models)} decoders, so the permutation test has {math.factorial(len(models))} orderings; "
                "perplexity " + ", ".join(f"{m} {p:.1f}" for p, m in ranked))
    return Claim("capability_predicts_alignment", "more capable language models align better with vision (lower "
                 "perplexity on held-out text here; MMLU in the paper)", "Figure 1; §5",
                 comparison, names, paper_value="positive correlation with MMLU (R² 0.101 excl. Phi-3, as printed)",
                 diagnosis=note, scale=1.0 if len(models) > 2 else 100.0, unit="" if len(models) > 2 else " %")


def _size_claim(runs: Runs, params: dict[str, float]) -> Claim | None:
    """The book's own question: within the decoders, do larger models align better? (The paper correlates with
    MMLU only, Figure 1; pooling encoders with decoders here would mix this with the decoder-vs-encoder claim.)"""
    decoders = {r["model"] for r in runs.where(family="decoder")}
    params = {m: v for m, v in params.items() if m in decoders}
    if len(params) < 3:
        return None
    found = rank_correlation(runs, params, **_main(family="decoder"))
    return Claim("size_predicts_alignment", "the book's question: within the decoders, larger language models "
                 f"align better with vision (parameter count, {len(found['models'])} decoders)",
                 "the book's own question (the paper correlates with MMLU: Figure 1)",
                 rank_comparison(found["per_seed"], found["measure"], found["score"]),
                 (f"Spearman rho over {len(found['models'])} decoders", "no correlation"), paper_value=None,
                 diagnosis="score by size: " + ", ".join(
                     f"{m} ({params[m] / 1e6:.0f}M) {100 * v:.2f} %"
                     for m, v in sorted(zip(found["models"], found["score"]), key=lambda mv: params[mv[0]])),
                 scale=1.0, unit="", origin="book")


def _means(runs: Runs, key: str, **where) -> str:
    values = {v: runs.summary("score", **where, **{key: v}).mean
              for v in dict.fromkeys(r[key] for r in runs.where(**where))}
    return ", ".join(f"{v} {100 * m:.2f} %" for v, m in sorted(values.items(), key=lambda kv: -(kv[1] or 0)))


def _diagnose(claim: Claim, cfg: Config, runs: Runs, reference_alone: dict[str, float] | None,
              curve: Runs | None = None) -> Claim:
    """A measured diagnosis for a claim that did not reproduce (kept as is when it did, or has one)."""
    import dataclasses

    if claim.verdict == "reproduced" or claim.diagnosis:
        return claim
    if claim.id == "decoders_beat_encoders":
        text = f"per model (mean over types and seeds): {_means(runs, 'model', **_main())}"
        if runs.where(study="pooling", role="score").rows:
            text += f"; the encoders mean-pooled: {_means(runs, 'model', study='pooling', role='score')}"
        if curve is not None and len(curve):
            trend = curves.trend(curve, "score", {"family": "decoder"}, {"family": "encoder"}, ("decoders", "encoders"),
                                 size_key="train_images", context=f"class names on {cfg.score_datasets[0]}")
            text += f"; {trend}" if trend else ""
    elif claim.id.endswith("_beats_names"):
        kind = claim.id[: -len("_beats_names")]
        text = "per dataset, " + "; ".join(
            f"{d}: {kind} {100 * (runs.summary('score', **_main(kind=kind, dataset=d)).mean or 0):.2f} % vs names "
            f"{100 * (runs.summary('score', **_main(kind='name', dataset=d)).mean or 0):.2f} %"
            for d in cfg.score_datasets)
        if kind == "reference" and reference_alone:
            text += "; classes whose reference text is only their name: " + ", ".join(
                f"{d} {100 * share:.0f} %" for d, share in reference_alone.items())
    elif claim.id == "above_chance":
        text = "per dataset: " + _means(runs, "dataset", **_main())
    else:
        return claim
    return dataclasses.replace(claim, diagnosis=text)


def claims(cfg: Config, runs: Runs, perplexity: dict[str, float | None], params: dict[str, float] | None = None,
           reference_alone: dict[str, float] | None = None, curve: Runs | None = None) -> list[Claim]:
    """The paper's claims that the runs can test, each with its verdict (``lib.core.results.RULE``) and, for one
    that did not reproduce, a measured diagnosis. ``perplexity``: model label -> perplexity on held-out text
    (None for encoders); ``params``: model label -> parameter count (with three or more models: the size claim,
    Spearman's rho over every model); ``reference_alone``: dataset -> share of classes whose reference text is
    only the name; ``curve``: the data-size curve (:func:`data_size_curve`), for the decoder claim's diagnosis."""
    out = [Claim("decoders_beat_encoders", "decoder LLMs give better class representations than encoders "
                 "(ViTeRB score, mean over models and text types)", "Table 1; abstract",
                 runs.compare("score", _main(family="decoder"), _main(family="encoder")), ("decoders", "encoders"),
                 paper_value=f"decoders {_paper_mean(['Dec.']):.1f} vs encoders {_paper_mean(['Enc.']):.1f} "
                             "(mean of Table 1's cells)", paper_pair=(_paper_mean(['Dec.']), _paper_mean(['Enc.'])))]
    for kind in [k for k in ("description", "encyclopedia", "reference") if k in cfg.text_kinds]:
        out.append(Claim(f"{kind}_beats_names", f"richer class text ({kind}) beats class names (mean over models)",
                         "Table 1", runs.compare("score", _main(kind=kind), _main(kind="name")), (kind, "class names"),
                         paper_value=f"{PAPER_COLUMNS[kind]} {_paper_mean(kinds=[kind]):.1f} vs Class Names "
                                     f"{_paper_mean(kinds=['name']):.1f} (mean of the 7 models)",
                         paper_pair=(_paper_mean(kinds=[kind]), _paper_mean(kinds=["name"]))))
    capable = _capability_claim(cfg, runs, perplexity)
    if capable is not None:
        out.append(capable)
    sized = _size_claim(runs, params or {})
    if sized is not None:
        out.append(sized)
    chances = {r["dataset"]: r["chance"] for r in runs.where(**_main())}  # the score averages datasets: so does chance
    chance = sum(chances.values()) / max(len(chances), 1)
    out.append(Claim("above_chance", "a head trained on seen classes transfers to unseen classes through their "
                     "texts alone", "§4", versus(runs.values("score", **_main()), chance), ("ViTeRB score", "chance"),
                     paper_value="all 28 cells of Table 1 between 15.9 and 47.5"))
    return [_diagnose(c, cfg, runs, reference_alone, curve) for c in out]


def findings(cfg: Config, runs: Runs, perplexity: dict[str, float | None]) -> dict[str, float | None]:
    """The chapter's numbers (means over seeds, fractions) for metrics.json and the results page."""
    main_models = [label(cfg, t) for t in cfg.text]
    out: dict[str, float | None] = {"decoders": runs.summary("score", **_main(family="decoder")).mean,
                                    "encoders": runs.summary("score", **_main(family="encoder")).mean}
    for m in main_models + [label(cfg, t) for t in cfg.pooling_ablation]:
        study = "main" if m in main_models else "pooling"
        out[f"score/{m}"] = runs.summary("score", study=study, role="score", model=m).mean
        for kind in cfg.text_kinds:
            out[f"score/{m}/{kind}"] = runs.summary("score", study=study, role="score", model=m, kind=kind).mean
        if cfg.bare_name and m in main_models:
            out[f"score/{m}/bare-name"] = runs.summary("score", study="bare name", role="score", model=m).mean
    for kind in cfg.text_kinds:
        out[f"kind/{kind}"] = runs.summary("score", **_main(kind=kind)).mean
    for dataset in cfg.datasets:
        out[f"dataset/{dataset}"] = runs.summary("score", study="main", dataset=dataset).mean
        out[f"control/{dataset}"] = runs.summary("score", study="control", dataset=dataset).mean
        out[f"chance/{dataset}"] = next((r["chance"] for r in runs.where(dataset=dataset)), None)
    out.update({f"perplexity/{m}": p for m, p in perplexity.items()})
    return out
