"""The FLAME chapter's experiments: the stored features (facets and baselines), one method trained and evaluated
(FLAME, a ShareLock head, a text tower from scratch), the medium config's extra tests.
See notebooks/flame.py, section "Three ways to align the same data".
"""
from __future__ import annotations

import dataclasses
import functools

import torch
import torch.nn.functional as F
from torch import nn

from chapters.flame.config import Config, MediumConfig
from chapters.flame.data import label_set_name, label_sets, short, sizes, subsets, text_sets, tux_multilingual
from corpora import caltech
from corpora.datasets import Benchmark
from lib.core import features, recipes
from lib.core.config import LossConfig, TextModelConfig, TrainSettings
from lib.core.evaluate import retrieval, zero_shot
from lib.core.rows import StoreRows
from lib.core.train import fit, seed_everything
from lib.data import pixel_cache
from lib.data.image_rows import ImageRows
from lib.methods import three_towers as tt
from lib.methods.flame import Flame, official_caption
from lib.methods.image_tower import WithImageTower
from lib.methods.sharelock import ShareLock
from lib.methods.three_towers import ThreeTowers, load_tokenizer, tokenize


def feature_plan(cfg: Config, bench: Benchmark) -> features.Plan:
    """Every feature the notebook reads: the image features of the training, validation, retrieval and
    zero-shot images (medium: of the whole splits, the ShareLock chapter's medium entries, and of the Tux Paint
    sets); the LLM's K facet embeddings of every text set; each baseline's features of the same texts. The text
    tower from scratch reads tokens, not features; an image tower trained from scratch (``image_tower``) reads
    pixels, so no image feature is stored then."""
    plan, store = features.Plan(), dict(dtype=cfg.store.dtype, shard_rows=cfg.store.shard_rows)
    images = [bench.train, bench.val, bench.retrieval, *bench.zero_shot[:1]]
    if isinstance(cfg, MediumConfig):
        images += [bench.zero_shot[1], tux_multilingual(cfg)[0]]
        images += [caltech.labelled()] if cfg.caltech_per_class is not None else []
    for labelled in images if cfg.image_tower is None else []:
        plan.add(features.image(cfg.vision, labelled, **store))
    for name, (texts, source) in text_sets(cfg, bench).items():
        prompted = [official_caption(t) for t in texts] if cfg.prompt == "official" else texts
        plan.add(features.facets(cfg.text, prompted, source=source, name=f"facets:{cfg.text.name}:{name}", **store))
        for baseline in cfg.baselines:
            plan.add(features.text(baseline, texts, source=source, name=f"text:{baseline.name}:{name}", **store))
    return plan


