"""Which test images name a concept the third tower's pretraining labels cover, and which do not.

Why: the Three Towers paper explains LiT's strengths and weaknesses by what the frozen model's labels cover
(LiT with an ImageNet-21k tower is strong on ImageNet-like tasks and weak on car brands, which no class
names). The chapter's third tower is an ImageNet-1k classifier, so the unseen test is split into concepts
of groups ImageNet-1k names (animals, food, places, objects) and groups it has no class for (flags,
symbols, faces, people): CLDR emoji groups, and for the medium corpus also the Openclipart folders that
plainly fall on one side. See notebooks/three_towers.py, section "Scratch vs LiT vs 3T".
"""
from __future__ import annotations

__all__ = ["COVERED", "NOT_COVERED", "MEDIUM_GROUPS", "concept_groups"]

# ImageNet-1k, the third tower's pretraining labels, names animals, foods, vehicles, buildings and everyday
# objects; it has no class for a flag, a symbol, a facial expression or a hand gesture. The emoji groups
# on either side of that line (activities, half sports gear and half events, are on neither side):
COVERED = ("animals & nature", "food & drink", "travel & places", "objects")
NOT_COVERED = ("flags", "symbols", "smileys & emotion", "people & body")


# The medium corpus's categories on either side of the same line: the emoji sources' CLDR group slugs, and the
# Openclipart folders whose drawings are plainly one or the other (the rest, e.g. recreation, are on neither side).
MEDIUM_GROUPS = {"animals-nature": "animals & nature", "food-drink": "food & drink", "travel-places": "travel & places",
                 "objects": "objects", "flags": "flags", "symbols": "symbols", "smileys-emotion": "smileys & emotion",
                 "people-body": "people & body",
                 **{f: "objects" for f in ("animals", "food", "plants", "transportation", "buildings", "tools",
                                           "electronics", "containers")},
                 "signs_and_symbols": "symbols", "people": "people & body"}


def concept_groups(labelled) -> list[str] | None:
    """The group of each image of an emoji or medium set (CLDR group, or :data:`MEDIUM_GROUPS`; None for an image
    on neither side of the line), or None for other sets."""
    if labelled.source.get("dataset") == "emoji":
        from corpora import emoji

        groups = {c.key: c.group for c in emoji.load_concepts()}
        return [groups[i.split("/")[0]] for i in labelled.ids]
    if labelled.name.startswith("medium-"):
        from corpora import medium

        rows = {r["id"]: r for r in medium.items()}
        return [MEDIUM_GROUPS.get(rows[i]["category"]) if rows[i]["source"] != "game-icons" else None
                for i in labelled.ids]
    return None
