"""The FDT chapter's experiments: the benchmark, the stored patch and token features, the FDT and pooled heads,
one training-and-evaluation run, the codes active at initialisation and their usage after training.
See notebooks/fdt.py, sections "Training" and "Codebook usage".
"""
from __future__ import annotations

import dataclasses

import torch

from chapters.fdt.config import Config, FDTHeadConfig, PooledHeadConfig, Variant
from chapters.fdt.towers import TowerInputs, TowerSequences
from corpora import benchmarks, caltech, medium
from corpora.datasets import Benchmark
from lib.core import curves, features, recipes
from lib.core.config import TrainSettings
from lib.core.evaluate import prompt_texts, zero_shot
from lib.core.evaluate import retrieval as embedding_retrieval
from lib.core.results import Runs
from lib.core.sequences import SequenceFeatures
from lib.core.train import fit, seed_everything
from lib.data.image_rows import select
from lib.methods.fdt import (
    OFFICIAL,
    FDTHead,
    PooledHead,
    codebook_usage,
    collect_codes,
    embed_sequences,
    token_code_scores,
    weight_encoder,
)
from lib.methods.fdt_towers import EndToEndFDT


def benchmark(cfg: Config) -> Benchmark:
    """Training, validation and retrieval pairs and the zero-shot sets (``corpora.datasets``)."""
    return benchmarks.build(cfg.data)


def zero_shot_sets(cfg: Config, bench: Benchmark) -> list:
    """The headline zero-shot set (unseen concepts / ImageNet) and those ``data.zero_shot`` names; the medium
    corpus adds Tux Paint's photo-like stamps of unseen concepts and the validation concepts (whose image
    features are the validation pairs': the seen-side check that a head learned anything)."""
    chosen = {bench.zero_shot[0].name: bench.zero_shot[0]}
    chosen.update({s.name: s for s in bench.zero_shot if s.name in cfg.data.zero_shot
                   or (cfg.data.corpus == "medium" and s.name.startswith("tuxpaint"))})
    if cfg.data.corpus == "medium":
        validation = medium.labelled("val", prompts=cfg.data.prompts)  # named as bench.val: one feature entry
        chosen[validation.name] = validation
    return list(chosen.values())


def feature_plan(cfg: Config, bench: Benchmark) -> features.Plan:
    """Every feature the chapter reads: the image token sequences of every image set (training,
    validation, retrieval, zero-shot), the token sequences of the captions of every pair set and of the
    zero-shot prompts. Towers trained through FDT (``cfg.towers``) read pixels and token ids: nothing is stored."""
    plan = features.Plan()
    if cfg.towers:
        return plan
    for images in [bench.train, bench.val, bench.retrieval, *zero_shot_sets(cfg, bench)]:
        plan.add(features.image_tokens(cfg.vision, images, tokens=cfg.image_tokens, dtype=cfg.store.dtype))
    for pairs in (bench.train, bench.val, bench.retrieval):
        plan.add(features.text_tokens(cfg.text, pairs.captions, source=pairs.source, ids=pairs.ids,
                                      name=f"text-tokens:{cfg.text.name}:{pairs.name}", dtype=cfg.store.dtype))
    photos = [caltech.labelled()] if cfg.caltech_per_class is not None else []
    for labelled in photos:
        plan.add(features.image_tokens(cfg.vision, labelled, tokens=cfg.image_tokens, dtype=cfg.store.dtype))
    for labelled in [*zero_shot_sets(cfg, bench), *photos]:
        source = {"prompts_for": labelled.source["dataset"], "templates": list(labelled.templates)}
        plan.add(features.text_tokens(cfg.text, prompt_texts(labelled), source=source, dtype=cfg.store.dtype,
                                      name=f"text-tokens:{cfg.text.name}:prompts:{labelled.name}"))
    return plan


