"""FLAME's prompted LLM text encoder: K facet embeddings of one caption from ONE forward pass.

Why: FLAME embeds a caption as a frozen LLM's state at the end of a prompt asking for a one-word summary of one
*facet*. *Facet-decoupled attention* reads the shared caption once for all K facets and gives each facet what a
separate pass would (tested). See notebooks/flame.py, section
"Facet-decoupled attention". A prompt's tokens are DEFINED as ``tokens(prefix) + tokens(suffix)``, the suffix
starting with the space before the facet. The official code also masks padding on the query axis only and puts
``<s>`` before the first facet only.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, Sequence

import torch
from tqdm.auto import tqdm

import lib  # noqa: F401  (torchvision fix before timm/open_clip)
from lib.core import paths
from lib.core.encoders import DTYPES, EncoderInputError
from lib.core.models import resolve
from lib.core.precision import resolve_dtype

# The paper's prompt (§3.2). ``{caption}`` and ``{facet}`` are filled by plain string
# replacement (a caption may contain braces).
FLAME_TEMPLATE = (
    'Detailed image description: "{caption}". After thinking step by step, {facet} means in just one word:"'
)

# The official facet phrasings (``long_template`` in ``src/open_clip/model.py`` and
# ``src/training/embed_cc3m_mask.py`` of the official repository). The official code also embeds the
# raw short caption with the first facet only, and the re-captioned short caption with the first three.
FACETS_LONG: tuple[str, ...] = (
    "this image description",
    "the category of the main object in this image",
    "the prominent characteristic or pattern of the main object in this image",
    "the category of the minor object in this image",
    "the prominent characteristic or pattern of the minor object in this image",
    "the primary action or event taking place in this image",
    "the overall atmosphere or emotion of this image",
)
FACET_SETS: dict[str, tuple[str, ...]] = {
    "long": FACETS_LONG,  # 7 facets: long captions (paper and code)
    "short": FACETS_LONG[:3],  # 3 facets: the official code's set for re-captioned short captions
    "single": FACETS_LONG[:1],  # 1 facet: short captions in the paper, raw captions in the code
}
METHODS = ("decoupled", "separate", "stacked")


@dataclass(frozen=True)
class FacetConfig:
    """Everything that changes a facet embedding (buildable by ``lib.core.config.build`` from YAML).

    ``layer=-1`` is the model output after the final norm (paper: "last layer"); ``layer=k`` is the
    output of block k before any norm (official code: ``39`` of Mistral-Nemo's 40 blocks).
    ``max_caption_tokens`` truncates the caption, never the prompt around it. ``positions``:
    ``reset`` (paper, equals separate passes) or ``contiguous`` (official code).
    """

    name: str
    facets: tuple[str, ...] = FACETS_LONG
    layer: int = -1
    template: str = FLAME_TEMPLATE
    positions: Literal["reset", "contiguous"] = "reset"
    max_caption_tokens: int = 256
    batch_size: int = 32
    dtype: Literal["float32", "float16", "bfloat16", "auto"] = "float32"  # auto: lib.core.precision
    attn_implementation: Literal["sdpa", "eager"] = "sdpa"
    revision: str | None = None

    def __post_init__(self) -> None:  # ValueErrors become one-line ConfigErrors in lib.core.config.build
        if not self.facets or any(not f.strip() for f in self.facets):
            raise ValueError(f"facets must be a non-empty list of non-empty phrases, got {list(self.facets)!r}")
        if self.max_caption_tokens < 1 or self.batch_size < 1:
            raise ValueError("max_caption_tokens and batch_size must be positive")
        split_template(self.template)


def split_template(template: str) -> tuple[str, str]:
    """``(prefix, suffix)`` templates: the prefix holds ``{caption}`` and ends before the whitespace
    that precedes ``{facet}``; the suffix starts with that whitespace (see the module docstring)."""
    if template.count("{caption}") != 1 or template.count("{facet}") != 1:
        raise ValueError(f"a facet template needs exactly one {{caption}} and one {{facet}}, got {template!r}")
    cut = template.index("{facet}")
    if template.index("{caption}") > cut:
        raise ValueError(f"{{caption}} must come before {{facet}} (the caption is the shared prefix): {template!r}")
    head = template[:cut]
    prefix = head.rstrip()
    return prefix, template[len(prefix) :]


def clean_caption(caption: str) -> str:
    """Collapse whitespace and turn double quotes into single ones, as the official code does, so
    the caption cannot close the prompt's quotation early."""
    if not isinstance(caption, str) or not caption.strip():
        raise EncoderInputError(f"caption {caption!r} is empty: every caption needs words")
    return re.sub(r"\s+", " ", caption).strip().replace('"', "'")


def decoupled_inputs(
    prefixes: Sequence[Sequence[int]],
    suffixes: Sequence[Sequence[int]],
    *,
    pad_id: int,
    positions: str = "reset",
    dtype: torch.dtype = torch.float32,
    sliding_window: int | None = None,
) -> dict:
    """Model inputs for facet-decoupled attention over a batch of caption prefixes.

    Row i is ``[pad ... pad][prefix_i][suffix_1] ... [suffix_K]``, prefixes left padded so every facet's final token
    sits at one column. A key is visible to a query iff it is not padding, not later, and in the prefix or the
    query's own segment. Suffix k's positions restart at ``P_i`` (``reset``) or continue (``contiguous``).
    Returns ``input_ids``, ``position_ids``, ``mask`` (``[B, 1, L, L]`` additive), ``window_mask`` (sliding window
    on logical positions, or None), ``final`` (each facet's last column) and ``logical_length``.
    """
    if positions not in ("reset", "contiguous"):
        raise ValueError(f"positions {positions!r} is not one of ('reset', 'contiguous')")
    if not prefixes or not suffixes or any(len(s) == 0 for s in suffixes) or any(len(p) == 0 for p in prefixes):
        raise ValueError("decoupled_inputs needs at least one non-empty prefix and one non-empty suffix")
    batch = len(prefixes)
    prefix_lengths = torch.tensor([len(p) for p in prefixes])
    width = int(prefix_lengths.max())
    suffix_lengths = [len(s) for s in suffixes]
    length = width + sum(suffix_lengths)

    ids = torch.full((batch, length), pad_id, dtype=torch.long)
    segment = torch.full((batch, length), -1, dtype=torch.long)  # -1 pad, 0 prefix, k+1 suffix k
    pos = torch.zeros((batch, length), dtype=torch.long)
    for i, prefix in enumerate(prefixes):
        start = width - len(prefix)
        ids[i, start:width] = torch.as_tensor(list(prefix), dtype=torch.long)
        segment[i, start:width] = 0
        pos[i, start:width] = torch.arange(len(prefix))
    column, offset = width, 0
    final = []
    for k, suffix in enumerate(suffixes):
        n = len(suffix)
        ids[:, column : column + n] = torch.as_tensor(list(suffix), dtype=torch.long)
        segment[:, column : column + n] = k + 1
        first = prefix_lengths + (offset if positions == "contiguous" else 0)
        pos[:, column : column + n] = first[:, None] + torch.arange(n)[None, :]
        column += n
        offset += n
        final.append(column - 1)

    q_seg, k_seg = segment[:, :, None], segment[:, None, :]
    causal = torch.ones(length, length, dtype=torch.bool).tril()[None]
    allowed = causal & (k_seg >= 0) & ((k_seg == 0) | (k_seg == q_seg))
    allowed |= torch.eye(length, dtype=torch.bool)[None] & (q_seg < 0)  # padding rows: themselves only
    minimum = torch.finfo(dtype).min

    def additive(visible: torch.Tensor) -> torch.Tensor:
        mask = torch.zeros(visible.shape, dtype=dtype)
        return mask.masked_fill_(~visible, minimum)[:, None]

    window_mask = None
    if sliding_window is not None:  # the window of a separate pass: q - k < window in logical positions
        near = (pos[:, :, None] - pos[:, None, :]) < sliding_window
        window_mask = additive(allowed & (near | (q_seg < 0)))
    logical = int(prefix_lengths.max()) + (sum(suffix_lengths) if positions == "contiguous" else max(suffix_lengths))
    return {
        "input_ids": ids,
        "position_ids": pos,
        "mask": additive(allowed),
        "window_mask": window_mask,
        "final": torch.tensor(final),
        "logical_length": logical,
    }


class FacetEncoder:
    """A frozen decoder LLM read through FLAME's prompt: captions in, ``[N, K, D]`` facet embeddings out.

    ``encode(method=...)``: ``decoupled`` (one pass, facet-decoupled attention), ``separate`` (K passes) or
    ``stacked`` (N*K prompts in one list); the same numbers. See notebooks/flame.py,
    section "Facet-decoupled attention".
    """

    def __init__(
        self,
        name: str,
        *,
        facets: Sequence[str] = FACETS_LONG,
        layer: int = -1,
        template: str = FLAME_TEMPLATE,
        positions: str = "reset",
        max_caption_tokens: int = 256,
        batch_size: int = 32,
        dtype: str = "float32",
        attn_implementation: str = "sdpa",
        device: str = "cpu",
        revision: str | None = None,
    ):
        from transformers import AutoModel, AutoTokenizer

        facets = tuple(facets)
        if not facets or any(not isinstance(f, str) or not f.strip() for f in facets):
            raise ValueError(f"facets must be a non-empty list of non-empty phrases, got {facets!r}")
        if attn_implementation not in ("sdpa", "eager"):
            raise ValueError(
                f"attn_implementation {attn_implementation!r}: facet-decoupled attention needs a custom 4-D mask, "
                "which 'sdpa' and 'eager' accept (flash attention does not)"
            )
        if positions not in ("reset", "contiguous"):
            raise ValueError(f"positions {positions!r} is not one of ('reset', 'contiguous')")
        self.name, self.facets, self.layer, self.template = name, facets, layer, template
        self.positions, self.max_caption_tokens, self.batch_size = positions, max_caption_tokens, batch_size
        self.dtype = dtype = resolve_dtype(dtype, device)  # "auto" -> what this machine runs fast; the key names it
        self.attn_implementation, self.device = attn_implementation, device
        self.prefix_template, self.suffix_template = split_template(template)
        self.resolved = resolve(name, "transformers", revision)
        revision = self.resolved.identity.get("revision", revision)  # the commit the key names
        self.tokenizer = AutoTokenizer.from_pretrained(self.resolved.load_path, revision=revision)
        if self.tokenizer.pad_token is None:  # any id works under the mask
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.tokenizer.padding_side = "left"
        self.model = AutoModel.from_pretrained(
            self.resolved.load_path, dtype=DTYPES[dtype], revision=revision, attn_implementation=attn_implementation
        )
        self.model.eval().requires_grad_(False).to(device)
        config = self.model.config
        self.dim = int(config.hidden_size)
        depth = int(getattr(config, "num_hidden_layers", 0))
        if not (layer == -1 or 0 <= layer <= depth):
            raise ValueError(f"layer {layer} does not exist in {name} (use -1 or 0..{depth})")
        kinds = set(getattr(config, "layer_types", None) or [])
        self.mixed_layers = "sliding_attention" in kinds and len(kinds) > 1
        self.suffix_ids = [
            self.tokenizer(self.suffix_template.replace("{facet}", f), add_special_tokens=False)["input_ids"]
            for f in facets
        ]

    def cache_spec(self) -> dict:
        """Everything about this encoder that changes its features (part of the store key)."""
        return {
            "kind": "text_facets",
            "model": self.resolved.identity,
            "layer": self.layer,
            "pooling": "prompt_token",
            "template": self.template,
            "facets": list(self.facets),
            "positions": self.positions,
            "max_caption_tokens": self.max_caption_tokens,
            "dtype": self.dtype,
        }

    # --- text -------------------------------------------------------------------------------------
    def _truncate(self, caption: str) -> str:
        ids = self.tokenizer(caption, add_special_tokens=False)["input_ids"]
        if len(ids) <= self.max_caption_tokens:
            return caption
        return self.tokenizer.decode(ids[: self.max_caption_tokens], skip_special_tokens=True).strip()

    def prefix_text(self, caption: str) -> str:
        return self.prefix_template.replace("{caption}", self._truncate(clean_caption(caption)))

    def prompts(self, caption: str) -> list[str]:
        """The K full prompt strings of one caption (for display and the tokenisation test)."""
        prefix = self.prefix_text(caption)
        return [prefix + self.suffix_template.replace("{facet}", f) for f in self.facets]

    def tokenize_prefixes(self, captions: Sequence[str]) -> list[list[int]]:
        texts = [self.prefix_text(c) for c in captions]
        return self.tokenizer(texts)["input_ids"]  # with the model's BOS, as a whole prompt would have

    # --- forward passes ---------------------------------------------------------------------------
    def _decoupled_batch(self, prefixes: list[list[int]]) -> torch.Tensor:
        dtype = DTYPES[self.dtype]
        window = getattr(self.model.config, "sliding_window", None)  # read now: tests shrink it
        inputs = decoupled_inputs(
            prefixes, self.suffix_ids, pad_id=self.tokenizer.pad_token_id, positions=self.positions,
            dtype=dtype, sliding_window=window,
        )
        mask = inputs["mask"]
        if window is not None and inputs["logical_length"] > window:
            if self.mixed_layers:
                mask = {"full_attention": mask, "sliding_attention": inputs["window_mask"]}
            else:
                mask = inputs["window_mask"]
        if isinstance(mask, dict):
            mask = {k: v.to(self.device) for k, v in mask.items()}
        else:
            mask = mask.to(self.device)
        hidden = self._layer_output(
            input_ids=inputs["input_ids"].to(self.device), position_ids=inputs["position_ids"].to(self.device),
            attention_mask=mask,
        )
        return hidden[:, inputs["final"].to(self.device)].float().cpu()  # [B, K, D]

    def _layer_output(self, **inputs) -> torch.Tensor:
        """Token states of ``self.layer`` without keeping every layer's states (a forward hook)."""
        if self.layer == -1 or self.layer == self.model.config.num_hidden_layers:
            return self.model(**inputs).last_hidden_state  # transformers 5: hidden_states[depth] is normed too
        if self.layer == 0:
            return self.model(**inputs, output_hidden_states=True).hidden_states[0]
        captured = {}

        def keep(module, args, output):
            captured["h"] = output[0] if isinstance(output, tuple) else output

        handle = self.model.layers[self.layer - 1].register_forward_hook(keep)
        try:
            self.model(**inputs)
        finally:
            handle.remove()
        return captured["h"]

    def _last_token_states(self, sequences: list[list[int]], rows_per_pass: int, show: bool) -> torch.Tensor:
        """Reference path: ordinary left-padded passes (2-D padding mask, position ids restarting at 0 at
        each row's first real token), the final token's state via ``output_hidden_states``."""
        out = torch.empty(len(sequences), self.dim, dtype=torch.float32)
        order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
        for start in tqdm(range(0, len(order), rows_per_pass), disable=not show, leave=False, desc="prompts"):
            rows = order[start : start + rows_per_pass]
            batch = self.tokenizer.pad({"input_ids": [sequences[i] for i in rows]}, return_tensors="pt")
            mask = batch["attention_mask"]
            position_ids = (mask.cumsum(1) - 1).clamp_min(0)
            outputs = self.model(
                input_ids=batch["input_ids"].to(self.device), attention_mask=mask.to(self.device),
                position_ids=position_ids.to(self.device), output_hidden_states=self.layer != -1,
            )
            hidden = outputs.last_hidden_state if self.layer == -1 else outputs.hidden_states[self.layer]
            out[rows] = hidden[:, -1].float().cpu()  # left padding: the last column is every row's final token
        return out

    @torch.no_grad()
    def encode(
        self, captions: Sequence[str], *, method: str = "decoupled", progress: bool | None = None
    ) -> torch.Tensor:
        """Facet embeddings ``[len(captions), K, dim]`` (float32, input order; facet k = ``self.facets[k]``)."""
        if method not in METHODS:
            raise ValueError(f"method {method!r} is not one of {METHODS}")
        show = (not paths.quiet()) if progress is None else progress
        prefixes = self.tokenize_prefixes(list(captions))
        n, k = len(prefixes), len(self.facets)
        if method == "decoupled":
            out = torch.empty(n, k, self.dim, dtype=torch.float32)
            order = sorted(range(n), key=lambda i: len(prefixes[i]))
            starts = range(0, n, self.batch_size)
            for start in tqdm(starts, desc=f"facets {self.name}", disable=not show, leave=False):
                rows = order[start : start + self.batch_size]
                out[rows] = self._decoupled_batch([prefixes[i] for i in rows])
            return out
        sequences = [p + s for p in prefixes for s in self.suffix_ids]  # caption-major, as the output
        if method == "stacked":
            return self._last_token_states(sequences, self.batch_size * k, show).view(n, k, self.dim)
        per_facet = [self._last_token_states(sequences[j::k], self.batch_size, show) for j in range(k)]
        return torch.stack(per_facet, dim=1)
