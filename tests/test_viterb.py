"""ViTeRB: splits are data (disjoint, checksummed), no unseen image reaches training, real reference
text, generated text matches its manifest, and the chapter's small-config run (slow)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml
from conftest import chapter_metrics

from lib.chapters import viterb
from lib.data import manifests, wordnet
from lib.core.checksums import file_sha256

ROOT = Path(__file__).resolve().parents[1]
FULL = ("awa2", "cub", "fgvc-aircraft", "imagenet-plus")


def test_fashion_split_is_seeded_disjoint_and_checksummed():
    split = viterb.load_split_file("fashion-mnist")  # raises if the file does not match the manifest's sha256
    entry = manifests.load("fashion-mnist")["splits"]
    assert file_sha256(ROOT / entry["file"]) == entry["sha256"]
    classes = manifests.load("fashion-mnist")["classes"]
    assert not set(split["seen"]) & set(split["unseen"])
    assert sorted(split["seen"] + split["unseen"]) == sorted(classes)
    assert (len(split["seen"]), len(split["unseen"])) == (7, 3)
    # The file is what the recorded function makes: regenerating it gives the same split.
    again = viterb.seeded_class_split(classes, viterb.FASHION_UNSEEN, viterb.FASHION_SPLIT_SEED)
    assert (again["seen"], again["unseen"]) == (split["seen"], split["unseen"])


def test_emoji_split_is_disjoint_and_checksummed():
    definition = yaml.safe_load((ROOT / "data_manifests" / "viterb.yaml").read_text())["small"]["emoji"]
    assert file_sha256(ROOT / definition["file"]) == definition["sha256"]
    keys = {split: {c.key for c in viterb.emoji_split(split)} for split in ("train", "val", "unseen")}
    assert {split: len(k) for split, k in keys.items()} == {s: definition["subset"][s] for s in keys}
    assert not keys["train"] & keys["unseen"] and not keys["val"] & keys["unseen"] and not keys["train"] & keys["val"]
    families = {split: {c.family for c in viterb.emoji_split(split)} for split in keys}
    assert not (families["train"] | families["val"]) & families["unseen"], "a concept family straddles the split"


@pytest.mark.parametrize("dataset", ["awa2", "cub"])
def test_full_config_proposed_splits_are_disjoint(dataset):
    manifest = manifests.load(dataset)
    unseen = manifest["splits"]["unseen"]
    assert len(unseen) == len(set(unseen)) == {"awa2": 10, "cub": 50}[dataset]
    if dataset == "awa2":
        split = viterb.full_split(dataset, manifest["classes"])
        assert len(split["seen"]) == 40 and not set(split["seen"]) & set(split["unseen"])
    else:  # seen = the rest of CUB's classes.txt (not shipped): check with the unseen names themselves
        split = viterb.full_split(dataset, sorted(unseen) + ["001.Black_footed_Albatross"])
        assert split["seen"] == ["001.Black_footed_Albatross"]


def test_aircraft_split_is_a_seeded_50_20_split_of_the_families():
    families = [f"family {i}" for i in range(70)]  # the real names come from the dataset's families.txt
    split = viterb.full_split("fgvc-aircraft", families)
    assert (len(split["seen"]), len(split["unseen"])) == (50, 20)
    assert not set(split["seen"]) & set(split["unseen"])
    assert split == viterb.full_split("fgvc-aircraft", families)


def test_full_config_manifests_say_where_to_get_the_data():
    for name in FULL:
        manifest = manifests.load(name)
        assert manifest["obtain"] and manifest["location"] and manifest["splits"]


@pytest.mark.parametrize("dataset", ["emoji", "fashion-mnist"])
def test_no_unseen_image_is_used_in_training(dataset):
    bench = viterb.load_benchmark(dataset, viterb.load_config("small"))
    bench.check_no_leak()
    unseen = set(bench.classes("unseen"))
    assert unseen and bench.images("train") and bench.images("val") and bench.images("test")
    for i in bench.images("train") + bench.images("val"):
        assert bench.image_labels[i] not in unseen
    # Rows point at images of the right class (a misaligned row would leak silently).
    for i, (source, row) in enumerate(bench.image_rows):
        image_id = bench.image_sources[source].ids[row]
        if dataset == "emoji":
            assert image_id.split("/")[0] == bench.class_keys[bench.image_labels[i]]
    if dataset == "fashion-mnist":
        from lib.data import fashion_mnist

        photos = fashion_mnist.load_test(200)
        assert [int(photos.labels[row]) for _, row in bench.image_rows] == list(bench.image_labels)
    # And the check bites: relabel one training image as unseen.
    first = bench.images("train")[0]
    broken = dataclasses.replace(bench, image_labels=(sorted(unseen)[0],) + bench.image_labels[1:]) if first == 0 else \
        dataclasses.replace(bench, image_role=tuple("train" if i == bench.images("test")[0] else r
                                                     for i, r in enumerate(bench.image_role)))
    with pytest.raises(AssertionError):
        broken.check_no_leak()


def test_wordnet_gloss_of_sandal_is_the_real_one():
    assert wordnet.gloss("sandal") == "a shoe consisting of a sole fastened by straps to the foot"
    assert wordnet.synsets("sandal")[0].wnid == "n04133789"


def test_reference_texts_are_real_text():
    cfg = viterb.load_config("small")
    fashion = viterb.load_benchmark("fashion-mnist", cfg)
    texts = dict(zip(fashion.class_names, viterb.class_texts(fashion, "reference")))
    assert texts["Sandal"] == "Sandal: a shoe consisting of a sole fastened by straps to the foot"
    emoji = viterb.load_benchmark("emoji", cfg)
    assert all(":" in t or t for t in viterb.class_texts(emoji, "reference"))


def test_generated_texts_match_their_manifest():
    manifest = yaml.safe_load(viterb.CLASS_TEXT_MANIFEST.read_text())
    names = {entry["file"] for entry in manifest["files"]}
    assert names == {f"{d}-{k}.json" for d in viterb.SMALL_DATASETS for k in viterb.GENERATED_KINDS}
    for entry in manifest["files"]:
        path = viterb.CLASS_TEXT_DIR / entry["file"]
        assert file_sha256(path) == entry["sha256"], f"{path} was changed after generation"
        record = viterb.load_class_texts(entry["dataset"], entry["kind"])
        assert record["prompt"] == viterb.PROMPTS[entry["kind"]]
        assert record["model"]["name"] == "offline/smollm2-135m-instruct"
        assert record["generation"]["do_sample"] is False
        assert set(record["texts"]) == set(viterb.generation_classes(entry["dataset"]))
        assert all(text.strip() for text in record["texts"].values())


def test_text_sources_have_distinct_store_keys():
    bench = viterb.load_benchmark("fashion-mnist", viterb.load_config("small"))
    sources = [json.dumps(viterb.text_source(bench, kind), sort_keys=True) for kind in viterb.TEXT_KINDS]
    assert len(set(sources)) == len(sources)


@pytest.fixture(scope="module")
def viterb_run(tmp_path_factory):
    # nbval's run of this session (all seeds), or, run on its own, a quick one (seed 0, one vision model).
    return chapter_metrics("viterb", tmp_path_factory.mktemp("viterb"))


@pytest.mark.slow
def test_viterb_small_config_metrics(viterb_run):
    metrics = viterb_run
    assert metrics["config"] == "small"
    chance = metrics["chance"]
    runs = metrics["runs"]
    models = {r["model"] for r in runs}
    assert models == {"gemma-3-270m", "smollm2-135m-instruct", "all-MiniLM-L6-v2"}
    seeds = {r["seed"] for r in runs}
    assert 0 in seeds
    for model in models:
        # Emoji: 192 unseen concepts (chance 0.5 %): every model, averaged over text types and seeds, far above.
        emoji = [r["score"] for r in runs if r["model"] == model and r["dataset"] == "emoji"]
        assert sum(emoji) / len(emoji) > 5 * chance["emoji"], model
    # Fashion-MNIST has only 3 unseen classes (chance 33 %) and is coarse (see the chapter): above chance
    # over all models and text types, and every model's best text type clearly above chance.
    fashion = [r["score"] for r in runs if r["dataset"] == "fashion-mnist"]
    assert sum(fashion) / len(fashion) > chance["fashion-mnist"]
    for model in models:
        by_kind = {}
        for r in runs:
            if r["model"] == model and r["dataset"] == "fashion-mnist":
                by_kind.setdefault(r["kind"], []).append(r["score"])
        assert max(sum(v) / len(v) for v in by_kind.values()) > 1.2 * chance["fashion-mnist"], model
    # The shuffled-text control falls to about chance on emoji.
    control = [r["score"] for r in metrics["controls"] if r["dataset"] == "emoji"]
    assert len(control) == len(seeds) and sum(control) / len(control) < 3 * chance["emoji"]
    # The decoders' own perplexity on held-out glosses is finite; the encoder has none.
    capability = {c["model"]: c for c in metrics["capability"]}
    assert capability["offline/all-MiniLM-L6-v2"]["perplexity"] is None
    assert 1 < capability["offline/gemma-3-270m"]["perplexity"] < 10_000
    assert metrics["statements"]
