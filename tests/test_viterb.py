"""ViTeRB: splits are data (disjoint, checksummed), no unseen image reaches training, class texts of every kind
(templates, sentences, real reference text, generated text that matches its manifest), training on classes with
several texts, class scores averaged over a class's texts, the feature plan, the claims, and the chapter's
small-config run (slow)."""
from __future__ import annotations

import dataclasses
import math
import json
from pathlib import Path

import pytest
import torch
import yaml
from conftest import chapter_metrics

from chapters import viterb
from chapters.viterb import verdicts as viterb_claims
from lib.methods.class_text_pairs import ClassTextPairs
from lib.core.checksums import file_sha256
from lib.core.results import Runs
from corpora import class_splits, class_texts, full_sets, manifests, wordnet
from corpora.templates import IMAGENET_TEMPLATES

ROOT = Path(__file__).resolve().parents[1]
FULL = ("awa2", "cub", "fgvc-aircraft", "imagenet-plus")


@pytest.fixture(scope="module")
def small():
    cfg = viterb.load_config("small")
    return cfg, viterb.benchmark(cfg)


# ------------------------------------------------------------------------------------------------ splits
def test_fashion_split_is_seeded_disjoint_and_checksummed():
    split = class_splits.load_split_file("fashion-mnist")  # raises if the file does not match the manifest's sha256
    entry = manifests.load("fashion-mnist")["splits"]
    assert file_sha256(ROOT / entry["file"]) == entry["sha256"]
    classes = manifests.load("fashion-mnist")["classes"]
    assert not set(split["seen"]) & set(split["unseen"])
    assert sorted(split["seen"] + split["unseen"]) == sorted(classes)
    assert (len(split["seen"]), len(split["unseen"])) == (7, 3)
    # The file is what the recorded function makes: regenerating it gives the same split.
    again = class_splits.seeded_class_split(classes, class_splits.FASHION_UNSEEN, class_splits.FASHION_SPLIT_SEED)
    assert (again["seen"], again["unseen"]) == (split["seen"], split["unseen"])


def test_emoji_split_is_disjoint_and_checksummed():
    definition = yaml.safe_load((ROOT / "data_manifests" / "viterb.yaml").read_text())["small"]["emoji"]
    assert file_sha256(ROOT / definition["file"]) == definition["sha256"]
    keys = {split: {c.key for c in class_splits.emoji_split(split)} for split in ("train", "val", "unseen")}
    assert {split: len(k) for split, k in keys.items()} == {s: definition["subset"][s] for s in keys}
    assert not keys["train"] & keys["unseen"] and not keys["val"] & keys["unseen"] and not keys["train"] & keys["val"]
    families = {split: {c.family for c in class_splits.emoji_split(split)} for split in keys}
    assert not (families["train"] | families["val"]) & families["unseen"], "a concept family straddles the split"


@pytest.mark.parametrize("dataset", ["awa2", "cub"])
def test_full_config_proposed_splits_are_disjoint(dataset):
    manifest = manifests.load(dataset)
    unseen = manifest["splits"]["unseen"]
    assert len(unseen) == len(set(unseen)) == {"awa2": 10, "cub": 50}[dataset]
    if dataset == "awa2":
        split = full_sets.full_split(dataset, manifest["classes"])
        assert len(split["seen"]) == 40 and not set(split["seen"]) & set(split["unseen"])
    else:  # seen = the rest of CUB's classes.txt (not shipped): check with the unseen names themselves
        split = full_sets.full_split(dataset, sorted(unseen) + ["001.Black_footed_Albatross"])
        assert split["seen"] == ["001.Black_footed_Albatross"]


def test_aircraft_split_is_a_seeded_50_20_split_of_the_families():
    families = [f"family {i}" for i in range(70)]  # the real names come from the dataset's families.txt
    split = full_sets.full_split("fgvc-aircraft", families)
    assert (len(split["seen"]), len(split["unseen"])) == (50, 20)
    assert not set(split["seen"]) & set(split["unseen"])
    assert split == full_sets.full_split("fgvc-aircraft", families)


def test_full_config_manifests_say_where_to_get_the_data():
    for name in FULL:
        manifest = manifests.load(name)
        assert manifest["obtain"] and manifest["location"] and manifest["splits"]


