"""The ShareLock chapter's experiments: its benchmark, the frozen features it reads (one plan, shared with
``python -m provision.precompute --chapter sharelock``), one training-and-evaluation run of a head or of LiT,
and the data-size curve. See notebooks/sharelock.py, sections "The data" and "Training the head".
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from chapters.sharelock.config import Config
from corpora import benchmarks, datasets
from corpora.datasets import Benchmark, Labelled
from lib.core import curves, features, recipes
from lib.core.config import TextModelConfig, TrainSettings, VisionModelConfig
from lib.core.evaluate import prompt_texts, retrieval, zero_shot
from lib.core.results import Runs, stuck
from lib.core.train import fit, seed_everything
from lib.methods.lit import LiT, token_ids
from lib.methods.sharelock import ShareLock


def benchmark(cfg: Config) -> Benchmark:
    """Training, validation and retrieval pairs and the zero-shot sets (``corpora.datasets``), under the committed
    split: the sets the feature plan reads, and the split of the first seed (:func:`seed_benchmark`)."""
    return benchmarks.build(cfg.data)


def seed_benchmark(cfg: Config, bench: Benchmark, seed: int) -> Benchmark:
    """The benchmark a run of ``seed`` trains and tests on: with ``split_per_seed`` (medium) the concept split
    that seed draws (``corpora.medium_seeds``: whole families to seen / val / unseen; seed 0 draws the committed
    split), the same set names with other rows; else ``bench`` itself. Its features are the plan's rows, read by
    id and text (:class:`ChapterFeatures`)."""
    if not cfg.split_per_seed:
        return bench
    key = (id(bench), seed)
    if key not in _SEED_BENCHES:
        from corpora import medium_seeds

        _SEED_BENCHES[key] = (bench, medium_seeds.benchmark(cfg.data, bench, seed))
    return _SEED_BENCHES[key][1]


_SEED_BENCHES: dict[tuple, tuple[Benchmark, Benchmark]] = {}  # keeps the base alive beside its id


def short(name: str) -> str:
    """A model's display name: the last part of its id."""
    return name.split("/")[-1]


_SHORT_SETS = {"emoji-unseen": "unseen", "emoji-seen": "seen", "fashion-mnist": "Fashion-MNIST",
               "medium-concepts-unseen": "unseen", "medium-concepts-train": "seen",
               "tuxpaint-photo": "Tux Paint photos", "gcompris-categories": "GCompris photo categories",
               "gcompris": "GCompris photos by title"}


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
        from corpora import medium

        return [medium.labelled("unseen", prompts="sentences"), medium.labelled("unseen", prompts="name")]
    return []


def _prompt_source(labelled) -> dict:
    return {"prompts_for": labelled.source["dataset"], "templates": list(labelled.templates)}


def _split_pools(cfg: Config) -> list:
    """What a split drawn per seed reads beyond the committed split's sets: every concept's prompts, and every
    photo-like Tux Paint stamp with its prompts (a seed's unseen stamps are others than the committed split's)."""
    if not cfg.split_per_seed:
        return []
    from corpora import medium_seeds

    return [medium_seeds.pool_labelled(cfg.data.prompts), medium_seeds.tuxpaint_pool(cfg.data.prompts)]


def feature_plan(cfg: Config, bench: Benchmark) -> features.Plan:
    """Every feature the chapter reads: each vision model on every image set; each text model on the
    captions of every pair set, the prompts of every zero-shot set, and the prompt ablation's prompts; with
    ``split_per_seed``, also every concept's prompts and every photo-like stamp (:func:`_split_pools`)."""
    plan, store = features.Plan(), dict(dtype=cfg.store.dtype, shard_rows=cfg.store.shard_rows)
    pools = _split_pools(cfg)  # [every concept's prompts, every photo-like stamp] or []
    # the concept pool's images are the committed sets' own, already planned; the stamps' are new
    image_sets = [bench.train, bench.val, bench.retrieval, *bench.zero_shot, *pools[1:]]
    for vision in cfg.vision:
        for images in image_sets:
            plan.add(features.image(vision, images, **store))
    for text in cfg.text:
        for pairs in (bench.train, bench.val, bench.retrieval):
            plan.add(features.text(text, pairs.captions, source=pairs.source, name=f"text:{text.name}:{pairs.name}",
                                   ids=pairs.ids, **store))
        for labelled in [*bench.zero_shot, *prompt_sets(cfg, bench), *pools]:
            plan.add(features.text(text, prompt_texts(labelled), source=_prompt_source(labelled),
                                   name=f"text:{text.name}:prompts:{labelled.name}:{len(labelled.templates)}", **store))
    return plan


