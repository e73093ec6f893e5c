"""The medium benchmark under the concept split a training seed draws: the same rows and set names, other roles.

Why: a verdict that rests on one seen/unseen split may be a fact about that split. A chapter that draws one split
per seed puts the split's own variance into its paired interval over seeds (book/design.md, "One rule for every
verdict"). Each seed's split is :func:`corpora.medium.make_splits` with that seed (whole concept families to
train / val / unseen, 70/10/20 % of the concepts), so seed ``corpora.medium.SPLIT_SEED`` (0) draws the committed
split of ``data_manifests/splits/medium.json`` row for row. The rows are the committed split's sets merged back
in corpus order, so every image and caption is one the store already holds: only the roles move. See
notebooks/sharelock.py, section "The data".
"""
from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from corpora import medium, synonyms
from corpora.datasets import Benchmark, Labelled, Pairs

__all__ = ["ROLES", "concept_split", "pool_pairs", "pool_labelled", "refuse_limit", "restrict_pairs",
           "restrict_labelled", "benchmark"]

ROLES = ("train", "val", "unseen")  # the concept-level split's roles, as corpora.medium names them


@lru_cache(maxsize=16)
def concept_split(seed: int) -> dict[str, str]:
    """Concept -> ``train`` / ``val`` / ``unseen`` as :func:`corpora.medium.make_splits` draws it with ``seed``."""
    return medium.make_splits(medium.items(), seed)["concepts"]


@lru_cache(maxsize=1)
def _corpus_order() -> dict[str, int]:
    return {row["id"]: i for i, row in enumerate(medium.items())}


def _merged(sets: Sequence) -> list[tuple]:
    """(set, row) of every row of ``sets``, in corpus order."""
    order = _corpus_order()
    return sorted(((s, i) for s in sets for i in range(len(s))), key=lambda si: order[si[0].ids[si[1]]])


@lru_cache(maxsize=4)
def pool_pairs(captions: str) -> Pairs:
    """Every training-source row with its ``captions``-kind caption, in corpus order: the committed split's
    training, validation and unseen pairs merged."""
    rows = _merged([medium.pairs(role, captions=captions) for role in ROLES])
    return Pairs(name="medium-concepts-all", ids=tuple(s.ids[i] for s, i in rows),
                 captions=tuple(s.captions[i] for s, i in rows), concepts=tuple(s.concepts[i] for s, i in rows),
                 load_image=lambda k, rows=rows: rows[k][0].load_image(rows[k][1]),
                 source={**rows[0][0].source, "split": "all"})


@lru_cache(maxsize=4)
def pool_labelled(prompts: str) -> Labelled:
    """Every training-source concept as one zero-shot set (class = concept, corpus order), with ``prompts``
    templates: the committed split's three concept sets merged. Its prompt features are the pool a seed's unseen
    and seen-ceiling classes are read from."""
    rows = _merged([medium.labelled(role, prompts=prompts) for role in ROLES])
    names, labels = _classes([s.classnames[s.labels[i]] for s, i in rows])
    first = rows[0][0]
    return Labelled(name="medium-concepts-all", ids=tuple(s.ids[i] for s, i in rows), labels=labels, classnames=names,
                    templates=first.templates, load_image=lambda k, rows=rows: rows[k][0].load_image(rows[k][1]),
                    source={**first.source, "split": "all"}, groups=synonyms.groups(names))


def refuse_limit(limit: int | None) -> None:
    """Raise when ``data.limit`` is set: it keeps the first training rows of the committed split, which a split drawn
    per seed cannot honour (the chapter's config refuses the pair at load time with this very message)."""
    if limit is not None:
        raise ValueError(f"data.limit = {limit} keeps the first training rows of the committed split, which a "
                         "split drawn per seed cannot honour: drop `limit` or set `split_per_seed: false`")


def _classes(row_classnames) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The class names of some rows in first-seen order, and each row's label among them."""
    names = tuple(dict.fromkeys(row_classnames))
    index = {name: c for c, name in enumerate(names)}
    return names, tuple(index[name] for name in row_classnames)


def restrict_pairs(pairs: Pairs, concepts: set[str], like: Pairs, seed: int) -> Pairs:
    """The rows of ``pairs`` whose concept is in ``concepts`` (order kept), named as ``like``, the set it stands for."""
    keep = [i for i, c in enumerate(pairs.concepts) if c in concepts]
    return Pairs(name=like.name, ids=tuple(pairs.ids[i] for i in keep),
                 captions=tuple(pairs.captions[i] for i in keep), concepts=tuple(pairs.concepts[i] for i in keep),
                 load_image=lambda k, keep=keep: pairs.load_image(keep[k]), source={**like.source, "split_seed": seed})


def restrict_labelled(labelled: Labelled, classes: Sequence[str], like: Labelled, seed: int) -> Labelled:
    """The images of ``classes`` only (order kept; synonym groups computed again among them, as
    ``corpora.medium`` does for any set), named as ``like``, the set it stands for."""
    wanted = set(classes)
    keep = [i for i, label in enumerate(labelled.labels) if labelled.classnames[label] in wanted]
    names, labels = _classes([labelled.classnames[labelled.labels[i]] for i in keep])
    return Labelled(name=like.name, ids=tuple(labelled.ids[i] for i in keep), labels=labels, classnames=names,
                    templates=labelled.templates, load_image=lambda k, keep=keep: labelled.load_image(keep[k]),
                    source={**like.source, "split_seed": seed},
                    groups=synonyms.groups(names) if labelled.groups is not None else None)


def tuxpaint_pool(prompts: str) -> Labelled:
    """Every photo-like Tux Paint stamp, whatever its concept's split: the pool a seed's unseen stamps come from."""
    return medium.tuxpaint_labelled("photo", None, prompts=prompts)


def benchmark(data, base: Benchmark, seed: int) -> Benchmark:
    """``base`` (:func:`corpora.medium.benchmark` of ``data``) with the concept split ``seed`` draws: training,
    validation and unseen pairs, the unseen concepts, Tux Paint's photo-like stamps of them and the seen-concept
    ceiling drawn again, each under its ``base`` name; the extra zero-shot sets (Fashion-MNIST, GCompris) kept."""
    refuse_limit(data.limit)
    split = concept_split(seed)
    role = {r: {c for c, s in split.items() if s == r} for r in ROLES}
    pool, names = pool_pairs(data.captions), pool_labelled(data.prompts)
    unseen_like, photos_like, seen_like, *extra = base.zero_shot
    unseen = restrict_labelled(names, [c for c in names.classnames if c in role["unseen"]], unseen_like, seed)
    seen = [c for c in names.classnames if c in role["train"]][:len(unseen.classnames)]
    photos = tuxpaint_pool(data.prompts)
    return Benchmark(
        train=restrict_pairs(pool, role["train"], base.train, seed),
        val=restrict_pairs(pool, role["val"], base.val, seed),
        retrieval=restrict_pairs(pool, role["unseen"], base.retrieval, seed),
        zero_shot=(unseen, restrict_labelled(photos, [c for c in photos.classnames if c in role["unseen"]],
                                             photos_like, seed),
                   restrict_labelled(names, seen, seen_like, seed), *extra))
