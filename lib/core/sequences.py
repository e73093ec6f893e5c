"""Sequence features in the store: one vector per image patch or text token, ragged, never padded on disk.

Why: FDT needs the frozen model's patch and token states, and padding them on disk would store mostly zeros. An
entry is two store entries: ``{**spec, "part": "lengths"}`` (one float32 token count per item) and ``{**spec,
"part": "tokens", "lengths_sha256": ...}`` (one row per token, ids ``"<item>.<token>"``, items back to back).
Padding happens only in memory, per batch (:func:`pad_batch`, with a bool mask, True = a real token).
See notebooks/fdt.py, section "Patch and token features".
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np
import torch
from PIL import Image

from lib.core.encoders import DTYPES, TextEncoder, VisionEncoder, to_rgb
from lib.core.store import CachedFeatures, FeatureStore, StoreError

__all__ = [
    "SequenceFeatures", "pad_batch", "trim_padding", "sequence_features", "text_token_states",
    "image_token_states", "repair", "TOKENS",
]

TOKENS = ("all", "patches")
LENGTH_SHARD_ROWS = 1 << 16  # items per shard of a lengths entry (fixed: it is part of the entry's layout)


def pad_batch(
    sequences: Sequence[np.ndarray | torch.Tensor],
    *,
    max_len: int | None = None,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad ``(L_i, D)`` sequences into ``x (B, T, D)`` (zeros after each sequence) and ``mask (B, T)``.

    ``mask[b, t]`` is True for real tokens; ``T = max_len`` or the longest sequence."""
    if len(sequences) == 0:
        raise ValueError("pad_batch needs at least one sequence")
    arrays = [s if isinstance(s, torch.Tensor) else torch.from_numpy(np.array(s)) for s in sequences]  # copies memmaps
    dims = {a.shape[-1] for a in arrays if a.ndim == 2}
    if any(a.ndim != 2 for a in arrays) or len(dims) != 1:
        raise ValueError(f"pad_batch needs 2-d (length, dim) sequences of one width, got shapes "
                         f"{[tuple(a.shape) for a in arrays][:5]}")
    lengths = [a.shape[0] for a in arrays]
    width = max(lengths) if max_len is None else int(max_len)
    if width < max(lengths):
        raise ValueError(f"max_len={max_len} is shorter than the longest sequence ({max(lengths)} tokens)")
    x = torch.zeros(len(arrays), width, dims.pop(), dtype=dtype, device=device)
    mask = torch.zeros(len(arrays), width, dtype=torch.bool, device=device)
    for b, a in enumerate(arrays):
        x[b, : a.shape[0]] = a.to(device=device, dtype=dtype)
        mask[b, : a.shape[0]] = True
    return x, mask


