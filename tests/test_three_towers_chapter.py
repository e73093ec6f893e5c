"""The Three Towers chapter: its config schema, feature plan, claims (the one rule), method diagram, and the
metrics of the small-config run (this session's nbval run, or a quick papermill run: one seed, no ablations).
"""
from __future__ import annotations

import pytest
import torch
from conftest import chapter_metrics

from chapters import three_towers as ch
from chapters.three_towers import figures as three_towers_figures
from lib.core.config import ConfigError
from lib.core.results import Runs


# --------------------------------------------------------------------------- config and plan
def test_config_small_loads_and_bad_values_are_named():
    cfg = ch.load_config("small")
    assert cfg.seeds and cfg.text_tower.context > 0 and cfg.train.eval_every == cfg.train.steps
    assert ch.load_config("full").third.name == "facebook/dinov2-large"
    with pytest.raises(ConfigError, match="alphas"):
        ch.load_config("small", {"alphas": [0.5, 1.5]})
    with pytest.raises(ConfigError, match="kind"):
        ch.load_config("small", {"image_tower": {"kind": "resnet"}})
    with pytest.raises(ConfigError, match="timm_name"):
        ch.load_config("small", {"image_tower": {"kind": "timm"}})
    with pytest.raises(ConfigError, match="divisible"):
        ch.load_config("small", {"text_tower": {"kind": "transformer", "width": 10, "heads": 4}})
    with pytest.raises(ConfigError, match="unknown field"):
        ch.load_config("small", {"train": {"seed": 3}})


def test_feature_plan_covers_every_image_set_and_is_what_precompute_lists(capsys):
    from provision import precompute

    cfg = ch.load_config("small")
    bench = ch.benchmark(cfg)
    plan = ch.feature_plan(cfg, bench)
    sets = {p.name for p in ch.training_pairs(cfg, bench)} | {bench.val.name, bench.retrieval.name}
    sets |= {s.name for s in bench.zero_shot}
    assert plan.names() == list(dict.fromkeys(f"image:{cfg.third.name}:{name}" for name in
                                              [p.name for p in ch.training_pairs(cfg, bench)] + [bench.val.name,
                                              bench.retrieval.name] + [s.name for s in bench.zero_shot]))
    assert {name.split(":")[-1] for name in plan.names()} == sets and len(sets) == 7
    assert all(request.kind == "image" and request.model == cfg.third for request in plan)
    assert precompute.main(["--chapter", "three_towers", "--list"]) == 0
    assert capsys.readouterr().out.split() == plan.names()


# --------------------------------------------------------------------------- claims use the one rule
def _runs(values: dict[str, list[float]], metric: str = "retrieval/mean_recall@1") -> Runs:
    runs = Runs()
    for method, per_seed in values.items():
        for seed, value in enumerate(per_seed):
            runs.add({"method": method, "seed": seed, metric: value, "zero_shot_average": value})
    return runs


class _Bench:  # what claims() and findings() read of a benchmark
    class _Set:
        def __init__(self, name, classes):
            self.name, self.classnames = name, tuple(range(classes))

    zero_shot = (_Set("emoji-unseen-google", 381), _Set("fashion-mnist", 10))
    retrieval = tuple(range(381))


def test_a_paired_gap_whose_interval_contains_zero_is_no_finding():
    """The book's rule is paired: seed by seed, 3T − scratch; a gap of means whose per-seed differences disagree in
    sign has an interval around 0, whatever the gap of means; differences that agree decide even when the seeds
    themselves spread widely."""
    runs = _runs({"3t": [0.10, 0.15, 0.14], "scratch": [0.11, 0.10, 0.12], "lit": [0.2, 0.2, 0.2]})
    cfg = ch.load_config("small")
    claims = {c.id: c for c in ch.claims(cfg, _Bench, runs)}
    assert claims["3t_beats_scratch_retrieval"].verdict == "inconclusive"
    assert claims["3t_beats_scratch_average"].verdict == "inconclusive"
    assert claims["3t_beats_lit_retrieval"].verdict == "not reproduced"
    assert "which contains 0" in claims["3t_beats_scratch_retrieval"].evidence
    found = ch.findings(cfg, _Bench, runs, list(claims.values()))
    assert found["3t_beats_scratch_retrieval"] is False and found["3t_beats_scratch_average"] is False
    clear = _runs({"3t": [0.11, 0.15, 0.24], "scratch": [0.08, 0.12, 0.20], "lit": [0.2, 0.2, 0.2]})
    claims = {c.id: c for c in ch.claims(cfg, _Bench, clear)}
    assert claims["3t_beats_scratch_retrieval"].verdict == "reproduced"
    assert ch.findings(cfg, _Bench, clear, list(claims.values()))["3t_beats_scratch_average"] is True


