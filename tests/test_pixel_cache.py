"""The pixel cache: a second read returns the decoded pixels without decoding; a different size, id list or
source is another entry; a damaged file is decoded again with a warning naming it."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from lib.data import pixel_cache


class _Set(SimpleNamespace):
    def __len__(self):
        return len(self.ids)


def _set(ids=("a", "b", "c"), source=None):
    return _Set(name="toy", ids=tuple(ids), source=source or {"manifest": "x"}, load_image=lambda i: i)


def _decoder(calls):
    def decode(load_image, count, size):
        calls.append((count, size))
        return (torch.arange(count * 3 * size * size, dtype=torch.int64).remainder(256).to(torch.uint8)
                .view(count, 3, size, size))
    return decode


def test_second_read_comes_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LIB_CACHE_DIR", str(tmp_path))
    calls = []
    first = pixel_cache.cached_pixels(_set(), 4, _decoder(calls))
    second = pixel_cache.cached_pixels(_set(), 4, _decoder(calls))
    assert torch.equal(first, second) and calls == [(3, 4)]
    assert pixel_cache.cache_path(_set(), 4).is_file()


def test_size_ids_and_source_key_separate_entries(tmp_path, monkeypatch):
    monkeypatch.setenv("LIB_CACHE_DIR", str(tmp_path))
    keys = {pixel_cache.cache_key(_set(), 4), pixel_cache.cache_key(_set(), 8),
            pixel_cache.cache_key(_set(ids=("a", "b", "d")), 4),
            pixel_cache.cache_key(_set(source={"manifest": "y"}), 4)}
    assert len(keys) == 4


def test_a_damaged_file_is_decoded_again_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("LIB_CACHE_DIR", str(tmp_path))
    calls = []
    pixel_cache.cached_pixels(_set(), 4, _decoder(calls))
    path = pixel_cache.cache_path(_set(), 4)
    path.write_bytes(b"not an array")
    with pytest.warns(UserWarning, match="unreadable"):
        again = pixel_cache.cached_pixels(_set(), 4, _decoder(calls))
    assert len(calls) == 2 and again.shape == (3, 3, 4, 4)


def test_a_decoder_of_the_wrong_shape_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("LIB_CACHE_DIR", str(tmp_path))
    with pytest.raises(ValueError, match="expected uint8"):
        pixel_cache.cached_pixels(_set(), 4, lambda load, count, size: torch.zeros(count, 3, size, size))
