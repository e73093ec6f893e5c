"""SVG drawings as images: rasterised once, with resvg, into a cached folder of PNGs.

Why once: the medium corpus has ~12k SVG drawings (OpenMoji, Fluent UI emoji, game-icons, Tux Paint
stamps); rendering one costs 8-80 ms, so every feature pass would otherwise pay minutes for the same
pixels. :func:`build_raster_cache` renders a set of SVGs into a folder (beside its target, renamed
into place when complete, with ``contents.json`` written last), and readers open the PNGs through
``lib.data.images.open_image`` like any other image.

Why resvg: two rasterisers install here from PyPI, ``cairosvg`` 2.9.1 (+ Debian's libcairo2) and
``resvg-py`` 0.5.0 (a self-contained abi3 wheel of the Rust resvg, 1.4 MB, MIT). Measured on this
project's 2-core machine, 60 random files per set, rendered to 224 px (renders/s, resvg vs cairo):

==============  ===========  ==========  ============================================================
set             resvg        cairosvg    agreement
==============  ===========  ==========  ============================================================
OpenMoji        118/s        132/s       mean |diff| 0.2 / 255 per pixel
Fluent (3D)     13/s         22/s        cairosvg ignores SVG filters (blur, shading): visibly wrong
Tux Paint       30/s         23/s        mean |diff| 1.7
Openclipart     60/s         29/s        cairosvg failed on 1 of 60; resvg on none
game-icons      123/s        189/s       mean |diff| 0.1
==============  ===========  ==========  ============================================================

resvg renders the filter effects that Fluent's 3D style is made of, fails on none of the sets, and is
fast enough, so the book uses it. One pitfall: ``resvg_py.svg_to_bytes`` defaults to ``dpi=0``, which
turns sizes in ``pt`` or ``mm`` (most Inkscape files) into "SVG has an invalid size"; :func:`rasterise`
passes ``dpi=96`` (the CSS pixel). See notebooks/sharelock.py, section "The data".
"""
from __future__ import annotations

import io
import json
import shutil
import time
from importlib import metadata
from pathlib import Path
from typing import Callable, Mapping

from PIL import Image

from lib.core.atomic import building_dir, write_json
from lib.data.images import open_image

RASTER_SIZE = 256  # longest side of a cached rendering: above the 224-260 px the vision towers take
DPI = 96.0


class SvgError(ValueError):
    """An SVG that resvg cannot render."""


def renderer() -> dict:
    """Name and version of the rasteriser: part of every cache folder's identity."""
    try:
        return {"renderer": "resvg-py", "version": metadata.version("resvg-py")}
    except metadata.PackageNotFoundError:
        raise SvgError("the PyPI package 'resvg-py' is not installed: run `make setup` "
                       "(tools/requirements.txt lists it)") from None


def rasterise(svg: str | bytes | Path, size: int = RASTER_SIZE, background: str | None = None) -> Image.Image:
    """Render an SVG (markup or a file) so that its longest side is ``size`` pixels; RGBA, transparent unless
    ``background`` (a CSS colour) is given."""
    import resvg_py

    if isinstance(svg, Path):
        svg = svg.read_bytes()
    text = svg.decode("utf-8", errors="replace") if isinstance(svg, bytes) else svg
    try:
        png = resvg_py.svg_to_bytes(svg_string=text, width=size, dpi=DPI, background=background)
        image = Image.open(io.BytesIO(bytes(png)))
        if image.height > size:  # taller than wide: fit the height instead
            png = resvg_py.svg_to_bytes(svg_string=text, height=size, dpi=DPI, background=background)
            image = Image.open(io.BytesIO(bytes(png)))
        image.load()
    except (ValueError, OSError) as error:
        raise SvgError(str(error)) from None
    return image.convert("RGBA")


def build_raster_cache(target: Path, sources: Mapping[str, Callable[[], str | bytes | Path]],
                       size: int = RASTER_SIZE, progress: bool = False) -> dict:
    """Render every ``sources[id]()`` into ``target/<id>.png`` once; ``contents.json`` (written last) records
    the renderer, the size, each file's bytes, the ids that failed (with resvg's message) and the seconds."""
    start = time.perf_counter()
    failed, files = {}, {}
    with building_dir(target) as tmp:
        for number, (rid, source) in enumerate(sorted(sources.items())):
            try:
                image = rasterise(source(), size)
            except SvgError as error:
                failed[rid] = str(error)
                continue
            path = tmp / f"{rid}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            image.save(path, optimize=False)
            files[rid] = path.stat().st_size
            if progress and number % 500 == 0:
                print(f"  {target.name}: {number}/{len(sources)}", flush=True)
        seconds = time.perf_counter() - start
        contents = {**renderer(), "size": size, "files": files, "failed": failed, "seconds": round(seconds, 1),
                    "per_second": round(len(sources) / max(seconds, 1e-9), 1)}
        write_json(tmp / "contents.json", contents)
    return contents


_checked: set[Path] = set()


def cached(target: Path, sources: Mapping[str, Callable[[], str | bytes | Path]], size: int = RASTER_SIZE,
           fix: str = "") -> dict:
    """The contents of a raster cache, built on first use; checked (every file present, its size as
    recorded) the first time a process opens it. A cache from another renderer version is rebuilt."""
    record = target / "contents.json"
    if record.is_file():
        contents = json.loads(record.read_text(encoding="utf-8"))
        if {k: contents.get(k) for k in ("renderer", "version", "size")} != {**renderer(), "size": size}:
            shutil.rmtree(target)
    if not record.is_file():
        if target.exists():
            shutil.rmtree(target)
        build_raster_cache(target, sources, size, progress=True)
        _checked.discard(target)
    contents = json.loads(record.read_text(encoding="utf-8"))
    if target not in _checked:
        for rid, nbytes in contents["files"].items():
            path = target / f"{rid}.png"
            if not path.is_file() or path.stat().st_size != nbytes:
                raise FileNotFoundError(f"{path} is missing or damaged: the raster cache {target} is incomplete; "
                                        f"delete that folder and it is rendered again{fix}")
        _checked.add(target)
    return contents


def open_cached(target: Path, rid: str) -> Image.Image:
    """One cached rendering (RGBA)."""
    return open_image(target / f"{rid}.png", mode="RGBA",
                      fix=f"the raster cache {target} is damaged; delete that folder and it is rendered again")
