"""One feature layer: a chapter's *plan* of frozen features, computed on a store miss and only then.

Why: features are the expensive part of every chapter, so a chapter lists what it needs (a plan of
:class:`FeatureRequest` s) and :func:`materialise` loads a model only when a request misses the store; the
notebook and ``provision.precompute`` run the same plan. See notebooks/sharelock.py, section
"The frozen encoders and the frozen-feature pipeline", and book/design.md for the store's key.
"""
from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

import numpy as np
import torch

from lib.core.config import TextModelConfig, VisionModelConfig
from lib.core.encoders import TextEncoder, VisionEncoder
from lib.core.facets import FacetConfig, FacetEncoder
from lib.core.models import resolve
from lib.core.precision import resolve_dtype
from lib.core.sequences import (
    TOKENS, SequenceFeatures, image_token_states, sequence_features, text_token_states,
)
from lib.core.store import CachedFeatures, FeatureStore, StoreError

__all__ = [
    "KINDS", "FeatureRequest", "Plan", "Features", "EncoderPool", "ENCODERS", "digest", "text", "image",
    "text_tokens", "image_tokens", "facets", "materialise", "release_encoders", "spec_of",
]

KINDS = ("text", "image", "text-tokens", "image-tokens", "facets")
Kind = Literal["text", "image", "text-tokens", "image-tokens", "facets"]
# Tokens per shard of a sequence entry, and rows per shard of the others, unless a request says otherwise.
SEQUENCE_SHARD_TOKENS = 1 << 16
SHARD_ROWS = 4096


def digest(items: Sequence[str]) -> str:
    """sha256 of a list of strings (ids, captions): rows and their order are part of a key."""
    return hashlib.sha256(json.dumps(list(items), ensure_ascii=False).encode()).hexdigest()


@dataclass(eq=False)
class FeatureRequest:
    """One store entry a chapter needs: which model reads which inputs, and how the entry is laid out.

    ``name``: the request's handle (``"<kind>:<model>:<set>"``; ``provision.precompute --only`` matches it).
    ``texts`` for the text kinds, ``images`` (``ids`` and ``load_image(i)``) for the image kinds. ``source`` names
    the dataset and is part of the key. ``ids`` default to the images' ids, or ``"0".."n-1"`` for texts.
    ``tokens``: ``patches`` or ``all`` (prefix tokens first). ``shard_rows`` counts tokens for sequence kinds.
    """

    name: str
    kind: Kind
    model: TextModelConfig | VisionModelConfig | FacetConfig
    source: dict
    texts: Sequence[str] | None = None
    images: Any = None
    ids: Sequence[str] | None = None
    tokens: Literal["patches", "all"] = "patches"
    backend: Literal["eager", "onnx"] = "eager"
    dtype: Literal["float16", "float32"] = "float16"
    shard_rows: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"feature request {self.name!r}: kind {self.kind!r} is not one of {KINDS}")
        wants_text = self.kind in ("text", "text-tokens", "facets")
        expected = FacetConfig if self.kind == "facets" else TextModelConfig if wants_text else VisionModelConfig
        if not isinstance(self.model, expected):
            raise TypeError(f"feature request {self.name!r} ({self.kind}) needs a {expected.__name__}, "
                            f"got {type(self.model).__name__}")
        if wants_text:
            if self.texts is None or isinstance(self.texts, str):
                raise ValueError(f"feature request {self.name!r} ({self.kind}) needs a list of texts")
            self.texts = list(self.texts)
            n = len(self.texts)
        else:
            if self.images is None or not hasattr(self.images, "load_image") or not hasattr(self.images, "ids"):
                raise ValueError(f"feature request {self.name!r} ({self.kind}) needs images with ids and load_image")
            n = len(self.images.ids)
            if self.ids is None:
                self.ids = list(self.images.ids)
        self.ids = list(self.ids) if self.ids is not None else [str(i) for i in range(n)]
        if len(self.ids) != n or n == 0:
            raise ValueError(f"feature request {self.name!r}: {len(self.ids)} ids for {n} inputs "
                             "(need one per input, >= 1)")
        if self.tokens not in TOKENS:
            raise ValueError(f"feature request {self.name!r}: tokens={self.tokens!r} is not one of {TOKENS}")
        if self.shard_rows is None:
            self.shard_rows = SEQUENCE_SHARD_TOKENS if self.kind.endswith("tokens") else SHARD_ROWS

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def model_name(self) -> str:
        return self.model.name


