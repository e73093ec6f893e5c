"""The Three Towers chapter in the small config: a papermill run (one seed, no ablations) and its metrics.

`make test` runs nbval on the committed notebook first (all seeds and ablations; it computes the
third tower's features), so this run reads those features from the store and only trains.
"""
from __future__ import annotations

import pytest
from conftest import run_chapter


@pytest.fixture(scope="module")
def three_towers_run(tmp_path_factory):
    return run_chapter("three_towers", tmp_path_factory.mktemp("three_towers"), quick=True)


@pytest.mark.slow
def test_three_towers_small_config_metrics(three_towers_run):
    metrics = three_towers_run
    assert metrics["config"] == "small" and metrics["seeds"] == [0]
    means, chance = metrics["means"], metrics["chance"]
    assert set(means) == {"scratch", "lit", "3t"}
    unseen = "emoji-unseen-google/acc1"
    for method, row in means.items():
        # Every method transfers to unseen concepts (381-way, chance 0.26 %) ...
        assert row[unseen] > 3 * chance["emoji-unseen-google"], method
        # ... and finds unseen drawings from their captions above chance (1/381).
        assert row["retrieval/image_retrieval_recall@1"] > 2 * chance["retrieval"], method
    # The locked pretrained features read photos (an ImageNet-trained model): LiT far above 10 % chance.
    assert means["lit"]["fashion-mnist/acc1"] > 1.5 * chance["fashion-mnist"]
    # Memorisation ceiling: LiT's seen concepts above its unseen ones.
    assert means["lit"]["emoji-seen-google/acc1"] > means["lit"][unseen]
    # What ships has f and g only, and embeds exactly as the trained method does.
    assert metrics["exported_towers"] == ["f", "g"] and metrics["export_same_embeddings"]
    # One shared temperature was learned (it moved from its 0.07 start but stays sane).
    temperatures = [r["temperature"] for r in metrics["runs"]]
    assert all(0.01 < t < 0.2 for t in temperatures)
    assert set(metrics["findings"]) >= {"3t_beats_scratch_retrieval", "3t_beats_scratch_average"}
