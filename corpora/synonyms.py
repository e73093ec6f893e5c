"""Concepts of one test set that name the same thing, so that zero-shot top-1 does not count a synonym as an error.

Why: the medium corpus' unseen concepts are titles written by many uploaders, and some are one concept twice:
"ant" and "ants", "thumbs up" and "thumb up", "traffic light: red" and "traffic lights red". A head that answers
"ants" for a drawing of an ant is right, and top-1 among distinct class names would call it wrong. The rules
favour precision over recall, so a merge is never a judgement call:

1. the same **normalised title**: case, punctuation and spacing ignored, and a plural on any word ("-ies" to
   "-y", a final "-s" on a word of four or more letters that does not end in "ss", "us" or "is"); also the same
   letters without spaces ("paint brush", "paintbrush"). Word order counts: "right arrow curving left" is not
   "left arrow curving right", nor a "boat house" a "house boat";
2. the same **WordNet noun sense**, when each whole normalised name is a WordNet noun lemma with that one sense
   only ("backpack" and "knapsack", "cellular phone" and "mobile phone"). A name with several senses is never
   merged this way: an icon titled "bar" need not be WordNet's first "bar", the saloon, and "hockey" may be
   played on ice.

Near-identical text embeddings are not a rule: checked by eye, the closest pairs of names are mostly different
concepts ("... pointing up" and "... pointing down", one scoop and two), and the chapter shows them.

Groups are the connected components of both rules. :func:`lib.core.evaluate.classification_metrics` reads them
(``Labelled.groups``): a prediction inside the true concept's group is correct, and the unmerged scores are kept
beside. See notebooks/sharelock.py, section "Zero-shot evaluation".
"""
from __future__ import annotations

import re
from collections.abc import Sequence

from corpora import wordnet

__all__ = ["normalise", "groups", "merged_pairs", "summary"]

_KEEP_S = ("ss", "us", "is")


def _singular(word: str) -> str:
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) >= 4 and word.endswith("s") and not word.endswith(_KEEP_S):
        return word[:-1]
    return word


def normalise(name: str) -> str:
    """Lower case, letters and digits only, one space between words, every word singular."""
    words = re.sub(r"[^a-z0-9]+", " ", name.lower()).split()
    return " ".join(_singular(w) for w in words)


def _only_sense(name: str) -> int | None:
    """The WordNet noun synset of ``name`` when it has exactly one, else None."""
    try:
        found = wordnet.synsets(name)
    except KeyError:  # not a WordNet noun; a missing WordNet raises (make setup installs it)
        return None
    return found[0].offset if len(found) == 1 else None


def groups(classnames: Sequence[str], use_wordnet: bool = True) -> tuple[int, ...]:
    """A group id per class (the index of the group's first class): classes with equal ids name one concept."""
    parent = list(range(len(classnames)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def join(keys: list) -> None:
        first: dict = {}
        for i, key in enumerate(keys):
            if key is None:
                continue
            if key in first:
                a, b = root(first[key]), root(i)
                parent[max(a, b)] = min(a, b)
            else:
                first[key] = i

    normalised = [normalise(c) for c in classnames]
    join([n or None for n in normalised])
    join([n.replace(" ", "") or None for n in normalised])
    if use_wordnet:
        join([_only_sense(n) if n else None for n in normalised])
    return tuple(root(i) for i in range(len(classnames)))


def merged_pairs(classnames: Sequence[str], ids: Sequence[int]) -> list[tuple[str, ...]]:
    """The groups of more than one class, by name (what a reader checks by eye)."""
    members: dict[int, list[str]] = {}
    for name, group in zip(classnames, ids):
        members.setdefault(group, []).append(name)
    return [tuple(m) for m in members.values() if len(m) > 1]


def summary(classnames: Sequence[str], ids: Sequence[int]) -> dict:
    """How many classes, groups and merged classes, and the share of classes merged into another."""
    merged = merged_pairs(classnames, ids)
    in_merged = sum(len(m) for m in merged)
    return {"classes": len(classnames), "groups": len(set(ids)), "merged_groups": len(merged),
            "classes_in_merged_groups": in_merged,
            "share_merged": (len(classnames) - len(set(ids))) / len(classnames) if classnames else 0.0}
