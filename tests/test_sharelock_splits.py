"""ShareLock's split per seed (corpora.medium_seeds, chapters.sharelock.seed_benchmark and ChapterFeatures).

Each medium seed trains and tests on the concept split it draws, with the features of the one store: the sets keep
their names and take other rows, which ChapterFeatures gathers from the plan's entries by image id and by text.
Without the medium data (CI) the corpus tests skip; the gathering and the config's refusals run everywhere.
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from corpora.datasets import Labelled, Pairs


def _pairs(name, ids, captions, concepts):
    return Pairs(name=name, ids=tuple(ids), captions=tuple(captions), concepts=tuple(concepts),
                 load_image=lambda i: None, source={"dataset": "x", "split": name})


class _Found:
    """A materialised plan: every entry's rows are a known function of its inputs (features.Features' interface)."""

    def __init__(self, plan, value):
        self.plan, self.value = plan, value

    def tensor(self, name, dtype=torch.float32):
        request = self.plan[name]
        keys = request.ids if request.kind == "image" else request.texts
        return torch.tensor([[self.value(k), 1.0] for k in keys], dtype=dtype)


def _features_for(train, val, unseen):
    from chapters import sharelock
    from lib.core import features
    from lib.core.config import TextModelConfig, VisionModelConfig

    vision, text = VisionModelConfig("offline/v", library="timm"), TextModelConfig("offline/t", "mean")
    plan = features.Plan()
    for pairs in (train, val, unseen):
        plan.add(features.image(vision, pairs))
        plan.add(features.text(text, pairs.captions, source=pairs.source, name=f"text:{text.name}:{pairs.name}",
                               ids=pairs.ids))
    value = {**{k: float(i) for i, k in enumerate(["a", "b", "c", "d", "e"])},
             **{f"cap {k}": 10.0 + i for i, k in enumerate(["a", "b", "c", "d", "e"])}}
    return sharelock.ChapterFeatures(_Found(plan, value.__getitem__)), vision, text


def test_a_set_of_other_rows_is_gathered_from_the_plans_entries_by_id_and_text():
    train = _pairs("train", "ab", ["cap a", "cap b"], ["A", "B"])
    val = _pairs("val", "c", ["cap c"], ["C"])
    unseen = _pairs("unseen", "de", ["cap d", "cap e"], ["D", "E"])
    feats, vision, text = _features_for(train, val, unseen)
    assert feats.image(vision, train)[:, 0].tolist() == [0.0, 1.0]  # the entry itself
    drawn = _pairs("train", "eca", ["cap e", "cap c", "cap a"], ["E", "C", "A"])  # same name, a seed's own rows
    assert feats.image(vision, drawn)[:, 0].tolist() == [4.0, 2.0, 0.0]
    assert feats.captions(text, drawn)[:, 0].tolist() == [14.0, 12.0, 10.0]
    stranger = _pairs("train", ["z"], ["cap z"], ["Z"])
    with pytest.raises(KeyError, match=r"train: 1 of 1 rows \(e.g. 'z'\) are in no image entry of offline/v"):
        feats.image(vision, stranger)


def test_restricting_keeps_order_names_the_set_it_stands_for_and_recounts_classes():
    from corpora import medium_seeds

    pool = Labelled(name="all", ids=("1", "2", "3", "4"), labels=(0, 1, 2, 1), classnames=("ant", "cow", "owl"),
                    templates=("{c}",), load_image=lambda i: i, source={"split": "all"}, groups=(0, 1, 2))
    like = Labelled(name="medium-concepts-unseen", ids=(), labels=(), classnames=(), templates=("{c}",),
                    load_image=lambda i: i, source={"split": "unseen"})
    kept = medium_seeds.restrict_labelled(pool, ["owl", "cow"], like, seed=3)
    assert kept.name == "medium-concepts-unseen" and kept.ids == ("2", "3", "4")
    assert kept.classnames == ("cow", "owl") and kept.labels == (0, 1, 0) and len(kept.groups) == 2
    assert kept.source == {"split": "unseen", "split_seed": 3} and kept.load_image(0) == 1
    pairs = _pairs("all", "abc", ["x", "y", "z"], ["A", "B", "A"])
    drawn = medium_seeds.restrict_pairs(pairs, {"A"}, _pairs("medium-concepts-train", [], [], []), seed=1)
    assert drawn.ids == ("a", "c") and drawn.captions == ("x", "z") and drawn.name == "medium-concepts-train"


def test_a_split_per_seed_is_refused_where_it_cannot_hold():
    from chapters import sharelock
    from lib.core.config import ConfigError

    with pytest.raises(ConfigError, match="split_per_seed draws the medium corpus's concept split"):
        sharelock.load_config("small", {"split_per_seed": True})
    with pytest.raises(ConfigError, match="a split drawn per seed cannot honour"):
        sharelock.load_config("medium", {"data": {"limit": 10}})
    assert sharelock.load_config("medium").split_per_seed and not sharelock.load_config("small").split_per_seed
    small = sharelock.load_config("small")
    bench = SimpleNamespace(name="committed")
    assert sharelock.seed_benchmark(small, bench, 3) is bench  # one split: every seed reads it


def test_each_medium_seed_draws_its_own_disjoint_split_and_seed_zero_the_committed_one():
    from tests.test_medium_data import _need_medium

    _need_medium()
    from chapters import sharelock
    from corpora import medium, medium_seeds

    cfg = sharelock.load_config("medium")
    bench = sharelock.benchmark(cfg)
    zero = sharelock.seed_benchmark(cfg, bench, 0)
    for a, b in zip((bench.train, bench.val, bench.retrieval, *bench.zero_shot),
                    (zero.train, zero.val, zero.retrieval, *zero.zero_shot)):
        assert (a.name, a.ids) == (b.name, b.ids), f"seed 0 must draw the committed {a.name} row for row"
    committed = set(bench.train.ids) | set(bench.val.ids) | set(bench.retrieval.ids)
    one = sharelock.seed_benchmark(cfg, bench, 1)
    assert set(one.train.ids) | set(one.val.ids) | set(one.retrieval.ids) == committed  # same rows, other roles
    families = {role: {medium.family(c) for c in pairs.concepts}
                for role, pairs in (("train", one.train), ("val", one.val), ("unseen", one.retrieval))}
    assert not families["train"] & families["unseen"] and not families["val"] & families["unseen"]
    assert not families["train"] & families["val"]
    unseen, photos, seen = one.zero_shot[:3]
    assert set(unseen.classnames) == set(one.retrieval.concepts) and unseen.ids == one.retrieval.ids
    assert photos.classnames and all(medium_seeds.concept_split(1)[c] == "unseen" for c in photos.classnames)
    assert set(seen.classnames) <= set(one.train.concepts)
    assert len(seen.classnames) == len(unseen.classnames)
    shared = set(unseen.classnames) & set(bench.zero_shot[0].classnames)
    assert len(shared) < 0.5 * len(unseen.classnames), "seed 1's unseen concepts must be mostly others"
    assert one.zero_shot[3:] == bench.zero_shot[3:]  # Fashion-MNIST and GCompris do not depend on the split
