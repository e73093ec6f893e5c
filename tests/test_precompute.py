"""``lib.precompute`` for every chapter: the entries it lists, and that each entry's store key is the one the
chapter's notebook produces, so that after a precompute the notebook computes nothing (book/scale_out.md).

Cheap by design (no feature is computed): a store call is intercepted before it computes
(:func:`_capture`), and the notebook's call is made with the notebook's own arguments, copied from the
cell named in each test. A token-sequence entry's lengths part (tokenizer counts) does run, since the
token entry's key depends on it. The real 2-rank run of an FDT entry is in tests/test_distributed.py.
"""
from __future__ import annotations

import dataclasses

import pytest

from lib import precompute
from lib.core.features import digest
from lib.core.store import FeatureStore, spec_key

LIMIT = 4  # training rows: the keys of a notebook run with data.limit 4


class _Stop(Exception):
    """Raised instead of computing an entry: the key was all we wanted."""


@pytest.fixture
def captured(monkeypatch):
    """Record (key, ids, rank, world_size) of every store call and stop it before it computes anything,
    except a sequence's lengths part, which runs (its result keys the token entry)."""
    calls: list[dict] = []
    real = FeatureStore.get_or_compute

    def intercept(self, spec, ids, compute, **kwargs):
        if spec.get("part") == "lengths":
            return real(self, spec, ids, compute, **kwargs)
        calls.append({"key": spec_key(spec), "rows": len(ids), "ids": digest(list(ids)), "rank": kwargs.get("rank", 0),
                      "world_size": kwargs.get("world_size", 1)})
        raise _Stop

    monkeypatch.setattr(FeatureStore, "get_or_compute", intercept)
    return calls


def _key(calls: list[dict], call) -> dict:
    with pytest.raises(_Stop):
        call()
    return calls.pop()


def _entries(chapter: str, patterns: list[str], limit: int | None = LIMIT):
    load_config, build = precompute.CHAPTERS[chapter]
    cfg = load_config("small", limit)
    return cfg, precompute._select(build(cfg, "cpu"), patterns)


def _check(calls, store, entries, notebook_calls) -> None:
    """Each entry, run as rank 1 of 2, asks the store for exactly the notebook's key and row ids (a hit
    needs both: the store refuses an entry whose ids differ)."""
    assert len(entries) == len(notebook_calls), [e.name for e in entries]
    for entry, notebook_call in zip(entries, notebook_calls):
        ours = _key(calls, lambda: entry.run(store, 1, 2))
        theirs = _key(calls, notebook_call)
        assert (ours["rank"], ours["world_size"]) == (1, 2), entry.name  # rank/world_size reach the store
        assert (theirs["rank"], theirs["world_size"]) == (0, 1)
        assert (ours["key"], ours["rows"], ours["ids"]) == (theirs["key"], theirs["rows"], theirs["ids"]), entry.name


# --------------------------------------------------------------------------- --list


EXPECTED = {  # chapter -> (entry kinds, one entry it must list)
    "sharelock": ({"image", "text"}, "text:offline/all-MiniLM-L6-v2:prompts:fashion-mnist"),
    "viterb": ({"image", "text"}, "text:offline/smollm2-135m-instruct:fashion-mnist/encyclopedia"),
    "flame": ({"image", "facets", "text"}, "facets:offline/smollm2-135m-instruct:labels:ja"),
    "fdt": ({"image-tokens", "text-tokens"}, "image-tokens:offline/dinov2-small:fashion-mnist"),
    "three_towers": ({"image"}, "image:offline/efficientnet-lite0:emoji-train-twitter"),
}


def test_every_chapter_is_tested():
    assert set(EXPECTED) == set(precompute.CHAPTERS)


@pytest.mark.parametrize("chapter", list(EXPECTED))
def test_list_prints_the_entry_names_and_computes_nothing(chapter, tmp_path, capsys, monkeypatch):
    from lib.core import facets, features

    def refuse(*args, **kwargs):
        raise AssertionError("--list called FeatureStore.get_or_compute")

    monkeypatch.setattr(FeatureStore, "get_or_compute", refuse)
    loaded = (len(features._TEXT_ENCODERS), len(features._VISION_ENCODERS), len(facets._ENCODERS))
    assert precompute.main(["--chapter", chapter, "--list", "--store", str(tmp_path / "store")]) == 0
    names = capsys.readouterr().out.splitlines()
    kinds, example = EXPECTED[chapter]
    assert example in names and len(names) == len(set(names)), names
    assert {name.split(":")[0] for name in names} == kinds
    assert (len(features._TEXT_ENCODERS), len(features._VISION_ENCODERS), len(facets._ENCODERS)) == loaded
    assert not (tmp_path / "store").exists()


def test_viterb_refuses_a_row_limit_with_the_fix():
    with pytest.raises(SystemExit) as exit_info:
        precompute.main(["--chapter", "viterb", "--limit", "8", "--list"])
    message = str(exit_info.value.code)
    assert message.startswith("lib.precompute: --limit 8: the viterb chapter has no row limit")
    assert "--only" in message and "\n" not in message


def test_an_unknown_chapter_names_the_closest_one():
    with pytest.raises(SystemExit, match=r"unknown chapter 'fame' \(did you mean 'flame'\?\): lib.precompute knows"):
        precompute.main(["--chapter", "fame", "--list"])


# --------------------------------------------------------------------------- same keys as the notebooks


