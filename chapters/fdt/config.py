"""The FDT chapter's config: the schema of ``notebooks/configs/fdt.yaml``.

See notebooks/fdt.py, section "Configuration".
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from chapters import configs as chapter_configs
from corpora.datasets import DataConfig
from lib.core.config import StoreConfig, TextModelConfig, TrainSettings, VisionModelConfig
from lib.core.recipes import SweepConfig
from lib.methods.fdt import OFFICIAL
from lib.nn.towers import ImageTowerConfig, TextTowerConfig

NAME = "fdt"


# The paper's numbers the chapter compares with (Table 2: 9-dataset zero-shot average, 15M pairs; Table 8:
# the same average with the FDT weights used as features, and with the FDT embeddings).
PAPER_NUMBERS = {"zs_average_15M": {"CLIP": 41.3, "CLIP+FDT": 45.9},
                 "weights_as_features": {"sparsemax": 32.4, "softmax": 5.2},
                 "embeddings": {"sparsemax": 45.9, "softmax": 43.9}}


def _check_bounds(bounds) -> None:
    if bounds is not None and not (len(bounds) == 2 and bounds[0] <= bounds[1]):
        raise ValueError(f"log_scale_bounds must be [low, high] with low <= high, or null, got {list(bounds)}")


@dataclass(frozen=True)
class FDTHeadConfig:
    """The FDT head's settings (:class:`lib.methods.fdt.FDTHead`'s keyword arguments). ``log_scale_bounds``:
    the official [3, 6] clamp of the log logit scale (scale 20.1 to 100 with ``max_scale``); null: none (paper)."""

    num_codes: int = 16384
    code_dim: int = 512
    projector: Literal["fc_gelu", "ln_mlp"] = "ln_mlp"
    weighting: Literal["sparsemax", "softmax"] = "sparsemax"
    temperature: float = 1000.0
    scaled_dot: bool = True
    padding: Literal["mask", "zero"] = "mask"
    init_temperature: float = 0.07
    max_scale: float = 100.0
    codebook_std: float = 1.0
    log_scale_bounds: tuple[float, ...] | None = OFFICIAL["log_scale_bounds"]

    def __post_init__(self) -> None:
        for name in ("num_codes", "code_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.codebook_std <= 0 or self.max_scale <= 0:
            raise ValueError("codebook_std and max_scale must be positive numbers")
        _check_bounds(self.log_scale_bounds)


@dataclass(frozen=True)
class PooledHeadConfig:
    """The pooled baseline (:class:`lib.methods.fdt.PooledHead`): one linear map per modality on pooled tokens."""

    embed_dim: int = 512
    image_pool: Literal["mean", "first"] = "mean"
    text_pool: Literal["mean", "first"] = "mean"
    init_temperature: float = 0.07
    max_scale: float = 100.0
    log_scale_bounds: tuple[float, ...] | None = OFFICIAL["log_scale_bounds"]

    def __post_init__(self) -> None:
        _check_bounds(self.log_scale_bounds)


@dataclass(frozen=True)
class Variant:
    """An FDT ablation: the main head with the named fields changed, trained on the first ``seeds`` seeds."""

    name: str
    seeds: int = 1
    projector: Literal["fc_gelu", "ln_mlp"] | None = None
    weighting: Literal["sparsemax", "softmax"] | None = None
    temperature: float | None = None
    scaled_dot: bool | None = None
    padding: Literal["mask", "zero"] | None = None

    def __post_init__(self) -> None:
        if self.seeds < 1:
            raise ValueError(f"variant {self.name!r}: seeds must be >= 1, got {self.seeds}")
        if not self.changes():
            raise ValueError(f"variant {self.name!r} changes nothing: name at least one FDT head field")

    def changes(self) -> dict:
        """The head fields this variant sets (those not left null)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in ("name", "seeds") and getattr(self, f.name) is not None}


