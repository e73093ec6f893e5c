"""The FLAME chapter's config: the schema of ``notebooks/configs/flame.yaml``; the medium config adds seeded
subsets, a data-size curve and the Tux Paint locales (:class:`MediumConfig`).
See notebooks/flame.py, section "Configuration".
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from chapters import configs as chapter_configs
from corpora import emoji
from corpora.datasets import DataConfig
from lib.core import curves
from lib.core.config import HeadConfig, LossConfig, StoreConfig, TextModelConfig, TrainSettings, VisionModelConfig
from lib.core.recipes import SweepConfig
from lib.core.facets import FLAME_TEMPLATE, FacetConfig
from lib.methods.flame import OFFICIAL_TEMPLATE, SHORT_TEXT_FACET
from lib.methods.three_towers import ImageTowerConfig, TextTowerConfig

NAME = "flame"


@dataclass(frozen=True)
class Config:
    """``notebooks/configs/flame.yaml``, validated field by field on load (``lib.core.config``).

    ``text`` is the frozen LLM read through FLAME's prompt (its ``facets`` are the K of the main run);
    ``facet_counts`` the prompt ablation (the first k facets, sliced from the K cached ones: with reset
    positions a facet's embedding does not depend on the others); ``short_text_facet`` the one prompt for
    short texts. ``prompt: official`` uses the official code's template and caption ending instead of the
    paper's (changes ``text.template`` unless the config set its own). ``baselines`` are ShareLock heads on
    plain features (the first: the same LLM as ``text``); ``scratch`` a text tower trained from scratch
    against the frozen image features. ``image_tower`` (full): the paper's image encoder trained from scratch
    (Table 3), in front of every method instead of ``vision``'s frozen features, with ``image_tower_dim``
    outputs. ``train_data``: the training text features resident on the device, or ``streamed`` from the store's
    shards (``lib.core.rows``), the image tower's training images then decoded per batch too
    (``lib.data.image_rows``); ``auto`` streams when the text features would take over half of the GPU's free memory.
    ``val_limit`` / ``retrieval_limit``: the first N validation /
    unseen pairs (``data.limit``: training pairs). ``locales``: CLDR labels in other languages (emoji only).
    """

    data: DataConfig
    vision: VisionModelConfig
    text: FacetConfig
    baselines: tuple[TextModelConfig, ...]
    scratch: TextTowerConfig
    scratch_embed_dim: int = 128
    image_tower: ImageTowerConfig | None = None  # full: a ViT trained from scratch instead of frozen image features
    image_tower_dim: int = 512
    train_data: Literal["auto", "resident", "streamed"] = "auto"  # auto: streamed when the text features do not fit
    projector_hidden: int | None = None  # None: the official max(LLM width, 4096)
    loss: Literal["facet_infonce", "mp_sigmoid"] = "facet_infonce"
    temperature: float | None = None  # None: 0.07 (facet_infonce) / 0.1 (mp_sigmoid)
    positives: int | None = None  # mp_sigmoid: positives drawn per image (official 6 of 11); None = all K
    compare_losses: bool = True
    facet_counts: tuple[int, ...] = (1,)
    short_text_facet: str = SHORT_TEXT_FACET
    prompt: Literal["paper", "official"] = "paper"
    head: HeadConfig = field(default_factory=HeadConfig)  # the ShareLock baseline's text head
    sharelock_loss: LossConfig = field(default_factory=LossConfig)
    train: TrainSettings = field(default_factory=TrainSettings)
    sweep: SweepConfig = field(default_factory=SweepConfig)  # each method's recipe (choose_recipes)
    store: StoreConfig = field(default_factory=StoreConfig)
    val_limit: int | None = None
    retrieval_limit: int | None = None
    locales: tuple[str, ...] = ()
    device: str = "cpu"
    seeds: tuple[int, ...] = (0,)

    def __post_init__(self) -> None:
        k = len(self.text.facets)
        if any(not 1 <= c <= k for c in self.facet_counts):
            raise ValueError(f"facet_counts {list(self.facet_counts)} must lie in 1..{k} (the facets of `text`)")
        if self.short_text_facet not in self.text.facets:
            raise ValueError(f"short_text_facet {self.short_text_facet!r} is not one of the facets of `text`")
        if not self.baselines:
            raise ValueError("baselines must name at least one text model (the first: the same LLM as `text`)")
        if self.positives is not None and self.positives > k:
            raise ValueError(f"positives ({self.positives}) cannot exceed the {k} facets")
        unknown = [loc for loc in self.locales if loc not in emoji.LOCALES]
        if unknown:
            raise ValueError(f"locales {unknown} are not in the emoji corpus ({', '.join(emoji.LOCALES)})")
        for name in ("val_limit", "retrieval_limit", "projector_hidden", "scratch_embed_dim"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be a positive integer or null, got {value}")
        if self.prompt == "official" and self.text.template == FLAME_TEMPLATE:
            object.__setattr__(self, "text", dataclasses.replace(self.text, template=OFFICIAL_TEMPLATE))


def load_config(name: str = "small", overrides: dict | None = None) -> Config:
    """``small`` / ``medium`` (a :class:`MediumConfig`) / ``full`` of the YAML, validated."""
    return chapter_configs.load(NAME, name, MediumConfig if name == "medium" else Config, overrides)


SUBSET_SEED = curves.SUBSET_SEED  # the permutation of every split's rows (the data-size curves' seed)


@dataclass(frozen=True)
class MediumConfig(Config):
    """``medium:`` of ``notebooks/configs/flame.yaml``: :class:`Config` plus the seeded subset
    sizes (``train_pairs`` / ``val_pairs`` / ``retrieval_pairs``), the data-size curve's training sizes (prefixes of
    the training subset, so nested) and how many of the seeds it runs (``curve_seeds``; None: all: the main
    comparisons may need more seeds for their intervals than the curve's trend does), and the Tux Paint locales of
    the multilingual test. ``caltech_per_class``: Caltech-101's photographs as a zero-shot test after training on the
    drawings' captions (the analogue of Table 3's CC3M captions -> ImageNet photos), each seed on its own seeded
    sample of that many photos a category (so an interval over seeds also spans test items); None: no such test."""

    train_pairs: int = 3000
    val_pairs: int = 500
    retrieval_pairs: int = 1000
    curve_sizes: tuple[int, ...] = ()
    curve_seeds: int | None = None
    tux_locales: tuple[str, ...] = ("en",)
    caltech_per_class: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.caltech_per_class is not None and self.caltech_per_class < 1:
            raise ValueError(f"caltech_per_class must be a positive integer or null, got {self.caltech_per_class}")
        if self.data.corpus != "medium":
            raise ValueError("the medium FLAME config reads the medium corpus (data.corpus: medium)")
        if any(not 2 <= n <= self.train_pairs for n in self.curve_sizes):
            raise ValueError(f"curve_sizes {list(self.curve_sizes)} must lie in 2..train_pairs ({self.train_pairs})")
        chapter_configs.curve_run_seeds(self.seeds, self.curve_seeds)  # refused outside 2..len(seeds)
        if "en" not in self.tux_locales:  # the reference language (the locales are checked against the data on use)
            raise ValueError(f"tux_locales {list(self.tux_locales)} must include en")

    @property
    def curve_run_seeds(self) -> tuple[int, ...]:
        """The seeds the data-size curve runs: the first ``curve_seeds`` of ``seeds`` (all when None)."""
        return chapter_configs.curve_run_seeds(self.seeds, self.curve_seeds)