class Plan:
    """An ordered list of requests with unique names (a request named twice must be the same entry)."""

    def __init__(self, requests: Sequence[FeatureRequest] = ()) -> None:
        self._requests: dict[str, FeatureRequest] = {}
        for request in requests:
            self.add(request)

    def add(self, request: FeatureRequest) -> FeatureRequest:
        """Add ``request``; a second request of the same name is dropped (a pairs corpus validates and
        retrieves on one set), but only if it would read the same inputs."""
        known = self._requests.get(request.name)
        if known is None:
            self._requests[request.name] = request
            return request
        if known.kind != request.kind or known.model != request.model or known.ids != request.ids \
                or known.source != request.source or known.texts != request.texts:
            raise ValueError(f"two different feature requests are both named {request.name!r}: "
                             "give them distinct names")
        return known

    def __iter__(self) -> Iterator[FeatureRequest]:
        return iter(self._requests.values())

    def __len__(self) -> int:
        return len(self._requests)

    def __getitem__(self, name: str) -> FeatureRequest:
        return self._requests[name]

    def names(self) -> list[str]:
        return list(self._requests)

    def select(self, patterns: Sequence[str] | None) -> "Plan":
        """The requests whose name matches any of the shell-style ``patterns`` (all when None)."""
        import fnmatch

        if not patterns:
            return self
        return Plan([r for r in self if any(fnmatch.fnmatchcase(r.name, p) for p in patterns)])


# --- request constructors: one per kind -----------------------------------------------------------------
def text(model: TextModelConfig, texts: Sequence[str], *, source: dict, name: str,
         ids: Sequence[str] | None = None, dtype: str = "float16", shard_rows: int | None = None) -> FeatureRequest:
    """One pooled vector per text (the model's layer and pooling)."""
    return FeatureRequest(name, "text", model, source, texts=texts, ids=ids, dtype=dtype, shard_rows=shard_rows)


def image(model: VisionModelConfig, images, *, name: str | None = None, source: dict | None = None,
          backend: str = "eager", dtype: str = "float16", shard_rows: int | None = None) -> FeatureRequest:
    """One pooled vector per image (timm: the pooled features; DINOv2: the layer-normed CLS token)."""
    return FeatureRequest(name or f"image:{model.name}:{images.name}", "image", model,
                          images.source if source is None else source, images=images, backend=backend,
                          dtype=dtype, shard_rows=shard_rows)


def text_tokens(model: TextModelConfig, texts: Sequence[str], *, source: dict, name: str,
                ids: Sequence[str] | None = None, dtype: str = "float16",
                shard_rows: int | None = None) -> FeatureRequest:
    """One vector per word piece (the model's layer; pooling does not apply)."""
    return FeatureRequest(name, "text-tokens", model, source, texts=texts, ids=ids, dtype=dtype, shard_rows=shard_rows)


def image_tokens(model: VisionModelConfig, images, *, tokens: str = "patches", name: str | None = None,
                 source: dict | None = None, dtype: str = "float16", shard_rows: int | None = None) -> FeatureRequest:
    """One vector per patch (``tokens="all"``: prefix tokens such as CLS first)."""
    return FeatureRequest(name or f"image-tokens:{model.name}:{images.name}", "image-tokens", model,
                          images.source if source is None else source, images=images, tokens=tokens, dtype=dtype,
                          shard_rows=shard_rows)


def facets(model: FacetConfig, texts: Sequence[str], *, source: dict, name: str, ids: Sequence[str] | None = None,
           dtype: str = "float16", shard_rows: int | None = None) -> FeatureRequest:
    """K facet embeddings per caption (FLAME's prompt), stored ``[N*K, D]`` caption-major."""
    return FeatureRequest(name, "facets", model, source, texts=texts, ids=ids, dtype=dtype, shard_rows=shard_rows)


# --- encoders -------------------------------------------------------------------------------------------------
class EncoderPool:
    """Encoders built on first use, one per ``(model config, device, backend)``; :meth:`release` frees them."""

    def __init__(self) -> None:
        self._encoders: dict[tuple, object] = {}

    def get(self, cfg, device: str = "cpu", backend: str = "eager"):
        key = (cfg, device, backend)
        if key not in self._encoders:
            if isinstance(cfg, TextModelConfig):
                encoder = TextEncoder(cfg.name, pooling=cfg.pooling, layer=cfg.layer, max_length=cfg.max_length,
                                      batch_size=cfg.batch_size, dtype=cfg.dtype, device=device, revision=cfg.revision)
            elif isinstance(cfg, VisionModelConfig):
                encoder = VisionEncoder(cfg.name, library=cfg.library, image_size=cfg.image_size,
                                        crop_pct=cfg.crop_pct, batch_size=cfg.batch_size, dtype=cfg.dtype,
                                        device=device, revision=cfg.revision, backend=backend)
            elif isinstance(cfg, FacetConfig):
                encoder = FacetEncoder(cfg.name, facets=cfg.facets, layer=cfg.layer, template=cfg.template,
                                       positions=cfg.positions, max_caption_tokens=cfg.max_caption_tokens,
                                       batch_size=cfg.batch_size, dtype=cfg.dtype,
                                       attn_implementation=cfg.attn_implementation, device=device,
                                       revision=cfg.revision)
            else:
                raise TypeError(f"no encoder for a {type(cfg).__name__}")
            self._encoders[key] = encoder
        return self._encoders[key]

    def loaded(self) -> list[tuple]:
        return list(self._encoders)

    def release(self) -> None:
        self._encoders.clear()