class ChapterFeatures:
    """The materialised plan, read by role: ``image(vision, images)``, ``captions(text, pairs)``,
    ``prompts(text, set)``.

    A set whose rows are the plan entry's of its name is that entry; a set of other rows (a seed's own split,
    :func:`seed_benchmark`) is gathered row by row from every entry of the model: images by id, texts by the
    text itself (a frozen encoder's features depend on nothing else), so a drawn split costs no new features."""

    def __init__(self, found: features.Features) -> None:
        self.found = found
        self._cache: dict = {}
        self._index: dict[tuple[str, str], dict[str, tuple[str, int]]] = {}  # (kind, model) -> key -> entry, row

    def _tensor(self, name: str) -> torch.Tensor:
        if name not in self._cache:
            self._cache[name] = self.found.tensor(name)
        return self._cache[name]

    def _read(self, name: str, kind: str, model, keys: tuple[str, ...]) -> torch.Tensor:
        try:
            request = self.found.plan[name]
        except KeyError:
            request = None
        if request is not None and tuple(request.ids if kind == "image" else request.texts) == keys:
            return self._tensor(name)
        cached = (name, keys)  # the rows themselves, not their hash: a collision must not return another set's rows
        if cached not in self._cache:
            self._cache[cached] = self._gather(kind, model, keys, name)
        return self._cache[cached]

    def _gather(self, kind: str, model, keys: tuple[str, ...], name: str) -> torch.Tensor:
        """Rows ``keys`` (image ids or texts) from every ``kind`` entry of exactly this model config."""
        if (kind, repr(model)) not in self._index:
            index: dict[str, tuple[str, int]] = {}
            for request in self.found.plan:
                if request.kind == kind and request.model == model:
                    for row, key in enumerate(request.ids if kind == "image" else request.texts):
                        index.setdefault(key, (request.name, row))
            self._index[(kind, repr(model))] = index
        index = self._index[(kind, repr(model))]
        missing = [key for key in keys if key not in index]
        if missing:
            raise KeyError(f"{name}: {len(missing)} of {len(keys)} rows (e.g. {missing[0]!r}) are in no {kind} entry "
                           f"of {model.name} in the feature plan: add their set to chapters.sharelock.feature_plan")
        by_entry: dict[str, tuple[list[int], list[int]]] = {}
        for out_row, key in enumerate(keys):
            entry, row = index[key]
            by_entry.setdefault(entry, ([], []))[0].append(out_row)
            by_entry[entry][1].append(row)
        first = self._tensor(next(iter(by_entry)))
        out = first.new_empty((len(keys), first.shape[1]))
        for entry, (out_rows, rows) in by_entry.items():
            out[torch.tensor(out_rows)] = self._tensor(entry)[torch.tensor(rows)]
        return out

    def image(self, vision: VisionModelConfig, images) -> torch.Tensor:
        return self._read(f"image:{vision.name}:{images.name}", "image", vision, tuple(images.ids))

    def captions(self, text: TextModelConfig, pairs) -> torch.Tensor:
        return self._read(f"text:{text.name}:{pairs.name}", "text", text, tuple(pairs.captions))

    def prompts(self, text: TextModelConfig, labelled) -> torch.Tensor:
        return self._read(f"text:{text.name}:prompts:{labelled.name}:{len(labelled.templates)}", "text", text,
                          tuple(prompt_texts(labelled)))


def curve_texts(cfg: Config) -> list[TextModelConfig]:
    """The text models the head ablation (MLP vs linear) and its data-size curve run on: the main decoder and the
    first encoder (mean pooling), so the ablation is seen on both kinds of language model."""
    return [cfg.text[0]] + [t for t in cfg.text[1:] if t.pooling != "last_token"][:1]


