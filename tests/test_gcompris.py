"""Tests of corpora.rcc, corpora.qm and corpora.gcompris.

The readers are tested on files made here, byte by byte from Qt's layout (a zlib entry, a raw entry, a nested
folder; a hostile offset and a lying length refused with an error naming the file; a .qm whose source text is
stripped, found by hash as Qt finds it). The real index needs Debian gcompris-qt-data 3.1-2 in
/usr/share/gcompris-qt (or GCOMPRIS_DIR) and skips, saying so, without it.
"""
from __future__ import annotations

import hashlib
import struct
import zlib
from pathlib import Path

import pytest

from corpora import gcompris, manifests, qm, rcc


# --------------------------------------------------------------------------------------------- .rcc

def _name(text: str) -> bytes:
    raw = text.encode("utf-16-be")
    return struct.pack(">HI", len(text), 0) + raw


def make_rcc(version: int = 3, compress: bool = True, data_offset_shift: int = 0, declared: int | None = None) -> bytes:
    """``/a/raw.txt`` (stored raw) and ``/a/b/z.txt`` (zlib, qCompress framing), as Qt's rcc lays them out."""
    names, name_offsets = b"", {}
    for label in ("a", "b", "raw.txt", "z.txt"):
        name_offsets[label] = len(names)
        names += _name(label)
    raw, packed_text = b"plain bytes", b"compressed " * 20
    packed = struct.pack(">I", len(packed_text) if declared is None else declared) + zlib.compress(packed_text)
    payload = struct.pack(">I", len(raw)) + raw
    z_offset = len(payload)
    stored = packed if compress else packed_text
    payload += struct.pack(">I", len(stored)) + stored
    tail = b"\0" * 8 if version >= 2 else b""

    def directory(name: int, count: int, first: int) -> bytes:
        return struct.pack(">IHII", name, 0x02, count, first) + tail

    def file(name: int, flags: int, offset: int) -> bytes:
        return struct.pack(">IHHHI", name, flags, 0, 0, offset) + tail

    # nodes: 0 root -> [1 a]; 1 a -> [2 b, 3 raw.txt]; 2 b -> [4 z.txt]
    tree = (directory(0, 1, 1) + directory(name_offsets["a"], 2, 2) + directory(name_offsets["b"], 1, 4)
            + file(name_offsets["raw.txt"], 0, 0)
            + file(name_offsets["z.txt"], 0x01 if compress else 0, z_offset + data_offset_shift))
    header = 20 + (4 if version >= 3 else 0)
    data_at, names_at = header, header + len(payload)
    tree_at = names_at + len(names)
    head = b"qres" + struct.pack(">IIII", version, tree_at, data_at, names_at) + (b"\0" * 4 if version >= 3 else b"")
    return head + payload + names + tree


@pytest.mark.parametrize("version", [1, 2, 3])
def test_rcc_reads_raw_and_zlib_entries(version, tmp_path):
    path = tmp_path / "made.rcc"
    path.write_bytes(make_rcc(version))
    assert rcc.read_rcc(path) == {"a/raw.txt": b"plain bytes", "a/b/z.txt": b"compressed " * 20}
    path.write_bytes(make_rcc(version, compress=False))
    assert rcc.read_rcc(path)["a/b/z.txt"] == b"compressed " * 20


def test_rcc_refuses_a_hostile_offset_naming_the_file(tmp_path):
    path = tmp_path / "hostile.rcc"
    path.write_bytes(make_rcc(data_offset_shift=10**9))
    with pytest.raises(rcc.RccError, match=r"hostile\.rcc.*'a/b/z\.txt'.*outside the file"):
        rcc.read_rcc(path)


def test_rcc_refuses_lies_and_garbage(tmp_path):
    path = tmp_path / "lying.rcc"
    path.write_bytes(make_rcc(declared=10**6))  # the zlib stream is shorter than it says
    with pytest.raises(rcc.RccError, match=r"lying\.rcc.*not the 1000000 it declares"):
        rcc.read_rcc(path)
    path.write_bytes(make_rcc(declared=2**31))
    with pytest.raises(rcc.RccError, match="more than"):
        rcc.read_rcc(path)
    path.write_bytes(b"PK\3\4 not a resource file at all")
    with pytest.raises(rcc.RccError, match=r"lying\.rcc.*no 'qres' header"):
        rcc.read_rcc(path)
    data = bytearray(make_rcc())
    data[8:12] = struct.pack(">I", len(data) + 1)  # the tree lies past the end
    with pytest.raises(rcc.RccError, match="tree offset"):
        rcc.entries(bytes(data), "bad-tree.rcc")
    with pytest.raises(rcc.RccError, match="missing.rcc cannot be read"):
        rcc.read_rcc(tmp_path / "missing.rcc")


