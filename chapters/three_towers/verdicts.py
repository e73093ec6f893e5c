"""The Three Towers chapter's claims (the paper's Tables 2 and 3) with their verdicts, and the key findings.

See notebooks/three_towers.py, section "What the comparisons say".
"""
from __future__ import annotations

from chapters.three_towers.concept_groups import group_diagnosis
from chapters.three_towers.config import Config
from chapters.three_towers.experiments import CURVE_METRIC, test_sets
from corpora.datasets import Benchmark
from lib.core import curves
from lib.core.results import Claim, Runs, versus
from lib.methods import three_towers as tt


def shown_metrics(bench: Benchmark) -> dict[str, str]:
    """The metrics the chapter's tables show, with their labels (the full config has no emoji sets)."""
    labels = {"emoji-unseen-google": "unseen emoji", "emoji-unseen-twitter": "unseen emoji, other style",
              "fashion-mnist": "Fashion-MNIST", "emoji-seen-google": "seen emoji (ceiling)",
              "medium-concepts-unseen": "unseen concepts", "tuxpaint-photo-unseen": "Tux Paint photos (unseen)"}
    labels.update({s.name: "seen concepts (ceiling)" for s in bench.zero_shot
                   if s.name.startswith("medium-concepts-train")})
    out = {f"{s.name}/acc1": f"{labels.get(s.name, s.name)} top-1" for s in bench.zero_shot}
    out.update({"retrieval/image_retrieval_recall@1": "text→image R@1",
                "retrieval/text_retrieval_recall@1": "image→text R@1"})
    return out


def chance(bench: Benchmark) -> dict[str, float]:
    """Chance level of each zero-shot set (one over its classes) and of retrieval (one over its images)."""
    return {**{s.name: 1 / len(s.classnames) for s in bench.zero_shot}, "retrieval": 1 / len(bench.retrieval)}


def chance_checks(bench: Benchmark, runs: Runs) -> list[dict]:
    """Each main method on each test set against chance, by :data:`lib.core.results.RULE`."""
    levels, out = chance(bench), []
    for variant in tt.VARIANTS:
        for s in test_sets(bench):
            comparison = versus(runs.values(f"{s.name}/acc1", method=variant), levels[s.name])
            out.append({"method": variant, "set": s.name, "top-1 %": comparison.a.text(), "chance %":
                        f"{100 * levels[s.name]:.2f}",
                        "above chance": {"a": "yes", "b": "below", "tie": "no", "unclear": "no",
                                         "unknown": "too few seeds"}[comparison.outcome]})
    return out


# --------------------------------------------------------------------------------------------
# Claims and findings (verdicts by lib.core.results.RULE)
# --------------------------------------------------------------------------------------------
TABLE2 = "§4.1, Table 2 (L scale, IN-21k third tower, unfiltered WebLI; top-1 recall)"


TABLE3 = "§4.2, Table 3 (IN-21k third tower, L scale, unfiltered WebLI)"


