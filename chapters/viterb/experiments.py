"""The ViTeRB chapter's experiments: seen/unseen class benchmarks, the class texts and their stored features,
and one run: a ShareLock head trained on the seen classes and scored on the unseen ones.
See notebooks/viterb.py, section "Train on seen classes, score on unseen ones".
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import torch

from chapters.viterb.config import Config
from corpora import caltech, class_splits, class_texts, full_sets, synonyms
from corpora.class_splits import ClassBenchmark
from corpora.class_texts import ClassTexts
from lib.core import curves, features, recipes
from lib.core.config import TextModelConfig, TrainSettings, VisionModelConfig
from lib.core.evaluate import mean_per_class_recall
from lib.core.results import Runs, stuck
from lib.core.train import fit, seed_everything
from lib.methods.class_text_pairs import ClassTextPairs
from lib.methods.sharelock import ShareLock


def short(name: str) -> str:
    """A model's display name: the last part of its id."""
    return name.split("/")[-1]


def label(cfg: Config, text: TextModelConfig) -> str:
    """A text model's row label: its short name, with the pooling for a pooling-ablation model."""
    return short(text.name) if text in cfg.text else f"{short(text.name)} ({text.pooling})"


def family(cfg: Config, text: TextModelConfig) -> str:
    return "encoder" if text.name in cfg.encoders else "decoder"


def benchmark(cfg: Config) -> dict[str, ClassBenchmark]:
    """Every dataset of the config (small: emoji and Fashion-MNIST; medium: the medium corpus's concepts, emoji
    and Caltech-101's photographs; full: the paper's four), leak-checked."""
    out = {}
    for dataset in cfg.datasets:
        if dataset == caltech.NAME:
            bench = caltech_benchmark(0)
        elif dataset == "medium":
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


def seed_benchmark(cfg: Config, benches: dict[str, ClassBenchmark], dataset: str, seed: int) -> ClassBenchmark:
    """The benchmark a run of ``seed`` reads: with ``split_per_seed`` (medium) the seed's own split of the classes,
    whole concept families (``corpora.medium.family``: "woman cook" and "cook" together) drawn to seen / val /
    unseen in the fixed split's proportions (``corpora.class_splits.resplit``); else the fixed split itself."""
    bench = benches[dataset]
    if not cfg.split_per_seed:
        return bench
    key = (dataset, seed, id(bench))
    if key not in _SEED_BENCHES:
        from corpora import medium

        _SEED_BENCHES[key] = (bench, caltech_benchmark(seed) if dataset == caltech.NAME
                              else class_splits.resplit(bench, seed, medium.family))
    return _SEED_BENCHES[key][1]


def caltech_benchmark(seed: int) -> ClassBenchmark:
    """Caltech-101's 8,677 photographs with seed ``seed``'s split of the 101 categories (51 seen / 50 unseen,
    ``corpora.caltech.split``; a tenth of each seen category's photos held out for early stopping), so each seed is
    tested on other categories' photos. The photos are :func:`corpora.caltech.labelled`'s, in its order and under
    its source, so the one store entry of their features serves this chapter, FLAME's and FDT's."""
    bench, photos = caltech.benchmark(seed), caltech.labelled()
    source = bench.image_sources[0]
    if source.ids != photos.ids:  # both list the manifest's photos in category order: a change to either breaks this
        raise ValueError("corpora.caltech.benchmark and labelled() list the photos in different orders")
    return dataclasses.replace(bench, image_sources=(dataclasses.replace(source, source=photos.source),))


_SEED_BENCHES: dict[tuple, tuple[ClassBenchmark, ClassBenchmark]] = {}  # keeps the base alive beside its id


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
    return {(d, k): caltech_texts(benches[d], k) if d == caltech.NAME else
            class_texts.class_texts(benches[d], k, templates=cfg.name_templates)
            for d in cfg.datasets for k in (*class_texts.TEXT_KINDS, "bare-name") if (d, k) in kinds}


