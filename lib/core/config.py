"""Validated configs: a dataclass schema checked field by field before any work starts.

Why: the worst way to learn that ``pooling: last-token`` should read ``last_token`` is an hour into a
paper-scale precompute. Every field is checked on load against a dataclass schema, and a bad one
gives a single line naming the field, the value and what is allowed (``ConfigError``).
See ``notebooks/sharelock.py``, section "Configuration".
"""
from __future__ import annotations

import dataclasses
import math
import re
import reprlib
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

import yaml


class ConfigError(ValueError):
    """One line: which field, which value, what is allowed."""


@dataclass(frozen=True)
class TextModelConfig:
    name: str
    pooling: Literal["last_token", "mean", "cls"]
    layer: int = -1
    max_length: int = 77
    batch_size: int = 64
    dtype: Literal["float32", "float16", "bfloat16", "auto"] = "float32"  # auto: lib.core.precision
    revision: str | None = None


@dataclass(frozen=True)
class VisionModelConfig:
    name: str
    library: Literal["timm", "transformers"]
    image_size: int | None = None
    crop_pct: float | None = None
    batch_size: int = 64
    dtype: Literal["float32", "float16", "bfloat16", "auto"] = "float32"  # auto: lib.core.precision
    revision: str | None = None


@dataclass(frozen=True)
class HeadConfig:
    hidden_dim: int = 4096
    num_layers: int = 4
    dropout: float = 0.2


@dataclass(frozen=True)
class LossConfig:
    temperature: float = 0.07
    learnable: bool = False


@dataclass(frozen=True)
class TrainSettings:
    """How :func:`lib.core.train.fit` trains: the one schema of a chapter's ``train:`` section and of ``fit``.

    The defaults are small and generic; every chapter config sets its own values. ShareLock's paper
    and official code use steps 5000, batch 16,384 (official: 1,024 x 16 accumulation), lr 1e-3, weight
    decay 1e-4, Adam, 150 warm-up steps, gradient clipping 1.0.

    ``patience`` counts *evaluations* without a validation improvement larger than ``min_delta``
    (ShareLock's official config: patience 50, min_delta 0.1, evaluated about every 31 optimiser steps);
    the weights restored at the end are those of the lowest validation loss, whatever ``min_delta``.
    ``eval_every`` counts optimiser steps. ``betas`` are Adam's (PyTorch's default (0.9, 0.999); FLAME's
    official code uses (0.9, 0.95)). ``precision="bf16"`` runs every forward pass and loss under
    ``torch.autocast`` in bfloat16 (the GPU path of the full configs: weights and optimiser stay fp32);
    ``precision="auto"`` is ``bf16`` where bfloat16 is fast (a GPU, or a CPU with bfloat16 units) and ``fp32``
    elsewhere (:func:`lib.core.precision.resolve_precision`; ``fit`` resolves it before anything is keyed).
    The seed and the device are arguments of ``fit``, not settings: one settings object serves every seed.
    See notebooks/sharelock.py, section "Training the head".
    """

    steps: int = 1000
    batch_size: int = 256
    micro_batch_size: int | None = None
    lr: float = 1e-3
    weight_decay: float = 1e-4
    optimizer: Literal["adam", "adamw"] = "adam"
    warmup_steps: int = 50
    grad_clip: float | None = 1.0
    eval_every: int = 50
    patience: int | None = None
    min_delta: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    precision: Literal["fp32", "bf16", "auto"] = "fp32"

    def __post_init__(self) -> None:  # ValueErrors become one-line ConfigErrors in build()
        if isinstance(self.betas, list):  # a YAML list, or a caller's
            object.__setattr__(self, "betas", tuple(self.betas))
        if not (isinstance(self.betas, tuple) and len(self.betas) == 2
                and all(isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1 for b in self.betas)):
            raise ValueError(f"betas must be two numbers in [0, 1), e.g. [0.9, 0.999], got {self.betas!r}")
        if self.precision not in ("fp32", "bf16", "auto"):
            raise ValueError(f"precision must be 'fp32', 'bf16' (bfloat16 autocast) or 'auto' (bf16 where bfloat16 "
                             f"is fast), got {self.precision!r}")
        if self.optimizer not in ("adam", "adamw"):
            raise ValueError(f"optimizer must be 'adam' or 'adamw', got {self.optimizer!r}")
        for name in ("steps", "batch_size", "eval_every"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.micro_batch_size is not None and not 1 <= self.micro_batch_size <= self.batch_size:
            raise ValueError(f"micro_batch_size must be between 1 and batch_size={self.batch_size}, "
                             f"got {self.micro_batch_size}")
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.grad_clip is not None and self.grad_clip <= 0:
            raise ValueError(f"grad_clip must be > 0 or null (off), got {self.grad_clip}")
        if self.patience is not None and self.patience < 1:
            raise ValueError(f"patience must be >= 1 or null (off), got {self.patience}")
        if self.min_delta < 0:
            raise ValueError(f"min_delta must be >= 0, got {self.min_delta}")
        if self.lr <= 0 or self.weight_decay < 0:
            raise ValueError(f"lr must be > 0 and weight_decay >= 0, got lr={self.lr}, "
                             f"weight_decay={self.weight_decay}")


@dataclass(frozen=True)
class StoreConfig:
    dtype: Literal["float16", "float32"] = "float16"
    shard_rows: int = 4096
    verify: Literal["always", "once", "never"] = "once"


MAX_PARAMETER_CHARS = 10_000  # a papermill parameter's YAML text (a seed list, an overrides mapping)
MAX_CONFIG_BYTES = 1 << 20  # a config file: the shipped ones are a few kilobytes
MAX_SEED = 2**32 - 1  # numpy's and torch's seeds are 32-bit here; anything larger is a typo

_SHOW = reprlib.Repr()  # Python 3.11 sets the limits as attributes, not constructor arguments
_SHOW.maxlevel, _SHOW.maxlist, _SHOW.maxtuple, _SHOW.maxdict = 3, 8, 8, 8
_SHOW.maxstring, _SHOW.maxother, _SHOW.maxlong = 60, 60, 40


def bounded_repr(value: Any) -> str:
    """A bounded ``repr`` for error messages: a huge or deeply nested value is never spelt out whole."""
    return _SHOW.repr(value)


def safe_yaml(text: str, where: str, limit: int = MAX_PARAMETER_CHARS) -> Any:
    """``yaml.safe_load`` of ``text``, bounded: refused past ``limit`` characters and when it uses an alias.

    Why: an alias (``*a``) can repeat an anchored node exponentially (a "billion laughs" of a few hundred
    characters), and a long text is parsed before any field is validated. The book's configs use neither."""
    if len(text) > limit:
        raise ConfigError(f"{where}: {len(text):,} characters of YAML is more than the {limit:,} allowed; "
                          "give a shorter value (or a config file)")
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent):
                raise ConfigError(f"{where}: YAML aliases (*name) are not allowed; write the value out")
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        first = (str(error).strip().splitlines() or [""])[0]
        raise ConfigError(f"{where}: not valid YAML ({first})") from None