@pytest.mark.parametrize("dataset", ["emoji", "fashion-mnist"])
def test_no_unseen_image_is_used_in_training(dataset, small):
    cfg, benches = small
    bench = benches[dataset]
    unseen = set(bench.classes("unseen"))
    assert unseen and bench.images("train") and bench.images("val") and bench.images("test")
    for i in bench.images("train") + bench.images("val"):
        assert bench.image_labels[i] not in unseen
    # Rows point at images of the right class (a misaligned row would leak silently).
    if dataset == "emoji":
        for i, (source, row) in enumerate(bench.image_rows):
            assert bench.image_sources[source].ids[row].split("/")[0] == bench.class_keys[bench.image_labels[i]]
    else:
        from corpora import fashion_mnist

        photos = fashion_mnist.load_test(cfg.fashion.test_per_class)
        assert [int(photos.labels[row]) for _, row in bench.image_rows] == list(bench.image_labels)
        assert bench.counts()["test images"] == 3 * cfg.fashion.test_per_class
    # And the check bites: an unseen image used for training, or a seen one among the test images.
    first_test = bench.images("test")[0]
    broken = dataclasses.replace(bench, image_role=tuple("train" if i == first_test else r
                                                         for i, r in enumerate(bench.image_role)))
    with pytest.raises(AssertionError):
        broken.check_no_leak()


def test_fashion_images_are_the_sharelock_chapters_entry(small):
    """100 photos per class: the same image source (ids and source) as the ShareLock chapter's zero-shot set."""
    from corpora.datasets import fashion_mnist_labelled

    cfg, benches = small
    shared = fashion_mnist_labelled(100, prompts="name")
    (source,) = benches["fashion-mnist"].image_sources
    assert (source.name, source.ids, source.source) == (shared.name, shared.ids, shared.source)


# ------------------------------------------------------------------------------------------- class texts
def test_wordnet_gloss_of_sandal_is_the_real_one():
    assert wordnet.gloss("sandal") == "a shoe consisting of a sole fastened by straps to the foot"
    assert wordnet.synsets("sandal")[0].wnid == "n04133789"


def test_reference_texts_are_real_text(small):
    _, benches = small
    fashion = class_texts.class_texts(benches["fashion-mnist"], "reference")
    texts = dict(zip(benches["fashion-mnist"].class_names, fashion.texts))
    assert texts["Sandal"] == "Sandal: a shoe consisting of a sole fastened by straps to the foot"
    emoji = class_texts.class_texts(benches["emoji"], "reference")
    assert len(emoji) == len(benches["emoji"].class_keys) and all(t.strip() for t in emoji.texts)
    assert sum(":" in t for t in emoji.texts) > 0.95 * len(emoji)  # "label: keyword, ..." (a concept may have none)


@pytest.mark.parametrize("templates, count", [("imagenet80", 80), ("imagenet7", 7)])
def test_name_texts_are_every_template_of_every_class(small, templates, count):
    _, benches = small
    bench = benches["fashion-mnist"]
    found = class_texts.class_texts(bench, "name", templates=templates)
    assert found.per_class() == [count] * len(bench.class_keys)
    assert list(found.owner) == sorted(found.owner)  # class-major
    assert found.texts[0] == class_texts.TEMPLATES[templates][0].replace("{c}", bench.class_names[0])
    assert len(set(found.ids)) == len(found)
    assert class_texts.TEMPLATES["imagenet80"] == tuple(IMAGENET_TEMPLATES)
    bare = class_texts.class_texts(bench, "bare-name")
    assert bare.texts == bench.class_names


def test_articles_are_split_into_sentences(small):
    assert class_texts.split_sentences('It is "big." It is red. It was cut off mid') == ['It is "big."', "It is red."]
    assert class_texts.split_sentences("No full stop at all") == ["No full stop at all"]
    _, benches = small
    bench = benches["emoji"]
    found = class_texts.class_texts(bench, "encyclopedia")
    record = class_texts.load_class_texts("emoji", "encyclopedia")
    assert (min(found.per_class()) >= 1 and max(found.per_class()) > 1
            and len(found.per_class()) == len(bench.class_keys))
    first = bench.class_keys[0]
    assert " ".join(t for t, o in zip(found.texts, found.owner) if o == 0) in record["texts"][first]