class ChapterFeatures:
    """The materialised plan, read by role: ``image(set)``, ``captions(pairs)``, ``prompts(labelled)``
    (each a :class:`lib.core.sequences.SequenceFeatures`) and ``tensors(pairs)``, the padded resident
    tensors ``{"image", "image_mask", "text", "text_mask"}`` that :func:`lib.core.train.fit` slices."""

    def __init__(self, cfg: Config, found: features.Features) -> None:
        self.cfg, self.found = cfg, found
        self._tensors: dict[str, dict[str, torch.Tensor]] = {}

    def image(self, images) -> SequenceFeatures:
        return self.found[f"image-tokens:{self.cfg.vision.name}:{images.name}"]

    def captions(self, pairs) -> SequenceFeatures:
        return self.found[f"text-tokens:{self.cfg.text.name}:{pairs.name}"]

    def prompts(self, labelled) -> SequenceFeatures:
        return self.found[f"text-tokens:{self.cfg.text.name}:prompts:{labelled.name}"]

    def tensors(self, pairs) -> dict[str, torch.Tensor]:
        if pairs.name not in self._tensors:
            (image, image_mask), (text, text_mask) = self.image(pairs).padded(), self.captions(pairs).padded()
            self._tensors[pairs.name] = {"image": image, "image_mask": image_mask, "text": text, "text_mask": text_mask}
        return self._tensors[pairs.name]

    def dims(self, bench: Benchmark) -> tuple[int, int]:  # (image token width, text token width)
        return self.image(bench.train).dim, self.captions(bench.train).dim

    def word_pieces(self, text: str) -> list[str]:
        """The word pieces of ``text`` as the frozen text encoder reads them (one stored state each)."""
        encoder = features.ENCODERS.get(self.cfg.text, self.cfg.device)
        return encoder.tokenizer.convert_ids_to_tokens(encoder.tokenize([text])[0])

    def describe(self, bench: Benchmark) -> str:
        return f"training pairs: {self.image(bench.train)!r}\n                {self.captions(bench.train)!r}"


def chapter_features(cfg: Config, bench: Benchmark, found: features.Features) -> ChapterFeatures | TowerInputs:
    """The stored sequences by role (:class:`ChapterFeatures`), or, when the towers train through FDT, what they
    read (:class:`chapters.fdt.towers.TowerInputs`) with the sequences of freshly initialised towers by role."""
    return TowerInputs(cfg, bench) if cfg.towers else ChapterFeatures(cfg, found)


def build_fdt(cfg: FDTHeadConfig, image_dim: int, text_dim: int, **changes) -> FDTHead:
    """An :class:`FDTHead` from its config, with ``changes`` (e.g. ``Variant.changes()``) applied."""
    return FDTHead(image_dim, text_dim, **{**dataclasses.asdict(cfg), **changes})


def build_pooled(cfg: PooledHeadConfig, image_dim: int, text_dim: int) -> PooledHead:
    return PooledHead(image_dim, text_dim, **dataclasses.asdict(cfg))


class _Embedded(torch.nn.Module):
    """Embeddings already computed, as a method for ``lib.core.evaluate.zero_shot`` / ``retrieval``."""

    def embed_image(self, x: torch.Tensor) -> torch.Tensor:
        return x

    embed_text = embed_image


def zero_shot_metrics(encode_image, encode_text, image_seqs: SequenceFeatures, prompt_seqs: SequenceFeatures,
                      labelled, *, batch_size: int = 256, device: str | torch.device = "cpu") -> dict[str, float]:
    """acc@1, acc@5, mean per-class recall (``lib.core.evaluate.zero_shot``) of a head's ``encode_*(x, mask)``
    (or :func:`lib.methods.fdt.weight_encoder`) over the token sequences of the images and of
    ``lib.core.evaluate.prompt_texts(labelled)`` (class-major)."""
    embed = dict(batch_size=batch_size, device=device)
    return zero_shot(_Embedded(), embed_sequences(encode_image, image_seqs, **embed),
                     embed_sequences(encode_text, prompt_seqs, **embed), labelled)


def retrieval(encode_image, encode_text, image_seqs: SequenceFeatures, caption_seqs: SequenceFeatures, *,
              batch_size: int = 256, device: str | torch.device = "cpu") -> dict[str, float]:
    """Image <-> caption R@1/5/10, one caption per image (row i pairs with row i)."""
    embed = dict(batch_size=batch_size, device=device)
    return embedding_retrieval(_Embedded(), embed_sequences(encode_image, image_seqs, **embed),
                               embed_sequences(encode_text, caption_seqs, **embed))


