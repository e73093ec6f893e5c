"""The Three Towers chapter's config: the schema of ``notebooks/configs/three_towers.yaml``.

See notebooks/three_towers.py, section "Configuration".
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from chapters import configs as chapter_configs
from corpora.datasets import DataConfig
from lib.core import curves
from lib.core.config import LossConfig, StoreConfig, TrainSettings, VisionModelConfig
from lib.core.recipes import SweepConfig
from lib.methods.three_towers import ImageTowerConfig, TextTowerConfig

NAME = "three_towers"


@dataclass(frozen=True)
class Config:
    """``notebooks/configs/three_towers.yaml``, validated field by field on load (``lib.core.config``).

    ``third`` is p, the frozen pretrained image model behind the third tower; ``train_styles`` the emoji
    drawing styles the towers train on (both: the towers trained from scratch need every image);
    ``weights`` the loss-weight ablation (w = 1 is the main run); ``alphas`` the headless convex combination
    ``alpha * h + (1 - alpha) * f``; ``ablation_seeds`` how many of ``seeds`` the ablations run on.
    The runs train a fixed budget (``train.steps``) and keep the final weights, as the paper does;
    ``diagnosis_eval_every`` is the validation interval of the early-stopping diagnosis
    (:func:`early_stopping_settings`). ``medium`` instead validates every ``train.eval_every`` steps and keeps
    the lowest validation loss (its 11,416 drawings are not memorised in a few epochs; see the chapter).
    ``curve_fractions``: the shares of the training pairs of the data-size curve (:func:`data_size_curve`), run on
    the first ``curve_seeds`` seeds (all when None).
    ``val_holdout`` > 0 (``medium``): validate on that share of the training pairs, held out from training
    (:func:`held_out_rows`), instead of on the validation concept families (see :func:`inputs`).
    ``train_data``: the training pixels ``resident`` (decoded once, held as uint8: :mod:`lib.data.pixel_cache`) or
    ``streamed`` (decoded as each batch needs them, :class:`lib.data.image_rows.ImageRows`: the full config at
    224 px, whose 563k images would take 85 GB). Both give the same batches.
    """

    data: DataConfig
    third: VisionModelConfig
    image_tower: ImageTowerConfig
    text_tower: TextTowerConfig
    embed_dim: int = 128
    train_styles: tuple[Literal["google", "twitter"], ...] = ("google",)
    loss: LossConfig = field(default_factory=lambda: LossConfig(temperature=0.07, learnable=True))
    train: TrainSettings = field(default_factory=TrainSettings)
    sweep: SweepConfig = field(default_factory=SweepConfig)  # each method's recipe (choose_recipes)
    store: StoreConfig = field(default_factory=StoreConfig)
    weights: tuple[float, ...] = (0.5, 2.0)
    alphas: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    augment: bool = True
    device: str = "cpu"
    seeds: tuple[int, ...] = (0,)
    ablation_seeds: int = 1
    diagnosis_eval_every: int = 25
    curve_fractions: tuple[float, ...] = (1.0,)
    curve_seeds: int | None = None  # the data-size curve runs the first this many seeds (None: all of them)
    val_holdout: float = 0.0
    train_data: Literal["resident", "streamed"] = "resident"

    def __post_init__(self) -> None:
        if self.embed_dim <= 0:
            raise ValueError(f"embed_dim must be a positive integer, got {self.embed_dim}")
        if any(not 0.0 <= a <= 1.0 for a in self.alphas):
            raise ValueError(f"alphas must lie in [0, 1] (a convex combination), got {list(self.alphas)}")
        if any(w < 0 for w in self.weights):
            raise ValueError(f"weights must be >= 0, got {list(self.weights)}")
        if not self.train_styles:
            raise ValueError("train_styles must name at least one drawing style")
        if self.ablation_seeds < 0:
            raise ValueError(f"ablation_seeds must be >= 0, got {self.ablation_seeds}")
        if self.diagnosis_eval_every < 1:
            raise ValueError(f"diagnosis_eval_every must be >= 1, got {self.diagnosis_eval_every}")
        curves.sizes(100, self.curve_fractions)  # each fraction in (0, 1], or one clear message
        chapter_configs.curve_run_seeds(self.seeds, self.curve_seeds)  # refused outside 2..len(seeds)
        if not 0.0 <= self.val_holdout < 0.5:
            raise ValueError(f"val_holdout is the share of training pairs held out for validation, in [0, 0.5); "
                             f"got {self.val_holdout}")

    @property
    def curve_run_seeds(self) -> tuple[int, ...]:
        """The seeds the data-size curve runs: the first ``curve_seeds`` of ``seeds`` (all when None)."""
        return chapter_configs.curve_run_seeds(self.seeds, self.curve_seeds)


def load_config(name: str = "small", overrides: dict | None = None) -> Config:
    """``small`` / ``medium`` / ``full`` of ``notebooks/configs/three_towers.yaml`` (or a YAML path), validated."""
    return chapter_configs.load(NAME, name, Config, overrides)