class ChapterFeatures:
    """The materialised plan, read by role: ``image(role)``, ``facets(set)`` ``(N, K, D)``, ``text(model, set)``,
    ``tokens(set)`` (the scratch tower's ``(N, 2, context)`` ids and mask)."""

    def __init__(self, cfg: Config, bench: Benchmark, found: features.Features) -> None:
        self.cfg, self.bench, self.found = cfg, bench, found
        self.rows = sizes(cfg, bench)
        self._cache: dict[str, torch.Tensor] = {}
        self._tokenizer = None

    def _tensor(self, name: str) -> torch.Tensor:
        if name not in self._cache:
            self._cache[name] = self.found.tensor(name)
        return self._cache[name]

    def image(self, role: str) -> torch.Tensor | ImageRows:
        """The frozen image features of a role's images, or their uint8 pixels when an image tower trains: the
        training images decoded per batch from their files or tar shards when the training data stream
        (:attr:`data_path`), so that neither the device nor the host holds 2.9M images."""
        images = self.bench.zero_shot[0] if role == "zero-shot" else getattr(self.bench, role)
        if self.cfg.image_tower is not None and role == "train" and self.data_path == "streamed":
            rows = ImageRows([images], self.cfg.image_tower.image_size, tt.pixels)
            return rows.select(torch.arange(min(len(rows), self.rows.get(role) or len(rows))))
        if self.cfg.image_tower is not None:
            key = f"pixels:{images.name}"
            if key not in self._cache:
                self._cache[key] = pixel_cache.cached_pixels(images, self.cfg.image_tower.image_size, tt.pixels)
            return self._cache[key][: self.rows.get(role)]
        return self._tensor(f"image:{self.cfg.vision.name}:{images.name}")[: self.rows.get(role)]

    def set_name(self, name: str) -> str:
        return label_set_name(self.cfg, self.bench, name.split(":")[1]) if name.startswith("labels:") else name

    def facets(self, name: str) -> torch.Tensor:
        return self._tensor(f"facets:{self.cfg.text.name}:{self.set_name(name)}")

    @functools.cached_property
    def data_path(self) -> str:
        """``resident`` (the training features on the device) or ``streamed`` (read from the store's shards as the
        loop needs them): ``train_data``, where ``auto`` streams when the training facets (the largest text set)
        would take more than half of the GPU's free memory. Decided once, so every method of a run reads one path
        (the free memory changes as runs come and go)."""
        if self.cfg.train_data != "auto":
            return self.cfg.train_data
        if not str(self.cfg.device).startswith("cuda") or not torch.cuda.is_available():
            return "resident"
        found = self.found[f"facets:{self.cfg.text.name}:train"]
        need = len(found) * found.dim * 4 * (self.rows["train"] / (len(found) // len(self.cfg.text.facets)))
        return "streamed" if need > 0.5 * torch.cuda.mem_get_info()[0] else "resident"

    def train_rows(self, name: str, k: int | None = None):
        """The training rows of a stored set (``facets``: the first ``k`` of every caption's K), resident or
        streamed (:attr:`data_path`)."""
        if self.data_path == "streamed":
            per_row = len(self.cfg.text.facets) if name.startswith("facets:") else 1
            return StoreRows(self.found[name], per_row=per_row, first=k if per_row > 1 else None,
                             limit=self.rows["train"])
        found = self._tensor(name)[: self.rows["train"]]
        return found[:, :k] if k is not None else found

    def dim(self, name: str) -> int:
        """The feature width of a stored set (streamed: read without loading the set)."""
        return self.found[name].dim if self.data_path == "streamed" else self._tensor(name).shape[-1]

    def text(self, model: TextModelConfig, name: str) -> torch.Tensor:
        return self._tensor(f"text:{model.name}:{self.set_name(name)}")

    @property
    def tokenizer(self):
        """The scratch tower's tokenizer (only its vocabulary is used): the frozen LLM's own in the shipped configs,
        so both sides spell every language alike. A decoder's tokenizer may lack a pad token: its end token pads."""
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.cfg.scratch.tokenizer)
            if self._tokenizer.pad_token is None:
                self._tokenizer.pad_token = self._tokenizer.eos_token
        return self._tokenizer

    def tokens(self, name: str) -> torch.Tensor:
        key = f"tokens:{self.set_name(name)}"
        if key not in self._cache:
            found = tokenize(self.tokenizer, text_sets(self.cfg, self.bench)[self.set_name(name)][0],
                             self.cfg.scratch.context)
            self._cache[key] = torch.stack([found["input_ids"], found["attention_mask"]], dim=1)
        return self._cache[key]


class _ScratchTower(nn.Module):
    """The LiT-recipe text tower behind the ``embed_image(features)`` / ``embed_text(features)`` interface of
    ``lib.core.evaluate``: image features are the frozen ones, text "features" are ``(N, 2, context)`` tokens."""

    def __init__(self, method: ThreeTowers) -> None:
        super().__init__()
        self.method = method

    def embed_image(self, images: torch.Tensor) -> torch.Tensor:
        """Frozen image features (the LiT recipe), or pixels through the tower trained from scratch (CLIP)."""
        if self.method.variant == "scratch":
            return tt.embed_in_batches(lambda pixels: self.method.embed_image(pixels, None), images, batch_size=256)
        return self.method.embed_image(None, images)

    def embed_text(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.method.embed_text(tokens[:, 0], tokens[:, 1])


def run_key(row: dict, cfg: Config) -> str:
    """A run's name in the findings: ``flame``, ``flame_1facets``, ``flame_mp_sigmoid``, ``sharelock/<model>``,
    ``scratch``."""
    if row["method"] != "flame":
        return row["method"]
    if row["facets"] != len(cfg.text.facets):
        return f"flame_{row['facets']}facets"
    return "flame" if row["loss"] == cfg.loss else f"flame_{row['loss']}"


def train_and_evaluate(cfg: Config, bench: Benchmark, feats: ChapterFeatures, kind: str, seed: int = 0, *,
                       k: int | None = None, loss: str | None = None,
                       score_val: bool = False) -> tuple[dict, object, nn.Module]:
    """Train one method on the training pairs (best weights on the validation pairs) and evaluate it on the
    unseen concepts: zero-shot, caption retrieval, and zero-shot with the labels of every locale.

    ``kind``: ``"flame"`` (its first ``k`` facets, ``loss``), ``"scratch"`` or a baseline's model name. FLAME
    embeds short texts under :data:`SHORT_TEXT_FACET` only (paper §4.1) and reports the average over its k
    facets as ``zero-shot-avg``. ``score_val`` adds ``val/retrieval_score``, the validation pairs' retrieval R@1
    (a recipe sweep's score, :func:`choose_recipes`). Returns the row (for :class:`lib.core.results.Runs`), the
    :class:`~lib.core.train.TrainResult` and the trained method.
    """
    K = len(cfg.text.facets)
    k, loss = (k or K, loss or cfg.loss) if kind == "flame" else (None, None)
    seed_everything(seed)
    image = {role: feats.image(role) for role in ("train", "val")}
    tower = cfg.image_tower  # None: frozen image features; else every method trains this tower from scratch
    image_dim = cfg.image_tower_dim if tower is not None else image["train"].shape[1]
    streamed = feats.data_path == "streamed"  # the training text features read from disk (full config)
    if kind == "flame":
        method = Flame(image_dim, feats.dim(f"facets:{cfg.text.name}:train"), loss=loss,
                       hidden_dim=cfg.projector_hidden, temperature=cfg.temperature,
                       positives=cfg.positives if loss == "mp_sigmoid" else None)
        data = {r: {"image": image[r], "text": feats.facets(r)[:, :k]} for r in image if r != "train" or not streamed}
        if streamed:
            data["train"] = {"image": image["train"], "text": feats.train_rows(f"facets:{cfg.text.name}:train", k)}
        one = cfg.text.facets.index(cfg.short_text_facet)
        long_text, short_text = (lambda name: feats.facets(name)[:, :k]), (lambda name: feats.facets(name)[:, [one]])
        label = "flame"
    elif kind == "scratch":  # with frozen image features, LiT's recipe; with an image tower, CLIP from scratch
        method = ThreeTowers("lit" if tower is None else "scratch", third_dim=image_dim,
                             vocab_size=feats.tokenizer.vocab_size, image_tower=tower, text_tower=cfg.scratch,
                             embed_dim=cfg.scratch_embed_dim, loss=LossConfig(0.07, learnable=True),
                             eos_id=tt.end_of_text_id(feats.tokenizer))
        side = "third" if tower is None else "pixels"
        data = {r: {side: image[r], "input_ids": feats.tokens(r)[:, 0], "attention_mask": feats.tokens(r)[:, 1]}
                for r in image}
        long_text = short_text = feats.tokens
        label = "scratch"
    else:
        baseline = next(b for b in cfg.baselines if b.name == kind)
        method = ShareLock(feats.dim(f"text:{baseline.name}:train"), image_dim, cfg.head, cfg.sharelock_loss)
        data = {r: {"image": image[r], "text": feats.text(baseline, r)} for r in image if r != "train" or not streamed}
        if streamed:
            data["train"] = {"image": image["train"], "text": feats.train_rows(f"text:{baseline.name}:train")}
        long_text = short_text = (lambda name: feats.text(baseline, name))
        label = f"sharelock/{short(kind)}"
    if tower is not None and kind != "scratch":  # the method's image side reads the tower's outputs
        method = WithImageTower(method, tower, cfg.image_tower_dim)
    model = _ScratchTower(method) if kind == "scratch" else method
    result = fit(method, data["train"], data["val"], cfg.train, seed=seed, device=cfg.device, progress=False)
    model.cpu()
    row = {"method": label, "facets": k, "loss": loss, "seed": seed, "lr": result.settings.lr,
           "weight_decay": result.settings.weight_decay, "best_step": result.best_step,
           "train_s": round(result.seconds, 1),
           "data_path": "streamed" if streamed and (kind != "scratch" or tower is not None) else "resident"}
    if bench.zero_shot:
        labelled = bench.zero_shot[0]
        found = zero_shot(model, feats.image("zero-shot"), short_text("zero-shot"), labelled)
        row.update({f"zero-shot/{m}": v for m, v in found.items()})
        if kind == "flame":
            found = zero_shot(model, feats.image("zero-shot"), long_text("zero-shot"), labelled)
            row.update({f"zero-shot-avg/{m}": v for m, v in found.items()})
    found = retrieval(model, feats.image("retrieval"), long_text("retrieval"))
    row.update({f"retrieval/{m}": v for m, v in found.items()})
    if score_val:
        row["val/retrieval_score"] = recipes.retrieval_score(retrieval(model, feats.image("val"), long_text("val")))
    with torch.no_grad():  # hubness: the share of captions whose nearest image is the most often retrieved one
        nearest = (model.embed_text(long_text("retrieval")) @ model.embed_image(feats.image("retrieval")).T).argmax(1)
    row["retrieval/hub_share"] = float(nearest.bincount().max()) / len(nearest)
    others = []
    for locale, labelled in label_sets(cfg, bench).items():
        row[f"labels:{locale}/acc1"] = zero_shot(model, feats.image("zero-shot"), short_text(f"labels:{locale}"),
                                                 labelled)["acc1"]
        others += [row[f"labels:{locale}/acc1"]] if locale != "en" else []
    if others:
        row["labels:other/acc1"] = sum(others) / len(others)
    return row, result, method


def chapter_features(cfg: Config, bench: Benchmark, found: features.Features) -> ChapterFeatures:
    """The features of a run, on the seeded subsets in the medium config (:class:`MediumFeatures`)."""
    return (MediumFeatures if isinstance(cfg, MediumConfig) else ChapterFeatures)(cfg, bench, found)


def run(cfg: Config, bench: Benchmark, feats: ChapterFeatures, kind: str, seed: int = 0, **options):
    """One method, one seed: ``(row, training result)``. The medium config adds its tests (Tux Paint's photo-like
    stamps, the multilingual sentences, retrieval among the Openclipart rows) and ``train_pairs``."""
    if isinstance(cfg, MediumConfig):
        return _run_medium(cfg, bench, feats, kind, seed, **options)
    return train_and_evaluate(cfg, bench, feats, kind, seed, **options)[:2]


def choose_recipes(cfg: Config, bench: Benchmark, feats: ChapterFeatures, kinds) -> tuple[dict, list[dict]]:
    """Each method's recipe chosen over ``cfg.sweep`` on the validation pairs, first seed, by their retrieval R@1
    (:func:`lib.core.recipes.choose`, which keeps the configured rate unless beaten by ``cfg.sweep.keep_within_se``
    standard errors over those pairs). Returns ``{kind: the config with that recipe}`` (what every
    later run of the method takes: seeds, ablations, data-size curve) and one row per candidate."""
    def score(kind, settings: TrainSettings) -> float:  # validation retrieval R@1, both directions
        return train_and_evaluate(dataclasses.replace(cfg, train=settings), bench, feats, kind, cfg.seeds[0],
                                  score_val=True)[0]["val/retrieval_score"]

    def describe(kind) -> dict:
        return {"method": kind if kind in ("flame", "scratch") else f"sharelock/{short(kind)}"}

    chosen, record = recipes.choose_each(cfg.train, cfg.sweep, kinds, score, describe, n=len(feats.image("val")))
    return {kind: dataclasses.replace(cfg, train=best) for kind, best in chosen.items()}, record


def main_setting(cfg: Config) -> dict:
    """The main FLAME run's columns: all K facets, the config's loss."""
    return dict(method="flame", facets=len(cfg.text.facets), loss=cfg.loss)


@torch.no_grad()
def facet_similarity(facet_features: torch.Tensor) -> torch.Tensor:
    """``(K, K)`` mean cosine between facet i and facet j of the same caption, after removing each facet's mean
    over the captions (a decoder's states share one large direction: raw cosines are near 1 for any two texts)."""
    unit = F.normalize((facet_features - facet_features.mean(0, keepdim=True)).float(), dim=-1)
    return torch.einsum("nid,njd->ij", unit, unit) / len(unit)


class MediumFeatures(ChapterFeatures):
    """:class:`ChapterFeatures` on the seeded subsets; ``train_rows``: the first N training
    pairs of the subset (the data-size curve), shared tensors with the full view (:meth:`with_train`)."""

    def __init__(self, cfg: MediumConfig, bench: Benchmark, found: features.Features, train_rows: int | None = None):
        super().__init__(cfg, bench, found)
        self.index = subsets(cfg, bench)
        self.train_rows = train_rows or len(self.index["train"])
        self.tux_images, self.tux_sentences = tux_multilingual(cfg)
        self.caltech = caltech.labelled() if cfg.caltech_per_class is not None else None

    def with_train(self, rows: int | None) -> MediumFeatures:
        view = MediumFeatures.__new__(MediumFeatures)
        view.__dict__.update(self.__dict__)
        view.train_rows = rows or len(self.index["train"])
        return view

    def _rows(self, role: str, x: torch.Tensor) -> torch.Tensor:
        return x[: self.train_rows] if role == "train" else x

    def image(self, role: str) -> torch.Tensor:
        if role in self.index:
            full = self._tensor(f"image:{self.cfg.vision.name}:{getattr(self.bench, role).name}")
            return self._rows(role, full[self.index[role]])
        images = {"zero-shot": self.bench.zero_shot[0], "tux-photo": self.bench.zero_shot[1],
                  "tux": self.tux_images, "caltech": self.caltech}[role]
        return self._tensor(f"image:{self.cfg.vision.name}:{images.name}")

    def set_name(self, name: str) -> str:
        return name

    def facets(self, name: str) -> torch.Tensor:
        return self._rows(name, super().facets(name))

    def text(self, model, name: str) -> torch.Tensor:
        return self._rows(name, super().text(model, name))

    def tokens(self, name: str) -> torch.Tensor:
        return self._rows(name, super().tokens(name))


def _text_reader(feats: MediumFeatures, kind: str, k: int | None, method):
    """(model for lib.core.evaluate, long-text features, short-text features) of one trained method."""
    cfg = feats.cfg
    if kind == "flame":
        one = cfg.text.facets.index(cfg.short_text_facet)
        return method, (lambda n: feats.facets(n)[:, :k]), (lambda n: feats.facets(n)[:, [one]])
    if kind == "scratch":
        return _ScratchTower(method), feats.tokens, feats.tokens
    baseline = next(b for b in cfg.baselines if b.name == kind)
    return method, (lambda n: feats.text(baseline, n)), (lambda n: feats.text(baseline, n))


def _run_medium(cfg: MediumConfig, bench: Benchmark, feats: MediumFeatures, kind: str, seed: int, *,
                k: int | None = None, loss: str | None = None, train_pairs: int | None = None) -> tuple[dict, object]:
    """One method trained on the first ``train_pairs`` of the training subset and evaluated on: the unseen
    concepts (zero-shot among all of them, caption retrieval among the retrieval subset and among its
    Openclipart rows, whose descriptions are the longest), Tux Paint's photo-like unseen stamps and the
    multilingual Tux Paint classes. Returns the row and the :class:`~lib.core.train.TrainResult`."""
    view = feats.with_train(train_pairs)
    k = (k or len(cfg.text.facets)) if kind == "flame" else None
    row, result, method = train_and_evaluate(cfg, bench, view, kind, seed, k=k, loss=loss)
    model, long_text, short_text = _text_reader(view, kind, k, method)
    model.eval()
    row.update({"train_pairs": view.train_rows, "first_eval": cfg.train.eval_every})
    row["tux-photo/acc1"] = zero_shot(model, view.image("tux-photo"), short_text("tux-photo"),
                                      bench.zero_shot[1])["acc1"]
    openclipart = torch.tensor([bench.retrieval.ids[i].startswith("openclipart/")
                                for i in view.index["retrieval"].tolist()])
    found = retrieval(model, view.image("retrieval")[openclipart], long_text("retrieval")[openclipart])
    row.update({f"retrieval-openclipart/{m}": v for m, v in found.items()})
    others = []
    for loc, sentences in view.tux_sentences.items():
        labelled = dataclasses.replace(view.tux_images, classnames=sentences)
        row[f"tux:{loc}/acc1"] = zero_shot(model, view.image("tux"), short_text(f"tux:{loc}"), labelled)["acc1"]
        others += [row[f"tux:{loc}/acc1"]] if loc != "en" else []
    row["tux:other/acc1"] = sum(others) / len(others) if others else None
    if view.caltech is not None:  # photographs, never trained on: this seed's own sample of them
        rows, photos = caltech.sample(view.caltech, cfg.caltech_per_class, seed)
        found = zero_shot(model, view.image("caltech")[rows], short_text("caltech"), photos)
        row.update({f"caltech/{m}": found[m] for m in ("acc1", "acc5", "mean_per_class_recall")})
    return row, result