def train_and_evaluate(cfg: Config, bench: Benchmark, feats: ChapterFeatures, kind: str = "fdt", seed: int = 0,
                       variant: Variant | None = None, subset: torch.Tensor | None = None,
                       train: TrainSettings | None = None) -> tuple[dict, object, torch.nn.Module, object]:
    """Train one head (``"fdt"`` with ``variant``'s changes, or ``"pooled"``; early stopping on the validation
    pairs), evaluate it zero-shot on :func:`zero_shot_sets` and by retrieval, and for FDT with its weights as
    features and its active codes. ``subset``: train on those training rows only (the data-size curve,
    ``chapters.fdt.checks``); ``train``: the recipe (default ``cfg.train``; :func:`choose_recipes`). Returns the row
    (:class:`lib.core.results.Runs`), TrainResult, head, and the sequences the head reads: ``feats`` itself, or with
    towers trained through FDT the trained towers' own (:class:`chapters.fdt.towers.TowerSequences`)."""
    result, head, settings, train_rows, feats = _fit_head(cfg, bench, feats, kind, seed, variant, subset,
                                                          train or cfg.train)
    name = variant.name if variant else ("FDT" if kind == "fdt" else "pooled")
    row = {"head": name, "seed": seed, "train_pairs": train_rows, "lr": settings.lr,
           "weight_decay": settings.weight_decay, "best_step": result.best_step,
           "first_eval": min(settings.eval_every, settings.steps), "steps_run": result.steps_run,
           "train_s": round(result.seconds, 1), "best_val_loss": result.best_val_loss,
           "logit_scale": round(float(head.criterion.scale.detach()), 2),
           "data_path": "streamed" if cfg.towers and cfg.train_data == "streamed" else "resident"}
    evaluate = dict(batch_size=cfg.eval_batch_size, device=cfg.device)
    sets = zero_shot_sets(cfg, bench)
    for labelled in sets:
        found = zero_shot_metrics(head.encode_image, head.encode_text, feats.image(labelled), feats.prompts(labelled),
                                  labelled, **evaluate)
        row.update({f"{labelled.name}/{k}": v for k, v in found.items()})
    found = retrieval(head.encode_image, head.encode_text, feats.image(bench.retrieval),
                      feats.captions(bench.retrieval), **evaluate)
    row.update({f"retrieval/{k}": v for k, v in found.items()})
    if cfg.caltech_per_class is not None:  # photographs, never trained on: this seed's own sample of them
        row.update({f"caltech/{k}": v for k, v in caltech_zero_shot(cfg, feats, head, seed).items()})
    if kind == "fdt":
        found = zero_shot_metrics(weight_encoder(head, "image"), weight_encoder(head, "text"), feats.image(sets[0]),
                                  feats.prompts(sets[0]), sets[0], **evaluate)
        row["weights_as_features/acc1"] = found["acc1"]
        image_codes, text_codes = _held_out_codes(head, feats, bench, cfg)
        row["active_codes/image"] = float(image_codes.active().float().mean())
        row["active_codes/text"] = float(text_codes.active().float().mean())
        row["codes_ever_active"] = int(((image_codes.weights > 0).any(0) | (text_codes.weights > 0).any(0)).sum())
    return row, result, head, feats


@torch.no_grad()
def caltech_zero_shot(cfg: Config, feats: ChapterFeatures, head, seed: int) -> dict[str, float]:
    """acc@1, acc@5 and mean per-class recall of a trained head on seed ``seed``'s sample of Caltech-101's photos
    (``cfg.caltech_per_class`` a category, ``corpora.caltech.sample``) among the 101 categories."""
    photos = caltech.labelled()
    rows, sample = caltech.sample(photos, cfg.caltech_per_class, seed)
    embed = dict(batch_size=cfg.eval_batch_size, device=cfg.device)
    images = embed_sequences(head.encode_image, feats.image(photos), **embed)[rows]
    return zero_shot(_Embedded(), images, embed_sequences(head.encode_text, feats.prompts(photos), **embed), sample)