def test_generated_texts_match_their_manifest():
    manifest = yaml.safe_load(class_texts.CLASS_TEXT_MANIFEST.read_text())
    generated = {entry["file"] for entry in manifest["files"] if entry["kind"] in class_texts.GENERATED_KINDS}
    assert generated == {f"{d}-{k}.json" for d in class_texts.SMALL_DATASETS for k in class_texts.GENERATED_KINDS}
    for entry in manifest["files"]:  # every file, generated or not (Caltech-101's WordNet and Wikipedia texts)
        path = class_texts.CLASS_TEXT_DIR / entry["file"]
        assert file_sha256(path) == entry["sha256"], f"{path} was changed after generation"
    for entry in [e for e in manifest["files"] if e["kind"] in class_texts.GENERATED_KINDS]:
        record = class_texts.load_class_texts(entry["dataset"], entry["kind"])
        assert record["prompt"] == class_texts.PROMPTS[entry["kind"]] == class_texts.PROMPT_VARIANTS[entry["kind"]][0]
        assert record["model"]["name"] == "offline/smollm2-135m-instruct"
        assert record["generation"]["do_sample"] is False and record["generation"]["seconds"] > 0
        assert set(record["texts"]) == set(class_texts.generation_classes(entry["dataset"]))
        assert all(text.strip() for text in record["texts"].values())


def test_text_sources_have_distinct_store_keys(small):
    _, benches = small
    bench = benches["fashion-mnist"]
    from corpora import wikipedia

    kinds = [k for k in (*class_texts.TEXT_KINDS, "bare-name") if k != "wikipedia" or wikipedia.installed()]
    sources = [json.dumps(class_texts.text_source(bench, kind), sort_keys=True) for kind in kinds]
    sources.append(json.dumps(class_texts.text_source(bench, "name", templates="imagenet7"), sort_keys=True))
    assert len(set(sources)) == len(sources)


def test_several_generated_texts_per_class(single_thread):
    """--per-class 2: the first text greedy with the recorded prompt, the second sampled with a prompt variant."""
    classes = {"Bag": "Bag", "Sandal": "Sandal"}
    record = class_texts.generate_texts("offline/smollm2-135m-instruct", classes, "description", per_class=2,
                                        max_new_tokens=6)
    assert set(record["texts"]) == set(classes) and all(len(v) == 2 for v in record["texts"].values())
    assert record["prompts"] == list(class_texts.PROMPT_VARIANTS["description"][:2])
    assert record["sampling"]["do_sample"] is True
    again = class_texts.generate_texts("offline/smollm2-135m-instruct", classes, "description", per_class=2,
                                       max_new_tokens=6)
    assert again["texts"] == record["texts"]  # seeded sampling: reproducible


# ------------------------------------------------------------------------------------ training and scoring
class _Identity(torch.nn.Module):
    """A stand-in method: normalised features on both sides (one parameter, so it has a device)."""

    def __init__(self):
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(1))

    def embed_text(self, x):
        return torch.nn.functional.normalize(x.float(), dim=-1)

    def embed_image(self, x):
        return torch.nn.functional.normalize(x.float(), dim=-1)

    def loss(self, batch):
        return (self.embed_image(batch["image"]) * self.embed_text(batch["text"])).sum() * 0 + self.anchor.sum()


def _toy_bench(n_unseen=3, per_class=4):
    roles = ("seen",) * 2 + ("unseen",) * n_unseen
    labels = [c for c in range(len(roles)) for _ in range(per_class)]
    source = class_splits.ImageSource("toy", tuple(map(str, range(len(labels)))), lambda i: None, {})
    return class_splits.ClassBenchmark("toy", tuple(f"c{i}" for i in range(len(roles))),
                                       tuple(f"c{i}" for i in range(len(roles))), roles, (source,),
                                       tuple((0, i) for i in range(len(labels))), tuple(labels),
                                       tuple("test" if roles[c] == "unseen" else "train" for c in labels))


