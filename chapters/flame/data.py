"""What the FLAME chapter reads: its benchmark, the rows used of each split (the first N, or the medium config's
seeded subsets), the labels in other languages, and every text set it embeds.
See notebooks/flame.py, section "The data: long, multi-facet captions".
"""
from __future__ import annotations

import dataclasses

import torch

from chapters.flame.config import SUBSET_SEED, Config, MediumConfig
from corpora import benchmarks, caltech, datasets, emoji, medium, tuxpaint
from corpora.datasets import Benchmark, Labelled
from lib.core.evaluate import prompt_texts


def short(name: str) -> str:
    return name.split("/")[-1]  # a model's display name: the last part of its id


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


def label_set_name(cfg: Config, bench: Benchmark, locale: str) -> str:
    """The text set holding a locale's labels: English labels are the zero-shot prompts when those are bare names."""
    same = locale == "en" and tuple(prompt_texts(bench.zero_shot[0])) == label_sets(cfg, bench)["en"].classnames
    return "zero-shot" if same else f"labels:{locale}"


def text_sets(cfg: Config, bench: Benchmark) -> dict[str, tuple[list[str], dict]]:
    """Every text the chapter embeds, by set name: ``(texts, source)``. Captions (the first :func:`sizes`
    rows), the zero-shot prompts (class-major, :func:`lib.core.evaluate.prompt_texts`) and the labels in
    other languages. Medium: the seeded subsets' captions and the Tux Paint sets (:func:`_medium_text_sets`)."""
    if isinstance(cfg, MediumConfig):
        return _medium_text_sets(cfg, bench)
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
        name = label_set_name(cfg, bench, locale)
        if name not in out:
            out[name] = (list(labelled.classnames), {"cldr_labels": locale, "split": "unseen"})
    return out


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


def _medium_text_sets(cfg: MediumConfig, bench: Benchmark) -> dict[str, tuple[list[str], dict]]:
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
    if cfg.caltech_per_class is not None:  # Caltech-101's 101 class prompts
        out["caltech"] = (caltech.prompts(), {"prompts_for": caltech.NAME, "templates": [caltech.TEMPLATE]})
    return out