def _fit_head(cfg: Config, bench: Benchmark, feats: ChapterFeatures, kind: str, seed: int, variant: Variant | None,
              subset: torch.Tensor | None, recipe: TrainSettings):
    """One head trained with ``recipe`` (shortened for a ``subset``): result, head, the settings, training rows and
    the sequences to read the head with. With ``cfg.towers`` the head sits on open_clip's towers trained from random
    weights (:class:`lib.methods.fdt_towers.EndToEndFDT`; ``pooled`` is then CLIP, the towers' pooled outputs)."""
    changes = variant.changes() if variant else {}
    seed_everything(seed)
    if cfg.towers:
        towers = feats.towers(seed)
        head = build_fdt(cfg.fdt, towers.image_width, towers.text_width, **changes) if kind == "fdt" else None
        method = EndToEndFDT(towers, head, init_temperature=cfg.baseline.init_temperature,
                             log_scale_bounds=cfg.baseline.log_scale_bounds, chunk=cfg.eval_batch_size)
    else:
        image_dim, text_dim = feats.dims(bench)
        method = (build_fdt(cfg.fdt, image_dim, text_dim, **changes) if kind == "fdt"
                  else build_pooled(cfg.baseline, image_dim, text_dim))
    train = feats.tensors(bench.train)
    train = train if subset is None else {k: select(v, subset) for k, v in train.items()}
    settings = recipe if subset is None else curves.subset_settings(recipe, len(subset))
    result = fit(method, train, feats.tensors(bench.val), settings, seed=seed, device=cfg.device)
    method.eval()
    rows = len(next(iter(train.values())))
    if not cfg.towers:
        return result, method, settings, rows, feats
    seqs = TowerSequences(method, feats, chunk=cfg.eval_batch_size)
    return result, seqs.head, settings, rows, seqs


def choose_recipes(cfg: Config, bench: Benchmark, feats: ChapterFeatures) -> tuple[dict[str, TrainSettings], list]:
    """Each head's recipe (``fdt``, ``pooled``) chosen over ``cfg.sweep`` by retrieval R@1 on the validation pairs,
    first seed (:func:`lib.core.recipes.choose`, which keeps the configured rate unless beaten by
    ``cfg.sweep.keep_within_se`` standard errors over those pairs); the variants take FDT's. Returns the recipes and
    one row per candidate."""

    def score(kind: str, settings: TrainSettings) -> float:  # validation retrieval R@1, both directions
        _, head, _, _, seqs = _fit_head(cfg, bench, feats, kind, cfg.seeds[0], None, None, settings)
        return recipes.retrieval_score(retrieval(head.encode_image, head.encode_text, seqs.image(bench.val),
                                                 seqs.captions(bench.val), batch_size=cfg.eval_batch_size,
                                                 device=cfg.device))

    return recipes.choose_each(cfg.train, cfg.sweep, ("fdt", "pooled"), score,
                               lambda kind: {"method": "FDT" if kind == "fdt" else "pooled"}, n=len(bench.val))


def run_all(cfg: Config, bench: Benchmark, feats: ChapterFeatures, *, quick: bool = False,
            chosen: dict[str, TrainSettings] | None = None) -> tuple[Runs, dict]:
    """Every run of the chapter: FDT and pooled on every seed, then each variant on its first ``seeds``
    seeds (``quick``: the first seed only), each head with its recipe (``chosen``, :func:`choose_recipes`; the
    variants with FDT's). Returns the runs and ``{head name: (head, TrainResult, the sequences it reads)}`` of the
    first seed."""
    runs, trained, chosen = Runs(), {}, chosen or {}
    seeds = cfg.seeds[:1] if quick else cfg.seeds
    jobs = [(kind, seed, None) for seed in seeds for kind in ("fdt", "pooled")]
    jobs += [("fdt", seed, v) for v in cfg.variants for seed in (seeds[:1] if quick else cfg.seeds[: v.seeds])]
    for kind, seed, variant in jobs:
        row, result, head, seqs = train_and_evaluate(cfg, bench, feats, kind, seed, variant, train=chosen.get(kind))
        if runs.add(row)["seed"] == cfg.seeds[0]:
            trained[row["head"]] = (head, result, seqs)
    return runs, trained


