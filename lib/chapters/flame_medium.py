"""The FLAME chapter's medium config: seeded subsets of the medium corpus, Tux Paint in five languages, a data-size
curve.

Why a module of its own: the medium config changes what the chapter reads (the pooled medium corpus with long
captions, whose LLM pass costs ~0.1 s per caption on 2 cores, so training, validation and retrieval are fixed
seeded subsets of their splits) and adds two tests the small config has no data for: zero-shot on Tux Paint's
photo-like stamps of unseen concepts, and multilingual zero-shot with Tux Paint's stamp sentences in other
languages. The training and evaluation of one method stay :func:`lib.chapters.flame.train_and_evaluate`; this
module gives it a feature view (:class:`MediumFeatures`) and adds the extra tests, the stuck-run count, the
data-size curve of FLAME vs the text tower from scratch and the medium claims.
See notebooks/flame.py, section "The medium config: more concepts, longer descriptions, five languages".
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from lib.chapters import flame
from lib.core import config as configs
from lib.core import curves, features
from lib.core.evaluate import prompt_texts, retrieval, zero_shot
from lib.core.results import Claim, Runs, stuck
from lib.data import medium, tuxpaint
from lib.data.datasets import Benchmark, Labelled

__all__ = ["MediumConfig", "load_config", "subsets", "tux_multilingual", "text_sets", "feature_plan", "MediumFeatures",
           "run", "stuck_runs", "data_size_curve", "curve_frame", "curve_trend", "claims", "findings",
           "facet_similarity_by_source", "translation_match", "language_bars", "SUBSET_SEED"]

SUBSET_SEED = curves.SUBSET_SEED  # the permutation of every split's rows (the data-size curves' seed)


@dataclass(frozen=True)
class MediumConfig(flame.Config):
    """``medium:`` of ``notebooks/configs/flame.yaml``: :class:`lib.chapters.flame.Config` plus the seeded subset
    sizes (``train_pairs`` / ``val_pairs`` / ``retrieval_pairs``), the data-size curve's training sizes (prefixes of
    the training subset, so nested) and the Tux Paint locales of the multilingual test."""

    train_pairs: int = 3000
    val_pairs: int = 500
    retrieval_pairs: int = 1000
    curve_sizes: tuple[int, ...] = ()
    tux_locales: tuple[str, ...] = ("en",)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.data.corpus != "medium":
            raise ValueError("the medium FLAME config reads the medium corpus (data.corpus: medium)")
        if any(not 2 <= n <= self.train_pairs for n in self.curve_sizes):
            raise ValueError(f"curve_sizes {list(self.curve_sizes)} must lie in 2..train_pairs ({self.train_pairs})")
        if "en" not in self.tux_locales:  # the reference language (the locales are checked against the data on use)
            raise ValueError(f"tux_locales {list(self.tux_locales)} must include en")


def load_config(name: str = "medium", overrides: dict | None = None) -> MediumConfig:
    return configs.load(flame.NAME, name, MediumConfig, overrides)


# --- data ------------------------------------------------------------------------------------------------------
def subsets(cfg: MediumConfig, bench: Benchmark) -> dict[str, torch.Tensor]:
    """The rows used of each split: the first N of a fixed permutation (independent of the training seed)."""
    wanted = {"train": cfg.train_pairs, "val": cfg.val_pairs, "retrieval": cfg.retrieval_pairs}
    out = {}
    for role, n in wanted.items():
        rows = len(getattr(bench, role))
        out[role] = torch.randperm(rows, generator=torch.Generator().manual_seed(SUBSET_SEED))[: min(n, rows)]
    return out


def tux_multilingual(cfg: MediumConfig) -> tuple[Labelled, dict[str, tuple[str, ...]]]:
    """Every Tux Paint stamp (photo-like and drawn; seen and unseen concepts) whose sentence exists in all of
    ``tux_locales``: the images, one class per concept, and per locale the class prompts (the sentence of the
    concept's first stamp in that language, e.g. "A frog." / "Ein Frosch." / "カエル")."""
    chosen = {i["id"]: i for i in tuxpaint.items("all")
              if all(loc == "en" or loc in i["locales"] for loc in cfg.tux_locales)}
    rows = [r for r in medium.items() if r["source"] == "tuxpaint" and r["key"] in chosen]
    names = list(dict.fromkeys(r["concept"] for r in rows))
    first = {c: next(chosen[r["key"]] for r in rows if r["concept"] == c) for c in names}
    images = Labelled(name="tuxpaint-all-" + "-".join(cfg.tux_locales), ids=tuple(r["id"] for r in rows),
                      labels=tuple(names.index(r["concept"]) for r in rows), classnames=tuple(names),
                      templates=("{c}",), load_image=lambda i, rs=rows: medium.load_image(rs[i]),
                      source={**medium.source_identity({"tuxpaint"}), "subset": "all",
                              "locales": list(cfg.tux_locales)})
    return images, {loc: tuple(tuxpaint.caption(first[c], loc) for c in names) for loc in cfg.tux_locales}


def text_sets(cfg: MediumConfig, bench: Benchmark) -> dict[str, tuple[list[str], dict]]:
    """Every text embedded: the subsets' captions, the unseen and Tux Paint photo zero-shot prompts, and the
    Tux Paint class sentences in each locale."""
    out = {}
    for role, idx in subsets(cfg, bench).items():
        pairs = getattr(bench, role)
        out[role] = ([pairs.captions[i] for i in idx.tolist()],
                     {**pairs.source, "captions": cfg.data.captions, "subset": [SUBSET_SEED, len(idx)]})
    for name, labelled in (("zero-shot", bench.zero_shot[0]), ("tux-photo", bench.zero_shot[1])):
        out[name] = (prompt_texts(labelled), {"prompts_for": labelled.source, "templates": list(labelled.templates)})
    images, sentences = tux_multilingual(cfg)
    for loc, texts in sentences.items():
        out[f"tux:{loc}"] = (list(texts), {"tuxpaint_sentences": loc, "classes_of": images.source})
    return out


def feature_plan(cfg: MediumConfig, bench: Benchmark) -> features.Plan:
    """The image features of the whole splits (the ShareLock chapter's medium entries) and of the Tux Paint sets;
    the K facet embeddings and each baseline's features of every text set."""
    plan, store = features.Plan(), dict(dtype=cfg.store.dtype, shard_rows=cfg.store.shard_rows)
    for images in [bench.train, bench.val, bench.retrieval, bench.zero_shot[0], bench.zero_shot[1],
                   tux_multilingual(cfg)[0]]:
        plan.add(features.image(cfg.vision, images, **store))
    for name, (texts, source) in text_sets(cfg, bench).items():
        plan.add(features.facets(cfg.text, texts, source=source, name=f"facets:{cfg.text.name}:{name}", **store))
        for baseline in cfg.baselines:
            plan.add(features.text(baseline, texts, source=source, name=f"text:{baseline.name}:{name}", **store))
    return plan


class MediumFeatures(flame.ChapterFeatures):
    """:class:`lib.chapters.flame.ChapterFeatures` on the seeded subsets; ``train_rows``: the first N training
    pairs of the subset (the data-size curve), shared tensors with the full view (:meth:`with_train`)."""

    def __init__(self, cfg: MediumConfig, bench: Benchmark, found: features.Features, train_rows: int | None = None):
        super().__init__(cfg, bench, found)
        self.index = subsets(cfg, bench)
        self.train_rows = train_rows or len(self.index["train"])
        self.tux_images, self.tux_sentences = tux_multilingual(cfg)

    def with_train(self, rows: int | None) -> MediumFeatures:
        view = MediumFeatures.__new__(MediumFeatures)
        view.__dict__.update(self.__dict__)
        view.train_rows = rows or len(self.index["train"])
        return view

    def _rows(self, role: str, x: torch.Tensor) -> torch.Tensor:
        return x[: self.train_rows] if role == "train" else x

    def image(self, role: str) -> torch.Tensor:
        if role in self.index:
            full = self._tensor(f"image:{self.cfg.vision.name}:{getattr(self.bench, role).name}")
            return self._rows(role, full[self.index[role]])
        images = {"zero-shot": self.bench.zero_shot[0], "tux-photo": self.bench.zero_shot[1],
                  "tux": self.tux_images}[role]
        return self._tensor(f"image:{self.cfg.vision.name}:{images.name}")

    def set_name(self, name: str) -> str:
        return name

    def facets(self, name: str) -> torch.Tensor:
        return self._rows(name, self._tensor(f"facets:{self.cfg.text.name}:{name}"))

    def text(self, model, name: str) -> torch.Tensor:
        return self._rows(name, self._tensor(f"text:{model.name}:{name}"))

    def tokens(self, name: str) -> torch.Tensor:
        key = f"tokens:{name}"
        if key not in self._cache:
            from lib.methods.three_towers import tokenize
            found = tokenize(self.tokenizer, text_sets(self.cfg, self.bench)[name][0], self.cfg.scratch.context)
            self._cache[key] = torch.stack([found["input_ids"], found["attention_mask"]], dim=1)
        return self._rows(name, self._cache[key])


# --- experiments -----------------------------------------------------------------------------------------------
def _text_reader(feats: MediumFeatures, kind: str, k: int | None, method):
    """(model for lib.core.evaluate, long-text features, short-text features) of one trained method."""
    cfg = feats.cfg
    if kind == "flame":
        one = cfg.text.facets.index(cfg.short_text_facet)
        return method, (lambda n: feats.facets(n)[:, :k]), (lambda n: feats.facets(n)[:, [one]])
    if kind == "scratch":
        return flame._ScratchTower(method), feats.tokens, feats.tokens
    baseline = next(b for b in cfg.baselines if b.name == kind)
    return method, (lambda n: feats.text(baseline, n)), (lambda n: feats.text(baseline, n))


def run(cfg: MediumConfig, bench: Benchmark, feats: MediumFeatures, kind: str, seed: int, *, k: int | None = None,
        loss: str | None = None, train_pairs: int | None = None) -> tuple[dict, object]:
    """One method trained on the first ``train_pairs`` of the training subset and evaluated on: the unseen
    concepts (zero-shot among all of them, caption retrieval among the retrieval subset and among its
    Openclipart rows, whose descriptions are the longest), Tux Paint's photo-like unseen stamps and the
    multilingual Tux Paint classes. Returns the row and the :class:`~lib.core.train.TrainResult`."""
    view = feats.with_train(train_pairs)
    k = (k or len(cfg.text.facets)) if kind == "flame" else None
    row, result, method = flame.train_and_evaluate(cfg, bench, view, kind, seed, k=k, loss=loss)
    model, long_text, short_text = _text_reader(view, kind, k, method)
    model.eval()
    row.update({"train_pairs": view.train_rows, "first_eval": cfg.train.eval_every})
    row["tux-photo/acc1"] = zero_shot(model, view.image("tux-photo"), short_text("tux-photo"),
                                      bench.zero_shot[1])["acc1"]
    openclipart = torch.tensor([bench.retrieval.ids[i].startswith("openclipart/")
                                for i in view.index["retrieval"].tolist()])
    found = retrieval(model, view.image("retrieval")[openclipart], long_text("retrieval")[openclipart])
    row.update({f"retrieval-openclipart/{m}": v for m, v in found.items()})
    others = []
    for loc, sentences in view.tux_sentences.items():
        labelled = dataclasses.replace(view.tux_images, classnames=sentences)
        row[f"tux:{loc}/acc1"] = zero_shot(model, view.image("tux"), short_text(f"tux:{loc}"), labelled)["acc1"]
        others += [row[f"tux:{loc}/acc1"]] if loc != "en" else []
    row["tux:other/acc1"] = sum(others) / len(others) if others else None
    return row, result


def stuck_runs(runs: Runs, cfg: MediumConfig) -> list[dict]:
    """Runs whose best validation step is their first evaluation: they never improved and must not be reported."""
    return [r for r in runs if stuck(r, cfg.train.eval_every)]


def data_size_curve(cfg: MediumConfig, bench: Benchmark, feats: MediumFeatures, runs: Runs) -> Runs:
    """FLAME (all K facets) and the text tower from scratch at each of ``curve_sizes`` nested training sizes, every
    seed; rows of ``runs`` at the same size are reused, not retrained."""
    curve = Runs()
    for size in cfg.curve_sizes:
        for kind, label in (("flame", "flame"), ("scratch", "scratch")):
            for seed in cfg.seeds:
                done = [r for r in runs
                        if flame.run_key(r, cfg) == label and r["seed"] == seed and r["train_pairs"] == size]
                curve.add(done[0] if done else run(cfg, bench, feats, kind, seed, train_pairs=size)[0])
    return curve


CURVE = ({"method": "flame"}, {"method": "scratch"}, ("FLAME", "scratch"))  # the curve's comparison: A, B, names


def curve_frame(curve: Runs, metric: str):
    """One row per training size: FLAME and scratch mean ± sd and the rule's outcome (:func:`lib.core.curves.table`)."""
    return curves.table(curve, metric, *CURVE)


def curve_trend(curve: Runs, metric: str) -> str:
    """One sentence: FLAME − scratch in points at each training size (:func:`lib.core.curves.trend`)."""
    return curves.trend(curve, metric, *CURVE)


@torch.no_grad()
def facet_similarity_by_source(feats: MediumFeatures, bench: Benchmark) -> dict[str, float]:
    """Mean off-diagonal facet cosine (``lib.chapters.flame.facet_similarity``) of the training captions of each
    source: do Openclipart's longer descriptions make the facets say more different things?"""
    facets_ = feats.facets("train")
    ids = [bench.train.ids[i] for i in feats.index["train"][: len(facets_)].tolist()]
    out = {}
    for source in ("openclipart", "openmoji", "fluentui-emoji", "game-icons"):
        mask = torch.tensor([i.startswith(source + "/") for i in ids])
        if mask.sum() > 2:
            sim = flame.facet_similarity(facets_[mask])
            K = len(sim)
            out[source] = float(sim[~torch.eye(K, dtype=torch.bool)].mean()) if K > 1 else None
    return out


@torch.no_grad()
def translation_match(feats: MediumFeatures, locale: str) -> float:
    """How often the frozen LLM's one-prompt embedding of a class sentence in ``locale`` has, among the English
    sentences of all classes, the same class as its nearest neighbour (each set's mean removed): the property
    the multilingual claim rests on, measured before any training."""
    one = feats.cfg.text.facets.index(feats.cfg.short_text_facet)
    a, b = (feats.facets(f"tux:{loc}")[:, one].float() for loc in (locale, "en"))
    a, b = (torch.nn.functional.normalize(x - x.mean(0, keepdim=True), dim=-1) for x in (a, b))
    return float(((a @ b.T).argmax(1) == torch.arange(len(a))).float().mean())


def claims(cfg: MediumConfig, bench: Benchmark, runs: Runs, *, diagnosis: dict | None = None) -> list[Claim]:
    """The small chapter's claims on the medium runs, with the multilingual one on Tux Paint's sentences."""
    diagnosis = diagnosis or {}
    out = flame.claims(cfg, bench, runs, diagnosis=diagnosis)
    others = ", ".join(loc for loc in cfg.tux_locales if loc != "en")
    out.append(Claim(
        "multilingual_transfer", f"trained on English captions only, FLAME classifies Tux Paint stamps by their "
        f"sentences in other languages ({others}) better than a text tower trained on the same English pairs",
        "Table 4 (multilingual ImageNet-1k, FLAME trained on YFCC15M)",
        runs.compare("tux:other/acc1", flame.main_setting(cfg), dict(method="scratch")),
        ("FLAME", "text tower from scratch"),
        paper_value="FLAME 40.6 vs CLIP 19.2 (average of ar, en, it, jp, zh; CLIP trained on WIT-400M)",
        diagnosis=diagnosis.get("multilingual_transfer"), paper_pair=(40.6, 19.2)))
    return out


def findings(cfg: MediumConfig, bench: Benchmark, runs: Runs) -> dict[str, float | None]:
    """:func:`lib.chapters.flame.findings` plus the medium metrics and their chance levels."""
    out = flame.findings(cfg, bench, runs)
    extra = {"tux-photo/acc1": "tux_photo_acc1", "tux:other/acc1": "tux_other_acc1",
             "retrieval-openclipart/image_retrieval_recall@1": "openclipart_t2i_r1",
             **{f"tux:{loc}/acc1": f"tux_{loc}_acc1" for loc in cfg.tux_locales}}
    for row in runs:
        key = flame.run_key(row, cfg)
        for metric, name in extra.items():
            summary = runs.summary(metric, **{k: row[k] for k in ("method", "facets", "loss")})
            if summary.n:
                out[f"{key}/{name}"] = summary.mean
    images, _ = tux_multilingual(cfg)
    n_openclipart = sum(bench.retrieval.ids[i].startswith("openclipart/")
                        for i in subsets(cfg, bench)["retrieval"].tolist())
    out.update({"chance_retrieval": 1 / min(cfg.retrieval_pairs, len(bench.retrieval)),
                "chance_tux_photo": 1 / len(bench.zero_shot[1].classnames), "chance_tux": 1 / len(images.classnames),
                "chance_openclipart_retrieval": 1 / n_openclipart})
    return out


def language_bars(runs: Runs, labels: dict[str, str], chance: float, classes: int, xlabel: str, title: str):
    """Top-1 by language, one bar per method (mean ± sd over seeds), with chance: the small config's CLDR labels
    and the medium config's Tux Paint sentences are drawn alike. Returns the table of means ± sd per method."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    from lib.core import notebook

    long_form = runs.frame().melt(id_vars=["method", "seed"], value_vars=list(labels), var_name="language",
                                  value_name="top-1").replace({"language": labels})
    fig, axis = plt.subplots(figsize=(9, 3.4))
    sns.barplot(data=long_form, x="language", y="top-1", hue="method", errorbar="sd", ax=axis)
    notebook.chance_line(axis, chance)
    notebook.percent_axis(axis, "y")
    axis.set(xlabel=xlabel, ylabel=f"top-1 among {classes}", title=title)
    axis.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1))
    plt.tight_layout()
    return runs.table(list(labels), by=["method"], labels=labels).set_index("method")