def caltech_texts(bench: ClassBenchmark, kind: str) -> ClassTexts:
    """Caltech-101's texts of one kind (``corpora.caltech.class_texts``: "a photo of a {name}.", the name and its
    WordNet gloss, or the sentences of its Wikipedia lead paragraph with the name's sentence as the fallback), as
    the chapter's other datasets' :class:`corpora.class_texts.ClassTexts`. A photograph's class takes CLIP's
    photo template, not the drawings' bare name."""
    if kind not in caltech.KINDS:
        raise ValueError(f"Caltech-101 has no {kind!r} texts (its kinds: {caltech.KINDS}): leave it out of "
                         "text_kinds, or photo_datasets")
    per_class = caltech.class_texts(kind)
    extra = {"template": caltech.TEMPLATE} if kind == "name" else {
        "file_sha256": class_texts.file_sha256(class_texts.class_text_path(caltech.NAME, kind))}
    source = {"viterb": bench.name, "kind": kind, "classes_sha256": hashlib.sha256(
        json.dumps(list(bench.class_keys)).encode()).hexdigest(), **extra}
    rows = [(text, c, f"{key}#{j}") for c, key in enumerate(bench.class_keys) for j, text in enumerate(per_class[key])]
    texts, owner, ids = zip(*rows)
    return ClassTexts(bench.name, kind, texts, owner, ids, source)


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
                 bench: ClassBenchmark, images: str = "test", among: Sequence[int] | None = None) -> float:
    """ViTeRB's score: mean per-class accuracy of the test images, classified among the unseen classes only
    (``images="val"``: the validation images among the classes they show, a recipe sweep's score: the held-out
    validation classes where the split has them, the seen classes' held-out images where it does not).
    ``among``: average the per-class accuracy over these classes only (the images of the others are still
    classified among all the unseen classes, and count for nothing). The medium corpus's synonym groups
    (``corpora.synonyms``: "ant" and "ants") count a synonym of the true class as correct.

    A class's score for an image is the **mean over its texts** of the image-text cosine (the paper
    averages class scores over all class-specific texts). The mean of dot products is the dot product with
    the mean text embedding (unnormalised), which is computed instead: no (images x texts) matrix is built.
    """
    method.eval()
    device = next(method.parameters()).device
    test = bench.images(images)
    unseen = bench.classes("unseen") if images == "test" else sorted({bench.image_labels[i] for i in test})
    position = {c: i for i, c in enumerate(unseen)}
    keep = [t for t, c in enumerate(owner) if c in position]
    classes = torch.tensor([position[owner[t]] for t in keep], device=device)
    embedded = method.embed_text(text_features[keep].to(device)).float()
    means = torch.zeros(len(unseen), embedded.shape[1], device=device).index_add_(0, classes, embedded)
    means /= torch.bincount(classes, minlength=len(unseen)).clamp_min(1)[:, None]
    logits = method.embed_image(image_features[test].to(device)) @ means.T
    labels = torch.tensor([position[bench.image_labels[i]] for i in test])
    groups = synonym_groups(bench, unseen)
    if among is not None:
        wanted = set(among)
        keep_images = torch.tensor([bench.image_labels[i] in wanted for i in test])
        if not keep_images.any():
            return float("nan")
        logits, labels = logits[keep_images.to(logits.device)], labels[keep_images]
    return mean_per_class_recall(logits.cpu(), labels, groups)


def synonym_groups(bench: ClassBenchmark, classes: Sequence[int]) -> tuple[int, ...] | None:
    """The synonym groups of ``classes`` of the medium corpus (``corpora.synonyms``; 24 groups among its 1,540
    unseen concepts), None for a benchmark whose split already keeps near-duplicates together (emoji families)."""
    if bench.name != "medium":
        return None
    return _groups(tuple(bench.class_names[c] for c in classes))


@lru_cache(maxsize=64)
def _groups(names: tuple[str, ...]) -> tuple[int, ...]:
    return synonyms.groups(names)


def own_text_classes(cfg: Config, bench: ClassBenchmark) -> tuple[int, ...] | None:
    """The unseen classes whose ``wikipedia`` texts are their own article (not the name fallback), when the config
    has that kind: every run of the dataset is scored on them too (``score_own_text``), so the Wikipedia claim
    compares the two text kinds on the same classes and images."""
    if "wikipedia" not in cfg.text_kinds or bench.name not in cfg.swept_datasets:
        return None
    own = with_article(bench)
    return tuple(c for c in bench.classes("unseen") if c in own)


def with_article(bench: ClassBenchmark) -> frozenset[int]:
    """Every class of ``bench`` (any role) that has a Wikipedia article of its own: ``corpora.wikipedia``'s exact
    matches, or for Caltech-101 the categories its texts file records as matched (``corpora.caltech``). Which
    classes have one does not depend on the split."""
    if bench.name not in _OWN_TEXT:
        if bench.name == caltech.NAME:
            matched = class_texts.load_class_texts(caltech.NAME, "wikipedia")["matched"]  # read once, not per class
            _OWN_TEXT[bench.name] = frozenset(c for c, key in enumerate(bench.class_keys) if key in matched)
        else:
            _OWN_TEXT[bench.name] = frozenset(class_texts.with_own_text(bench, "wikipedia"))
    return _OWN_TEXT[bench.name]


_OWN_TEXT: dict[str, frozenset[int]] = {}


def recipe_key(text: TextModelConfig, dataset: str) -> str:
    """Which recipe a run takes: one per score dataset, language model and pooling (:func:`choose_recipes`)."""
    return f"{dataset}:{text.name}:{text.pooling}"


def recipe_for(cfg: Config, chosen: dict, spec: RunSpec) -> TrainSettings | None:
    """The recipe of a run: its dataset's (a check dataset, which has no sweep, takes the first score dataset's)."""
    own = chosen.get(recipe_key(spec.text, spec.dataset))
    return own if own is not None else chosen.get(recipe_key(spec.text, cfg.score_datasets[0]))