def test_one_seed_judges_nothing():
    runs = _runs({"3t": [0.5], "scratch": [0.0], "lit": [0.0]})
    assert {c.verdict for c in ch.claims(ch.load_config("small"), _Bench, runs)} == {"inconclusive"}


def test_medium_selects_on_validation_and_has_a_four_point_curve():
    cfg = ch.load_config("medium")
    assert cfg.data.corpus == "medium" and cfg.train.eval_every < cfg.train.steps and cfg.train.patience
    assert len(cfg.curve_fractions) == 4 and max(cfg.curve_fractions) == 1.0 and len(cfg.seeds) >= 3
    from chapters import sharelock

    for name in ("small", "medium"):  # the third tower reads the ShareLock chapter's EfficientNet-Lite0 store entries
        assert ch.load_config(name).third == sharelock.load_config(name).vision[0], name
    with pytest.raises(ConfigError, match="curve fractions"):
        ch.load_config("medium", {"curve_fractions": [0.0, 1.0]})


def test_medium_claims_run_five_seeds_and_the_curve_its_first_three(monkeypatch):
    from chapters.three_towers import experiments

    cfg = ch.load_config("medium")
    assert len(cfg.seeds) >= 5 and cfg.curve_run_seeds == cfg.seeds[:3]
    assert ch.load_config("small").curve_run_seeds == ch.load_config("small").seeds  # None: every seed
    with pytest.raises(ConfigError, match="curve_seeds"):
        ch.load_config("medium", {"curve_seeds": 1})
    trained = []

    def fake_run(own, bench, data, variant, seed, train_pairs=None, settings=None):
        trained.append((variant, seed, train_pairs))
        return {"method": variant, "seed": seed, "train_pairs": train_pairs}, None, None

    monkeypatch.setattr(experiments, "train_and_evaluate", fake_run)
    total = 1000
    whole = Runs([{"method": v, "seed": s, "train_pairs": total} for v in ("scratch", "lit", "3t") for s in cfg.seeds])
    data = type("Data", (), {"train": {"pixels": torch.zeros(total, 1)}})()
    curve = experiments.data_size_curve(cfg, None, data, whole)
    assert {seed for _, seed, _ in trained} == set(cfg.seeds[:3])  # the smaller subsets: the curve's seeds only
    assert len(trained) == 3 * 3 * (len(cfg.curve_fractions) - 1)  # the whole set is read from the main runs
    assert {r["seed"] for r in curve} == set(cfg.seeds[:3])


def test_medium_validates_on_held_out_training_pairs_the_same_for_every_seed():
    cfg = ch.load_config("medium")
    assert 0 < cfg.val_holdout < 0.5 and ch.load_config("small").val_holdout == 0
    keep, held = ch.held_out_rows(1000, 0.05)
    assert len(held) == 50 and len(keep) == 950 and not set(keep.tolist()) & set(held.tolist())
    assert sorted(keep.tolist() + held.tolist()) == list(range(1000))
    assert torch.equal(held, ch.held_out_rows(1000, 0.05)[1])  # no dependence on the training seed
    assert ch.diagnosis_protocols(cfg) == ("held-out pairs", "validation families")
    assert ch.diagnosis_protocols(ch.load_config("small"))[0] == "fixed budget"
    with pytest.raises(ConfigError, match="val_holdout"):
        ch.load_config("medium", {"val_holdout": 0.6})


def test_a_run_that_kept_its_first_evaluation_is_stuck_but_a_fixed_budget_is_not():
    rows = [{"method": "3t", "first_eval": 100, "best_step": 100, "steps_run": 700},   # never improved: stuck
            {"method": "lit", "first_eval": 100, "best_step": 400, "steps_run": 800},
            {"method": "scratch", "first_eval": 200, "best_step": 200, "steps_run": 200}]  # one evaluation, at the end
    assert [r["method"] for r in ch.stuck_runs(ch.load_config("medium"), Runs(rows))] == ["3t"]