def test_class_score_is_the_mean_of_its_texts_scores():
    torch.manual_seed(0)
    bench = _toy_bench()
    owner = [0, 1, 2, 2, 2, 3, 4, 4]  # class 2 has three texts, class 4 two
    texts, images = torch.randn(len(owner), 16), torch.randn(len(bench.image_labels), 16)
    got = viterb.unseen_score(_Identity(), images, texts, owner, bench)
    # Brute force: every image x text cosine, averaged per unseen class, argmax, mean per-class accuracy.
    unseen = bench.classes("unseen")
    cos = torch.nn.functional.normalize(images, dim=-1) @ torch.nn.functional.normalize(texts, dim=-1).T
    scores = torch.stack([cos[:, [t for t, o in enumerate(owner) if o == c]].mean(1) for c in unseen], 1)
    test = bench.images("test")
    hits = {c: [] for c in unseen}
    for i in test:
        hits[bench.image_labels[i]].append(unseen[int(scores[i].argmax())] == bench.image_labels[i])
    assert got == pytest.approx(sum(sum(h) / len(h) for h in hits.values()) / len(unseen))
    # Texts of seen classes are never candidates: an image identical to a seen class's text still lands on
    # an unseen class (every test image is scored among the unseen classes only).
    images[bench.images("test")] = texts[0]
    assert 0 <= viterb.unseen_score(_Identity(), images, texts, owner, bench) <= 1


def test_a_score_among_some_classes_averages_their_recall_only():
    """``among``: images of the other unseen classes are still classified among all of them, and count for nothing;
    the subset score is the brute-force mean recall of the chosen classes."""
    torch.manual_seed(1)
    bench = _toy_bench(n_unseen=4, per_class=5)
    owner = list(range(len(bench.class_keys)))
    texts, images = torch.randn(len(owner), 8), torch.randn(len(bench.image_labels), 8)
    unseen, test = bench.classes("unseen"), bench.images("test")
    cos = torch.nn.functional.normalize(images, dim=-1) @ torch.nn.functional.normalize(texts, dim=-1).T
    predicted = {i: unseen[int(cos[i, unseen].argmax())] for i in test}
    among = unseen[1:3]
    recall = [sum(predicted[i] == c for i in test if bench.image_labels[i] == c) / 5 for c in among]
    got = viterb.unseen_score(_Identity(), images, texts, owner, bench, among=among)
    assert got == pytest.approx(sum(recall) / len(recall))
    every = viterb.unseen_score(_Identity(), images, texts, owner, bench)
    assert every == pytest.approx(viterb.unseen_score(_Identity(), images, texts, owner, bench, among=unseen))
    assert viterb.unseen_score(_Identity(), images, texts, owner, bench, among=[]) != viterb.unseen_score(
        _Identity(), images, texts, owner, bench, among=[])  # nan: no class to average over


def test_training_draws_each_text_of_its_class_uniformly():
    owner = [1, 0, 1, 1, 2]  # rows out of class order on purpose
    features = torch.arange(len(owner), dtype=torch.float32)[:, None].repeat(1, 4)
    pairs = ClassTextPairs(_Identity(), features, owner, n_classes=3, seed=0)
    labels = torch.tensor([1] * 3000 + [0] * 10 + [2] * 10)
    drawn = pairs.draw(labels)[:, 0].long()
    assert set(drawn[:3000].tolist()) == {0, 2, 3} and set(drawn[3000:3010].tolist()) == {1}
    assert set(drawn[3010:].tolist()) == {4}
    counts = torch.bincount(drawn[:3000], minlength=5)[[0, 2, 3]].float()
    assert (counts / 3000 - 1 / 3).abs().max() < 0.04
    first = ClassTextPairs(_Identity(), features, owner, n_classes=3, seed=0).draw(labels)
    assert torch.equal(first, drawn[:, None].float().repeat(1, 4))  # seeded: the same draws for the same seed
    batch = {"image": torch.randn(3, 4), "text": torch.randn(3, 4)}
    assert pairs.loss(batch).ndim == 0  # a batch that carries its texts is used as is


# ------------------------------------------------------------------------------------------ plan and config
def test_feature_plan_is_exactly_what_the_runs_read(small):
    cfg, benches = small
    plan = viterb.feature_plan(cfg, benches)
    names = plan.names()
    assert len(names) == len(set(names))
    read = {f"text:{s.text.name}:{s.text.pooling}:{s.dataset}/{s.kind}" for s in viterb.run_specs(cfg)}
    read |= {f"image:{s.vision.name}:{source.name}" for s in viterb.run_specs(cfg)
             for source in benches[s.dataset].image_sources}
    assert set(names) == read
    assert ("text:offline/all-MiniLM-L6-v2:cls:emoji/name" in names
            and "text:offline/all-MiniLM-L6-v2:mean:emoji/name" in names)
    entry = plan["text:offline/gemma-3-270m:last_token:emoji/description"]
    texts = class_texts.class_texts(benches["emoji"], "description")
    assert entry.texts == list(texts.texts) and entry.ids == list(texts.ids)
    quick = viterb.run_specs(cfg, quick=True)
    assert {s.study for s in quick} == {"main"} and {s.seed for s in quick} == {cfg.seeds[0]}