def choose_recipes(cfg: Config, benches: dict[str, ClassBenchmark], feats: ChapterFeatures):
    """Each language model's recipe (every text model and pooling a run reads) on each score and photo dataset, chosen
    over ``cfg.sweep`` on that dataset's held-out validation images (of held-out classes, or Caltech-101's held-out
    photos of seen categories), on its class names, first seed, by the mean
    per-class accuracy of their images among them (:func:`lib.core.recipes.choose`, which keeps the configured
    rate unless beaten by ``cfg.sweep.keep_within_se`` standard errors over those images): features of different models
    differ in scale, and one shared learning rate would favour the models it suits; and a recipe chosen on
    11,416 training images (medium) need not suit 192 (emoji). Returns ``{recipe_key: settings}`` and one row per
    candidate."""
    chosen, record = {}, []
    for dataset in cfg.swept_datasets:
        def score(text: TextModelConfig, settings: TrainSettings, dataset: str = dataset) -> float:
            spec = RunSpec("recipe", dataset, text, "name", cfg.vision[0], cfg.seeds[0])
            bench = seed_benchmark(cfg, benches, dataset, spec.seed)
            return train_and_score(cfg, bench, feats, spec, train=settings, score_val=True)["val_score"]

        validation_images = len(seed_benchmark(cfg, benches, dataset, cfg.seeds[0]).images("val"))
        found, rows = recipes.choose_each(
            cfg.train, cfg.sweep, dict.fromkeys([*cfg.text, *(cfg.pooling_ablation if dataset in cfg.score_datasets
                                                               else ())]), score,
            lambda text, dataset=dataset: {"dataset": dataset, "model": label(cfg, text), "pooling": text.pooling},
            n=validation_images)
        chosen.update({recipe_key(text, dataset): recipe for text, recipe in found.items()})
        record += rows
    return chosen, record


def train_and_score(cfg: Config, bench: ClassBenchmark, feats: ChapterFeatures, spec: RunSpec,
                    train: TrainSettings | None = None, score_val: bool = False) -> dict:
    """Train a ShareLock head on the seen classes' (image, class text) pairs, early-stop on the val images,
    score on the unseen classes; ``score_val`` adds ``val_score``, the val images among their classes (what
    :func:`choose_recipes` judges a candidate by); ``train``: the recipe (default ``cfg.train``). Returns the run's
    row for :class:`lib.core.results.Runs`."""
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
    recipe = train or cfg.train
    subset = curves.nested_subset(len(train_rows), spec.train_images)
    if subset is not None:  # a point of the data-size curve
        train_rows = train_rows[subset]
    # The budget rule: validate once an epoch of a small training set (emoji's 192 images at batch 256: every 5
    # steps, not every 10 epochs), with as many steps of patience; a no-op on the medium corpus's 11,416.
    settings = curves.subset_settings(recipe, len(train_rows))
    val_text = model.draw(labels[val_rows], torch.Generator().manual_seed(10_000 + spec.seed))
    result = fit(model, {"image": images[train_rows], "label": labels[train_rows]},
                 {"image": images[val_rows], "text": val_text}, settings, seed=spec.seed, device=cfg.device)
    row = {"study": spec.study, "dataset": spec.dataset, "role": cfg.role(spec.dataset), "model": label(cfg, spec.text),
           "family": family(cfg, spec.text), "pooling": spec.text.pooling, "kind": spec.kind,
           "vision": short(spec.vision.name), "seed": spec.seed, "texts_per_class": round(len(texts) / n_classes, 2),
           "score": unseen_score(method, images, text_features, texts.owner, bench),
           "chance": 1 / len(bench.classes("unseen")), "lr": settings.lr, "weight_decay": settings.weight_decay,
           "best_val_loss": result.best_val_loss, "best_step": result.best_step, "steps_run": result.steps_run,
           "first_eval": min(settings.eval_every, settings.steps), "train_images": len(train_rows),
           "train_s": round(result.seconds, 2)}
    own = own_text_classes(cfg, bench)
    if own is not None:
        row["score_own_text"] = unseen_score(method, images, text_features, texts.owner, bench, among=own)
    if score_val:
        row["val_score"] = unseen_score(method, images, text_features, texts.owner, bench, "val")
    return row


def stuck_runs(cfg: Config, runs: Runs) -> list[dict]:
    """Runs whose best validation step is their first evaluation (each run's own: the budget rule validates a
    small training set more often than ``eval_every``): a head that never improved
    on what it knew after its first evaluation has not trained, and its score must not be reported as a
    language model's. The shuffled-text controls are left out (they are meant not to learn)."""
    default = min(cfg.train.eval_every, cfg.train.steps)  # a row without its own (each run records its first_eval)
    return [r for r in runs if r["study"] != "control" and stuck(r, r.get("first_eval") or default)]


def same_as_name(found: ClassTexts, bench: ClassBenchmark) -> float:
    """Share of the classes whose every text is just the class name (a reference text that adds nothing)."""
    alone = [True] * len(bench.class_keys)
    for text, c in zip(found.texts, found.owner):
        alone[c] = alone[c] and text.strip().lower() == bench.class_names[c].strip().lower()
    return sum(alone) / len(alone)
