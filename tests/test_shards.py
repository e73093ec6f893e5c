"""Images prepared into webdataset tar shards (``provision.shards`` writes them, ``lib.data.shards`` reads them).

What must hold: every image read back through the chapter's loader is the image of the download, byte for byte;
the shards are the layout webdataset readers (open_clip, img2dataset) expect, each image a group of members that
share one dot-free key, with its caption; streamed training rows read from them equal the resident pixels; and a
shard that changed after preparation is named by the pre-flight's check and by the reader, with the command that
fixes it, never silently misread.
"""
from __future__ import annotations

import io
import json
import shutil
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from corpora import datasets, manifests
from lib.data import shards
from lib.data.image_rows import ImageRows
from lib.data.images import BadImageError
from lib.methods import three_towers as tt
from provision import prepare
from tools import standins


@pytest.fixture(scope="module")
def downloads(tmp_path_factory):
    return standins.build_downloads(tmp_path_factory.mktemp("downloads"), ["cc3m-llava"])


@pytest.fixture
def sixteen_per_shard(edited_manifests):
    """The real manifests, with 16 images per shard so that 60 pairs take four shards."""
    edited_manifests("cc3m-llava", lambda m: m["prepare"].update(shard_images=16))


@pytest.fixture
def prepared(downloads, tmp_path, monkeypatch, sixteen_per_shard):
    target = tmp_path / "cc3m-llava"
    prepare.prepare("cc3m-llava", downloads["cc3m-llava"], target, skip_checksums=True, say=lambda _: None)
    monkeypatch.setenv("CC3M_LLAVA_DIR", str(target))
    return target


def _download_images(downloads) -> dict[str, bytes]:
    with zipfile.ZipFile(downloads["cc3m-llava"] / "images.zip") as archive:
        return {Path(n).name: archive.read(n) for n in archive.namelist() if not n.endswith("/")}


def test_every_image_comes_back_as_downloaded(prepared, downloads):
    record = json.loads((prepared / prepare.RECORD).read_text())
    assert sorted(record["counts"]["shards"]) == [f"shards/{i:05d}.tar" for i in range(4)]  # 60 images, 16 a shard
    assert not list(prepared.rglob("*.part")) and not (prepared / "images").exists()
    originals = _download_images(downloads)
    for split in ("train", "val"):
        pairs = datasets.jsonl_pairs("cc3m-llava", split)
        for line, key in zip((prepared / f"{split}.jsonl").read_text().splitlines(), pairs.ids):
            row = json.loads(line)
            member = shards.Member(prepared / row["shard"], row["member"], row["offset"], row["size"])
            assert shards.read_member(member) == originals[key]
        loaded, first = pairs.load_image(0), Image.open(io.BytesIO(originals[pairs.ids[0]]))
        assert np.array_equal(np.asarray(loaded), np.asarray(first.convert(loaded.mode)))


def test_the_shards_are_webdataset_shards(prepared):
    """Members grouped by a key without dots (webdataset cuts a name at its first dot), in order, image + txt + json."""
    captions = {}
    for split in ("train", "val"):
        pairs = datasets.jsonl_pairs("cc3m-llava", split)
        captions.update(zip(pairs.ids, pairs.captions))
    seen = 0
    for shard in sorted((prepared / "shards").glob("*.tar")):
        with tarfile.open(shard) as archive:
            names = archive.getnames()
            groups = [names[i:i + 3] for i in range(0, len(names), 3)]
            for group in groups:
                keys = {name.split(".", 1)[0] for name in group}
                assert len(keys) == 1 and [n.split(".", 1)[1] for n in group] == ["jpg", "txt", "json"]
                meta = json.loads(archive.extractfile(group[2]).read())
                assert archive.extractfile(group[1]).read().decode() == meta["caption"] == captions[meta["key"]]
            seen += len(groups)
    assert seen == len(captions) == 60


def test_streamed_rows_from_shards_equal_resident_pixels(prepared):
    pairs = datasets.jsonl_pairs("cc3m-llava", "train")
    resident = tt.pixels(pairs.load_image, len(pairs), 16)
    rows = ImageRows([pairs], 16, tt.pixels)
    index = torch.tensor([5, 0, 17, 5, 33])
    assert torch.equal(rows[index], resident[index])


def test_a_changed_shard_is_named_with_its_fix(prepared):
    shard = prepared / "shards" / "00001.tar"
    shutil.copy(prepared / "shards" / "00003.tar", shard)  # another shard in its place: other bytes, other size
    (problem,) = prepare.check("cc3m-llava", prepared)
    assert str(shard) in problem and "were written" in problem and "python -m provision.prepare cc3m-llava" in problem
    pairs = datasets.jsonl_pairs("cc3m-llava", "train")
    lines = [json.loads(line) for line in (prepared / "train.jsonl").read_text().splitlines()]
    victim = next(i for i, row in enumerate(lines) if row["shard"] == "shards/00001.tar")
    with pytest.raises(BadImageError, match=r"00001\.tar:.*changed after it was prepared.*prepare the dataset again"):
        pairs.load_image(victim)
    shard.unlink()
    with pytest.raises(BadImageError, match=r"00001\.tar does not exist: prepare the dataset again"):
        pairs.load_image(victim)


def test_a_jsonl_line_that_points_outside_is_refused(prepared):
    path = prepared / "train.jsonl"
    row = json.loads(path.read_text().splitlines()[0])
    for change, message in (({"shard": "../elsewhere.tar"}, "is not a path inside"),
                            ({"offset": -1}, "are not byte counts"), ({"member": "a/b.jpg"}, "is not a file name")):
        path.write_text(json.dumps({**row, **change}) + "\n")
        with pytest.raises(manifests.DatasetMissingError, match=f"train.jsonl line 1: .*{message}"):
            datasets.jsonl_pairs("cc3m-llava", "train")
    with pytest.raises(BadImageError, match="cannot be a tar member's data"):
        shards.read_member(shards.Member(prepared / row["shard"], row["member"], 100, row["size"]))
