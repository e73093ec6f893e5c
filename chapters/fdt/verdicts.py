"""The FDT chapter's claims (the paper's Table 2 and its sparsity argument) with their verdicts, and the key
findings. See notebooks/fdt.py, section "What reproduced, what did not".
"""
from __future__ import annotations

import dataclasses

from chapters.fdt.config import Config
from chapters.fdt.experiments import zero_shot_sets
from corpora import caltech
from corpora.datasets import Benchmark
from lib.core.results import Claim, Runs, versus


def claims(cfg: Config, bench: Benchmark, runs: Runs) -> list[Claim]:
    """The paper's claims that the chapter's runs can test, each with its verdict (``lib.core.results.RULE``)."""
    headline = zero_shot_sets(cfg, bench)[0].name
    metric = f"{headline}/acc1"
    softmax = next((v.name for v in cfg.variants if v.changes() == {"weighting": "softmax"}), None)
    photos = bool(runs.values("caltech/acc1", head="FDT"))  # the paper's zero-shot sets are photographs: they decide
    pooled = Claim("fdt_beats_pooled", "FDT's codebook head beats a pooled CLIP-style head on the same features",
                   "Table 2 (9-dataset zero-shot average, 15M pairs)",
                   runs.compare(metric, {"head": "FDT"}, {"head": "pooled"}), ("FDT head", "pooled head"),
                   paper_value="CLIP+FDT 45.9 vs CLIP 41.3", paper_pair=(45.9, 41.3))
    out = [pooled] if not photos else [
        dataclasses.replace(pooled, comparison=runs.compare("caltech/acc1", {"head": "FDT"}, {"head": "pooled"}),
                            names=("FDT head on Caltech-101", "pooled head on Caltech-101"),
                            statement=pooled.statement + " (zero-shot on Caltech-101's photographs, trained on the "
                            "drawings)"),
        _on_drawings(pooled, "fdt_beats_pooled_drawings")]
    if softmax:
        out.append(Claim("sparsemax_beats_softmax_as_features", "with the code weights themselves used as features, "
                         "sparsemax beats softmax", "Table 8 (rows marked *: FDT weights as features)",
                         runs.compare("weights_as_features/acc1", {"head": "FDT"}, {"head": softmax}),
                         ("sparsemax weights", "softmax weights"), paper_value="32.4 vs 5.2", paper_pair=(32.4, 5.2)))
        sparse = Claim("sparsemax_beats_softmax", "with the FDT embeddings, sparsemax beats softmax",
                       "Table 8 (rows without *)", runs.compare(metric, {"head": "FDT"}, {"head": softmax}),
                       ("sparsemax head", "softmax head"), paper_value="45.9 vs 43.9", paper_pair=(45.9, 43.9))
        out += [sparse] if not photos else [
            dataclasses.replace(sparse, statement=sparse.statement + " (zero-shot on Caltech-101's photographs)",
                                comparison=runs.compare("caltech/acc1", {"head": "FDT"}, {"head": softmax}),
                                names=("sparsemax head on Caltech-101", "softmax head on Caltech-101")),
            _on_drawings(sparse, "sparsemax_beats_softmax_drawings")]
    chance = 1 / len(zero_shot_sets(cfg, bench)[0].classnames)
    out.append(Claim("fdt_above_chance", "the book's question: an FDT head on frozen features transfers zero-shot to "
                     "concepts it never saw (the paper trains its encoders through FDT and makes no frozen-feature or "
                     "unseen-concept claim)", "the book's own question (the paper's zero-shot average: Table 2)",
                     versus(runs.values(metric, head="FDT"), chance), ("FDT head", "chance"), paper_value=None,
                     origin="book"))
    return out


def _on_drawings(claim: Claim, id_: str) -> Claim:
    """A paper claim's comparison on the unseen drawn concepts, kept as the book's own question once Caltech-101's
    photographs decide the claim: one paper claim, one verdict (the tallies count it once)."""
    return dataclasses.replace(claim, id=id_, origin="book", paper_value=None, paper_pair=None,
                               names=tuple(f"{name} on unseen drawn concepts" for name in claim.names),
                               statement=claim.statement + " (zero-shot on the unseen drawn concepts)",
                               reference=f"the book's own question (the claim of {claim.reference} on drawings)")


def findings(cfg: Config, bench: Benchmark, runs: Runs, init_rows: list[dict] = ()) -> dict[str, float | None]:
    """The chapter's headline numbers (means over seeds, fractions) for metrics.json and the results page;
    ``init_rows`` (:func:`active_codes_at_init`) adds the image side's active fractions at initialisation."""
    sets = zero_shot_sets(cfg, bench)
    headline = sets[0].name
    mean = lambda head, metric: runs.summary(metric, head=head).mean  # noqa: E731
    out = {"fdt_unseen_acc1": mean("FDT", f"{headline}/acc1"), "pooled_unseen_acc1": mean("pooled", f"{headline}/acc1"),
           "fdt_unseen_acc1_sd": runs.summary(f"{headline}/acc1", head="FDT").sd,
           "pooled_unseen_acc1_sd": runs.summary(f"{headline}/acc1", head="pooled").sd,
           "chance_unseen": 1 / len(sets[0].classnames),
           "sparsemax_weights_as_features_acc1": mean("FDT", "weights_as_features/acc1"),
           "fdt_active_codes_image": mean("FDT", "active_codes/image"),
           "fdt_active_codes_text": mean("FDT", "active_codes/text"),
           "fdt_codes_ever_active": mean("FDT", "codes_ever_active"), "num_codes": cfg.fdt.num_codes,
           "fdt_logit_scale": mean("FDT", "logit_scale")}
    if cfg.caltech_per_class is not None:
        out["chance_caltech"] = 1 / len(caltech.categories())
        out.update({f"{key}_caltech_acc1": mean(head, "caltech/acc1")
                    for head, key in (("FDT", "fdt"), ("pooled", "pooled"), *((v.name, v.name.replace(" ", "_"))
                                                                             for v in cfg.variants))})
    for head, key in (("FDT", "fdt"), ("pooled", "pooled")):
        out.update({f"{key}_{s.name}_acc1": mean(head, f"{s.name}/acc1") for s in sets[1:]})
        out.update({f"{key}_retrieval/{m}_retrieval_recall@{k}": mean(head, f"retrieval/{m}_retrieval_recall@{k}")
                    for m in ("image", "text") for k in (1, 5)})
    for row in (r for r in init_rows if r["modality"] == "image"):
        out["init_active_fraction_" + row["probe"].replace(",", "").replace(" ", "_")] = row["active fraction"]
    for v in cfg.variants:
        out.update({f"{v.name.replace(' ', '_')}_{key}": mean(v.name, metric) for key, metric in (
            ("unseen_acc1", f"{headline}/acc1"), ("weights_as_features_acc1", "weights_as_features/acc1"),
            ("active_codes_image", "active_codes/image"), ("active_codes_text", "active_codes/text"))})
    return out
