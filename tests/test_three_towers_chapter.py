"""The Three Towers chapter in the small config: the metrics of this session's nbval run (all seeds and
ablations) or, when this file runs on its own, of a quick papermill run (one seed, no ablations).
"""
from __future__ import annotations

import pytest
from conftest import chapter_metrics


@pytest.fixture(scope="module")
def three_towers_run(tmp_path_factory):
    return chapter_metrics("three_towers", tmp_path_factory.mktemp("three_towers"))


@pytest.mark.slow
def test_three_towers_small_config_metrics(three_towers_run):
    metrics = three_towers_run
    assert metrics["config"] == "small" and metrics["seeds"][0] == 0
    means, chance = metrics["means"], metrics["chance"]
    assert set(means) == {"scratch", "lit", "3t"}
    unseen = "emoji-unseen-google/acc1"
    for method in ("lit", "3t"):  # scratch sits near chance on this little data (see the chapter)
        # Transfer to unseen concepts (381-way, chance 0.26 %) ...
        assert means[method][unseen] > 3 * chance["emoji-unseen-google"], method
        # ... and unseen drawings found from their captions above chance (1/381).
        assert means[method]["retrieval/image_retrieval_recall@1"] > 2 * chance["retrieval"], method
    # Fashion-MNIST photos were scored for every method (10 classes; near chance after 2,670 drawings,
    # with a seed spread too wide for an ordering to be a property).
    assert all(0 < row["fashion-mnist/acc1"] < 1 for row in means.values())
    # Memorisation ceiling: LiT's seen concepts above its unseen ones.
    assert means["lit"]["emoji-seen-google/acc1"] > means["lit"][unseen]
    # What ships has f and g only, and embeds exactly as the trained method does.
    assert metrics["exported_towers"] == ["f", "g"] and metrics["export_same_embeddings"]
    # One shared temperature was learned (it moved from its 0.07 start but stays sane).
    temperatures = [r["temperature"] for r in metrics["runs"]]
    assert all(0.01 < t < 0.2 for t in temperatures)
    assert set(metrics["findings"]) >= {"3t_beats_scratch_retrieval", "3t_beats_scratch_average"}