def _describe(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(tp))
    if origin is tuple:
        return f"a list of {_describe(typing.get_args(tp)[0])}"
    if tp is type(None):
        return "null"
    if dataclasses.is_dataclass(tp):
        return f"a mapping with fields {', '.join(f.name for f in dataclasses.fields(tp))}"
    return getattr(tp, "__name__", str(tp))


def _convert(value: Any, tp: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    bad = ConfigError(f"{where}: {bounded_repr(value)} is not allowed; expected {_describe(tp)}")
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(tp):
            try:
                return _convert(value, option, where)
            except ConfigError:
                continue
        raise bad
    if origin is Literal:
        if value in typing.get_args(tp):
            return value
        raise bad
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise bad
        (item,) = typing.get_args(tp)[:1]
        return tuple(_convert(v, item, f"{where}[{i}]") for i, v in enumerate(value))
    if tp is type(None):
        if value is None:
            return None
        raise bad
    if dataclasses.is_dataclass(tp):
        return build(tp, value, where)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise bad
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise bad
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise bad
        try:  # YAML reads 1e-3 (no dot) as a string; a huge integer overflows
            number = float(value)
        except (ValueError, OverflowError):
            raise bad from None
        if not math.isfinite(number):
            raise ConfigError(f"{where}: {bounded_repr(value)} is not allowed; expected a finite number")
        return number
    if tp is str:
        if isinstance(value, str) and value:
            return value
        raise bad
    raise ConfigError(f"{where}: unsupported schema type {tp!r}")


def build(schema: type, data: Any, where: str = "config"):
    """Build a frozen dataclass from plain data, validating every field."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected {_describe(schema)}, got {bounded_repr(data)}")
    hints = typing.get_type_hints(schema)
    names = {f.name for f in dataclasses.fields(schema)}
    unknown = sorted(str(key) for key in set(data) - names)
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: unknown field; allowed fields are {', '.join(sorted(names))}")
    values = {}
    for f in dataclasses.fields(schema):
        here = f"{where}.{f.name}"
        if f.name in data:
            values[f.name] = _convert(data[f.name], hints[f.name], here)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{here}: missing; expected {_describe(hints[f.name])}")
    def default(f):
        if f.default is not dataclasses.MISSING:
            return f.default
        return f.default_factory() if f.default_factory is not dataclasses.MISSING else None

    # field-level checks first, so the message names the field (``small.train.steps: -5 is not allowed``)
    _check_positive(types.SimpleNamespace(**{f.name: values.get(f.name, default(f))
                                             for f in dataclasses.fields(schema)}),
                    where)
    try:
        return schema(**values)
    except (TypeError, ValueError) as error:  # a __post_init__ check across fields
        raise ConfigError(f"{where}: {error}") from None


def _check_positive(instance: Any, where: str) -> None:
    for name in ("steps", "batch_size", "hidden_dim", "num_layers", "shard_rows", "max_length", "image_size",
                 "micro_batch_size", "eval_every", "patience", "zero_shot_per_class", "limit"):
        value = getattr(instance, name, None)
        if isinstance(value, int) and value <= 0:
            raise ConfigError(f"{where}.{name}: {value!r} is not allowed; expected a positive integer")
    for name in ("temperature", "lr"):
        value = getattr(instance, name, None)
        if isinstance(value, float) and value <= 0:
            raise ConfigError(f"{where}.{name}: {value!r} is not allowed; expected a positive number")
    warmup = getattr(instance, "warmup_steps", None)
    if isinstance(warmup, int) and warmup < 0:
        raise ConfigError(f"{where}.warmup_steps: {warmup!r} is not allowed; expected an integer >= 0")
    clip = getattr(instance, "grad_clip", None)
    if isinstance(clip, float) and clip <= 0:
        raise ConfigError(f"{where}.grad_clip: {clip!r} is not allowed; expected a positive number or null (off)")
    micro, batch = getattr(instance, "micro_batch_size", None), getattr(instance, "batch_size", None)
    if isinstance(micro, int) and isinstance(batch, int) and micro > batch:
        raise ConfigError(f"{where}.micro_batch_size: {micro!r} is not allowed; expected at most batch_size ({batch})")
    for name in ("weight_decay", "crop_pct"):
        value = getattr(instance, name, None)
        if isinstance(value, float) and (value < 0 or (name == "crop_pct" and not 0 < value <= 1)):
            allowed = "a number in (0, 1]" if name == "crop_pct" else "a number >= 0"
            raise ConfigError(f"{where}.{name}: {value!r} is not allowed; expected {allowed}")
    for name in ("seeds", "text", "vision"):
        value = getattr(instance, name, None)
        if isinstance(value, tuple) and not value:
            raise ConfigError(f"{where}.{name}: [] is not allowed; expected at least one entry")
    seeds = getattr(instance, "seeds", None)
    if isinstance(seeds, tuple):
        absurd = [s for s in seeds if isinstance(s, int) and not 0 <= s <= MAX_SEED]
        if absurd:
            raise ConfigError(f"{where}.seeds: {bounded_repr(absurd[0])} is not allowed; "
                              f"expected integers in [0, {MAX_SEED}]")
        repeated = sorted({s for s in seeds if seeds.count(s) > 1})
        if repeated:
            raise ConfigError(f"{where}.seeds: {repeated[0]} appears more than once; a repeated seed repeats a run and "
                              "narrows every interval falsely: list each seed once")
    device = getattr(instance, "device", None)
    if isinstance(device, str) and not re.fullmatch(r"cpu|mps|cuda(:\d+)?", device):
        raise ConfigError(f"{where}.device: {device!r} is not allowed; expected 'cpu', 'cuda', 'cuda:N' or 'mps'")
    dropout = getattr(instance, "dropout", None)
    if isinstance(dropout, float) and not 0 <= dropout < 1:
        raise ConfigError(f"{where}.dropout: {dropout!r} is not allowed; expected a number in [0, 1)")


def as_dict(instance: Any) -> dict:
    return dataclasses.asdict(instance)