def grid(cfg: Config) -> list[tuple[TextModelConfig, VisionModelConfig, str]]:
    """The (text, vision, head) settings the chapter trains, main pair first: every text model with the main
    vision model and every other vision model with the main text model, each with the MLP head, plus the linear
    head (the book's ablation) for :func:`curve_texts` on the main vision model.

    Not the full product: the text ladder is the chapter's question, the vision models and the linear head side
    comparisons, and each extra setting costs a learning-rate sweep and a run per seed (about 40 s a run in the
    medium config on this CPU; notebooks/sharelock.py, "Zero-shot evaluation")."""
    pairs = [(t, cfg.vision[0]) for t in cfg.text] + [(cfg.text[0], v) for v in cfg.vision[1:]]
    ablation = {t.name for t in curve_texts(cfg)}
    return [(t, v, kind) for t, v in pairs for kind in ("mlp", "linear")
            if kind == "mlp" or (v == cfg.vision[0] and t.name in ablation)]


def build(cfg: Config, feats: ChapterFeatures, bench: Benchmark, text: TextModelConfig, vision: VisionModelConfig,
          kind: str = "mlp") -> ShareLock:
    """A fresh ShareLock (``kind="mlp"``) or linear (``"linear"``) head for this pair of models."""
    text_dim = feats.captions(text, bench.train).shape[1]
    image_dim = feats.image(vision, bench.train).shape[1]
    return ShareLock(text_dim, image_dim, cfg.head, cfg.loss, kind=kind)


def train_and_evaluate(cfg: Config, bench: Benchmark, feats: ChapterFeatures, text: TextModelConfig,
                       vision: VisionModelConfig, kind: str = "mlp", seed: int = 0, *,
                       shuffle_captions: bool = False, train_pairs: int | None = None,
                       train: TrainSettings | None = None) -> tuple[dict, object, ShareLock]:
    """Train one head on the training pairs (early stopping on the validation concepts), then evaluate it
    zero-shot on every labelled set and by retrieval on the unseen pairs.

    ``shuffle_captions``: the control, captions permuted among the training images (the pairing is broken,
    everything else kept). ``train_pairs``: train on that many pairs only (:func:`lib.core.curves.nested_subset`; the
    data-size curve). ``train``: the recipe (default ``cfg.train``; :func:`choose_recipes` gives each head kind its
    own). ``bench`` is the committed split's; the run reads its seed's (:func:`seed_benchmark`). Returns the run's
    row (for :class:`lib.core.results.Runs`), the :class:`~lib.core.train.TrainResult` and the trained method.
    """
    bench = seed_benchmark(cfg, bench, seed)
    result, method, text_train = _fit_head(cfg, bench, feats, text, vision, kind, seed, train or cfg.train,
                                           shuffle_captions=shuffle_captions, train_pairs=train_pairs)
    row = {"text": short(text.name), "vision": short(vision.name), "head": kind, "seed": seed,
           "control": "shuffled captions" if shuffle_captions else "", "train_pairs": len(text_train),
           "lr": result.settings.lr, "weight_decay": result.settings.weight_decay,
           "best_step": result.best_step, "first_eval": min(result.settings.eval_every, result.settings.steps),
           "steps_run": result.steps_run, "negatives": result.negatives_per_loss, "train_s": round(result.seconds, 1)}
    row.update(_evaluate(method, cfg, bench, lambda s: feats.image(vision, s),
                         lambda s, prompts: feats.prompts(text, s) if prompts else feats.captions(text, s)))
    return row, result, method


def _fit_head(cfg: Config, bench: Benchmark, feats: ChapterFeatures, text: TextModelConfig, vision: VisionModelConfig,
              kind: str, seed: int, train: TrainSettings, *, shuffle_captions: bool = False,
              train_pairs: int | None = None):
    """One head trained with ``train`` (early stopping on the validation concepts): result, method, its text rows."""
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
                 train, seed=seed, device=cfg.device)
    return result, method, text_train


def recipe_key(text: TextModelConfig, vision: VisionModelConfig, kind: str) -> str:
    """Which recipe a head takes: one per setting of the grid, ``"gemma-3-270m + efficientnet-lite0, mlp"``."""
    return f"{short(text.name)} + {short(vision.name)}, {kind}"