def trim_padding(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop the trailing columns that are padding in every row (a batch sliced from a globally padded tensor)."""
    if mask.ndim != 2 or x.shape[:2] != mask.shape:
        raise ValueError(f"x {tuple(x.shape)} and mask {tuple(mask.shape)} do not match as (B, T, D) and (B, T)")
    used = mask.any(dim=0).nonzero()
    last = int(used.max()) + 1 if used.numel() else 0
    return x[:, :last], mask[:, :last]


def _lengths_sha256(lengths: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(lengths, dtype="<i8").tobytes()).hexdigest()


def _token_ids(lengths: np.ndarray) -> list[str]:
    return [f"{i}.{t}" for i, n in enumerate(lengths.tolist()) for t in range(n)]


def _parts(spec: Mapping, lengths: np.ndarray | None = None) -> tuple[dict, dict | None]:
    base = dict(spec)
    if "part" in base:
        raise StoreError("a sequence spec must not have a 'part' field: lib.core.sequences adds it "
                         "('lengths'/'tokens')")
    tokens = None if lengths is None else {**base, "part": "tokens", "lengths_sha256": _lengths_sha256(lengths)}
    return {**base, "part": "lengths"}, tokens


class SequenceFeatures:
    """A complete sequence entry: item ``i`` has ``lengths[i]`` token rows of width ``dim``, read lazily.

    Rows follow ``ids``. :meth:`batch` gives padded tensors + masks for any rows; :meth:`padded` all of
    them (resident training tensors for ``lib.core.train.fit``); :meth:`pooled` one vector per item.
    """

    def __init__(self, store: FeatureStore, spec: Mapping, ids: list[str], lengths: np.ndarray,
                 tokens: CachedFeatures, shard_tokens: int, lengths_entry: CachedFeatures | None = None):
        self.root, self.verify, self.shard_tokens = store.root, store.verify, shard_tokens
        self.lengths_entry = lengths_entry
        self.spec: dict = dict(spec)
        self.ids = ids
        self.lengths = lengths.astype(np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int64)
        self.tokens = tokens
        self.dtype = tokens.dtype
        self._starts = np.array([sc["rows"][0] for sc in tokens.shards], dtype=np.int64)
        self._arrays: list[np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def dim(self) -> int:
        return self.tokens.dim

    @property
    def key(self) -> str:
        return self.tokens.key

    @property
    def num_tokens(self) -> int:
        return int(self.offsets[-1])

    @property
    def shards_computed(self) -> int:
        return self.tokens.shards_computed

    def __repr__(self) -> str:
        return (f"SequenceFeatures(items={len(self)}, tokens={self.num_tokens}, length {self.lengths.min()}.."
                f"{self.lengths.max()}, dim={self.dim}, dtype={self.dtype})")

    def _shards(self) -> list[np.ndarray]:
        if self._arrays is None:
            try:
                self._arrays = self.tokens.shard_arrays()
            except StoreError as e:
                raise StoreError(f"{e}. This is the token part of a sequence entry: call .repair() on this "
                                 "SequenceFeatures (or lib.core.sequences.repair(store, spec)) and rerun the "
                                 "function that built it; only the damaged shards are recomputed") from None
        return self._arrays

    def token_rows(self, start: int, stop: int) -> np.ndarray:
        """Token rows ``start:stop`` of the flat token table (may span shards), as stored."""
        arrays, pieces = self._shards(), []
        s = int(np.searchsorted(self._starts, start, side="right")) - 1
        while start < stop:
            lo, hi = self.tokens.shards[s]["rows"]
            take = min(stop, hi)
            pieces.append(arrays[s][start - lo : take - lo])
            start, s = take, s + 1
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)

    def sequence(self, i: int) -> np.ndarray:
        """The ``(lengths[i], dim)`` token rows of item ``i`` (a memory-mapped view when in one shard)."""
        return self.token_rows(int(self.offsets[i]), int(self.offsets[i + 1]))

    def batch(self, rows: Sequence[int] | np.ndarray | torch.Tensor, *, dtype: torch.dtype = torch.float32,
              device: str | torch.device = "cpu", max_len: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Padded ``(B, T, dim)`` tensor and ``(B, T)`` bool mask of the given item rows (T = longest of them)."""
        rows = np.asarray(rows.cpu() if isinstance(rows, torch.Tensor) else rows, dtype=np.int64).reshape(-1)
        return pad_batch([self.sequence(int(i)) for i in rows], max_len=max_len, dtype=dtype, device=device)

    def padded(self, *, dtype: torch.dtype = torch.float16) -> tuple[torch.Tensor, torch.Tensor]:
        """Every item padded to the longest one, in memory (not on disk): ``lib.core.train.fit``'s resident tensors."""
        return self.batch(np.arange(len(self)), dtype=dtype, max_len=int(self.lengths.max()))

    def batches(self, batch_size: int = 256, *, dtype: torch.dtype = torch.float32,
                device: str | torch.device = "cpu") -> Iterator[tuple[np.ndarray, torch.Tensor, torch.Tensor]]:
        """``(rows, x, mask)`` for consecutive rows, each batch padded only to its own longest item."""
        for start in range(0, len(self), batch_size):
            rows = np.arange(start, min(start + batch_size, len(self)))
            yield (rows, *self.batch(rows, dtype=dtype, device=device))

    def pooled(self, how: str = "mean") -> torch.Tensor:
        """One float32 vector per item: ``mean`` over its tokens, or its ``first`` token (CLS)."""
        if how not in ("mean", "first"):
            raise ValueError(f"pooling {how!r} is not one of ('mean', 'first')")
        out = torch.empty(len(self), self.dim, dtype=torch.float32)
        for i in range(len(self)):
            seq = self.sequence(i).astype(np.float32)
            out[i] = torch.from_numpy(seq.mean(0) if how == "mean" else seq[0])
        return out

    def repair(self) -> dict[str, list[int]]:
        """Check every shard of both parts in full and delete the damaged ones (see ``FeatureStore.repair``)."""
        return repair(FeatureStore(self.root, verify=self.verify), self.spec)


def repair(store: FeatureStore, spec: Mapping) -> dict[str, list[int]]:
    """Repair both parts of the sequence entry of ``spec``; return the shards deleted per part."""
    lengths_spec, _ = _parts(spec)
    out = {"lengths": store.repair(lengths_spec) if store.entry_dir(lengths_spec).is_dir() else [], "tokens": []}
    if store.has(lengths_spec):
        lengths = np.rint(store.open(lengths_spec).numpy()[:, 0]).astype(np.int64)
        _, tokens_spec = _parts(spec, lengths)
        if store.entry_dir(tokens_spec).is_dir():
            out["tokens"] = store.repair(tokens_spec)
    return out


def sequence_features(
    store: FeatureStore,
    spec: Mapping,
    ids: Sequence[str],
    lengths: Callable[[np.ndarray], np.ndarray | Sequence[int]],
    compute: Callable[[np.ndarray], Sequence[np.ndarray | torch.Tensor]],
    *,
    dtype: str | None = None,
    shard_tokens: int = 1 << 16,
    rank: int = 0,
    world_size: int = 1,
    progress: bool | None = None,
    desc: str | None = None,
) -> SequenceFeatures | None:
    """Compute-or-load the ragged sequence features of ``ids`` under ``spec`` (two store entries, module docstring).

    ``lengths(rows)`` returns the token count of each item row; ``compute(rows)`` one ``(lengths[i], dim)`` array
    or tensor per item row. ``shard_tokens``, ``dtype``, ``rank``/``world_size``: as
    :meth:`FeatureStore.get_or_compute` (``None`` until every rank's shards exist).
    """
    if not isinstance(shard_tokens, int) or shard_tokens < 1:
        raise StoreError(f"shard_tokens={shard_tokens!r} must be a positive int")
    ids = list(ids)
    lengths_spec, _ = _parts(spec)

    def count(rows: np.ndarray) -> np.ndarray:
        n = np.asarray(lengths(rows), dtype=np.float32).reshape(-1, 1)
        if n.shape[0] != len(rows) or (n < 1).any() or (n != np.rint(n)).any():
            raise StoreError(f"lengths() must return one positive integer per row ({len(rows)}), got {n[:5, 0]}...")
        return n

    # Every rank computes the (cheap) lengths; the store's locks give each shard to one process.
    length_entry = store.get_or_compute(lengths_spec, ids, count, dtype="float32", shard_rows=LENGTH_SHARD_ROWS,
                                        progress=False)
    lens = np.rint(length_entry.numpy()[:, 0]).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(lens)])
    _, tokens_spec = _parts(spec, lens)

    def compute_tokens(token_rows: np.ndarray) -> np.ndarray:
        start, stop = int(token_rows[0]), int(token_rows[-1]) + 1
        first = int(np.searchsorted(offsets, start, side="right")) - 1
        last = int(np.searchsorted(offsets, stop - 1, side="right")) - 1
        items = np.arange(first, last + 1, dtype=np.int64)
        seqs = compute(items)
        if len(seqs) != len(items):
            raise StoreError(f"compute returned {len(seqs)} sequences for {len(items)} items")
        arrays = []
        for i, s in zip(items, seqs):
            a = s.detach().to("cpu", torch.float32).numpy() if isinstance(s, torch.Tensor) else np.asarray(s)
            if a.ndim != 2 or a.shape[0] != lens[i]:
                got = a.shape[0] if a.ndim == 2 else f"shape {a.shape}, not"
                raise StoreError(f"item {i} ({ids[i]!r}) has {got} token rows but its stored length is {lens[i]}: "
                                 "the lengths function and the encoder disagree; fix them, delete "
                                 f"{store.entry_dir(lengths_spec)} and rerun")
            arrays.append(a.astype(np.float32, copy=False))
        flat = np.concatenate(arrays)
        return flat[start - offsets[first] : stop - offsets[first]]

    tokens = store.get_or_compute(tokens_spec, _token_ids(lens), compute_tokens, dtype=dtype, shard_rows=shard_tokens,
                                  rank=rank, world_size=world_size, progress=progress, desc=desc)
    if tokens is None:
        return None
    return SequenceFeatures(store, spec, ids, lens, tokens, shard_tokens, length_entry)


