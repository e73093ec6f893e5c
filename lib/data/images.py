"""Every image the book opens goes through :func:`open_image`: one clear error naming the file and the fix.

Why: a damaged file deep inside a dataset otherwise surfaces as a bare PIL exception, sometimes without a
path, halfway through a feature pass. Very large images are refused with the same kind of message, or shrunk
by a pixel cap. See notebooks/sharelock.py,
section "The data".
"""
from __future__ import annotations

import io
from pathlib import Path

from PIL import Image

__all__ = ["BadImageError", "open_image", "decode_image"]


class BadImageError(ValueError):
    """An image file that cannot be read; the message names the file and the fix."""


def open_image(path: str | Path, *, mode: str | None = None, fix: str | None = None,
               max_pixels: int | None = None) -> Image.Image:
    """The image at ``path``, fully decoded (the file is closed again), optionally converted to ``mode``.

    ``fix``: what to tell the reader when the file is damaged. ``max_pixels``: larger images are reduced to at most
    that many pixels; without it, PIL's decompression-bomb limit applies."""
    path = Path(path)
    return _decode(path, path, mode=mode, fix=fix, max_pixels=max_pixels)


def decode_image(data: bytes, where: str, *, mode: str | None = None, fix: str | None = None,
                 max_pixels: int | None = None) -> Image.Image:
    """:func:`open_image` for an image's bytes (a member of a tar shard); ``where`` names it in every error."""
    return _decode(io.BytesIO(data), where, mode=mode, fix=fix, max_pixels=max_pixels)


def _decode(source, where, *, mode, fix, max_pixels) -> Image.Image:
    remedy = fix or "remove it or replace it with a readable copy"
    try:
        with Image.open(source) as handle:
            if max_pixels and handle.width * handle.height > max_pixels:
                scale = (max_pixels / (handle.width * handle.height)) ** 0.5
                handle.draft(handle.mode, (max(1, int(handle.width * scale)), max(1, int(handle.height * scale))))
            handle.load()
            image = handle.copy()
    except FileNotFoundError:
        raise BadImageError(f"{where} does not exist: {remedy}") from None
    except Image.DecompressionBombError as error:
        name = Path(str(where))
        # PIL refuses such a file inside Image.open, before any draft or thumbnail could shrink it, so
        # max_pixels cannot help: the file itself must be made smaller, or left out.
        raise BadImageError(f"{where} is too large to decode safely ({error}): shrink the file itself (e.g. "
                            f"`convert {name.name} -resize 25% smaller{name.suffix}`) or remove it from the dataset"
                            ) from None
    except (OSError, SyntaxError, ValueError) as error:
        raise BadImageError(f"{where} is not a readable image ({type(error).__name__}: {error}): {remedy}") from None
    if max_pixels and image.width * image.height > max_pixels:
        scale = (max_pixels / (image.width * image.height)) ** 0.5
        image.thumbnail((max(1, int(image.width * scale)), max(1, int(image.height * scale))))
    return image.convert(mode) if mode and image.mode != mode else image
