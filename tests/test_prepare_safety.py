"""``python -m provision.prepare`` against a hostile or careless user: it never deletes a file it did not write, never
writes outside ``--to``, refuses archives that climb out of their tree or expand without bound, and never prepares an
image that does not decode (so the advice "prepare again" cannot put a damaged file back)."""
from __future__ import annotations

import io
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from provision import archives, prepare
from provision.archives import ArchiveError
from provision.prepare import PrepareError
from tools import standins

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def downloads(tmp_path_factory):
    return standins.build_downloads(tmp_path_factory.mktemp("downloads"), names=["cub", "fgvc-aircraft"])


def _quiet(name, source, target, **kwargs):
    lines = []
    prepare.prepare(name, source, target, skip_checksums=True, say=lines.append, **kwargs)
    return "\n".join(lines)


def _retar(original: Path, dest: Path, extra: dict[str, bytes] | None = None, links: dict[str, str] | None = None):
    """A copy of a release tar with extra members (hostile names) and symbolic links added."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(original, "r:*") as src, tarfile.open(dest, "w:gz") as out:
        for member in src:
            out.addfile(member, src.extractfile(member) if member.isfile() else None)
        for name, data in (extra or {}).items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            out.addfile(info)
    return dest


# --- 1. a folder the user owns is never emptied ----------------------------------------------------------------------
def test_a_folder_prepare_did_not_make_is_refused_and_untouched(downloads, tmp_path):
    target = tmp_path / "thesis"
    (target / "results").mkdir(parents=True)
    (target / "thesis.tex").write_text("my thesis")
    (target / "results" / "table.csv").write_text("1,2")
    with pytest.raises(PrepareError, match=r"already holds files that provision.prepare did not write .* --replace"):
        _quiet("fgvc-aircraft", downloads["fgvc-aircraft"], target)
    assert (target / "thesis.tex").read_text() == "my thesis" and (target / "results" / "table.csv").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["thesis"]  # no staging folder was even started


def test_replace_moves_the_users_folder_aside_and_deletes_nothing(downloads, tmp_path):
    target = tmp_path / "fgvc"
    target.mkdir()
    (target / "thesis.tex").write_text("my thesis")
    said = _quiet("fgvc-aircraft", downloads["fgvc-aircraft"], target, replace=True)
    (aside,) = tmp_path.glob("fgvc.replaced-*")
    assert (aside / "thesis.tex").read_text() == "my thesis" and f"moved aside to {aside}" in said
    assert prepare.check("fgvc-aircraft", target) == []


def test_an_empty_target_and_an_earlier_preparation_need_no_flag(downloads, tmp_path):
    target = tmp_path / "fgvc"
    target.mkdir()
    _quiet("fgvc-aircraft", downloads["fgvc-aircraft"], target)
    (target / "notes.txt").write_text("added by the user after preparing")
    _quiet("fgvc-aircraft", downloads["fgvc-aircraft"], target, force=True)
    (aside,) = tmp_path.glob("fgvc.replaced-*")
    assert (aside / "notes.txt").is_file() and prepare.check("fgvc-aircraft", target) == []


def test_in_place_preparation_keeps_every_file_it_does_not_know(downloads, tmp_path):
    """--from X --to X (what the pre-flight suggests for a copy laid out by hand) with --replace: the release's
    other files (FGVC's variants.txt, manufacturer lists) stay, in the folder moved aside."""
    folder = tmp_path / "fgvc-aircraft-2013b"
    with tarfile.open(downloads["fgvc-aircraft"] / "fgvc-aircraft-2013b.tar.gz") as archive:
        archive.extractall(tmp_path, filter="data")
    (folder / "data" / "variants.txt").write_text("707-320\n")
    problem = prepare.check("fgvc-aircraft", folder)[0]
    assert "--replace" in problem
    _quiet("fgvc-aircraft", tmp_path, folder, replace=True)  # the release folder is found below --from
    (aside,) = tmp_path.glob("fgvc-aircraft-2013b.replaced-*")
    assert (aside / "data" / "variants.txt").read_text() == "707-320\n"
    assert prepare.check("fgvc-aircraft", folder) == []


# --- 2. one safe archive reader ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, archive", [("cub", "CUB_200_2011.tgz"),
                                            ("fgvc-aircraft", "fgvc-aircraft-2013b.tar.gz")])
@pytest.mark.parametrize("hostile", ["{root}/images/../../../../escape.jpg", "/tmp/escape-absolute.jpg",
                                     "../escape.jpg"])
def test_a_tar_member_that_climbs_out_is_refused_before_anything_is_written(downloads, tmp_path, name, archive,
                                                                          hostile):
    root = {"cub": "CUB_200_2011", "fgvc-aircraft": "fgvc-aircraft-2013b/data"}[name]
    source = tmp_path / "downloads"
    _retar(downloads[name] / archive, source / archive, extra={hostile.format(root=root): b"owned"})
    target = tmp_path / "deep" / "er" / "target"
    with pytest.raises(ArchiveError, match=r"refusing the archive"):
        _quiet(name, source, target)
    assert not list(tmp_path.rglob("escape*")) and not Path("/tmp/escape-absolute.jpg").exists()
    assert not target.exists()


