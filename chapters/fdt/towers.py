"""FDT's full config as the paper trains it: the encoders learn through the codebook (``lib.methods.fdt_towers``).

The small and medium configs read frozen, stored token sequences (:class:`chapters.fdt.ChapterFeatures`). With
``image_tower`` and ``text_tower`` set, nothing is stored: the chapter trains open_clip's ViT-B/32 and text
transformer from random weights, through the FDT head or read the CLIP way, on uint8 pixels and token ids
(:class:`TowerInputs`). Every analysis of the chapter (zero-shot, retrieval, weights as features, codebook usage,
grounding) reads token sequences and a head; here those are the trained model's own tower outputs
(:class:`TowerSequences`), so the analyses are the frozen configs' code, unchanged. See notebooks/fdt.py, section
"Paper, official code, this book".
"""
from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from lib.core.evaluate import prompt_texts
from lib.core.sequences import pad_batch
from lib.data import pixel_cache
from lib.data.image_rows import ImageRows
from lib.methods import three_towers as tt
from lib.methods.fdt_towers import EndToEndFDT, SequenceTowers

OPEN_CLIP = "open_clip:"  # text_tower.tokenizer "open_clip:ViT-B-32": open_clip's tokenizer of that model (CLIP BPE)


class Words:
    """Token ids and masks for the text tower: ``open_clip:<model>`` (open_clip's tokenizer of that model, CLIP's BPE
    as the official FDT code) or a Hugging Face tokenizer by name. The mask keeps every token up to and including
    the end-of-text token, the last one the causal tower reads."""

    def __init__(self, name: str, context: int) -> None:
        self.name, self.context, self.open_clip = name, context, name.startswith(OPEN_CLIP)
        if self.open_clip:
            import open_clip

            self.tokenizer = open_clip.get_tokenizer(name.removeprefix(OPEN_CLIP), context_length=context)
            self.vocab_size, self.eos_id = self.tokenizer.vocab_size, int(self.tokenizer.eot_token_id)
        else:
            self.tokenizer = tt.load_tokenizer(name)
            self.vocab_size, self.eos_id = len(self.tokenizer), tt.end_of_text_id(self.tokenizer)

    def __call__(self, texts) -> tuple[torch.Tensor, torch.Tensor]:
        if self.open_clip:
            ids = self.tokenizer(list(texts), context_length=self.context)
        else:
            ids = tt.tokenize(self.tokenizer, texts, self.context)["input_ids"]
        ends = (ids == self.eos_id).int().argmax(1)  # the first end-of-text token (CLIP's BPE pads with id 0, a word)
        return ids, (torch.arange(ids.shape[1])[None] <= ends[:, None]).long()

    def pieces(self, text: str) -> list[str]:
        """The word pieces the tower reads for ``text``, start and end tokens included."""
        ids, mask = self([text])
        ids = ids[0, : int(mask.sum())].tolist()
        if self.open_clip:
            return [self.tokenizer.decoder[i] for i in ids]
        return self.tokenizer.convert_ids_to_tokens(ids)


class TowerInputs:
    """What the towers read, by set: the training images decoded per batch from their tar shards when
    ``train_data`` is ``streamed`` (never held: 2.9M images at 224 px are 406 GiB as uint8), every other image set
    resident as uint8 (``lib.data.pixel_cache``), and the captions' and prompts' token ids. Read by role
    (``image``, ``captions``, ``prompts``, ``dims``), it gives the sequences of freshly initialised towers (seed 0):
    what a new head reads at its first step (the codes active at initialisation, the method diagram)."""

    def __init__(self, cfg, bench) -> None:
        self.cfg, self.bench = cfg, bench
        self.words = Words(cfg.text_tower.tokenizer, cfg.text_tower.context)
        self._pixels: dict[str, torch.Tensor] = {}

    def pixels(self, images):
        size = self.cfg.image_tower.image_size
        if images is self.bench.train and self.cfg.train_data == "streamed":
            return ImageRows([images], size, tt.pixels)
        if images.name not in self._pixels:
            self._pixels[images.name] = pixel_cache.cached_pixels(images, size, tt.pixels)
        return self._pixels[images.name]

    def tensors(self, pairs) -> dict:
        """``{"pixels", "input_ids", "attention_mask"}``: the batch :class:`EndToEndFDT` trains on."""
        ids, mask = self.words(pairs.captions)
        return {"pixels": self.pixels(pairs), "input_ids": ids, "attention_mask": mask}

    def towers(self, seed: int = 0) -> SequenceTowers:
        """Freshly initialised towers (``seed``) of this config."""
        torch.manual_seed(seed)
        return SequenceTowers(self.cfg.image_tower, self.cfg.text_tower, self.words.vocab_size, self.words.eos_id)

    @functools.cached_property
    def fresh(self) -> TowerSequences:
        return TowerSequences(EndToEndFDT(self.towers(0)), self, pooled=False)

    def image(self, images) -> InMemorySequences:
        return self.fresh.image(images)

    def captions(self, pairs) -> InMemorySequences:
        return self.fresh.captions(pairs)

    def prompts(self, labelled) -> InMemorySequences:
        return self.fresh.prompts(labelled)

    def dims(self, bench) -> tuple[int, int]:
        return self.fresh.dims(bench)

    def word_pieces(self, text: str) -> list[str]:
        return self.words.pieces(text)

    def describe(self, bench) -> str:
        return (f"training pairs: {len(bench.train):,} images ({self.cfg.image_tower.image_size} px, "
                f"{self.cfg.train_data}) and captions ({self.words.name}, {self.cfg.text_tower.context} tokens), "
                "read by towers trained from scratch")


