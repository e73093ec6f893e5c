"""The ViTeRB chapter's claims (the paper's Table 1 and §5), the paper's table beside ours, the key findings.

See notebooks/viterb.py, section "What reproduced, what did not".
"""
from __future__ import annotations

import dataclasses
import math
from typing import Sequence

from chapters.viterb.config import Config
from chapters.viterb.experiments import label
from lib.core import curves
from lib.core.ranks import rank_comparison, rank_correlation
from lib.core.results import Claim, Runs, versus

# ------------------------------------------------------------------------------ the paper and the claims
# Table 1 of the paper (file 000, §5): ViTeRB score (%) per language model and text type. Caption: "Decoder-based
# language models outperform encoder-based architectures across all types of input data. Llama-3 8B is used for
# LLM generated Wikipedia articles and descriptions." The book's kinds map onto its columns in this order. Where a
# config has no Wikipedia text (small), its `reference` kind (human-written text: CLDR keywords, WordNet glosses)
# stands in for the "Wikip. Articles" column; where it has (medium), `reference` is the book's own question.
PAPER_COLUMNS = {"name": "Class Names", "description": "LLM Description", "encyclopedia": "LLM Wikip. Articles",
                 "wikipedia": "Wikip. Articles"}
STAND_IN = {"reference": "wikipedia"}


def paper_kind(cfg: Config, kind: str) -> str | None:
    """The Table 1 column (a key of :data:`PAPER_COLUMNS`) a text kind of this config is compared with, or None
    for a kind that is the book's own (``reference`` beside the real Wikipedia texts)."""
    if kind in PAPER_COLUMNS:
        return kind
    stand_in = STAND_IN.get(kind)
    return stand_in if stand_in is not None and stand_in not in cfg.text_kinds else None


def paper_columns(cfg: Config) -> dict[str, str]:
    """This config's text kinds -> the Table 1 column each is compared with (the notebook's table headers)."""
    return {k: PAPER_COLUMNS[paper_kind(cfg, k)] for k in cfg.text_kinds if paper_kind(cfg, k)}


PAPER_TABLE_1 = {  # model: (type, class names, LLM description, LLM Wikipedia articles, Wikipedia articles)
    "BERT-Large": ("Enc.", 18.3, 15.9, 20.8, 22.9), "T5-XL": ("Enc.", 33.6, 37.8, 37.9, 40.7),
    "Flan-UL2": ("Enc.", 37.0, 43.4, 42.6, 41.9), "SentenceT5-XXL": ("Enc.", 39.5, 44.7, 44.3, 41.6),
    "NV-Embed": ("Dec.", 40.5, 42.9, 47.5, 45.9), "Gemma 7B": ("Dec.", 39.7, 33.7, 45.1, 43.4),
    "Llama-3 8B": ("Dec.", 40.2, 43.8, 44.9, 44.3),
}


def paper_table():
    """Table 1 as printed (a DataFrame: one row per language model, one column per text type)."""
    import pandas as pd

    return pd.DataFrame([{"language model": m, "type": row[0], **dict(zip(PAPER_COLUMNS.values(), row[1:]))}
                         for m, row in PAPER_TABLE_1.items()]).set_index("language model")


def _paper_mean(types: Sequence[str] = ("Enc.", "Dec."), kinds: Sequence[str] = tuple(PAPER_COLUMNS)) -> float:
    cells = [row[1 + list(PAPER_COLUMNS).index(STAND_IN.get(k, k))] for row in PAPER_TABLE_1.values()
             if row[0] in types for k in kinds]
    return sum(cells) / len(cells)


def score_table(runs: Runs, cfg: Config, **where):
    """Models x text types, ``"mean ± sd"`` in %, plus the mean over text types (one row per model)."""
    import pandas as pd

    selected = runs.where(**where)
    models = list(dict.fromkeys(r["model"] for r in selected))
    kinds = list(dict.fromkeys(r["kind"] for r in selected))
    rows = [{"language model": m, **{k: selected.summary("score", model=m, kind=k).text() for k in kinds},
             "all types": selected.summary("score", model=m).text()} for m in models]
    return pd.DataFrame(rows).set_index("language model")


def outcome(comparison, name_a: str, name_b: str) -> str:
    """The rule's outcome of a :class:`lib.core.results.Comparison` in words (for a table cell)."""
    return {"a": f"{name_a} clearly ahead", "b": f"{name_b} clearly ahead", "tie": "no clear difference",
            "unclear": "no clear difference", "unknown": "too few seeds to judge"}[comparison.outcome]


def own_text_metric(kind: str) -> str:
    """The run metric a kind is compared with class names on: ``score_own_text`` (the unseen classes with a
    Wikipedia article: ``chapters.viterb.experiments.own_text_classes``) for ``wikipedia``, else ``score``."""
    return "score_own_text" if kind == "wikipedia" else "score"