def test_small_config_reads_encoders_at_cls_and_keeps_fashion_out_of_the_score(small):
    cfg, _ = small
    assert cfg.score_datasets == ("emoji",) and cfg.check_datasets == ("fashion-mnist",)
    assert {t.name: t.pooling for t in cfg.text if viterb.family(cfg, t) == "encoder"} == {
        "offline/all-MiniLM-L6-v2": "cls"}
    assert all(t.pooling == "last_token" for t in cfg.text if viterb.family(cfg, t) == "decoder")
    assert [t.pooling for t in cfg.pooling_ablation] == ["mean"]


def test_full_config_is_table_1():
    cfg = viterb.load_config("full")
    assert cfg.vision[0].name == "facebook/dinov2-base"
    assert cfg.score_datasets == FULL and cfg.name_templates == "imagenet80"
    names = [t.name for t in cfg.text]
    assert names == ["google-bert/bert-large-uncased", "google/t5-v1_1-xl", "google/flan-ul2",
                     "sentence-transformers/sentence-t5-xxl", "google/gemma-7b", "meta-llama/Meta-Llama-3-8B"]
    assert set(cfg.encoders) == set(names[:4])
    assert cfg.text[0].pooling == "cls" and all(t.pooling == "last_token" for t in cfg.text[1:])
    assert len(viterb.PAPER_TABLE_1) == 7 and "NV-Embed" in viterb.PAPER_TABLE_1
    assert "nvidia/NV-Embed-v2" in (ROOT / "notebooks" / "configs" / "viterb.yaml").read_text()


def test_a_config_naming_an_unknown_encoder_is_refused():
    from lib.core.config import ConfigError

    with pytest.raises(ConfigError, match="encoders"):
        viterb.load_config("small", {"encoders": ["bert-base-uncased"]})


# ------------------------------------------------------------------------------------------------- claims
def _runs(decoder_scores, encoder_scores, kinds=("name", "description")):
    runs = Runs()
    for seed, (d, e) in enumerate(zip(decoder_scores, encoder_scores)):
        for kind in kinds:
            bonus = 0.05 if kind != "name" else 0.0
            for model, family, base in (("dec-a", "decoder", d), ("dec-b", "decoder", d - 0.05),
                                        ("enc", "encoder", e)):
                runs.add(study="main", role="score", dataset="emoji", model=model, family=family, kind=kind,
                         seed=seed, score=base + bonus, chance=0.005)
    return runs


def test_claims_follow_the_rule():
    cfg = dataclasses.replace(viterb.load_config("small"), text_kinds=("name", "description"))
    runs = _runs([0.30, 0.31, 0.29], [0.10, 0.12, 0.11])
    found = {c.id: c for c in viterb.claims(cfg, runs, {"dec-a": 20.0, "dec-b": 40.0, "enc": None})}
    assert found["decoders_beat_encoders"].verdict == "reproduced"
    assert found["description_beats_names"].verdict == "reproduced"
    assert found["capability_predicts_alignment"].verdict == "reproduced"  # dec-a: fewer bits per byte, +5 points
    assert "two decoders" in found["capability_predicts_alignment"].diagnosis
    assert found["above_chance"].verdict == "reproduced"
    one_seed = {c.id: c for c in viterb.claims(cfg, _runs([0.3], [0.1]), {"dec-a": 20.0, "dec-b": 40.0})}
    assert all(c.verdict == "inconclusive" for c in one_seed.values())
    flipped = {c.id: c for c in viterb.claims(cfg, _runs([0.10, 0.11, 0.12], [0.30, 0.31, 0.29]), {})}
    assert (flipped["decoders_beat_encoders"].verdict == "not reproduced"
            and "capability_predicts_alignment" not in flipped)
    assert (viterb_claims._paper_mean(["Dec."]) == pytest.approx(511.9 / 12)
            and viterb_claims._paper_mean(["Enc."]) == pytest.approx(562.9 / 16))