def test_links_in_a_tar_are_skipped_never_followed(downloads, tmp_path):
    source = tmp_path / "downloads"
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    _retar(downloads["cub"] / "CUB_200_2011.tgz", source / "CUB_200_2011.tgz",
           links={"CUB_200_2011/images/link.jpg": str(outside), "CUB_200_2011/notes.txt": "../../secret.txt"})
    target = tmp_path / "cub"
    _quiet("cub", source, target)
    assert not any(p.is_symlink() for p in target.rglob("*")) and not (target / "images" / "link.jpg").exists()


def test_a_zip_member_that_climbs_out_or_is_absolute_is_refused(tmp_path):
    for bad in ("../escape.txt", "/abs/escape.txt", "a/../../escape.txt", "C:/windows.txt", "a\\..\\b.txt"):
        path = tmp_path / "bad.zip"
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("ok.txt", "fine")
            archive.writestr(bad, "owned")
        with pytest.raises(ArchiveError, match="refusing the archive"):
            list(archives.entries(path))


def test_a_zip_bomb_is_stopped_at_the_cap_with_bounded_memory(tmp_path, monkeypatch):
    """An entry whose header claims a few bytes but inflates to more than the cap stops at the cap, in blocks."""
    monkeypatch.setenv("LIB_PREPARE_MAX_ENTRY_BYTES", str(4 << 20))
    path = tmp_path / "bomb.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("images/huge.jpg", b"\0" * (64 << 20))
    assert path.stat().st_size < 200_000
    for entry in archives.entries(path):  # read while the generator holds the archive open
        with pytest.raises(ArchiveError, match=r"expands past 4,194,304 bytes; a decompression bomb"):
            entry.read()
    monkeypatch.setenv("LIB_PREPARE_MAX_ENTRY_BYTES", str(128 << 20))
    monkeypatch.setenv("LIB_PREPARE_MAX_TOTAL_BYTES", str(32 << 20))
    for entry in archives.entries(path):
        with pytest.raises(ArchiveError, match=r"expands past 33,554,432 bytes .* LIB_PREPARE_MAX_TOTAL_BYTES"):
            entry.read()


def test_the_staging_folder_refuses_a_path_outside_it(tmp_path):
    staging = prepare.Staging(tmp_path / "target")
    for rel in ("../outside.txt", "/etc/passwd-copy", "a/../../outside.txt"):
        with pytest.raises(PrepareError, match="is not a path inside"):
            staging.write(rel, b"x")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".target.preparing"]


# --- 6. an image that does not decode is never prepared --------------------------------------------------------------
def test_a_truncated_jpeg_is_refused_at_preparation_and_preparing_again_stops_there_too(downloads, tmp_path):
    """PIL's verify() passes a truncated JPEG; a full decode does not. So prepare names it, and --force (what the
    pre-flight advises after a feature pass fails on it) cannot put it back."""
    source = tmp_path / "downloads"
    from PIL import Image

    import numpy as np

    buffer = io.BytesIO()
    noise = (np.random.default_rng(0).random((64, 64, 3)) * 255).astype("uint8")
    Image.fromarray(noise).save(buffer, "JPEG")
    truncated = buffer.getvalue()[: len(buffer.getvalue()) // 2]
    with Image.open(io.BytesIO(truncated)) as image:
        image.verify()  # the old check: passes
    with tarfile.open(downloads["fgvc-aircraft"] / "fgvc-aircraft-2013b.tar.gz") as archive:
        first = next(m.name for m in archive if m.name.endswith(".jpg"))
    original = downloads["fgvc-aircraft"] / "fgvc-aircraft-2013b.tar.gz"
    dest = source / "fgvc-aircraft-2013b.tar.gz"
    dest.parent.mkdir(parents=True)
    with tarfile.open(original, "r:*") as src, tarfile.open(dest, "w:gz") as out:
        for member in src:
            data = truncated if member.name == first else src.extractfile(member).read()
            member.size = len(data)
            out.addfile(member, io.BytesIO(data))
    for force in (False, True):
        with pytest.raises(PrepareError, match=r"does not decode as an image .* get it again"):
            _quiet("fgvc-aircraft", source, tmp_path / "fgvc", force=force)
    assert not (tmp_path / "fgvc").exists()


def test_command_line_refusal_is_one_line(downloads, tmp_path):
    target = tmp_path / "mine"
    target.mkdir()
    (target / "keep.txt").write_text("keep")
    done = subprocess.run([sys.executable, "-m", "provision.prepare", "fgvc-aircraft", "--from",
                           str(downloads["fgvc-aircraft"]), "--to", str(target), "--skip-checksums"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "--replace" in done.stderr and "\n" not in done.stderr.strip()
    assert (target / "keep.txt").read_text() == "keep"
    shutil.rmtree(target)
