"""WordNet 3.0 glosses, read straight from Debian's ``wordnet-base`` files (no nltk, no download).

Why: ViTeRB's fourth text type is *real reference text* about each class (the paper uses Wikipedia
articles). For Fashion-MNIST the small config uses the WordNet gloss of each class's synset: real,
human-written, dictionary text, installed offline. ImageNet's classes
are WordNet synsets, so the same lookup serves the full config's ImageNet+ by synset offset.
Glosses also serve as held-out text for the language models' own perplexity (``chapters.viterb``).
See ``notebooks/viterb.py``, section "Text per class".

File format (``wndb(5WN)``): ``index.noun`` lines are ``lemma pos synset_cnt p_cnt [ptr...] sense_cnt
tagsense_cnt offset...`` with offsets in sense order (most frequent first); ``data.noun`` lines start at
that byte offset: ``offset lex_filenum ss_type w_cnt word lex_id ... | gloss``.
"""
from __future__ import annotations

import os
import random
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from corpora.manifests import DatasetMissingError

DEFAULT_DIR = Path("/usr/share/wordnet")


def wordnet_dir() -> Path:
    folder = Path(os.environ.get("WORDNET_DIR", DEFAULT_DIR))
    if not (folder / "data.noun").is_file():
        raise DatasetMissingError(
            f"WordNet 3.0 is missing: {folder / 'data.noun'} not found. Get it: `apt-get install wordnet-base` "
            "(Debian/Ubuntu), or download WordNet 3.0's dict/ folder and set WORDNET_DIR to it."
        )
    return folder


@dataclass(frozen=True)
class Synset:
    offset: int  # byte offset in data.noun: the synset's id (ImageNet's wnid is "n%08d" % offset)
    words: tuple[str, ...]
    gloss: str  # the definition and any quoted examples, as written in WordNet

    @property
    def wnid(self) -> str:
        return f"n{self.offset:08d}"

    @property
    def definition(self) -> str:
        """The gloss without its quoted usage examples ("...; \"example\"")."""
        return self.gloss.split('; "')[0].strip()


@lru_cache(maxsize=1)
def _index() -> dict[str, tuple[int, ...]]:
    table = {}
    with open(wordnet_dir() / "index.noun", encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("  "):  # licence header
                continue
            parts = line.split()
            lemma, p_cnt = parts[0], int(parts[3])
            sense_cnt = int(parts[4 + p_cnt])
            table[lemma] = tuple(int(x) for x in parts[6 + p_cnt : 6 + p_cnt + sense_cnt])
    return table


def synset_at(offset: int) -> Synset:
    """The noun synset whose line starts at byte ``offset`` of ``data.noun``."""
    with open(wordnet_dir() / "data.noun", "rb") as handle:
        handle.seek(offset)
        line = handle.readline().decode("utf-8")
    head, _, gloss = line.partition(" | ")
    parts = head.split()
    if int(parts[0]) != offset:
        raise ValueError(f"data.noun has no synset at offset {offset}")
    count = int(parts[3], 16)
    words = tuple(parts[4 + 2 * i].replace("_", " ") for i in range(count))
    return Synset(offset, words, gloss.strip())


def synsets(lemma: str) -> list[Synset]:
    """Noun synsets of ``lemma`` in WordNet's sense order (most frequent sense first)."""
    key = lemma.strip().lower().replace(" ", "_")
    if key not in _index():
        raise KeyError(f"{lemma!r} is not a noun in WordNet 3.0")
    return [synset_at(offset) for offset in _index()[key]]


def gloss(lemma: str, sense: int = 1) -> str:
    """The gloss of noun sense ``sense`` (1-based, as WordNet numbers them) of ``lemma``."""
    found = synsets(lemma)
    if not 1 <= sense <= len(found):
        raise KeyError(f"{lemma!r} has {len(found)} noun senses, not {sense}")
    return found[sense - 1].gloss


def sample_glosses(n: int, seed: int = 0, exclude: set[str] = frozenset()) -> list[str]:
    """``n`` definitions of random noun synsets (seeded): held-out text for a perplexity measure."""
    offsets = sorted({o for lemma, found in _index().items() if lemma not in exclude for o in found})
    picked = random.Random(seed).sample(offsets, n)
    return [synset_at(o).definition for o in picked]