def test_a_claim_not_reproduced_carries_the_curve_trend():
    runs = _runs({"3t": [0.10, 0.11, 0.12], "scratch": [0.08, 0.10, 0.12], "lit": [0.30, 0.31, 0.29]})
    curve = Runs()
    for size, gap in ((500, -0.2), (1000, -0.1)):
        for seed in range(3):
            for method, value in (("3t", 0.3 + gap + 0.01 * seed), ("lit", 0.3 + 0.01 * seed), ("scratch", 0.1)):
                curve.add(method=method, seed=seed, train_pairs=size, **{ch.CURVE_METRIC: value})
    found = {c.id: c for c in ch.claims(ch.load_config("small"), _Bench, runs, curve=curve)}
    assert found["3t_beats_lit_retrieval"].verdict == "not reproduced"
    assert found["3t_beats_lit_retrieval"].diagnosis == ("3T − LiT in points, by training pairs: "
                                                         "500: -20.0 (LiT ahead); 1,000: -10.0 (LiT ahead)")
    assert found["3t_beats_scratch_retrieval"].diagnosis.startswith("3T − from scratch in points")  # inconclusive


def test_coverage_groups_are_disjoint_and_name_real_groups():
    from corpora import emoji

    groups = {c.group for c in emoji.load_concepts()}
    from corpora.concept_groups import COVERED, NOT_COVERED

    assert set(COVERED) <= groups and set(NOT_COVERED) <= groups
    assert not set(COVERED) & set(NOT_COVERED)


# --------------------------------------------------------------------------- the diagram
@pytest.mark.parametrize("variant,options,circles", [("3t", {}, 3), ("3t", {"terms": ["fh", "gh"]}, 2),
                                                      ("3t", {"headless": True}, 3), ("lit", {}, 1),
                                                      ("scratch", {}, 1)])
def test_diagram_is_drawn_from_the_built_model(variant, options, circles):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Circle

    from lib.core.config import LossConfig
    from lib.methods import three_towers as tt

    method = tt.ThreeTowers(variant, third_dim=24, vocab_size=50, embed_dim=16, loss=LossConfig(0.07, True),
                            image_tower=tt.ImageTowerConfig(widths=(8,), image_size=16),
                            text_tower=tt.TextTowerConfig(tokenizer="unused", kind="bag", width=16), **options)
    ax = three_towers_figures.diagram(method, "offline/efficientnet-lite0")
    texts = " ".join(t.get_text() for t in ax.texts)
    assert sum(isinstance(p, Circle) for p in ax.patches) == circles  # one per loss term the method has
    assert method.formula() in ax.get_title()
    assert ("f_h = " in texts) == hasattr(method, "f_h") and ("f: image tower" in texts) == (variant != "lit")
    counts = method.parameter_counts()
    assert f"trained · {three_towers_figures._count(counts['g'][0])} params" in texts  # the numbers are the model's
    if variant != "scratch":
        assert "frozen · cached features" in texts and "efficientnet-lite0" in texts
    plt.close("all")


# --------------------------------------------------------------------------- the notebook's run
@pytest.fixture(scope="module")
def three_towers_run(tmp_path_factory):
    return chapter_metrics("three_towers", tmp_path_factory.mktemp("three_towers"))