def test_rcc_zstd_entry_needs_zstandard():
    data = bytearray(make_rcc(compress=False))
    tree_at = struct.unpack(">I", data[8:12])[0]
    flags_at = tree_at + 4 * 22 + 4  # node 4 (z.txt): its flags
    data[flags_at:flags_at + 2] = struct.pack(">H", rcc.COMPRESSED_ZSTD)
    try:
        import zstandard  # noqa: F401
    except ImportError:
        with pytest.raises(rcc.RccError, match=r"zstd\.rcc.*zstd-compressed.*zstandard"):
            rcc.entries(bytes(data), "zstd.rcc")
    else:
        with pytest.raises(rcc.RccError, match=r"zstd\.rcc.*zstd data is damaged"):  # plain text is no zstd frame
            rcc.entries(bytes(data), "zstd.rcc")


def test_rcc_refuses_a_directory_loop():
    data = bytearray(make_rcc())
    tree_at = struct.unpack(">I", data[8:12])[0]
    node_b = tree_at + 2 * 22
    data[node_b + 6:node_b + 14] = struct.pack(">II", 1, 1)  # b's child is a: a loop
    with pytest.raises(rcc.RccError, match="loop|outside the tree"):
        rcc.entries(bytes(data), "loop.rcc")


# --------------------------------------------------------------------------------------------- .qm

def _field(tag: int, raw: bytes) -> bytes:
    return struct.pack(">BI", tag, len(raw)) + raw


def make_qm(messages: list[tuple[str, str, str, bool]]) -> bytes:
    """(context, source, translation, keep source text) per message; hashes sorted as lrelease writes them."""
    body, table = b"", []
    for context, source, translation, keep in messages:
        table.append((qm.elf_hash(source.encode()), len(body)))
        body += _field(qm.TRANSLATION, translation.encode("utf-16-be"))
        if keep:
            body += _field(qm.SOURCE, source.encode()) + _field(qm.COMMENT, b"")
        body += _field(qm.CONTEXT, context.encode()) + bytes([qm.END])
    hashes = b"".join(struct.pack(">II", h, o) for h, o in sorted(table))
    return (qm.MAGIC + struct.pack(">BI", qm.LANGUAGE, 2) + b"fr" + struct.pack(">BI", qm.HASHES, len(hashes))
            + hashes + struct.pack(">BI", qm.MESSAGES, len(body)) + body)


def test_qm_finds_translations_by_hash_context_and_source(tmp_path):
    path = tmp_path / "gcompris_fr.qm"
    path.write_bytes(make_qm([("board1", "Giraffe", "La girafe", True), ("board2", "Giraffe", "Girafe (2)", True),
                              ("board1", "Owl", "Le hibou", False)]))
    catalogue = qm.read_qm(path)
    assert catalogue.language == "fr" and len(catalogue) == 3
    assert catalogue.translate("Giraffe", "board1") == "La girafe"
    assert catalogue.translate("Giraffe", "board2") == "Girafe (2)"
    assert catalogue.translate("Owl", "board1") == "Le hibou"  # source stripped: found by hash alone
    assert catalogue.translate("Owl", "board9") is None and catalogue.translate("Cat") is None


def test_elf_hash_is_qts():
    # values computed by Qt's qtranslator.cpp elfHash
    assert qm.elf_hash(b"") == 1
    assert qm.elf_hash(b"a") == 0x61
    assert qm.elf_hash(b"abc") == ((0x61 << 8) + (0x62 << 4) + 0x63)


def test_qm_refuses_damaged_files(tmp_path):
    path = tmp_path / "cut.qm"
    good = make_qm([("c", "Owl", "Le hibou", True)])
    path.write_bytes(good[:-7])
    with pytest.raises(qm.QmError, match=r"cut\.qm.*runs past its end"):
        qm.read_qm(path)
    path.write_bytes(b"\0" * 40)
    with pytest.raises(qm.QmError, match=r"cut\.qm: no \.qm magic"):
        qm.read_qm(path)


# --------------------------------------------------------------------------------------------- README, licences

def test_readme_blocks_and_licences():
    text = ("Copyright: Somebody\nLicense: CC-BY-SA 4.0\nFiles:\nwonders/a.webp\nwonders/b.webp\n\n"
            "Copyright:\n  Copyright 2011 NASA\nLicense: Public domain\nComment: from https://x.org/y.jpg\nFiles:\n"
            "  c.webp\n")
    blocks = gcompris.parse_readme(text)
    assert blocks[0]["files"] == ["wonders/a.webp", "wonders/b.webp"] and blocks[1]["files"] == ["c.webp"]
    assert blocks[1]["copyright"] == "Copyright 2011 NASA"
    assert [gcompris.normalise_licence(b["license"]) for b in blocks] == ["CC-BY-SA-4.0", "Public Domain"]
    assert gcompris.normalise_licence("GPLv2+") == "GPL-2+" and gcompris.normalise_licence("CC0-1.0") == "CC0-1.0"
    assert gcompris.normalise_licence("Some custom licence") not in gcompris.FREE