ENCODERS = EncoderPool()  # the process's pool: notebooks and provision.precompute share it


def release_encoders() -> None:
    """Free every loaded model (a chapter calls this once its features are in the store)."""
    ENCODERS.release()


# --- store keys -----------------------------------------------------------------------------------------------
def _text_model_spec(cfg: TextModelConfig, device: str) -> dict:
    return {"model": resolve(cfg.name, "transformers", cfg.revision).identity, "layer": cfg.layer,
            "max_length": cfg.max_length, "dtype": resolve_dtype(cfg.dtype, device), "batch_size": cfg.batch_size}


def spec_of(request: FeatureRequest, pool: EncoderPool = ENCODERS, device: str = "cpu") -> dict:
    """The store key of ``request``: everything that changes its bytes (book/design.md, "The feature store")."""
    cfg, kind = request.model, request.kind
    common = {"source": request.source, "store_dtype": request.dtype}
    if kind == "text":
        return {"kind": "text", **_text_model_spec(cfg, device), "pooling": cfg.pooling, **common,
                "texts_sha256": digest(request.texts)}
    if kind == "text-tokens":
        return {"kind": "text_sequence", **_text_model_spec(cfg, device), "pooling": None, "padding_side": "right",
                **common, "texts_sha256": digest(request.texts)}
    if kind == "facets":
        return {"kind": "text_facets", "model": resolve(cfg.name, "transformers", cfg.revision).identity,
                "layer": cfg.layer, "pooling": "prompt_token", "template": cfg.template, "facets": list(cfg.facets),
                "positions": cfg.positions, "max_caption_tokens": cfg.max_caption_tokens,
                "dtype": resolve_dtype(cfg.dtype, device),
                "batch_size": cfg.batch_size, **common, "texts_sha256": digest(request.texts)}
    encoder = pool.get(cfg, device, request.backend)  # vision: preprocessing is resolved from the model
    spec = {**encoder.cache_spec(), "batch_size": cfg.batch_size, **common, "ids_sha256": digest(request.ids)}
    if kind == "image-tokens":
        spec.update(kind="image_sequence", pooling=None, tokens=request.tokens)
    return spec


# --- computing one request ------------------------------------------------------------------------------------
def _facet_ids(ids: Sequence[str], k: int) -> list[str]:
    """Row ids of the ``[N*K, D]`` facet layout: ``f"{id}#{k}"``, caption-major (row ``i*K + k``)."""
    return [f"{i}#{j}" for i in ids for j in range(k)]