@pytest.mark.slow
def test_three_towers_small_config_metrics(three_towers_run):
    metrics = three_towers_run
    assert metrics["config"] == "small" and metrics["settings"]["seeds"][0] == 0
    runs, findings, chance = metrics["runs"], metrics["findings"], metrics["extra"]["chance"]
    assert {r["method"] for r in runs} == {"scratch", "lit", "3t"}
    # A fixed budget: every run trained all its steps and kept its final weights.
    assert all(r["steps_run"] == r["best_step"] == metrics["settings"]["train"]["steps"] for r in runs)
    # LiT and 3T transfer to unseen concepts (381-way) and find unseen drawings from their captions.
    for method in ("lit", "3t"):
        assert findings[f"{method}/unseen_acc1"] > 3 * findings["chance_unseen"], method
        assert findings[f"{method}/retrieval_r1"] > 3 * findings["chance_retrieval"], method
    assert chance["fashion-mnist"] == pytest.approx(0.1)
    # Memorisation ceiling: LiT's seen concepts above its unseen ones.
    lit = [r for r in runs if r["method"] == "lit"]
    assert sum(r["emoji-seen-google/acc1"] for r in lit) > sum(r["emoji-unseen-google/acc1"] for r in lit)
    # What ships has f and g only, and embeds exactly as the trained method does.
    assert metrics["extra"]["exported_towers"] == ["f", "g"] and metrics["extra"]["export_same_embeddings"]
    # One shared temperature was learned (it moved from its 0.07 start but stays sane).
    assert all(0.01 < r["temperature"] < 0.2 and r["temperature"] != 0.07 for r in runs)
    ids = {c["id"] for c in metrics["claims"]}
    assert ids >= {"3t_beats_scratch_retrieval", "3t_beats_scratch_average", "3t_beats_lit_retrieval",
                   "lit_beats_3t_where_labels_cover", "3t_beats_lit_where_labels_do_not_cover"}
    assert all(findings[i] == (c["verdict"] == "reproduced") for c in metrics["claims"] for i in [c["id"]])


def test_a_group_claim_not_reproduced_carries_both_groups_gaps_and_the_curve():
    unseen = "medium-concepts-unseen"
    rows = [{"method": method, "seed": seed, "train_pairs": size, f"{unseen}/acc1_covered": covered + 0.001 * seed,
             f"{unseen}/acc1_not_covered": not_covered + 0.001 * seed}
            for size, scale in ((100, 0.5), (200, 1.0))
            for method, covered, not_covered in (("lit", 0.010 * scale, 0.012 * scale), ("3t", 0.005 * scale,
                                                                                         0.004 * scale))
            for seed in range(3)]
    whole = Runs([r for r in rows if r["train_pairs"] == 200])
    text = ch.group_diagnosis(whole, Runs(rows), unseen)
    assert text.startswith("LiT − 3T in points: +0.5 on the groups ImageNet-1k names, +0.8 on those it does not; "
                           "LiT leads where its labels do not cover the group, and by at least as much as where they "
                           "do: not the paper's mechanism")
    assert "3T − LiT in points, on the groups ImageNet-1k does not name, by training pairs: 100: -0.4" in text
    assert ch.group_diagnosis(whole, None, unseen).endswith("(a locked tower limited by its labels)")
    behind = Runs([{**r, f"{unseen}/acc1_not_covered": 0.0} if r["method"] == "lit" else r for r in whole])
    assert "+0.5 on the groups ImageNet-1k names, -0.5 on those it does not; LiT does not lead where" in \
        ch.group_diagnosis(behind, None, unseen)


def test_the_committed_three_towers_run_is_not_degenerate():
    """What the book shows (book/metrics/three_towers.json, in the config book/configs.yaml names): every run
    trained, the three methods on at least five paired seeds, transfer above chance, a data-size curve with several
    sizes and seeds, and a verdict with its interval for every claim."""
    import json
    from pathlib import Path

    from lib.core.results import VERDICTS
    from tools.run_notebooks import shown_configs

    metrics = json.loads((Path(__file__).resolve().parents[1] / "book" / "metrics" / "three_towers.json").read_text())
    assert metrics["config"] == shown_configs()["three_towers"]
    findings, extra, seeds = metrics["findings"], metrics["extra"], metrics["settings"]["seeds"]
    assert extra["stuck_runs"] == 0, "a run that kept its first evaluation has not trained"
    main = [r for r in metrics["runs"] if r["method"] == r["variant"]]
    assert {(r["method"], r["seed"]) for r in main} == {(m, s) for m in ("scratch", "lit", "3t") for s in seeds}
    if metrics["config"] == "medium":
        assert len(seeds) >= 5
    for method in ("lit", "3t"):
        assert findings[f"{method}/unseen_acc1"] > 3 * findings["chance_unseen"], method
        assert findings[f"{method}/retrieval_r1"] > 3 * findings["chance_retrieval"], method
    curve = extra["data_size_curve"]
    assert len({r["train_pairs"] for r in curve}) >= 2 and len({r["seed"] for r in curve}) >= 2
    assert metrics["claims"] and all(c["verdict"] in VERDICTS for c in metrics["claims"])
    assert all(c["comparison"]["pairs"] == len(seeds) for c in metrics["claims"])  # paired over every seed