@dataclass(frozen=True)
class Config:
    """``notebooks/configs/fdt.yaml``, validated on load (``lib.core.config``). ``image_tokens``: ``patches``
    (official: no CLS) or ``all`` (CLS first); ``init_probe``: the ``[num_codes, code_dim]`` at which a fresh
    head's sparsity is measured (the paper's 16,384 x 512), on ``init_probe_items`` items. ``image_tower`` and
    ``text_tower`` (full): the paper's setting, open_clip's towers trained from random weights through the head
    (:mod:`chapters.fdt.towers`) instead of ``vision``'s and ``text``'s frozen sequences; ``train_data: streamed``
    decodes the training images per batch from their tar shards. ``caltech_per_class``: Caltech-101's photographs as a
    zero-shot test of heads trained on the drawings (the paper's zero-shot sets are photographs), each seed on its own
    seeded sample of that many photos a category (``corpora.caltech.sample``); None: no such test."""

    data: DataConfig
    vision: VisionModelConfig
    text: TextModelConfig
    fdt: FDTHeadConfig = field(default_factory=FDTHeadConfig)
    baseline: PooledHeadConfig = field(default_factory=PooledHeadConfig)
    variants: tuple[Variant, ...] = ()
    image_tokens: Literal["all", "patches"] = "patches"
    train: TrainSettings = field(default_factory=TrainSettings)
    sweep: SweepConfig = field(default_factory=SweepConfig)  # each head's recipe on the validation set (run_all)
    store: StoreConfig = field(default_factory=StoreConfig)
    eval_batch_size: int = 256
    init_probe: tuple[int, ...] = (16384, 512)
    init_probe_items: int = 64
    device: str = "cpu"
    seeds: tuple[int, ...] = (0,)
    curve_fractions: tuple[float, ...] = (0.125, 0.25, 0.5, 1.0)  # the data-size curve's shares (medium)
    curve_seeds: int | None = None  # the data-size curve runs the first this many seeds (None: all of them)
    image_tower: ImageTowerConfig | None = None  # full: the encoders trained through FDT (None: frozen sequences)
    text_tower: TextTowerConfig | None = None
    train_data: Literal["resident", "streamed"] = "resident"  # the towers' training images: held, or per batch
    caltech_per_class: int | None = None  # Caltech-101's photos a category per seed (corpora.caltech.sample), or None

    @property
    def curve_run_seeds(self) -> tuple[int, ...]:
        """The seeds the data-size curve runs: the first ``curve_seeds`` of ``seeds`` (all when None)."""
        return chapter_configs.curve_run_seeds(self.seeds, self.curve_seeds)

    @property
    def towers(self) -> bool:
        """Whether the encoders train through the head (the paper's setting) rather than stay frozen."""
        return self.image_tower is not None

    @property
    def embed_dim(self) -> int:
        """The width of the baseline's embeddings: what ``provision.preflight.tower_costs`` sizes the towers with."""
        return self.baseline.embed_dim

    def __post_init__(self) -> None:
        if (self.image_tower is None) != (self.text_tower is None):
            raise ValueError("image_tower and text_tower go together: set both (the encoders trained through FDT) "
                             "or neither (frozen vision and text sequences)")
        if len(self.init_probe) != 2 or min(self.init_probe) < 1:
            raise ValueError(f"init_probe must be [num_codes, code_dim], got {list(self.init_probe)}")
        if not self.curve_fractions or any(not 0 < f <= 1 for f in self.curve_fractions):
            raise ValueError(f"curve_fractions must lie in (0, 1], got {list(self.curve_fractions)}")
        names = [v.name for v in self.variants]
        if len(set(names)) != len(names) or {"FDT", "pooled"} & set(names):
            raise ValueError(f"variant names must be distinct and not 'FDT' or 'pooled', got {names}")
        chapter_configs.curve_run_seeds(self.seeds, self.curve_seeds)  # refused outside 2..len(seeds)
        if self.caltech_per_class is not None and (self.caltech_per_class < 1 or self.towers):
            raise ValueError(f"caltech_per_class must be a positive integer or null (and null with image_tower, whose "
                             f"runs store no features), got {self.caltech_per_class}")


def load_config(name: str = "small", overrides: dict | None = None) -> Config:
    """``small`` / ``medium`` / ``full`` of ``notebooks/configs/fdt.yaml`` (or a YAML path), validated."""
    return chapter_configs.load(NAME, name, Config, overrides)
