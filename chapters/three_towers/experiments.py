"""The Three Towers chapter's experiments: the benchmark, the third tower's stored features, the towers' resident
inputs, one training-and-evaluation run, the ablations and the data-size curve.
See notebooks/three_towers.py, section "Training".
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from chapters.three_towers.concept_groups import group_accuracy
from chapters.three_towers.config import Config
from corpora import benchmarks, datasets
from corpora.datasets import Benchmark
from lib.core import curves, features, recipes
from lib.core.config import TrainSettings
from lib.core.evaluate import prompt_texts
from lib.core.results import Runs, stuck
from lib.core.train import fit, seed_everything
from lib.data import image_rows, pixel_cache
from lib.methods import three_towers as tt
from lib.methods.three_towers import ThreeTowers

RETRIEVAL_R1 = ("retrieval/image_retrieval_recall@1", "retrieval/text_retrieval_recall@1")


def benchmark(cfg: Config) -> Benchmark:
    """Training, validation and retrieval pairs and the zero-shot sets (``corpora.datasets``)."""
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
# The towers' inputs: pixels (uint8, resident or streamed), tokens and the cached p(I)
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

    def tensors(images, captions: bool, pixels: bool = True) -> dict[str, torch.Tensor]:
        key = f"{images.name}:{captions}:{pixels}"
        if key not in cache:
            out = {"pixels": pixel_cache.cached_pixels(images, cfg.image_tower.image_size, tt.pixels)} if pixels else {}
            out["third"] = found.tensor(f"image:{cfg.third.name}:{images.name}")
            if captions:
                out.update(tt.tokenize(tokenizer, images.captions, cfg.text_tower.context))
            cache[key] = out
        return cache[key]

    streamed = cfg.train_data == "streamed"  # the training images decoded as each batch needs them
    train_sets = training_pairs(cfg, bench)
    parts = [tensors(p, True, pixels=not streamed) for p in train_sets]
    train = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
    if streamed:
        train["pixels"] = image_rows.ImageRows(train_sets, cfg.image_tower.image_size, tt.pixels)
    if cfg.val_holdout:
        keep, held = held_out_rows(len(train["pixels"]), cfg.val_holdout)
        train, val = ({k: image_rows.select(v, keep) for k, v in train.items()},
                      {k: v[held] for k, v in train.items()})  # the held-out pairs resident: validated every time
    else:
        val = tensors(bench.val, True)
    return Inputs(train=train, val=val, retrieval=tensors(bench.retrieval, True),
                  family_val=tensors(bench.val, True) if cfg.val_holdout else None,
                  test={s.name: {k: v for k, v in tensors(s, False).items()} for s in bench.zero_shot},
                  tokenizer=tokenizer, train_names=tuple(p.name for p in train_sets))


# --------------------------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------------------------
def build(cfg: Config, data: Inputs, variant: str, **options) -> ThreeTowers:
    """A fresh method from the config; ``options``: ``weight``, ``terms``, ``headless``."""
    return ThreeTowers(variant, third_dim=data.third_dim, vocab_size=data.vocab_size, image_tower=cfg.image_tower,
                       text_tower=cfg.text_tower, embed_dim=cfg.embed_dim, loss=cfg.loss, augment=cfg.augment,
                       eos_id=tt.end_of_text_id(data.tokenizer), **options)


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
    result, method, train = _fit_method(cfg, data, variant, seed, settings or cfg.train, train_pairs, val, **options)
    evaluations = [r["step"] for r in result.history if r["val_loss"] is not None]
    row = {"method": label or variant, "variant": variant, "seed": seed, "train_pairs": len(train["pixels"]),
           "lr": result.settings.lr, "weight_decay": result.settings.weight_decay, "best_step": result.best_step,
           "first_eval": evaluations[0] if evaluations else None, "steps_run": result.steps_run,
           "val_loss": result.best_val_loss, "temperature": round(method.criterion.temperature, 4),
           "train_s": round(result.seconds, 1),
           "data_path": "resident" if isinstance(train["pixels"], torch.Tensor) else "streamed"}  # which path ran
    row.update(evaluate(cfg, bench, data, method))
    return row, result, method


def _fit_method(cfg: Config, data: Inputs, variant: str, seed: int, settings: TrainSettings,
                train_pairs: int | None = None, val: dict | None = None, **options):
    """One method trained with ``settings``: the TrainResult, the method (on the CPU) and its training tensors."""
    total = len(data.train["pixels"])
    subset = curves.nested_subset(total, train_pairs)
    train = data.train if subset is None else {k: image_rows.select(v, subset) for k, v in data.train.items()}
    seed_everything(seed)
    method = build(cfg, data, variant, **options)
    result = fit(method, train, data.val if val is None else val, settings, seed=seed, device=cfg.device,
                 progress=False)
    method.to("cpu")
    return result, method, train


def choose_recipes(cfg: Config, data: Inputs) -> tuple[dict[str, Config], list[dict]]:
    """Each method's recipe chosen over ``cfg.sweep`` on the validation pairs, first seed, by their retrieval R@1
    (:func:`lib.core.recipes.choose`). Returns ``{variant: the config with that recipe}`` (what
    every later run of the method takes: its budget rule and data-size curve follow from it) and one row per
    candidate."""
    def score(variant: str, settings: TrainSettings) -> float:  # validation retrieval R@1, both directions
        method = _fit_method(cfg, data, variant, cfg.seeds[0], settings)[1]
        return recipes.retrieval_score(tt.retrieval(method, data.val, data.val))

    chosen, record = recipes.choose_each(cfg.train, cfg.sweep, tt.VARIANTS, score, lambda v: {"method": v})
    return {variant: dataclasses.replace(cfg, train=best) for variant, best in chosen.items()}, record


def diagnosis_protocols(cfg: Config) -> tuple[str, str]:  # (the chapter's protocol, the diagnosis's)
    return ("fixed budget", "validation concepts") if fixed_budget(cfg) else ("held-out pairs", "validation families")


def early_stopping_diagnosis(cfg: Config, bench: Benchmark, data: Inputs, runs: Runs, seed: int,
                             histories: dict | None = None, configs: dict[str, Config] | None = None):
    """Each main method trained again under the other protocol (:func:`early_stopping_settings`; ``medium``: on
    the validation concept families, :attr:`Inputs.family_val`), beside the chapter's run of the same seed.
    Returns (table: step kept, unseen top-1 and R@1 under each protocol; validation curves per protocol,
    ``{protocol: {method: history}}``, from the diagnosis runs and ``histories``, the main runs'
    ``history_frame()``, wherever a protocol validated more than once)."""
    import pandas as pd

    ours, other = diagnosis_protocols(cfg)
    rows, val_curves = [], {ours: {}, other: {}}
    for variant in tt.VARIANTS:
        own = (configs or {}).get(variant, cfg)  # the method's recipe (choose_recipes)
        row, result, _ = train_and_evaluate(own, bench, data, variant, seed, settings=early_stopping_settings(own),
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


def data_size_curve(cfg: Config, bench: Benchmark, data: Inputs, runs: Runs,
                    configs: dict[str, Config] | None = None) -> Runs:
    """Scratch, LiT and 3T at each share of the training pairs in ``cfg.curve_fractions``, on the config's
    ``curve_run_seeds``, each method with its recipe (``configs``, :func:`choose_recipes`): does 3T's lead (or lag)
    open, close or flip as the data grow? Rows of ``runs`` at the whole set are reused.
    See notebooks/three_towers.py, section "More data"."""
    curve, total = Runs(), len(data.train["pixels"])
    for size in curves.sizes(total, cfg.curve_fractions):  # early stopping: validated once an epoch of the subset
        for variant in tt.VARIANTS:
            own = (configs or {}).get(variant, cfg)
            settings = None if fixed_budget(own) else curves.subset_settings(own.train, size)
            for seed in cfg.curve_run_seeds:
                done = [r for r in runs.where(method=variant, seed=seed) if r["train_pairs"] == size]
                curve.add(done[0] if done else train_and_evaluate(own, bench, data, variant, seed, train_pairs=size,
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