def test_a_resplit_moves_whole_families_keeps_the_role_counts_and_leaks_nothing():
    bench = _toy_bench(n_unseen=3, per_class=2)
    bench = dataclasses.replace(bench, class_names=("ant", "ants", "bee", "cat", "dog"))
    family = {"ant": "ant", "ants": "ant", "bee": "bee", "cat": "cat", "dog": "dog"}.__getitem__
    drawn = [class_splits.resplit(bench, seed, family) for seed in range(12)]
    for split in drawn:
        split.check_no_leak()
        assert sorted(split.class_role) == sorted(bench.class_role)  # two seen, three unseen, whatever the seed
        assert split.class_role[0] == split.class_role[1]  # "ant" and "ants": one family, one role
        assert split.image_labels == bench.image_labels and split.image_rows == bench.image_rows
    assert len({split.class_role for split in drawn}) > 1  # the seed draws the split
    assert drawn[3] == class_splits.resplit(bench, 3, family)  # ... reproducibly


def test_a_seed_reads_its_own_split_only_where_the_config_says_so(small):
    cfg, benches = small
    assert viterb.seed_benchmark(cfg, benches, "emoji", 1) is benches["emoji"]  # small: the fixed split
    per_seed = dataclasses.replace(cfg, split_per_seed=True)
    first, second = (viterb.seed_benchmark(per_seed, benches, "emoji", s) for s in (0, 1))
    assert first.class_role != second.class_role and first.counts() == second.counts() == benches["emoji"].counts()
    assert viterb.seed_benchmark(per_seed, benches, "emoji", 1) is second  # drawn once per seed


def test_wikipedia_is_tables_column_and_reference_its_stand_in_only_without_it():
    small, medium = viterb.load_config("small"), viterb.load_config("medium")
    assert viterb.paper_columns(small)["reference"] == "Wikip. Articles" and "wikipedia" not in small.text_kinds
    assert viterb.paper_columns(medium) == {"name": "Class Names", "wikipedia": "Wikip. Articles"}
    assert viterb.paper_kind(medium, "reference") is None
    assert viterb_claims._paper_mean(kinds=["reference"]) == viterb_claims._paper_mean(kinds=["wikipedia"]) == (
        pytest.approx(sum(row[4] for row in viterb.PAPER_TABLE_1.values()) / 7))


def test_the_wikipedia_claim_reads_the_classes_with_an_article():
    """Only the classes with an article differ between `wikipedia` and `name`: the claim is read there
    (``score_own_text``), and `reference` beside it is the book's own question."""
    cfg = dataclasses.replace(viterb.load_config("small"), text_kinds=("name", "reference", "wikipedia"))
    runs = Runs()
    for seed in range(5):
        for kind, own, every in (("name", 0.10, 0.20), ("wikipedia", 0.14 + 0.002 * seed, 0.20), ("reference", 0, 0.2)):
            for model, family in (("dec", "decoder"), ("enc", "encoder")):
                runs.add(study="main", role="score", dataset="emoji", model=model, family=family, kind=kind,
                         seed=seed, score=every + 0.001 * seed, score_own_text=own, chance=0.005)
    found = {c.id: c for c in viterb.claims(cfg, runs, {})}
    wiki = found["wikipedia_beats_names"]
    assert wiki.origin == "paper" and wiki.verdict == "reproduced" and "Wikip. Articles 40.1" in wiki.paper_value
    assert wiki.comparison.difference == pytest.approx(0.044)
    assert found["reference_beats_names"].origin == "book" and found["reference_beats_names"].paper_pair is None
    worse = Runs(dict(r, score_own_text=0.20 - r["score_own_text"]) if r["kind"] == "wikipedia" else r for r in runs)
    lost = {c.id: c for c in viterb.claims(cfg, worse, {})}["wikipedia_beats_names"]
    assert lost.verdict == "not reproduced"
    assert "emoji: wikipedia 5.60 % vs names 10.00 %" in lost.diagnosis  # the classes with an article
    assert "on all the unseen classes" in lost.diagnosis and "wikipedia 20.20 % vs names 20.20 %" in lost.diagnosis


def test_medium_config_runs_seven_models_five_seeds_and_the_curve_on_three():
    cfg = viterb.load_config("medium")
    names = [t.name for t in cfg.text]
    assert len(names) == 7 and "offline/qwen2.5-coder-1.5b-instruct" in names
    assert len(cfg.seeds) >= 5 and cfg.curve_run_seeds == cfg.seeds[:3]
    assert {s.seed for s in viterb.curve_specs(cfg, 1000)} == set(cfg.seeds[:3])
    with pytest.raises(ValueError, match="curve_seeds"):
        viterb.load_config("medium", {"curve_seeds": 9})