# --- extraction from the frozen encoders of lib.core.encoders -------------------------------------------------


@torch.no_grad()
def text_token_states(encoder: TextEncoder, texts: Sequence[str]) -> list[torch.Tensor]:
    """Per-token hidden states ``(L_i, dim)`` (float32) of ``encoder``'s layer for each text, in input order.

    Same tokenisation and layer as ``encoder.encode`` (special tokens included); padded on the right, so real
    tokens are unaffected by padding in encoders and causal decoders alike.
    """
    ids = encoder.tokenize(texts)
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    pad_id = encoder.tokenizer.pad_token_id
    out: list[torch.Tensor | None] = [None] * len(ids)
    for start in range(0, len(order), encoder.batch_size):
        rows = order[start : start + encoder.batch_size]
        width = max(len(ids[i]) for i in rows)
        input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        attention = torch.zeros(len(rows), width, dtype=torch.long)
        for b, i in enumerate(rows):
            input_ids[b, : len(ids[i])] = torch.tensor(ids[i])
            attention[b, : len(ids[i])] = 1
        outputs = encoder.model(input_ids=input_ids.to(encoder.device), attention_mask=attention.to(encoder.device),
                                output_hidden_states=encoder.layer != -1)
        hidden = outputs.last_hidden_state if encoder.layer == -1 else outputs.hidden_states[encoder.layer]
        hidden = hidden.float().cpu()
        for b, i in enumerate(rows):
            out[i] = hidden[b, : len(ids[i])].clone()
    return out  # type: ignore[return-value]