def choose_recipes(cfg: Config, bench: Benchmark, feats: ChapterFeatures,
                   settings: list | None = None) -> tuple[dict[str, TrainSettings], list]:
    """Each method's recipe, chosen on the validation concepts by their image-caption retrieval R@1
    (:func:`lib.core.recipes.choose`), on the first seed: every setting of :func:`grid` (text model, vision model,
    head kind: the features' scale differs from model to model) over ``cfg.sweep``, and LiT over
    ``cfg.lit.sweep``; ``settings``: only these (text, vision, kind), no LiT (a quick run's main pair). A candidate
    that keeps its first evaluation has not trained (:func:`stuck_runs`' rule) and is never chosen. Returns
    ``{recipe_key(...) or "lit": settings}`` and one record row per candidate. With ``sweep.keep_within_se`` the
    configured rate stays unless a candidate leads by that many standard errors over the validation pairs."""
    seed = cfg.seeds[0]
    bench = seed_benchmark(cfg, bench, seed)

    def score(setting, settings: TrainSettings) -> float | None:  # validation R@1; None: kept its first evaluation
        if setting == "lit":
            result, method, text_of = _fit_lit(cfg, bench, feats, cfg.vision[0], seed, settings)
            vision, val_text = cfg.vision[0], text_of(bench.val, False)
        else:
            text, vision, kind = setting
            result, method, _ = _fit_head(cfg, bench, feats, text, vision, kind, seed, settings)
            val_text = feats.captions(text, bench.val)
        if _kept_first_evaluation(result):
            return None  # by the chapter's rule it has not trained: never chosen
        return recipes.retrieval_score(retrieval(method, feats.image(vision, bench.val), val_text))

    def describe(setting) -> dict:
        return {"setting": f"{short(cfg.lit.text.name)} tuned (LiT)" if setting == "lit" else recipe_key(*setting)}

    heads = list(settings if settings is not None else grid(cfg))
    chosen, record = recipes.choose_each(cfg.train, cfg.sweep, heads, score, describe, n=len(bench.val))
    chosen = {recipe_key(*setting): recipe for setting, recipe in chosen.items()}
    if cfg.lit.enabled and settings is None:
        lit, lit_rows = recipes.choose_each(cfg.lit.train, cfg.lit.sweep, ["lit"], score, describe, n=len(bench.val))
        chosen, record = {**chosen, **lit}, record + lit_rows
    return chosen, record


def _kept_first_evaluation(result) -> bool:
    """:func:`lib.core.results.stuck`'s rule on a :class:`~lib.core.train.TrainResult`: its best step is its first
    evaluation, so the run has not trained."""
    return stuck({"best_step": result.best_step, "first_eval": min(result.settings.eval_every, result.settings.steps)})


def _evaluate(method, cfg: Config, bench: Benchmark, image, text_of) -> dict:
    """Zero-shot on every labelled set and retrieval on the unseen pairs; ``text_of(labelled_or_pairs, prompts)``
    gives the text side's input (cached features for a head, token ids for LiT). Each set's chance (one over its
    classes) is kept beside its scores: a seed that draws its own split has its own number of unseen concepts."""
    row = {}
    for labelled in bench.zero_shot:
        found = zero_shot(method, image(labelled), text_of(labelled, True), labelled)
        row.update({f"{labelled.name}/{k}": v for k, v in found.items()})
        row[f"{labelled.name}/chance"] = 1 / len(labelled.classnames)
    found = retrieval(method, image(bench.retrieval), text_of(bench.retrieval, False))
    row.update({f"{bench.retrieval.name}/{k}": v for k, v in found.items()})
    return row


def train_lit(cfg: Config, bench: Benchmark, feats: ChapterFeatures, vision: VisionModelConfig,
              seed: int = 0, train: TrainSettings | None = None) -> tuple[dict, object, LiT]:
    """The paper's LiT baseline on the same locked image features, pairs and seed as the heads: a pretrained text
    encoder (``cfg.lit.text``) and a linear projection, all trained (:class:`lib.methods.lit.LiT`), early-stopped
    on the validation concepts by the heads' rule; ``train`` defaults to ``cfg.lit.train``. See
    notebooks/sharelock.py, section "The LiT baseline"."""
    bench = seed_benchmark(cfg, bench, seed)
    result, method, text_of = _fit_lit(cfg, bench, feats, vision, seed, train or cfg.lit.train)
    row = {"text": short(cfg.lit.text.name), "vision": short(vision.name), "head": "lit", "seed": seed,
           "control": "", "train_pairs": len(bench.train), "lr": result.settings.lr,
           "weight_decay": result.settings.weight_decay, "best_step": result.best_step,
           "first_eval": min(result.settings.eval_every, result.settings.steps), "steps_run": result.steps_run,
           "negatives": result.negatives_per_loss, "train_s": round(result.seconds, 1)}
    row.update(_evaluate(method, cfg, bench, lambda s: feats.image(vision, s), text_of))
    return row, result, method


