"""The ShareLock chapter's config: the schema of ``notebooks/configs/sharelock.yaml`` (small, medium, full).

See notebooks/sharelock.py, section "Configuration".
"""
from __future__ import annotations

from dataclasses import dataclass, field

from chapters import configs as chapter_configs
from corpora.datasets import DataConfig
from lib.core.config import HeadConfig, LossConfig, StoreConfig, TextModelConfig, TrainSettings, VisionModelConfig
from lib.core.recipes import SweepConfig

NAME = "sharelock"


@dataclass(frozen=True)
class LiTConfig:
    """The paper's baseline (§6.1): a pretrained text encoder trained end to end, with a linear projection, on the
    same locked image features and pairs (:class:`lib.methods.lit.LiT`). ``train``: its own settings, since a tuned
    transformer needs a smaller learning rate than a head on frozen features; the budget rule (``eval_every``,
    ``patience``) is the heads'. ``sweep``: LiT's own grid of learning rates (a pretrained transformer's lie
    lower than a head's), chosen on the validation concepts like the heads' (:mod:`lib.core.recipes`)."""

    enabled: bool = False  # a config's `lit:` section sets it; absent, the baseline is not trained
    text: TextModelConfig = field(default_factory=lambda: TextModelConfig("offline/all-MiniLM-L6-v2", "mean"))
    train: TrainSettings = field(default_factory=TrainSettings)
    sweep: SweepConfig = field(default_factory=SweepConfig)


@dataclass(frozen=True)
class Config:
    """``notebooks/configs/sharelock.yaml``, validated field by field on load (``lib.core.config``).

    The first vision and the first text model are the chapter's main pair; the others are comparisons.
    """

    data: DataConfig
    vision: tuple[VisionModelConfig, ...]
    text: tuple[TextModelConfig, ...]
    head: HeadConfig = field(default_factory=HeadConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    train: TrainSettings = field(default_factory=TrainSettings)
    store: StoreConfig = field(default_factory=StoreConfig)
    device: str = "cpu"
    seeds: tuple[int, ...] = (0,)
    # each seed trains and tests on the concept split it draws (corpora.medium_seeds; medium only): the paired
    # interval over seeds then holds the split's variance too, and no verdict rests on one split
    split_per_seed: bool = False
    curve_fractions: tuple[float, ...] = (0.125, 0.25, 0.5, 1.0)  # the data-size curve's shares of the training pairs
    curve_seeds: int | None = None  # the data-size curve runs the first this many seeds (None: all of them)
    lit: LiTConfig = field(default_factory=LiTConfig)  # the LiT baseline (trained when ``lit.enabled``)
    sweep: SweepConfig = field(default_factory=SweepConfig)  # each head kind's lr x weight decay (lib.core.recipes)

    def __post_init__(self) -> None:
        if not self.curve_fractions or any(not 0 < f <= 1 for f in self.curve_fractions):
            raise ValueError(f"curve_fractions must be shares of the training pairs in (0, 1], e.g. [0.25, 1.0]; "
                             f"got {list(self.curve_fractions)}")
        chapter_configs.curve_run_seeds(self.seeds, self.curve_seeds)  # refused outside 2..len(seeds)
        if self.split_per_seed and self.data.corpus != "medium":
            raise ValueError(f"split_per_seed draws the medium corpus's concept split per seed; data.corpus is "
                             f"{self.data.corpus!r}: set `split_per_seed: false` (or drop it)")
        if self.split_per_seed:
            from corpora import medium_seeds

            medium_seeds.refuse_limit(self.data.limit)

    @property
    def curve_run_seeds(self) -> tuple[int, ...]:
        """The seeds the data-size curve runs: the first ``curve_seeds`` of ``seeds`` (all when None)."""
        return chapter_configs.curve_run_seeds(self.seeds, self.curve_seeds)


def load_config(name: str = "small", overrides: dict | None = None) -> Config:
    """``small`` / ``medium`` / ``full`` of ``notebooks/configs/sharelock.yaml`` (or a YAML path), validated."""
    return chapter_configs.load(NAME, name, Config, overrides)