def _main(role: str = "score", **extra) -> dict:
    """The main grid's runs on the score datasets (``role="photos"``: on the photo datasets)."""
    return {"study": "main", "role": role, **extra}


def _capability_claim(cfg: Config, runs: Runs, bits: dict[str, float | None],
                      role: str = "score") -> Claim | None:
    """Capability as each decoder's bits per byte on held-out text (``bits``: label -> bits, None for an encoder;
    lower is better; tokenizer-free, unlike per-token perplexity) against the score."""
    ranked = sorted((b, m) for m, b in bits.items() if b is not None)  # most capable (lowest) first
    if len(ranked) < 2:
        return None
    models = [m for _, m in ranked]
    if len(models) == 2:
        comparison = runs.compare("score", _main(role, model=models[0]), _main(role, model=models[1]))
        names = (f"{models[0]} ({ranked[0][0]:.2f} bits per byte)", f"{models[1]} ({ranked[1][0]:.2f} bits per byte)")
        note = ("two decoders: a rank correlation of two points is +1 or -1 by construction, so the evidence is "
                "this one pair, by the rule; it says nothing about a trend")
    else:  # Spearman's rho per seed between capability (minus bits per byte) and score, against no correlation
        found = rank_correlation(runs, {m: -b for b, m in ranked}, **_main(role))
        comparison = rank_comparison(found["per_seed"], found["measure"], found["score"])
        names = (f"Spearman rho of minus bits per byte over {len(models)} decoders", "no correlation")
        note = (f"{len(models)} decoders, so the permutation test has {math.factorial(len(models))} orderings; "
                "bits per byte " + ", ".join(f"{m} {b:.3f}" for b, m in ranked))
    return Claim("capability_predicts_alignment", "more capable language models align better with vision (fewer "
                 "bits per byte on held-out text here; MMLU in the paper)", "Figure 1; §5",
                 comparison, names, paper_value="positive correlation with MMLU (R² 0.101 excl. Phi-3, as printed)",
                 diagnosis=note, scale=1.0 if len(models) > 2 else 100.0, unit="" if len(models) > 2 else " %")


def _size_claim(runs: Runs, params: dict[str, float], role: str = "score") -> Claim | None:
    """The book's own question: within the decoders, do larger models align better? (The paper correlates with
    MMLU only, Figure 1; pooling encoders with decoders here would mix this with the decoder-vs-encoder claim.)"""
    decoders = {r["model"] for r in runs.where(family="decoder", role=role)}
    params = {m: v for m, v in params.items() if m in decoders}
    if len(params) < 3:
        return None
    found = rank_correlation(runs, params, **_main(role, family="decoder"))
    return Claim("size_predicts_alignment", "the book's question: within the decoders, larger language models "
                 f"align better with vision (parameter count, {len(found['models'])} decoders)",
                 "the book's own question (the paper correlates with MMLU: Figure 1)",
                 rank_comparison(found["per_seed"], found["measure"], found["score"]),
                 (f"Spearman rho of parameter count over {len(found['models'])} decoders", "no correlation"),
                 paper_value=None,
                 diagnosis="score by size: " + ", ".join(
                     f"{m} ({params[m] / 1e6:.0f}M) {100 * v:.2f} %"
                     for m, v in sorted(zip(found["models"], found["score"]), key=lambda mv: params[mv[0]])),
                 scale=1.0, unit="", origin="book")


def _means(runs: Runs, key: str, **where) -> str:
    values = {v: runs.summary("score", **where, **{key: v}).mean
              for v in dict.fromkeys(r[key] for r in runs.where(**where))}
    return ", ".join(f"{v} {100 * m:.2f} %" for v, m in sorted(values.items(), key=lambda kv: -(kv[1] or 0)))


