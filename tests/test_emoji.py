"""Tests of corpora.emoji: the emoji corpus and its leak-free family splits."""
from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest
from PIL import Image

from corpora import emoji
from corpora.emoji import Concept, caption, family_key, make_splits


@pytest.fixture(scope="module")
def splits(emoji_concepts):
    return make_splits(emoji_concepts)


def test_corpus_is_base_emoji_with_unique_keys(emoji_concepts):
    assert 1800 <= len(emoji_concepts) <= 2100  # ~1,900 base emoji drawn in both styles
    keys = [c.key for c in emoji_concepts]
    assert len(set(keys)) == len(keys)
    assert all("FE0F" not in c.key.split("-") for c in emoji_concepts)
    # no skin-tone duplicates and no swatches of the "component" group
    assert not any("skin tone" in c.label for c in emoji_concepts)
    assert not any(c.group == "component" or c.group == "components" for c in emoji_concepts)
    assert all(c.label and c.group and c.family == family_key(c.label) for c in emoji_concepts)


@pytest.mark.parametrize("labels,family", [
    (["man rowing boat", "woman rowing boat", "person rowing boat"], "rowing boat"),
    (["keycap: 7", "keycap: #", "keycap: 10"], "keycap"),
    (["family: man, woman, boy", "family: woman, girl"], "family"),
    (["kiss: woman, man", "kiss"], "kiss"),
    (["couple with heart: man, man", "couple with heart"], "couple with heart"),
    (["old man", "older person", "baby", "woman"], "person"),
    (["man cook", "woman cook", "cook"], "cook"),
    (["grinning face"], "grinning face"),
])
def test_family_key_examples(labels, family):
    assert {family_key(label) for label in labels} == {family}


def test_family_key_keeps_distinct_concepts_apart():
    assert family_key("growing heart") != family_key("man rowing boat")  # "rowing" inside "growing"
    assert family_key("woman rowing boat") != family_key("woman surfing")


def test_committed_splits_equal_a_fresh_regeneration(emoji_concepts, splits):
    committed = json.loads(emoji.SPLITS_FILE.read_text())
    assert committed == json.loads(json.dumps(splits))  # JSON round trip: same keys, same values
    assert make_splits(emoji_concepts) == splits  # deterministic
    assert make_splits(emoji_concepts, seed=1)["concepts"] != splits["concepts"]  # the seed matters


def test_every_concept_has_exactly_one_split(emoji_concepts, splits):
    table = splits["concepts"]
    assert set(table) == {c.key for c in emoji_concepts}
    assert set(table.values()) == {"train", "val", "unseen"}
    assert Counter(table.values()) == Counter(splits["counts"])


def test_no_family_straddles_splits(emoji_concepts, splits):
    by_family = defaultdict(set)
    for c in emoji_concepts:
        by_family[c.family].add(splits["concepts"][c.key])
    assert all(len(s) == 1 for s in by_family.values()), [f for f, s in by_family.items() if len(s) > 1][:5]
    rowing = {splits["concepts"][c.key] for c in emoji_concepts if c.label.endswith("rowing boat")}
    keycaps = {splits["concepts"][c.key] for c in emoji_concepts if c.label.startswith("keycap")}
    assert len(rowing) == 1 and len(keycaps) == 1


def test_split_fractions(emoji_concepts, splits):
    n = len(emoji_concepts)
    counts = splits["counts"]
    assert counts["unseen"] / n == pytest.approx(0.2, abs=0.01)
    assert counts["val"] / n == pytest.approx(0.1, abs=0.01)
    assert sum(counts.values()) == n


def test_split_concepts_are_disjoint_in_concepts_labels_and_families(emoji_concepts):
    parts = {s: emoji.split_concepts(s) for s in ("train", "val", "unseen")}
    keys = {s: {c.key for c in cs} for s, cs in parts.items()}
    families = {s: {c.family for c in cs} for s, cs in parts.items()}
    labels = {s: {c.label.lower() for c in cs} for s, cs in parts.items()}
    for a, b in [("train", "val"), ("train", "unseen"), ("val", "unseen")]:
        assert not keys[a] & keys[b]
        assert not families[a] & families[b]
        assert not labels[a] & labels[b]
    assert set().union(*keys.values()) == {c.key for c in emoji_concepts}
    # corpus order is kept within a split
    order = {c.key: i for i, c in enumerate(emoji_concepts)}
    for cs in parts.values():
        assert [order[c.key] for c in cs] == sorted(order[c.key] for c in cs)


def test_unknown_split_is_an_error():
    with pytest.raises(ValueError, match="test"):
        emoji.split_concepts("test")


def test_images_exist_for_both_styles_and_are_64px(emoji_concepts):
    for c in emoji_concepts:
        assert set(c.images) == set(emoji.STYLES)
        for style in emoji.STYLES:
            with Image.open(c.images[style]) as handle:  # reads the header only
                assert handle.size == (64, 64), (c.key, style)
                assert handle.format == "PNG"
                # every file carries transparency (RGBA; a few are LA or palette + tRNS)
                assert handle.mode in ("RGBA", "LA") or (handle.mode == "P" and "transparency" in handle.info)
    for c in emoji_concepts[::97]:
        for style in emoji.STYLES:
            image = c.image(style)
            assert image.mode == "RGBA" and image.size == (64, 64)
            alpha = image.getchannel("A")
            assert alpha.getextrema()[0] < 255  # real drawings: a transparent background


def test_the_two_styles_are_different_drawings(emoji_concepts):
    c = emoji_concepts[0]
    assert c.image("google").tobytes() != c.image("twitter").tobytes()


def _concept(label, tags):
    return Concept(key="X", label=label, tags=tuple(tags), group="animals & nature", subgroup="animal-mammal",
                   family=family_key(label), images={})


def test_caption_kinds():
    c = _concept("dog face", ["dog", "Dog Face", "face", "pet"])
    assert caption(c) == caption(c, "label") == "dog face"
    assert caption(c, "label_tags") == "dog face: dog, face, pet"  # the label itself is not repeated
    assert caption(c, "long") == "dog face. Keywords: dog, face, pet. Group: animals & nature, animal-mammal."
    bare = _concept("hole", ["hole"])
    assert caption(bare, "label_tags") == "hole"
    assert caption(bare, "long") == "hole. Keywords: hole. Group: animals & nature, animal-mammal."
    with pytest.raises(ValueError, match="caption kind"):
        caption(c, "tags")


def test_real_captions(emoji_concepts):
    for c in emoji_concepts[:50]:
        assert caption(c, "label_tags").startswith(c.label)
        assert c.group in caption(c, "long") and c.subgroup in caption(c, "long")
    assert all(caption(c, "label_tags").strip() for c in emoji_concepts)  # no empty caption anywhere


def test_multilingual_names(emoji_concepts):
    c = emoji_concepts[0]
    assert c.names["en"] == c.label
    assert len(c.names) >= 10 and len(set(c.names.values())) >= 8
