"""The ViTeRB chapter's config: the schema of ``notebooks/configs/viterb.yaml``.

See notebooks/viterb.py, section "Configuration".
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from chapters import configs as chapter_configs
from corpora.class_splits import FashionImages
from lib.core import config as configs
from lib.core.config import HeadConfig, LossConfig, StoreConfig, TextModelConfig, TrainSettings, VisionModelConfig
from lib.core.recipes import SweepConfig

NAME = "viterb"


TextKind = Literal["name", "description", "encyclopedia", "reference", "wikipedia"]


@dataclass(frozen=True)
class Config:
    """``notebooks/configs/viterb.yaml``, validated field by field on load (``lib.core.config``).

    ``score_datasets`` are averaged into the ViTeRB score (the paper: AWA2, CUB, FGVC-Aircraft, ImageNet+);
    ``check_datasets`` run the same grid but are reported on their own; ``photo_datasets`` (medium: Caltech-101's
    photographs, each seed its own 51 / 50 split of the categories) run the same grid with a recipe sweep of their
    own, and where they exist the paper's claims are decided on them (the score datasets' drawings become a second
    analogue, the book's own questions). ``encoders`` names the text models
    that are encoders (Table 1's "Enc." rows); the others are decoders. ``pooling_ablation``: text models
    run again with another pooling (reported apart from the main table). ``bare_name``: also run the class
    name without templates. ``curve_fractions``: shares of the first score dataset's training images at which
    every text model is trained again on the class names (the data-size curve, :func:`data_size_curve`; empty:
    none), on the first ``curve_seeds`` seeds. ``split_per_seed``: every seed draws its own split of each
    dataset's classes by concept family (:func:`chapters.viterb.experiments.seed_benchmark`), so that no verdict
    rests on one split; otherwise every seed reads the dataset's fixed, checksummed split.
    """

    score_datasets: tuple[str, ...]
    text_kinds: tuple[TextKind, ...]
    vision: tuple[VisionModelConfig, ...]  # the first is the chapter's main image model
    text: tuple[TextModelConfig, ...]  # the first is the main model (the shuffled-text control)
    encoders: tuple[str, ...] = ()
    check_datasets: tuple[str, ...] = ()
    photo_datasets: tuple[str, ...] = ()
    name_templates: Literal["imagenet80", "imagenet7", "bare"] = "imagenet80"
    bare_name: bool = False
    pooling_ablation: tuple[TextModelConfig, ...] = ()
    head: HeadConfig = field(default_factory=HeadConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    train: TrainSettings = field(default_factory=TrainSettings)
    sweep: SweepConfig = field(default_factory=SweepConfig)  # each language model's recipe (choose_recipes)
    store: StoreConfig = field(default_factory=StoreConfig)
    fashion: FashionImages = field(default_factory=FashionImages)
    vision_check_seeds: int = 1  # the other vision models run only the first N seeds ...
    vision_check_kinds: tuple[TextKind, ...] = ("name", "reference")  # ... and only these text types
    perplexity_texts: int = 200  # held-out WordNet glosses for each decoder's own perplexity
    curve_fractions: tuple[float, ...] = ()
    curve_seeds: int | None = None  # the data-size curve runs the first this many seeds (None: all of them)
    split_per_seed: bool = False  # each seed draws its own seen / val / unseen split of every dataset's classes
    device: str = "cpu"
    seeds: tuple[int, ...] = (0,)

    def __post_init__(self) -> None:
        chapter_configs.curve_run_seeds(self.seeds, self.curve_seeds)  # refused outside 2..len(seeds)

    @property
    def curve_run_seeds(self) -> tuple[int, ...]:
        """The seeds the data-size curve runs: the first ``curve_seeds`` of ``seeds`` (all when None)."""
        return chapter_configs.curve_run_seeds(self.seeds, self.curve_seeds)

    @property
    def datasets(self) -> tuple[str, ...]:
        return self.score_datasets + self.photo_datasets + self.check_datasets

    @property
    def swept_datasets(self) -> tuple[str, ...]:
        """The datasets with a recipe sweep of their own (a check dataset takes the first score dataset's)."""
        return self.score_datasets + self.photo_datasets

    def role(self, dataset: str) -> str:
        """A dataset's role in the runs' rows: ``score`` (the ViTeRB score), ``photos`` or ``check``."""
        return "score" if dataset in self.score_datasets else "photos" if dataset in self.photo_datasets else "check"

    def datasets_in(self, role: str) -> tuple[str, ...]:
        """The datasets of one :meth:`role`, in config order."""
        return tuple(d for d in self.datasets if self.role(d) == role)


def load_config(name: str = "small", overrides: dict | None = None) -> Config:
    """``small`` / ``medium`` / ``full`` of ``notebooks/configs/viterb.yaml`` (or a YAML path), validated."""
    cfg = chapter_configs.load(NAME, name, Config, overrides)
    names = {t.name for t in cfg.text + cfg.pooling_ablation}
    unknown = [e for e in cfg.encoders if e not in names]
    if unknown:
        raise configs.ConfigError(f"{name}.encoders: {unknown[0]!r} is not a text model of this config")
    return cfg
