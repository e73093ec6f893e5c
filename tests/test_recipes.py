"""lib.core.recipes: each method's recipe chosen on the validation set (a fair comparison between methods)."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from lib.core.config import HeadConfig, LossConfig, TrainSettings
from lib.core.recipes import SweepConfig, candidates, choose, choose_each
from lib.core.train import fit
from lib.methods.sharelock import ShareLock

BASE = TrainSettings(steps=40, batch_size=32, lr=1e-3, weight_decay=1e-4, warmup_steps=2, eval_every=5)


def test_the_grid_is_every_pair_with_the_configured_recipe_first_and_nothing_else_changed():
    grid = candidates(BASE, SweepConfig(lr=(3e-4, 1e-3), weight_decay=(1e-4, 1e-2)))
    assert [(t.lr, t.weight_decay) for t in grid][0] == (1e-3, 1e-4)
    assert {(t.lr, t.weight_decay) for t in grid} == {(3e-4, 1e-4), (3e-4, 1e-2), (1e-3, 1e-4), (1e-3, 1e-2)}
    assert all(dataclasses.replace(t, lr=BASE.lr, weight_decay=BASE.weight_decay) == BASE for t in grid)
    only_lr = candidates(BASE, SweepConfig(lr=(1e-4, 1e-2)))
    assert [(t.lr, t.weight_decay) for t in only_lr] == [(1e-4, 1e-4), (1e-2, 1e-4)]  # an empty axis keeps its value


def test_the_highest_validation_score_wins_ties_go_to_the_configured_recipe_and_unjudged_runs_never_win():
    scores = {(1e-3, 1e-4): 0.2, (3e-4, 1e-4): 0.2, (3e-3, 1e-4): 0.5, (1e-2, 1e-4): None}
    best, record = choose(BASE, SweepConfig(lr=(3e-4, 1e-3, 3e-3, 1e-2)), lambda t: scores[(t.lr, t.weight_decay)])
    assert best.lr == 3e-3 and [r["chosen"] for r in record].count(True) == 1
    assert next(r for r in record if r["lr"] == 1e-2)["score"] is None
    tie, _ = choose(BASE, SweepConfig(lr=(3e-4, 1e-3)), lambda t: 2.0)
    assert tie.lr == BASE.lr
    with pytest.raises(RuntimeError, match="finite validation score"):
        choose(BASE, SweepConfig(lr=(3e-4, 1e-3)), lambda t: float("nan"))


def test_each_method_gets_its_own_choice_and_its_rows_name_it():
    best_lr = {"fdt": 3e-4, "pooled": 3e-3}  # each method peaks at a different rate: one shared choice would not do
    calls = []

    def score(method, settings):
        calls.append((method, settings.lr))
        return -abs(settings.lr - best_lr[method])

    chosen, record = choose_each(BASE, SweepConfig(lr=(3e-4, 1e-3, 3e-3), extend=0), ["fdt", "pooled"], score,
                                 lambda m: {"method": m.upper()})
    assert {m: t.lr for m, t in chosen.items()} == best_lr
    assert [r["method"] for r in record] == ["FDT"] * 3 + ["POOLED"] * 3
    assert [(r["method"], r["lr"]) for r in record if r["chosen"]] == [("FDT", 3e-4), ("POOLED", 3e-3)]
    assert len(calls) == 6 and {m for m, _ in calls[:3]} == {"fdt"}  # every candidate trained for its own method


def test_no_sweep_trains_nothing_and_returns_the_recipe_as_written():
    calls = []
    assert choose(BASE, SweepConfig(), lambda t: calls.append(t)) == (BASE, []) and calls == []


@pytest.mark.parametrize(("field", "value", "message"), [
    ("lr", (0.0,), "positive"), ("weight_decay", (-1e-4,), "non-negative"), ("lr", (1e-3, 1e-3), "twice"),
    ("lr", ("fast",), "positive"), ("extend", -1, "whole number")])
def test_a_bad_grid_names_the_field_and_an_example(field, value, message):
    with pytest.raises(ValueError, match=f"sweep.{field}.*{message}"):
        SweepConfig(**{field: value})


def test_on_real_training_a_learning_rate_too_small_to_move_loses_to_one_that_learns():
    """A ShareLock head on synthetic pairs whose text is a noisy linear image of the image features: at lr 1e-6 the
    head barely leaves its initialisation, at 3e-3 it aligns; scored by validation retrieval, the sweep must pick
    the one that learned."""
    from lib.core.evaluate import retrieval
    from lib.core.recipes import retrieval_score

    generator = torch.Generator().manual_seed(0)
    image = torch.randn(512, 16, generator=generator)
    text = image @ torch.randn(16, 24, generator=generator) + 0.1 * torch.randn(512, 24, generator=generator)
    train, val = {"image": image[:384], "text": text[:384]}, {"image": image[384:], "text": text[384:]}

    def run(settings):
        torch.manual_seed(0)
        method = ShareLock(24, 16, HeadConfig(hidden_dim=32, num_layers=2, dropout=0.0), LossConfig())
        fit(method, train, val, settings, seed=0)
        return retrieval_score(retrieval(method, val["image"], val["text"]))

    best, record = choose(BASE, SweepConfig(lr=(1e-6, 3e-3), extend=0), run)
    assert best.lr == 3e-3, record
    slow, fast = (next(r["score"] for r in record if r["lr"] == lr) for lr in (1e-6, 3e-3))
    assert fast > slow + 0.2, record


def test_the_retrieval_score_is_the_mean_of_both_directions_r_at_1():
    from lib.core.recipes import retrieval_score

    assert retrieval_score({"image_retrieval_recall@1": 0.2, "text_retrieval_recall@1": 0.4, "x": 9}) == \
        pytest.approx(0.3)


def test_a_best_on_the_grids_edge_grows_the_grid_by_its_own_step_until_it_is_inside():
    """A validation score with its peak at lr 1e-2, beyond a grid that stops at 1e-3: the grid grows upwards by its
    own step (x 3.33) while the best is its top; with too few extensions the choice is flagged as still on the edge."""
    import math

    def score(settings):
        return -(math.log10(settings.lr) - math.log10(1e-2)) ** 2

    grid = (1e-4, 3e-4, 1e-3)
    short, record = choose(BASE, SweepConfig(lr=grid, extend=1), score)
    assert short.lr == pytest.approx(1e-3 * 10 / 3) and [r["extended"] for r in record] == [False] * 3 + [True]
    assert next(r for r in record if r["chosen"])["at_edge"]
    best, record = choose(BASE, SweepConfig(lr=grid, extend=3), score)
    assert best.lr == pytest.approx(1e-3 * (10 / 3) ** 2)  # 1.1e-2: the next one up (3.7e-2) is worse
    chosen = [r for r in record if r["chosen"]]
    assert len(chosen) == 1 and not chosen[0]["at_edge"] and sum(r["extended"] for r in record) == 3
    low, record = choose(BASE, SweepConfig(lr=(3e-2, 1e-1), extend=2), score)  # the bottom edge grows downwards
    assert low.lr == pytest.approx(3e-2 * 0.3) and min(r["lr"] for r in record) == pytest.approx(3e-2 * 0.09)


def test_the_sweep_table_names_a_candidate_without_a_score_instead_of_showing_nan():
    from chapters.notebook import recipe_table

    record = choose(BASE, SweepConfig(lr=(3e-4, 1e-3), extend=0), lambda t: None if t.lr == 3e-4 else 0.25)[1]
    html = recipe_table(record, "validation R@1 %", "sweep", unscored="kept its first evaluation").to_html()
    assert "kept its first evaluation" in html and "25.00" in html
    assert ">nan<" not in html.lower() and ">none<" not in html.lower()


def test_with_keep_within_se_the_configured_recipe_stays_unless_beaten_beyond_the_noise():
    """k standard errors of the best score over n items: a lead inside them keeps the configured rate (with the lead
    recorded on every row), a lead beyond them moves to the best; with k = 0 the best wins, as before."""
    from lib.core.recipes import lead_needed

    n, k = 64, 2.0
    lead = lead_needed(0.20, n, k)
    assert lead == pytest.approx(2 * (0.2 * 0.8 / 64) ** 0.5)
    grid = (3e-4, 1e-3, 3e-3)
    close = {3e-4: 0.10, 1e-3: 0.20 - 0.9 * lead, 3e-3: 0.20}
    kept, record = choose(BASE, SweepConfig(lr=grid, keep_within_se=k), lambda t: close.get(t.lr, 0.05), n)
    assert kept.lr == BASE.lr and next(r for r in record if r["chosen"])["lr"] == BASE.lr
    assert all(r["lead"] == pytest.approx(lead) for r in record)
    assert choose(BASE, SweepConfig(lr=grid), lambda t: close.get(t.lr, 0.05))[0].lr == 3e-3  # k = 0: today's rule
    far = {3e-4: 0.10, 1e-3: 0.20 - 1.1 * lead, 3e-3: 0.20}
    assert choose(BASE, SweepConfig(lr=grid, keep_within_se=k), lambda t: far.get(t.lr, 0.05), n)[0].lr == 3e-3
    each, rows = choose_each(BASE, SweepConfig(lr=grid, keep_within_se=k), ["a"], lambda m, t: close.get(t.lr, 0.05),
                             lambda m: {"method": m}, n=n)
    assert each["a"].lr == BASE.lr and rows[0]["method"] == "a"


@pytest.mark.parametrize("value", [-1.0, float("nan"), "2", True])
def test_a_bad_keep_within_se_names_the_field(value):
    with pytest.raises(ValueError, match="keep_within_se"):
        SweepConfig(lr=(1e-3,), keep_within_se=value)


def test_keep_within_se_without_the_number_of_validation_items_is_refused():
    with pytest.raises(ValueError, match="number of validation items"):
        choose(BASE, SweepConfig(lr=(3e-4, 1e-3), keep_within_se=2), lambda t: 0.1)