def test_board_entries_read_qstr_fields():
    qml = ('property var tab: [ { "image": "qrc:/x/q.svg", "title": qsTr("Polar bear"), '
           '"text": qsTr("It says \\"hello\\"."), "image2": "qrc:/x/bear.webp", "x": 0.5 }, '
           '{ "text": qsTr("Instructions only") } ]')
    (entry,) = gcompris.board_entries(qml)
    assert entry["title"] == ("Polar bear", True) and entry["text"] == ('It says "hello".', True)
    assert entry["image2"] == ("qrc:/x/bear.webp", False)


# --------------------------------------------------------------------------------------------- the real index

@pytest.fixture(scope="module")
def index():
    base = gcompris.root()
    if not (base / "rcc").is_dir():
        pytest.skip(f"Debian gcompris-qt-data is not installed in {base}: run `{gcompris.SETUP}` (or set GCOMPRIS_DIR)")
    return gcompris.load_index()


def test_real_rcc_files_read(index):
    entries = rcc.read_rcc(gcompris.root() / "rcc" / "explore_farm_animals.rcc")
    assert any(p.endswith("animals/README") for p in entries)
    assert sum(p.endswith(".webp") for p in entries) == 9


def test_counts_and_digest_match_the_manifest(index):
    manifest = manifests.load("gcompris")
    counts = manifest["counts"]
    assert index["tree_sha256"] == manifest["tree_sha256"] == gcompris.tree_digest(gcompris.root())
    assert len(index["items"]) == counts["items"]
    assert len(index["category_photos"]) == counts["category_photos"]
    assert len(index["items"]) + len(index["category_photos"]) == counts["photos_kept"]
    assert sum(len(v) for v in index["dropped"].values()) == counts["dropped"]
    assert sum("same_source_as" in p for p in index["category_photos"]) == counts["same_source"]
    assert index["below_tuxpaint_flatness"] == counts["below_tuxpaint_flatness"]
    assert len(index["locales"]) == counts["locales"]
    assert len(gcompris.locales()) - 1 == counts["locales_90"]
    assert index["photo_flatness"] == manifest["photo_flatness"]


def test_every_image_decodes_and_matches_its_sha256(index):
    folder = Path(index["folder"])
    for item in index["items"] + index["category_photos"]:
        assert hashlib.sha256((folder / item["image"]).read_bytes()).hexdigest() == item["sha256"], item["id"]
        picture = gcompris.image(item)
        assert picture.mode == "RGB" and picture.size == (item["width"], item["height"]), item["id"]
        assert item["flatness"] < gcompris.PHOTO_FLATNESS and item["licence"] in gcompris.FREE, item["id"]
        assert item["source"].startswith("http"), item["id"]


def test_titles_unique_and_described(index):
    titles = [i["title"] for i in index["items"]]
    assert len(set(titles)) == len(titles)
    assert all(len(i["description"].split()) >= 5 for i in index["items"])


def test_languages_with_coverage(index):
    good = gcompris.locales(0.9)
    assert len(good) - 1 >= 20 and {"fr", "es", "ru", "el", "zh_TW"} <= set(good)
    french = gcompris.translations("fr")
    assert len(french) == len(index["items"])
    assert french["explore_world_animals/animals/giraffe"]["title"] == "La girafe"
    with pytest.raises(ValueError, match="locale 'xx'"):
        gcompris.translations("xx")


def test_labelled_pairs_and_categories_shapes(index):
    zero_shot = gcompris.labelled("en")
    assert len(zero_shot) == len(index["items"]) == len(zero_shot.classnames)
    assert zero_shot.labels == tuple(range(len(zero_shot))) and zero_shot.source["dataset"] == "gcompris"
    german = gcompris.labelled("de")
    assert 0.85 * len(zero_shot) <= len(german) < len(zero_shot)  # de leaves the farm animals untranslated
    retrieval = gcompris.pairs("fr")
    assert len(retrieval) == len(index["items"]) and retrieval.captions[0] != zero_shot.classnames[0]
    assert retrieval.load_image(0).mode == "RGB"
    coarse = gcompris.categories("en")
    assert coarse.classnames == ("Fishes", "Monuments", "Renewable", "Tools")
    assert len(coarse) == len(index["category_photos"]) and set(coarse.labels) == {0, 1, 2, 3}