def _compute(store: FeatureStore, request: FeatureRequest, spec: dict, pool: EncoderPool, device: str,
             rank: int, world_size: int, progress: bool | None):
    cfg, kind, desc = request.model, request.kind, f"{request.kind} {request.model.name}"
    layout = {"dtype": request.dtype, "rank": rank, "world_size": world_size, "progress": progress, "desc": desc}
    if kind == "text":
        texts = request.texts

        def compute(rows: np.ndarray):
            return pool.get(cfg, device).encode([texts[i] for i in rows], rows=rows)

        return store.get_or_compute(spec, request.ids, compute, shard_rows=request.shard_rows, **layout)
    if kind == "image":
        images = request.images

        def compute(rows: np.ndarray):
            return pool.get(cfg, device, request.backend).encode([images.load_image(int(i)) for i in rows])

        return store.get_or_compute(spec, request.ids, compute, shard_rows=request.shard_rows, **layout)
    if kind == "facets":
        captions, k = request.texts, len(cfg.facets)

        def compute(rows: np.ndarray):  # a shard that cuts a caption's facets recomputes that caption
            first = int(rows.min()) // k
            encoder = pool.get(cfg, device)
            block = encoder.encode([captions[i] for i in range(first, int(rows.max()) // k + 1)])
            return block.reshape(-1, encoder.dim)[torch.as_tensor(rows - first * k)]

        return store.get_or_compute(spec, _facet_ids(request.ids, k), compute, shard_rows=request.shard_rows,
                                    **layout)
    if kind == "text-tokens":
        texts = request.texts

        def lengths(rows: np.ndarray) -> list[int]:
            return [len(t) for t in pool.get(cfg, device).tokenize([texts[i] for i in rows], rows=rows)]

        def tokens(rows: np.ndarray) -> list[torch.Tensor]:
            return text_token_states(pool.get(cfg, device), [texts[i] for i in rows])

        return sequence_features(store, spec, request.ids, lengths, tokens, shard_tokens=request.shard_rows,
                                 **layout)
    images, which = request.images, request.tokens  # image-tokens

    def lengths(rows: np.ndarray) -> np.ndarray:  # fixed-size preprocessing: every image has as many tokens
        encoder = pool.get(cfg, device)
        return np.full(len(rows), image_token_states(encoder, [images.load_image(int(rows[0]))], which).shape[1])

    def tokens(rows: np.ndarray) -> torch.Tensor:
        return image_token_states(pool.get(cfg, device), [images.load_image(int(i)) for i in rows], which)

    return sequence_features(store, spec, request.ids, lengths, tokens, shard_tokens=request.shard_rows, **layout)


# --- materialising a plan -----------------------------------------------------------------------------------
@dataclass
class Features(Mapping):
    """The result of :func:`materialise`: request name -> features, plus what was computed and read.

    Values are :class:`~lib.core.store.CachedFeatures` or :class:`~lib.core.sequences.SequenceFeatures` (token
    kinds); ``None`` on a rank whose entry other ranks are still completing. ``report``: one row per request.
    """

    plan: Plan
    results: dict[str, CachedFeatures | SequenceFeatures | None] = field(default_factory=dict)
    report: list[dict] = field(default_factory=list)

    def __getitem__(self, name: str):
        return self.results[name]

    def __iter__(self):
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    def tensor(self, name: str, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """``text``/``image`` features as one ``(N, D)`` tensor; ``facets`` as ``(N, K, D)``."""
        found = self.results[name]
        if found is None:
            raise StoreError(f"{name}: this rank's entry is incomplete (other ranks are still computing it)")
        if isinstance(found, SequenceFeatures):
            raise TypeError(f"{name} holds token sequences: use features[{name!r}] (SequenceFeatures) instead")
        out = found.tensor(dtype)
        request = self.plan[name]
        if request.kind == "facets":
            out = out.view(len(request), len(request.model.facets), -1)
        return out

    def counts(self) -> tuple[int, int]:
        """(shards computed by this process, shards read from the store) over the whole plan."""
        return (sum(r["computed"] for r in self.report), sum(r["reused"] for r in self.report))

    def summary(self) -> str:
        computed, reused = self.counts()
        entries = sum(1 for r in self.report if r["computed"])
        return (f"{len(self.report)} feature sets: {entries} computed now ({computed} shards), the rest read from "
                f"the store ({reused} shards)")


def materialise(store: FeatureStore, plan: Plan | Sequence[FeatureRequest], *, device: str = "cpu",
                rank: int = 0, world_size: int = 1, pool: EncoderPool = ENCODERS, release: bool = True,
                progress: bool | None = None, on_done: Callable[[dict], None] | None = None) -> Features:
    """Every request of ``plan`` from the store, each computed on a miss (and only its missing shards).

    ``rank``/``world_size``: compute shards ``r, r+W, ...`` of every entry (``None`` where others are missing).
    ``release``: free the models afterwards. ``on_done(row)``: called with each report row."""
    plan = plan if isinstance(plan, Plan) else Plan(plan)
    out = Features(plan)
    try:
        for request in plan:
            start, calls = time.perf_counter(), len(store.calls)
            spec = spec_of(request, pool, device)
            found = _compute(store, request, spec, pool, device, rank, world_size, progress)
            mine = store.calls[calls:]
            entry = mine[-1] if mine else {"key": "", "computed": []}  # sequences: the token entry is last
            computed = sum(len(c["computed"]) for c in mine)
            total = _shard_count(found)
            row = {"name": request.name, "kind": request.kind, "model": request.model_name, "rows": len(request),
                   "key": entry["key"], "computed": computed, "computed_shards": entry["computed"],
                   "reused": max(total - computed, 0), "seconds": round(time.perf_counter() - start, 2)}
            out.results[request.name] = found
            out.report.append(row)
            if on_done is not None:
                on_done(row)
    finally:
        if release:
            pool.release()
    return out


def _shard_count(found) -> int:
    if found is None:
        return 0
    if isinstance(found, SequenceFeatures):
        return len(found.tokens.shards) + len(found.lengths_entry.shards)
    return len(found.shards)