def test_viterb_entries_have_the_notebooks_keys(captured, tmp_path):
    """notebooks/viterb.py, "Features, from the store": benchmark_image_features and the TXT loop."""
    from lib.chapters import viterb
    from lib.core import features

    cfg, entries = _entries("viterb", ["image:*efficientnet-lite0:fashion-mnist",
                                       "text:*all-MiniLM-L6-v2:fashion-mnist/*"], limit=None)
    store = FeatureStore(tmp_path, dtype=cfg.store.dtype, shard_rows=cfg.store.shard_rows)
    bench = viterb.load_benchmark("fashion-mnist", cfg)
    vision, text = cfg.vision[0], next(t for t in cfg.text if t.name.endswith("all-MiniLM-L6-v2"))
    source, = bench.image_sources
    notebook = [lambda: features.image_features(store, vision, source.load_image, source.ids, source=source.source,
                                                device=cfg.device)]
    for kind in cfg.text_kinds:  # name, description, encyclopedia (generated files), reference (WordNet)
        texts = viterb.class_texts(bench, kind)
        notebook.append(lambda texts=texts, kind=kind: features.text_features(
            store, text, texts, source=viterb.text_source(bench, kind), ids=list(bench.class_keys),
            device=cfg.device))
    _check(captured, store, entries, notebook)


def test_flame_entries_have_the_notebooks_keys(captured, tmp_path):
    """notebooks/flame.py, "The frozen features": image_feats, facet_feats and text_feats of text_sets."""
    from lib.core import facets, features
    from lib.data import datasets
    from lib.methods import flame
    from lib.methods.sharelock import prompts

    cfg, entries = _entries("flame", ["image:*:emoji-train-google", "facets:*:train", "facets:*:zero-shot",
                                      "facets:*:labels:de", "text:*all-MiniLM-L6-v2:train"])
    assert cfg.data.limit == LIMIT
    store = FeatureStore(tmp_path, dtype=cfg.store.dtype, shard_rows=cfg.store.shard_rows)
    bench = datasets.build_benchmark(dataclasses.replace(cfg.data, limit=None))
    zero_shot_set, train = bench.zero_shot[0], bench.train
    captions = list(train.captions[:LIMIT])
    train_source = {**train.source, "captions": cfg.data.captions, "rows": LIMIT}
    n_labels = min(cfg.locale_limit, len(zero_shot_set.classnames))
    minilm = next(b for b in cfg.baselines if b.name.endswith("all-MiniLM-L6-v2"))
    notebook = [
        lambda: features.image_features(store, cfg.vision, train.load_image, train.ids, source=train.source,
                                        device=cfg.device),
        lambda: facets.facet_features(store, cfg.text, captions, source=train_source, device=cfg.device),
        lambda: facets.facet_features(store, cfg.text, prompts(zero_shot_set),
                                      source={"prompts_for": zero_shot_set.source}, device=cfg.device),
        lambda: facets.facet_features(store, cfg.text, flame.cldr_labels("unseen", "de", n_labels),
                                      source={"cldr_labels": "de", "split": "unseen", "rows": n_labels},
                                      device=cfg.device),
        lambda: features.text_features(store, minilm, captions, source=train_source, device=cfg.device),
    ]
    _check(captured, store, entries, notebook)
    assert entries[1].name.startswith("facets:") and len(cfg.text.facets) == 3  # rows: 4 captions x 3 facets


def test_fdt_entries_have_the_notebooks_keys(captured, tmp_path):
    """notebooks/fdt.py, "Patch and token features": image_seqs, text_seqs and the PROMPTS."""
    from lib.data import datasets
    from lib.core.sequences import image_sequences, text_sequences
    from lib.methods.sharelock import prompts

    cfg, entries = _entries("fdt", ["image-tokens:*:emoji-train-google", "text-tokens:*:emoji-train-google",
                                    "text-tokens:*:prompts:fashion-mnist"])
    store = FeatureStore(tmp_path, dtype=cfg.store.dtype, shard_rows=cfg.store.shard_rows)
    bench = datasets.build_benchmark(cfg.data)
    train, fashion = bench.train, next(s for s in bench.zero_shot if s.name == "fashion-mnist")
    assert len(train) == LIMIT
    notebook = [
        lambda: image_sequences(store, cfg.vision, train.load_image, train.ids, source=train.source,
                                tokens=cfg.image_tokens, device=cfg.device),
        lambda: text_sequences(store, cfg.text, train.captions, source=train.source, device=cfg.device),
        lambda: text_sequences(store, cfg.text, prompts(fashion), source={"prompts_for": fashion.source["dataset"]},
                               device=cfg.device),
    ]
    _check(captured, store, entries, notebook)


def test_three_towers_entries_have_the_notebooks_keys(captured, tmp_path):
    """notebooks/three_towers.py, "The data": three_towers.tensors itself, the notebook's own call."""
    from lib.data import datasets
    from lib.methods import three_towers as tt

    cfg, entries = _entries("three_towers", ["image:*:emoji-train-twitter", "image:*:fashion-mnist"])
    store = FeatureStore(tmp_path, dtype=cfg.store.dtype, shard_rows=cfg.store.shard_rows)
    bench = datasets.build_benchmark(cfg.data)
    twitter = tt.training_pairs(cfg, bench)[1]
    fashion = next(s for s in bench.zero_shot if s.name == "fashion-mnist")
    assert len(twitter) == LIMIT
    notebook = [lambda: tt.tensors(twitter, cfg, store, None),
                lambda: tt.tensors(fashion, cfg, store, None, with_captions=False)]
    _check(captured, store, entries, notebook)