class InMemorySequences:
    """Padded token sequences held in memory, read as :class:`lib.core.sequences.SequenceFeatures` is (``batch``,
    ``batches``, ``padded``, ``dim``, ``len``): what the chapter's analyses take."""

    def __init__(self, x: torch.Tensor, mask: torch.Tensor) -> None:
        self.x, self.mask = x, mask.bool()
        self.lengths = self.mask.sum(1).numpy()

    def __len__(self) -> int:
        return len(self.x)

    @property
    def dim(self) -> int:
        return self.x.shape[-1]

    def __repr__(self) -> str:
        return (f"InMemorySequences(items={len(self)}, length {self.lengths.min()}..{self.lengths.max()}, "
                f"dim={self.dim})")

    def batch(self, rows, *, dtype: torch.dtype = torch.float32, device="cpu", max_len: int | None = None):
        rows = np.asarray(rows.cpu() if isinstance(rows, torch.Tensor) else rows, dtype=np.int64).reshape(-1)
        return pad_batch([self.x[i, : self.lengths[i]] for i in rows], max_len=max_len, dtype=dtype, device=device)

    def padded(self, *, dtype: torch.dtype = torch.float16):
        return self.batch(np.arange(len(self)), dtype=dtype, max_len=int(self.lengths.max()))

    def batches(self, batch_size: int = 256, *, dtype: torch.dtype = torch.float32, device="cpu"):
        for start in range(0, len(self), batch_size):
            rows = np.arange(start, min(start + batch_size, len(self)))
            yield (rows, *self.batch(rows, dtype=dtype, device=device))


class PooledOutputs(nn.Module):
    """The CLIP baseline's "head": its towers' pooled, projected outputs, stored as sequences of one token, and the
    trained model's ``criterion`` (its logit scale)."""

    def __init__(self, criterion: nn.Module) -> None:
        super().__init__()
        self.criterion = criterion

    def encode_image(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return F.normalize(x[:, 0].float(), dim=-1)

    encode_text = encode_image


class TowerSequences:
    """One trained :class:`EndToEndFDT`'s token sequences of every evaluation set, computed once per set and held
    on the host: ``image(set)`` (its patch tokens), ``captions(pairs)``, ``prompts(labelled)``, the same roles as
    :class:`chapters.fdt.ChapterFeatures`. For the CLIP baseline (no FDT head) each item is its pooled embedding,
    read by :class:`PooledOutputs`; ``head`` is what the analyses read the sequences with. ``pooled``: store the
    pooled embeddings (default: when the model has no FDT head) or the token sequences."""

    def __init__(self, model: EndToEndFDT, inputs: TowerInputs, chunk: int = 256, pooled: bool | None = None) -> None:
        self.model, self.inputs, self.chunk = model, inputs, chunk
        self.pooled = model.head is None if pooled is None else pooled
        self.head = model.head if model.head is not None else PooledOutputs(model.criterion)
        self._found: dict[str, InMemorySequences] = {}

    @torch.no_grad()
    def _run(self, key: str, encode, *tensors) -> InMemorySequences:
        if key not in self._found:
            self.model.eval()
            xs, masks = [], []
            for i in range(0, len(tensors[0]), self.chunk):
                pooled, x, mask = encode(*(t[i:i + self.chunk] for t in tensors))
                if self.pooled:
                    x, mask = pooled[:, None], torch.ones(len(pooled), 1, dtype=torch.bool, device=pooled.device)
                xs.append(x.to("cpu", torch.float16))
                masks.append(mask.cpu())
            width = max(x.shape[1] for x in xs)
            self._found[key] = InMemorySequences(torch.cat([F.pad(x, (0, 0, 0, width - x.shape[1])) for x in xs]),
                                                 torch.cat([F.pad(m, (0, width - m.shape[1])) for m in masks]))
        return self._found[key]

    def image(self, images) -> InMemorySequences:
        return self._run(f"image:{images.name}", self.model.towers.image, self.inputs.pixels(images))

    def _texts(self, key: str, texts) -> InMemorySequences:
        return self._run(key, self.model.towers.words, *self.inputs.words(texts))

    def captions(self, pairs) -> InMemorySequences:
        return self._texts(f"captions:{pairs.name}", pairs.captions)

    def prompts(self, labelled) -> InMemorySequences:
        return self._texts(f"prompts:{labelled.name}", prompt_texts(labelled))

    def dims(self, bench) -> tuple[int, int]:  # (image token width, text token width)
        return self.model.towers.image_width, self.model.towers.text_width

    def word_pieces(self, text: str) -> list[str]:
        return self.inputs.word_pieces(text)

    def describe(self, bench) -> str:
        return self.inputs.describe(bench)