def _fit_lit(cfg: Config, bench: Benchmark, feats: ChapterFeatures, vision: VisionModelConfig, seed: int,
             train: TrainSettings):
    """One LiT trained with ``train``: the result, the method and its ``text_of(items, prompts)`` token ids."""
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
                 train, seed=seed, device=cfg.device)
    return result, method, text_of


def held_out_groups(cfg: Config, pairs) -> tuple[str, list[str]]:
    """What to break the unseen pairs down by, and each pair's group: the CLDR group for emoji, the source
    (Openclipart, OpenMoji, Fluent UI, game-icons) for the medium corpus, nothing for a pairs corpus."""
    if cfg.data.corpus == "emoji":
        from corpora import emoji

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
                    texts: list[TextModelConfig], chosen: dict[str, TrainSettings] | None = None) -> Runs:
    """The head comparison (MLP vs linear, main vision model) at growing shares of the training pairs, on the
    config's ``curve_run_seeds``, each head with its recipe (``chosen``, from :func:`choose_recipes`): does the gap
    open, close or flip as data grows? The whole set is the main grid's run of each seed, reused, not retrained.
    ``curve_size`` is a point's x: a subset's size (the shares of the smallest training set among the seeds'
    splits, so every seed trains on as many pairs), or for the whole set the mean over the seeds' splits
    (``train_pairs`` keeps each run's own count). See notebooks/sharelock.py, "More data"."""
    chosen = chosen or {}
    vision, seeds = cfg.vision[0], cfg.curve_run_seeds
    n_train = {seed: len(seed_benchmark(cfg, bench, seed).train) for seed in seeds}
    whole = round(sum(n_train.values()) / len(n_train))
    sizes = [size for size in curves.sizes(min(n_train.values()), cfg.curve_fractions) if size < min(n_train.values())]
    curve = Runs()
    for t in texts:
        for kind in ("mlp", "linear"):
            for seed in seeds:
                for size in sizes:
                    curve.add(train_and_evaluate(cfg, bench, feats, t, vision, kind, seed, train_pairs=size,
                                                 train=chosen.get(recipe_key(t, vision, kind)))[0], curve_size=size)
                done = runs.where(text=short(t.name), vision=short(vision.name), head=kind, seed=seed, control="")
                if len(done) != 1:
                    raise ValueError(f"the data-size curve reuses the main grid's run of {short(t.name)}, {kind}, "
                                     f"seed {seed} as its whole-set point, but `runs` holds {len(done)} such rows")
                curve.add(list(done)[0], curve_size=whole)
    return curve


HEADS = ({"head": "mlp"}, {"head": "linear"}, ("MLP", "linear"))  # the curve's comparison: A, B and their names


SHARE_WORDS = {0.125: "an eighth", 0.25: "a quarter", 0.5: "half", 1.0: "all"}


def share_words(fractions) -> str:
    """The data-size curve's shares of the training pairs in words, so the prose describes the config it shows:
    (0.25, 1.0) -> "a quarter and all of the training pairs"; a share without a word is written as a percentage."""
    words = [SHARE_WORDS.get(float(f), f"{100 * float(f):g} %") for f in fractions]
    listed = words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
    return f"{listed} of the training pairs"


def curve_frame(curve: Runs, metric: str):
    """One row per (text model, training pairs): MLP and linear mean ± sd and the rule's outcome."""
    import pandas as pd

    tables = [curves.table(curve.where(text=text), metric, *HEADS, size_key="curve_size").assign(**{"text model": text})
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


def matched_rows(first: Labelled, second: Labelled) -> tuple[list[int], list[int]]:
    """Row pairs that show one concept in both sets, one pair per concept, for :func:`style_diagnostics`: the
    first image of each class of ``second`` whose name ``first`` also has, with ``first``'s first image of it.
    The emoji corpus draws each concept once per artist, so every concept pairs; the medium corpus pairs each
    Tux Paint photo-like stamp with a drawing of its (unseen) concept."""
    first_row: dict[str, int] = {}
    for row, label in enumerate(first.labels):
        first_row.setdefault(first.classnames[label], row)
    pairs: dict[str, tuple[int, int]] = {}
    for row, label in enumerate(second.labels):
        name = second.classnames[label]
        if name in first_row and name not in pairs:
            pairs[name] = (first_row[name], row)
    if not pairs:
        raise ValueError(f"{first.name} and {second.name} share no class name: no concept is shown in both")
    return [a for a, _ in pairs.values()], [b for _, b in pairs.values()]
