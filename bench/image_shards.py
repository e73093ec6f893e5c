"""Benchmark: training images read from webdataset tar shards (``lib.data.shards``) vs one file per image.

``python -m provision.prepare`` writes the image-caption datasets as tar shards, and a streamed run reads them in
the random order of training (``lib.data.image_rows``): one seek to the offset the jsonl records, a check of the
512-byte tar header in front, one read. The baseline is what the loose layout did: open each image's own file
and read it. Both are measured on the same synthetic JPEGs, in the same random batches of 256:

* **fetch**: the bytes only (``read_member`` vs ``Path.read_bytes``), with the page cache *warm* (files just read)
  and *cold* (their cached pages dropped first with ``posix_fadvise(POSIX_FADV_DONTNEED)``, which the kernel may
  not honour fully);
* **decoded**: the bytes decoded and resized to 224 px as a tower's training batch (``three_towers.pixels``).

The shards' point is the file count (three members per image, 10,000 images per tar, instead of a file per image):
what this measures is that the random-order read they need costs no more than the loose files did.

    .venv/bin/python -m bench.image_shards --images 2000
"""
from __future__ import annotations

import io
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import _common

NAME = "image_shards"
BATCH = 256


def synthetic_jpegs(n: int, size: int = 256, seed: int = 0) -> list[bytes]:
    """``n`` JPEGs (quality 90) of smooth random colour fields with grain: the size of a web photo's bytes."""
    from PIL import Image

    rng, out = np.random.default_rng(seed), []
    for _ in range(n):
        coarse = Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).resize((size, size),
                                                                                          Image.Resampling.BICUBIC)
        grain = rng.normal(0, 12, (size, size, 3))
        pixels = np.clip(np.asarray(coarse, dtype=np.float64) + grain, 0, 255).astype(np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
        out.append(buffer.getvalue())
    return out


def write_layouts(images: list[bytes], workdir: Path, per_shard: int):
    """The loose layout (``images/<i>.jpg``) and the prepared shards (:class:`provision.shards.ShardWriter`);
    returns the loose paths and the shard members, in the same order."""
    from lib.data.shards import Member
    from provision.prepare import Staging
    from provision.shards import ShardWriter

    loose = workdir / "loose" / "images"
    loose.mkdir(parents=True)
    paths = []
    for i, data in enumerate(images):
        paths.append(loose / f"{i:06d}.jpg")
        paths[-1].write_bytes(data)
    staging = Staging(workdir / "shards")
    writer = ShardWriter(staging, per_shard)
    where = [writer.add(f"{i:06d}.jpg", data, ".jpg", f"image {i}") for i, data in enumerate(images)]
    writer.close()
    staging.commit()
    members = [Member(workdir / "shards" / w["shard"], w["member"], w["offset"], w["size"]) for w in where]
    return paths, members, sorted((workdir / "shards").glob("shards/*.tar"))


def measure(n: int, per_shard: int, repeats: int, workdir: Path) -> dict:
    from bench.store import drop_page_cache
    from lib.data.images import open_image
    from lib.data.shards import open_member_image, read_member
    from lib.methods.three_towers import pixels

    images = synthetic_jpegs(n)
    paths, members, shard_files = write_layouts(images, workdir, per_shard)
    step = max(1, n // 50)
    assert all(read_member(m) == p.read_bytes() for m, p in zip(members[::step], paths[::step]))
    order = np.random.default_rng(1).permutation(n)
    batches = [order[i:i + BATCH].tolist() for i in range(0, n, BATCH)]

    def fetch_loose():
        return [sum(len(paths[i].read_bytes()) for i in batch) for batch in batches]

    def fetch_shards():
        return [sum(len(read_member(members[i])) for i in batch) for batch in batches]

    def decode_loose():
        return [pixels(lambda j, b=batch: open_image(paths[b[j]]), len(batch), 224) for batch in batches]

    def decode_shards():
        return [pixels(lambda j, b=batch: open_member_image(members[b[j]]), len(batch), 224) for batch in batches]

    files = {"loose files": paths, "tar shards": shard_files}
    fetch, dropped = {}, False
    for cache in ("warm", "cold"):
        best = {name: float("inf") for name in files}
        for _ in range(repeats):
            for name, function in (("loose files", fetch_loose), ("tar shards", fetch_shards)):
                if cache == "cold":
                    dropped = drop_page_cache(files[name])
                else:
                    function()  # pages in RAM
                start = time.perf_counter()
                function()
                best[name] = min(best[name], time.perf_counter() - start)
        fetch[cache] = {name: n / seconds for name, seconds in best.items()}
    decoded = _common.best_times({"loose files": decode_loose, "tar shards": decode_shards}, repeats)
    assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(decode_loose()[:1], decode_shards()[:1]))
    return {
        "images": n, "image_bytes_mean": float(np.mean([len(x) for x in images])), "per_shard": per_shard,
        "shards": len(shard_files), "files_loose": n, "batch_size": BATCH, "repeats": repeats,
        "cold_cache_dropped_with_fadvise": bool(dropped),
        "fetch_images_per_s": fetch,
        "decoded_images_per_s": {name: n / seconds for name, seconds in decoded.items()},
    }


def ratios(result: dict) -> list[dict]:
    out = []
    for cache, rates in result["fetch_images_per_s"].items():
        out.append(_common.ratio(
            f"image bytes from tar shards, {cache} page cache", rates["tar shards"] / rates["loose files"],
            baseline="Path.read_bytes of one file per image", candidate="lib.data.shards.read_member (seek, header "
            "check, read)", measure="images/s, random batches of 256", baseline_value=rates["loose files"],
            candidate_value=rates["tar shards"], unit="images/s"))
    decoded = result["decoded_images_per_s"]
    out.append(_common.ratio(
        "decoded 224 px batches from tar shards", decoded["tar shards"] / decoded["loose files"],
        baseline="open_image of one file per image", candidate="open_member_image from the tar shards",
        measure="images/s decoded and resized (three_towers.pixels)", baseline_value=decoded["loose files"],
        candidate_value=decoded["tar shards"], unit="images/s"))
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = _common.parser(__doc__.splitlines()[0], NAME)
    parser.add_argument("--images", type=int, default=None, help="images (default 2,000; --quick 64)")
    parser.add_argument("--per-shard", type=int, default=None, help="images per shard (default 500; --quick 16)")
    parser.add_argument("--repeats", type=int, default=None, help="rounds; the best time counts (default 3)")
    parser.add_argument("--tmp", default=None, help="scratch folder (default: the system's temp dir)")
    args = parser.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    n = args.images or (64 if args.quick else 2000)
    per_shard = args.per_shard or (16 if args.quick else 500)
    repeats = args.repeats or (1 if args.quick else 3)
    with tempfile.TemporaryDirectory(prefix="bench-shards-", dir=args.tmp) as tmp:
        result = measure(n, per_shard, repeats, Path(tmp))
    config = {"images": n, "per_shard": per_shard, "repeats": repeats, "quick": args.quick}
    return _common.publish(NAME, config, ratios(result), args.out, result=result)


if __name__ == "__main__":
    main()