@torch.no_grad()
def active_codes_at_init(cfg: Config, bench: Benchmark, feats: ChapterFeatures, *, seed: int = 0) -> list[dict]:
    """How many codes sparsemax switches on in a freshly initialised head, per item, on
    ``cfg.init_probe_items`` held-out items: this config's head, the same at the official temperature
    (1000), a head of the paper's size (``cfg.init_probe``) at that temperature, on real features and on
    random inputs of the official encoders' widths (ViT-B/32: 49 patches x 768; text: 16 tokens x 512).
    Sparsemax keeps the codes above ``tau`` with ``sum(r_i - tau) = 1``: the relevances' spread in units of
    ``1/K`` decides sparsity (the column ``relevance sd x K``)."""
    n = min(cfg.init_probe_items, len(bench.retrieval))
    real = {"image": feats.image(bench.retrieval).batch(range(n)),
            "text": feats.captions(bench.retrieval).batch(range(n))}
    generator = torch.Generator().manual_seed(seed)
    gauss = {"image": (torch.randn(n, 49, 768, generator=generator), None),
             "text": (torch.randn(n, 16, 512, generator=generator), None)}
    num_codes, code_dim = cfg.init_probe
    official = dict(temperature=OFFICIAL["temperature"])
    paper = dict(num_codes=num_codes, code_dim=code_dim, **official)
    probes = [("this config", {}, real), ("this config, official temperature", official, real),
              ("paper size", paper, real), ("paper size, random inputs", paper, gauss)]
    out = []
    for probe, changes, inputs in probes:
        seed_everything(seed)
        widths = [inputs[m][0].shape[-1] for m in ("image", "text")]
        head = build_fdt(cfg.fdt, *widths, **changes).eval()
        for modality in ("image", "text"):
            x, mask = inputs[modality]
            codes = head.codes(modality, x, mask)
            active = codes.active().float()
            out.append({"probe": probe, "codebook": f"{head.num_codes} x {head.code_dim}",
                        "temperature": head.temperature,
                        "inputs": "this chapter's features" if inputs is real else "random, official widths",
                        "modality": modality, "active codes per item": float(active.mean()),
                        "active fraction": float(active.mean() / head.num_codes),
                        "relevance sd x K": float(codes.relevance.std(dim=1).mean() * head.num_codes)})
    return out


def _held_out_codes(head: FDTHead, feats: ChapterFeatures, bench: Benchmark, cfg: Config):
    """``(image, text)`` :class:`lib.methods.fdt.CodeWeights` of the held-out pairs."""
    return tuple(collect_codes(head, modality, seqs, batch_size=cfg.eval_batch_size, device=cfg.device)
                 for modality, seqs in (("image", feats.image(bench.retrieval)),
                                        ("text", feats.captions(bench.retrieval))))


def usage_rows(trained: dict, bench: Benchmark, cfg: Config) -> tuple[list[dict], list[dict]]:
    """Codebook usage of the first seed's FDT heads (:func:`run_all`'s ``trained``) on the held-out pairs, each read
    from its own sequences: one summary row per head and modality, and one row per item (its number of active
    codes) for the histogram."""
    summary, per_item = [], []
    for name, (head, _, seqs) in ((n, t) for n, t in trained.items() if isinstance(t[0], FDTHead)):
        for modality, codes in zip(("image", "text"), _held_out_codes(head, seqs, bench, cfg)):
            active = codes.active()
            summary.append({"head": name, "modality": modality, "weighting": head.weighting,
                            "temperature": head.temperature,
                            "active codes per item (mean)": round(float(active.float().mean()), 1),
                            "codes ever active": int((codebook_usage(codes.weights) > 0).sum()),
                            "codebook size": head.num_codes})
            per_item += [{"head": name, "modality": modality, "active codes": int(k)} for k in active]
    return summary, per_item


@torch.no_grad()
def grounding_examples(head: FDTHead, feats: ChapterFeatures, bench: Benchmark, cfg: Config, n: int = 4) -> list[dict]:
    """The paper's qualitative figure, as data: ``n`` held-out pairs that the head retrieves correctly
    (image -> caption top-1), each with the code of largest ``w_image * w_caption``, that code's score on
    every patch (a square grid) and on every word piece (with the word pieces' text). ``feats``: the sequences the
    head reads (:func:`run_all`'s ``trained[name][2]``)."""
    images, captions = feats.image(bench.retrieval), feats.captions(bench.retrieval)
    image_codes, text_codes = _held_out_codes(head, feats, bench, cfg)
    hits = ((image_codes.embedding @ text_codes.embedding.T).argmax(1) == torch.arange(len(images))).nonzero().flatten()
    out = []
    for i in hits[:: max(1, len(hits) // n)][:n].tolist():
        code = int((image_codes.weights[i] * text_codes.weights[i]).argmax())
        patches = token_code_scores(head, "image", *images.batch([i]), [code])[0, :, 0]
        grid = int(len(patches) ** 0.5)
        patches = patches[len(patches) - grid * grid:]  # tokens "all": drop CLS / registers
        words = feats.word_pieces(bench.retrieval.captions[i])
        word_scores = token_code_scores(head, "text", *captions.batch([i]), [code])[0, :, 0]
        out.append({"item": i, "code": code, "caption": bench.retrieval.captions[i], "words": words,
                    "patch_scores": patches.reshape(grid, grid).cpu().numpy(),  # the head may sit on a GPU
                    "word_scores": word_scores.cpu().numpy()})
    features.release_encoders()
    return out