def _diagnose(claim: Claim, cfg: Config, runs: Runs, reference_alone: dict[str, float] | None,
              curve: Runs | None = None, role: str = "score") -> Claim:
    """A measured diagnosis for a claim that did not reproduce (kept as is when it did, or has one)."""
    if claim.verdict == "reproduced" or claim.diagnosis:
        return claim
    datasets = cfg.datasets_in(role)
    if claim.id == "decoders_beat_encoders":
        text = f"per model (mean over types and seeds): {_means(runs, 'model', **_main(role))}"
        if runs.where(study="pooling", role=role).rows:
            text += f"; the encoders mean-pooled: {_means(runs, 'model', study='pooling', role=role)}"
        if curve is not None and len(curve) and role == "score":  # the curve is on the drawings
            trend = curves.trend(curve, "score", {"family": "decoder"}, {"family": "encoder"}, ("decoders", "encoders"),
                                 size_key="curve_size", context=f"class names on {cfg.score_datasets[0]}")
            text += f"; {trend}" if trend else ""
    elif claim.id.endswith("_beats_names"):
        kind = claim.id[: -len("_beats_names")]
        metric = own_text_metric(kind)
        text = "per dataset, " + "; ".join(
            f"{d}: {kind} {100 * (runs.summary(metric, **_main(role, kind=kind, dataset=d)).mean or 0):.2f} % vs names "
            f"{100 * (runs.summary(metric, **_main(role, kind='name', dataset=d)).mean or 0):.2f} %"
            for d in datasets)
        if metric != "score":
            text += ("; on all the unseen classes (the others with their names on both sides): " + "; ".join(
                f"{d}: {kind} {100 * (runs.summary('score', **_main(role, kind=kind, dataset=d)).mean or 0):.2f} % vs "
                f"names {100 * (runs.summary('score', **_main(role, kind='name', dataset=d)).mean or 0):.2f} %"
                for d in datasets))
        if kind == "reference" and reference_alone and role == "score":
            text += "; classes whose reference text is only their name: " + ", ".join(
                f"{d} {100 * share:.0f} %" for d, share in reference_alone.items())
    elif claim.id == "above_chance":
        text = "per dataset: " + _means(runs, "dataset", **_main(role))
    else:
        return claim
    return dataclasses.replace(claim, diagnosis=text)


def claims(cfg: Config, runs: Runs, bits: dict[str, float | None], params: dict[str, float] | None = None,
           reference_alone: dict[str, float] | None = None, curve: Runs | None = None) -> list[Claim]:
    """The paper's claims that the runs can test, each with its verdict (``lib.core.results.RULE``) and, for one
    that did not reproduce, a measured diagnosis. ``bits``: model label -> bits per byte on held-out text
    (None for encoders); ``params``: model label -> parameter count (with three or more models: the size claim,
    Spearman's rho over every model); ``reference_alone``: dataset -> share of classes whose reference text is
    only the name; ``curve``: the data-size curve (:func:`data_size_curve`), for the decoder claim's diagnosis.

    With photo datasets (medium: Caltech-101) the paper's claims are decided on their photographs, the paper's
    test; the same comparisons on the score datasets' drawings are kept as the book's own questions (ids ending in
    ``_drawings``), so each paper claim has one verdict."""
    drawn = _claims_on(cfg, runs, "score", bits, params, reference_alone, curve)
    if not cfg.photo_datasets or not runs.where(**_main("photos")).rows:
        return drawn
    return [*_claims_on(cfg, runs, "photos", bits, params, reference_alone, curve),
            *(_on_drawings(c) for c in drawn)]


def _on_drawings(claim: Claim) -> Claim:
    """A claim's comparison on the drawn concepts, kept as the book's own question once the photographs decide it."""
    paper = claim.origin == "paper"
    return dataclasses.replace(
        claim, id=f"{claim.id}_drawings", origin="book", paper_value=None, paper_pair=None,
        names=tuple(f"{name} on drawings" for name in claim.names),
        statement=claim.statement + " (the unseen drawn concepts: the ViTeRB score of the score datasets)",
        reference=f"the book's own question (the claim of {claim.reference} on drawings)" if paper else claim.reference)


