"""The ShareLock chapter's claims: the paper's, each with its verdict from paired runs, and the key findings.

See notebooks/sharelock.py, section "What reproduced, what did not".
"""
from __future__ import annotations

from chapters.sharelock.config import Config
from chapters.sharelock.experiments import HEADS, short
from corpora.datasets import Benchmark
from lib.core import curves
from lib.core.results import Claim, Runs, compare


def claims(cfg: Config, bench: Benchmark, runs: Runs, curve: Runs | None = None) -> list[Claim]:
    """The paper's claims that the chapter's runs can test, and the book's own head ablation, each with its verdict
    (``lib.core.results.RULE``); with the data-size ``curve``, the ablation's diagnosis says how the gap moves as
    the data grow."""
    headline = bench.zero_shot[0].name
    metric = f"{headline}/acc1"
    text, vision = short(cfg.text[0].name), short(cfg.vision[0].name)
    main = dict(text=text, vision=vision, control="")
    out = []
    if cfg.lit.enabled and runs.where(head="lit"):
        lit = short(cfg.lit.text.name)
        out.append(Claim(
            "sharelock_beats_lit", "ShareLock (a frozen LLM and an MLP head) beats LiT (a pretrained text encoder "
            "tuned end to end) on the same locked image features and pairs",
            "Table 3, ImageNet-1k top-1 at 563k CC3M-LLaVA pairs",
            runs.compare(metric, {**main, "head": "mlp"}, dict(text=lit, vision=vision, control="", head="lit")),
            (f"ShareLock ({text} frozen, MLP head)", f"LiT ({lit} tuned)"), paper_value="ShareLock 50.5 vs LiT 41.7",
            paper_pair=(50.5, 41.7), diagnosis=_lit_budget(runs.where(head="lit"))))
    out.append(Claim(
        "zero_shot_above_chance", "frozen features and a small head transfer zero-shot to classes never seen in "
        "training", "ViTeRB, Table 1 (unseen classes)", against_chance(runs, headline, {**main, "head": "mlp"}),
        ("ShareLock head on unseen concepts", "chance"),
        paper_value="Llama-3-8B 40.2 (ViTeRB score, class names)"))
    if len(cfg.text) > 1:
        decoders = [short(t.name) for t in cfg.text if t.pooling == "last_token"]
        encoders = [short(t.name) for t in cfg.text if t.pooling != "last_token"]
        if decoders and encoders:
            dec, enc = decoders[0], encoders[0]
            out.append(Claim(
                "decoder_beats_encoder", "decoder LLM features (last token) are better text representations for "
                "vision than encoder features", "abstract; ViTeRB, Table 1",
                runs.compare(metric, dict(text=dec, vision=vision, control="", head="mlp"),
                             dict(text=enc, vision=vision, control="", head="mlp")),
                (dec, enc), paper_value="Llama-3 8B 40.2 vs BERT-Large 18.3 (class names)", paper_pair=(40.2, 18.3)))
    photos = next((z for z in bench.zero_shot if z.name.startswith("gcompris-") and "categories" not in z.name), None)
    if photos is not None:
        out.append(Claim(
            "real_photos_above_chance", "the book's question: a head trained on drawings names real photographs "
            "(GCompris' Wikimedia Commons animals and monuments, by title) above chance",
            "the book's own question (the paper trains and tests on photographs)",
            against_chance(runs, photos.name, {**main, "head": "mlp"}),
            ("ShareLock head on real photos", "chance"), paper_value=None, origin="book"))
    out.append(Claim(
        "mlp_beats_linear", "the book's ablation: the MLP head beats one linear map on the same frozen LLM features "
        "(the paper never compares the two; its head ablation is MLP vs Q-Former vs attention pooling)",
        "the book's own question (the paper's head ablation: App. A.3, Table 9)",
        runs.compare(metric, {**main, "head": "mlp"}, {**main, "head": "linear"}),
        ("MLP head", "linear head"), paper_value=None, origin="book",
        diagnosis="; ".join(filter(None, (curves.trend(curve.where(text=t), metric, *HEADS, size_key="curve_size",
                                                       context=t) for t in sorted({r["text"] for r in curve}))))
        if curve is not None else None))
    return out


def against_chance(runs: Runs, labelled: str, rows: dict):
    """Top-1 on the set ``labelled`` against its chance, paired seed by seed: a seed that draws its own split has
    its own number of classes, hence its own chance (``<set>/chance`` in each run's row, one over its classes)."""
    return compare(runs.values(f"{labelled}/acc1", **rows), runs.values(f"{labelled}/chance", **rows))


def _lit_budget(lit: Runs) -> str | None:
    """Said when LiT was still improving at its last evaluation: the comparison is then bounded by LiT's budget."""
    rows = list(lit)
    last = [r for r in rows if r["best_step"] is not None and r["best_step"] >= r["steps_run"]]
    if not last:
        return None
    return (f"LiT's best validation step was its last on {len(last)} of {len(rows)} seeds "
            f"(step {last[0]['steps_run']}): "
            "it was still improving when its step budget ended, so this verdict is bounded by LiT's budget on this "
            "CPU and says less than the paper's comparison")


def findings(cfg: Config, bench: Benchmark, runs: Runs) -> dict[str, float | None]:
    """The chapter's headline numbers (means over seeds, fractions) for metrics.json and the results page."""
    headline = bench.zero_shot[0].name
    metric = f"{headline}/acc1"
    text, vision = short(cfg.text[0].name), short(cfg.vision[0].name)
    main = dict(text=text, vision=vision, control="")
    out = {
        "sharelock_unseen_acc1": runs.summary(metric, **main, head="mlp").mean,
        "linear_unseen_acc1": runs.summary(metric, **main, head="linear").mean,
        "lit_unseen_acc1": (runs.summary(metric, text=short(cfg.lit.text.name), vision=vision, control="",
                                         head="lit").mean if cfg.lit.enabled and runs.where(head="lit") else None),
        "shuffled_unseen_acc1": runs.summary(metric, text=text, vision=vision, head="mlp",
                                             control="shuffled captions").mean,
        "chance_unseen": runs.summary(f"{headline}/chance", **main, head="mlp").mean,
    }
    for t in cfg.text:
        out[f"text/{short(t.name)}"] = runs.summary(metric, text=short(t.name), vision=vision, control="",
                                                    head="mlp").mean
    for v in cfg.vision:
        out[f"vision/{short(v.name)}"] = runs.summary(metric, text=text, vision=short(v.name), control="",
                                                      head="mlp").mean
    for labelled in bench.zero_shot[1:]:
        out[f"{labelled.name}/acc1"] = runs.summary(f"{labelled.name}/acc1", **main, head="mlp").mean
    for key in ("image_retrieval_recall@1", "text_retrieval_recall@1", "image_retrieval_recall@5",
                "text_retrieval_recall@5"):
        out[f"retrieval/{key}"] = runs.summary(f"{bench.retrieval.name}/{key}", **main, head="mlp").mean
    return out


def head_comparison(runs: Runs, metric: str, cfg: Config):
    """MLP vs linear on the main pair (a :class:`lib.core.results.Comparison`)."""
    main = dict(text=short(cfg.text[0].name), vision=short(cfg.vision[0].name), control="")
    return compare(runs.values(metric, **main, head="mlp"), runs.values(metric, **main, head="linear"))
