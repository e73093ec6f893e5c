"""corpora.synonyms: which class names of a test set are one concept (and which must stay apart)."""
import pytest

from corpora import synonyms


@pytest.mark.parametrize("name, expected", [
    ("Ants", "ant"), ("traffic light: red", "traffic light red"), ("Traffic Lights  red", "traffic light red"),
    ("cherries", "cherry"), ("glass", "glass"), ("cactus", "cactus"), ("iris", "iris"), ("bus", "bus"),
])
def test_normalise_ignores_case_punctuation_spacing_and_plurals(name, expected):
    assert synonyms.normalise(name) == expected


def test_groups_join_plurals_and_spellings_but_keep_word_order_and_distinct_concepts():
    names = ["ant", "ants", "paint brush", "paintbrush", "right arrow curving left", "left arrow curving right",
             "thumbs up", "thumbs down", "boat house", "house boat"]
    ids = synonyms.groups(names, use_wordnet=False)
    assert ids[0] == ids[1] == 0 and ids[2] == ids[3] == 2
    assert len(set(ids[4:])) == 6  # the other six stay apart
    assert synonyms.merged_pairs(names, ids) == [("ant", "ants"), ("paint brush", "paintbrush")]
    assert synonyms.summary(names, ids)["share_merged"] == pytest.approx(2 / 10)


def test_wordnet_joins_names_that_share_their_only_sense_and_never_a_polysemous_one():
    pytest.importorskip("corpora.wordnet")
    from corpora import wordnet

    try:
        wordnet.wordnet_dir()
    except Exception as missing:  # noqa: BLE001 - the test says why it skips
        pytest.skip(f"WordNet is not installed here: {missing}")
    names = ["backpack", "knapsack", "bar", "saloon", "hockey", "field hockey"]
    ids = synonyms.groups(names)
    assert ids[0] == ids[1]  # one sense each, the same synset
    assert len({ids[2], ids[3]}) == 2 and len({ids[4], ids[5]}) == 2  # "bar" and "hockey" have several senses