def _claims_on(cfg: Config, runs: Runs, role: str, bits: dict[str, float | None],
               params: dict[str, float] | None, reference_alone: dict[str, float] | None,
               curve: Runs | None) -> list[Claim]:
    """:func:`claims` on one role's runs: ``score`` (the ViTeRB score of the drawn score datasets) or ``photos``."""
    where = "Caltech-101's photographs" if role == "photos" else "ViTeRB score"
    out = [Claim("decoders_beat_encoders", "decoder LLMs give better class representations than encoders "
                 f"({where}, mean over models and text types)", "Table 1; abstract",
                 runs.compare("score", _main(role, family="decoder"), _main(role, family="encoder")),
                 ("decoders", "encoders"),
                 paper_value=f"decoders {_paper_mean(['Dec.']):.1f} vs encoders {_paper_mean(['Enc.']):.1f} "
                             "(mean of Table 1's cells)", paper_pair=(_paper_mean(['Dec.']), _paper_mean(['Enc.'])))]
    for kind in [k for k in ("description", "encyclopedia", "reference", "wikipedia") if k in cfg.text_kinds]:
        column = paper_kind(cfg, kind)
        if kind == "wikipedia":  # read where the texts differ: the unseen classes that have an article
            comparison = runs.compare(own_text_metric(kind), _main(role, kind=kind), _main(role, kind="name"))
            text = ("real Wikipedia lead paragraphs beat class names on the unseen classes that have an article "
                    f"({where}, mean over models; the others fall back to their names)")
        else:
            comparison = runs.compare("score", _main(role, kind=kind), _main(role, kind="name"))
            text = f"richer class text ({kind}) beats class names ({where}, mean over models)"
        if column is None:
            out.append(Claim(f"{kind}_beats_names", f"the book's question: {text}",
                             "the book's own question (Table 1's human-written column is Wikipedia's: `wikipedia`)",
                             comparison, (kind, "class names"), paper_value=None, origin="book"))
            continue
        out.append(Claim(f"{kind}_beats_names", text, "Table 1", comparison, (kind, "class names"),
                         paper_value=f"{PAPER_COLUMNS[column]} {_paper_mean(kinds=[column]):.1f} vs Class Names "
                                     f"{_paper_mean(kinds=['name']):.1f} (mean of the 7 models)",
                         paper_pair=(_paper_mean(kinds=[column]), _paper_mean(kinds=["name"]))))
    capable = _capability_claim(cfg, runs, bits, role)
    if capable is not None:
        out.append(capable)
    sized = _size_claim(runs, params or {}, role)
    if sized is not None:
        out.append(sized)
    chances: dict[str, list[float]] = {}  # the score averages datasets: so does chance (a seed's own split: its own)
    for r in runs.where(**_main(role)):
        chances.setdefault(r["dataset"], []).append(r["chance"])
    chance = sum(sum(v) / len(v) for v in chances.values()) / max(len(chances), 1)
    out.append(Claim("above_chance", "a head trained on seen classes transfers to unseen classes through their "
                     f"texts alone ({where})", "§4", versus(runs.values("score", **_main(role)), chance),
                     (where, "chance"), paper_value="all 28 cells of Table 1 between 15.9 and 47.5"))
    if role == "photos":  # each arm says where it was measured, as the drawings' copies do
        out = [dataclasses.replace(c, names=tuple(f"{name} on Caltech-101" for name in c.names))
               if not c.names[0].startswith("Caltech-101") else c for c in out]
    return [_diagnose(c, cfg, runs, reference_alone, curve, role) for c in out]


def findings(cfg: Config, runs: Runs, bits: dict[str, float | None]) -> dict[str, float | None]:
    """The chapter's numbers (means over seeds, fractions) for metrics.json and the results page."""
    main_models = [label(cfg, t) for t in cfg.text]
    out: dict[str, float | None] = {"decoders": runs.summary("score", **_main(family="decoder")).mean,  # drawings
                                    "encoders": runs.summary("score", **_main(family="encoder")).mean}
    for m in main_models + [label(cfg, t) for t in cfg.pooling_ablation]:
        study = "main" if m in main_models else "pooling"
        out[f"score/{m}"] = runs.summary("score", study=study, role="score", model=m).mean
        for kind in cfg.text_kinds:
            out[f"score/{m}/{kind}"] = runs.summary("score", study=study, role="score", model=m, kind=kind).mean
        if cfg.bare_name and m in main_models:
            out[f"score/{m}/bare-name"] = runs.summary("score", study="bare name", role="score", model=m).mean
    for kind in cfg.text_kinds:
        out[f"kind/{kind}"] = runs.summary("score", **_main(kind=kind)).mean
    if "wikipedia" in cfg.text_kinds:  # the unseen classes with an article, every model (the Wikipedia claim's pair)
        for kind in ("name", "wikipedia"):
            out[f"own_text/{kind}"] = runs.summary("score_own_text", **_main(kind=kind)).mean
            for m in main_models:
                out[f"own_text/{m}/{kind}"] = runs.summary("score_own_text", **_main(kind=kind, model=m)).mean
    for dataset in cfg.datasets:
        out[f"dataset/{dataset}"] = runs.summary("score", study="main", dataset=dataset).mean
        out[f"control/{dataset}"] = runs.summary("score", study="control", dataset=dataset).mean
        out[f"chance/{dataset}"] = runs.summary("chance", study="main", dataset=dataset).mean
    for dataset in cfg.photo_datasets:  # the same numbers on the photographs, under "<dataset>/"
        where = dict(study="main", dataset=dataset)
        out.update({f"{dataset}/{family}s": runs.summary("score", **where, family=family).mean
                    for family in ("decoder", "encoder")})
        for m in main_models:
            out[f"{dataset}/score/{m}"] = runs.summary("score", **where, model=m).mean
            for kind in cfg.text_kinds:
                out[f"{dataset}/score/{m}/{kind}"] = runs.summary("score", **where, model=m, kind=kind).mean
        for kind in cfg.text_kinds:
            out[f"{dataset}/kind/{kind}"] = runs.summary("score", **where, kind=kind).mean
            if "wikipedia" in cfg.text_kinds and kind in ("name", "wikipedia"):
                out[f"{dataset}/own_text/{kind}"] = runs.summary("score_own_text", **where, kind=kind).mean
    out.update({f"bits_per_byte/{m}": b for m, b in bits.items()})
    return out