def _prefix_tokens(encoder: VisionEncoder) -> int:
    if encoder.library == "transformers":
        return 1 + int(getattr(encoder.model.config, "num_register_tokens", 0) or 0)  # CLS (+ registers)
    return int(getattr(encoder.model, "num_prefix_tokens", 0) or 0)  # timm ViTs; 0 for CNNs


@torch.no_grad()
def image_token_states(encoder: VisionEncoder, images: Sequence[Image.Image], tokens: str = "all") -> torch.Tensor:
    """Final token states ``(B, T, dim)`` (float32) of ``encoder`` with its eval preprocessing.

    ``tokens="all"`` keeps prefix tokens (DINOv2: CLS first, equal to the pooled feature); ``"patches"``
    keeps only patch tokens. A timm CNN's ``(B, C, H, W)`` map becomes ``H*W`` tokens (row-major).
    """
    if tokens not in TOKENS:
        raise ValueError(f"tokens={tokens!r} is not one of {TOKENS}")
    chunks = []
    for start in range(0, len(images), encoder.batch_size):
        pixels = torch.stack([encoder.transform(to_rgb(im)) for im in images[start : start + encoder.batch_size]])
        pixels = pixels.to(device=encoder.device, dtype=DTYPES[encoder.dtype])
        if encoder.library == "transformers":
            hidden = encoder.model(pixel_values=pixels).last_hidden_state
        else:
            hidden = encoder.model.forward_features(pixels)
            if hidden.ndim == 4:  # CNN feature map
                hidden = hidden.flatten(2).transpose(1, 2)
        if tokens == "patches":
            hidden = hidden[:, _prefix_tokens(encoder):]
        chunks.append(hidden.float().cpu())
    return torch.cat(chunks)