def claims(cfg: Config, bench: Benchmark, runs: Runs, curve: Runs | None = None) -> list[Claim]:
    """The paper's claims that the chapter's runs can test, each with its verdict (``lib.core.results.RULE``);
    with the data-size ``curve``, each retrieval claim that is not reproduced says how its gap moves with data."""
    retrieval, headline = "retrieval/mean_recall@1", bench.zero_shot[0].name
    out = [
        Claim("3t_beats_scratch_retrieval", "3T beats the from-scratch baseline on retrieval (mean R@1 of both "
              "directions)", TABLE2, runs.compare(retrieval, {"method": "3t"}, {"method": "scratch"}),
              ("3T", "from scratch"), paper_value="COCO image→text 54.4 vs 51.0, text→image 37.7 vs 34.2; "
              "Flickr 80.0 vs 75.6, 60.9 vs 57.1", paper_pair=(54.4, 51.0)),
        Claim("3t_beats_scratch_average", "3T beats the from-scratch baseline on average classification accuracy "
              f"(zero-shot top-1 averaged over {', '.join(s.name for s in test_sets(bench))})", TABLE3,
              runs.compare("zero_shot_average", {"method": "3t"}, {"method": "scratch"}), ("3T", "from scratch"),
              paper_value="average 71.4 vs 68.4", paper_pair=(71.4, 68.4)),
        Claim("3t_beats_lit_retrieval", "3T beats LiT on retrieval (mean R@1 of both directions)", TABLE2,
              runs.compare(retrieval, {"method": "3t"}, {"method": "lit"}), ("3T", "LiT"),
              paper_value="COCO image→text 54.4 vs 46.1, text→image 37.7 vs 27.8", paper_pair=(54.4, 46.1)),
    ]
    if f"{headline}/acc1_covered" in (runs.rows[0] if len(runs) else {}):
        out += [
            Claim("lit_beats_3t_where_labels_cover", "LiT is strong where the pretrained model's labels cover the "
                  "task: LiT beats 3T on unseen concepts of groups ImageNet-1k names (animals, food, places, objects)",
                  TABLE3 + "; 10-shot linear probes, here zero-shot",
                  runs.compare(f"{headline}/acc1_covered", {"method": "lit"}, {"method": "3t"}), ("LiT", "3T"),
                  paper_value="IN-1k 10-shot LiT 79.0 vs 3T 68.0; Birds 83.4 vs 65.0", paper_pair=(79.0, 68.0)),
            Claim("3t_beats_lit_where_labels_do_not_cover", "LiT is weak where they do not: 3T beats LiT on unseen "
                  "concepts of groups ImageNet-1k has no class for (flags, symbols, faces, people)",
                  TABLE3 + "; 10-shot linear probes, here zero-shot",
                  runs.compare(f"{headline}/acc1_not_covered", {"method": "3t"}, {"method": "lit"}), ("3T", "LiT"),
                  paper_value="Cars 10-shot 3T 84.9, from scratch 81.5, LiT 41.9 (IN-21k has no car brand)",
                  paper_pair=(84.9, 41.9)),
        ]
    if curve is not None and len(curve):
        for claim, other, name in ((out[0], "scratch", "from scratch"), (out[2], "lit", "LiT")):
            if claim.verdict != "reproduced":
                claim.diagnosis = curves.trend(curve, CURVE_METRIC, {"method": "3t"}, {"method": other},
                                               ("3T", name)) or None
    for claim in out[3:]:
        if claim.verdict == "not reproduced":
            claim.diagnosis = group_diagnosis(runs, curve, headline)
    return out


def findings(cfg: Config, bench: Benchmark, runs: Runs, found_claims: list[Claim]) -> dict[str, float | bool | None]:
    """The chapter's headline numbers (means over seeds, fractions) for metrics.json and the results page, and
    each claim's outcome as ``<claim id>``: True when the paper's side is clearly ahead by the one rule."""
    headline, levels = bench.zero_shot[0].name, chance(bench)
    out: dict[str, float | bool | None] = {}
    for variant in tt.VARIANTS:
        where = {"method": variant}
        out[f"{variant}/unseen_acc1"] = runs.summary(f"{headline}/acc1", **where).mean
        out[f"{variant}/retrieval_r1"] = runs.summary("retrieval/mean_recall@1", **where).mean
        out[f"{variant}/zero_shot_average"] = runs.summary("zero_shot_average", **where).mean
        for s in test_sets(bench)[1:]:
            out[f"{variant}/{s.name}/acc1"] = runs.summary(f"{s.name}/acc1", **where).mean
        for part in ("covered", "not_covered"):
            out[f"{variant}/unseen_acc1_{part}"] = runs.summary(f"{headline}/acc1_{part}", **where).mean
    out["chance_unseen"], out["chance_retrieval"] = levels[headline], levels["retrieval"]
    for claim in found_claims:
        out[claim.id] = claim.comparison.outcome == claim.expected
    return out