@pytest.mark.skipif(not __import__("corpora.wikipedia").wikipedia.installed(),
                    reason="the pinned Wikipedia wheel is a medium asset (make setup-medium)")
def test_wikipedia_texts_are_the_article_sentences_or_the_name(small):
    _, benches = small
    bench = benches["emoji"]
    from corpora import wikipedia

    found = class_texts.class_texts(bench, "wikipedia", templates="bare")
    own = set(class_texts.with_own_text(bench, "wikipedia"))
    articles = wikipedia.class_texts(bench.class_names)
    assert 0 < len(own) < len(bench.class_keys) and found.source["with_article"] == len(own)
    for c, name in enumerate(bench.class_names):
        texts = [t for t, o in zip(found.texts, found.owner) if o == c]
        assert texts == (articles[name] if c in own else [name])


def test_split_diagram_is_drawn_from_the_benchmarks(small):
    import matplotlib

    matplotlib.use("Agg")
    cfg, benches = small
    fig = class_splits.split_diagram(benches, cfg.score_datasets)
    texts = " ".join(t.get_text() for ax in fig.axes for t in ax.texts)
    assert "192 unseen" in texts and "3 unseen" in texts and "7 seen" in texts and "64 val" in texts


# --------------------------------------------------------------------------------------- the notebook (slow)
@pytest.fixture(scope="module")
def viterb_run(tmp_path_factory):
    # nbval's run of this session (all seeds), or, run on its own, a quick one (main grid, first seed).
    return chapter_metrics("viterb", tmp_path_factory.mktemp("viterb"))


@pytest.mark.slow
def test_viterb_small_config_metrics(viterb_run):
    metrics = viterb_run
    assert metrics["config"] == "small" and metrics["chapter"] == "viterb"
    chance = metrics["extra"]["chance"]
    runs = [r for r in metrics["runs"] if r["study"] == "main"]
    models = {r["model"] for r in runs}
    assert models == {"gemma-3-270m", "smollm2-135m-instruct", "all-MiniLM-L6-v2"}
    assert {r["pooling"] for r in runs if r["family"] == "encoder"} == {"cls"}
    for model in models:
        # Emoji: 192 unseen concepts (chance 0.5 %): every model, averaged over text types and seeds, far above.
        emoji = [r["score"] for r in runs if r["model"] == model and r["dataset"] == "emoji"]
        assert sum(emoji) / len(emoji) > 5 * chance["emoji"], model
    # Fashion-MNIST (3 unseen classes, chance 33 %) is a separate check, never part of the score.
    assert {r["role"] for r in runs if r["dataset"] == "fashion-mnist"} == {"check"}
    fashion = [r["score"] for r in runs if r["dataset"] == "fashion-mnist"]
    assert sum(fashion) / len(fashion) > chance["fashion-mnist"]
    claims = {c["id"]: c for c in metrics["claims"]}
    assert {"decoders_beat_encoders", "description_beats_names", "capability_predicts_alignment"} <= set(claims)
    capability = {c["model"]: c for c in metrics["extra"]["capability"]}
    assert capability["offline/all-MiniLM-L6-v2"]["perplexity"] is None
    assert capability["offline/all-MiniLM-L6-v2"]["bits_per_byte"] is None
    gemma = capability["offline/gemma-3-270m"]
    assert 1 < gemma["perplexity"] < 10_000
    # bits per byte = the same log-likelihood per byte instead of per token: the two agree through the token count
    assert gemma["bits_per_byte"] == pytest.approx(math.log2(gemma["perplexity"]) * gemma["tokens"] / gemma["bytes"],
                                                   rel=1e-6)
    assert 0.3 < gemma["bits_per_byte"] < 4  # English text under a 270M LM: about 1-2 bits a byte
    if not metrics["extra"]["quick"]:
        control = [r["score"] for r in metrics["runs"] if r["study"] == "control" and r["dataset"] == "emoji"]
        assert control and sum(control) / len(control) < 3 * chance["emoji"]
        assert {r["model"] for r in metrics["runs"] if r["study"] == "pooling"} == {"all-MiniLM-L6-v2 (mean)"}
