"""The FDT chapter: chapters.fdt (config, feature plan, helpers, claims, the diagram) and notebooks/fdt.py in
the small config, through its metrics (this session's nbval run with every seed or, when this file runs on its
own, a quick papermill run: the first seed, every variant once), checked against properties that must hold.

The thresholds are wide enough for seed and thread-count noise (with patch tokens and the scaled temperature,
FDT's unseen top-1 was 2.1-4.5 % over seeds 0-2 when this test was written, the pooled head's 7.9-10.5 %) and
tight enough to catch a broken pipeline: a head that learns nothing sits at chance (0.26 %).
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from conftest import chapter_metrics

from chapters import fdt
from lib.core.config import ConfigError
from chapters.metrics import SCHEMA
from lib.core.results import VERDICTS, Runs


@pytest.fixture(scope="module")
def fdt_run(tmp_path_factory):
    # nbval's run of this session (all seeds), or, run on its own, a quick one (~90 s with cached features).
    return chapter_metrics("fdt", tmp_path_factory.mktemp("fdt"))


def _runs(metrics, head):
    return [r for r in metrics["runs"] if r["head"] == head]


@pytest.mark.slow
def test_fdt_metrics_file_is_complete(fdt_run):
    metrics = fdt_run
    assert metrics["schema"] == SCHEMA and metrics["chapter"] == "fdt" and metrics["config"] == "small"
    assert metrics["settings"]["seeds"][0] == 0 and metrics["settings"]["image_tokens"] == "patches"
    for key in ("chance", "paper", "active_at_init", "codebook_usage"):
        assert key in metrics["extra"], key
    findings = metrics["findings"]
    for key in ("fdt_unseen_acc1", "pooled_unseen_acc1", "sparsemax_weights_as_features_acc1",
                "softmax_weights_as_features_acc1", "fdt_active_codes_image", "fdt_codes_ever_active",
                "zero_padding_unseen_acc1", "temperature_1000_active_codes_image", "paper_formula_active_codes_image",
                "fdt_fashion-mnist_acc1", "pooled_fashion-mnist_acc1", "init_active_fraction_paper_size",
                "init_active_fraction_paper_size_random_inputs", "init_active_fraction_this_config"):
        assert findings.get(key) is not None and not math.isnan(findings[key]), key
    heads = {row["head"] for row in metrics["runs"]}
    assert heads == {"FDT", "pooled", "softmax", "temperature 1000", "softmax at 1000", "zero padding", "paper formula"}
    assert metrics["extra"]["paper"]["weights_as_features"] == {"sparsemax": 32.4, "softmax": 5.2}
    assert metrics["extra"]["paper"]["zs_average_15M"] == {"CLIP": 41.3, "CLIP+FDT": 45.9}
    claims = {c["id"]: c for c in metrics["claims"]}
    assert set(claims) == {"fdt_beats_pooled", "sparsemax_beats_softmax_as_features", "sparsemax_beats_softmax",
                           "fdt_above_chance"}
    assert all(c["verdict"] in VERDICTS for c in claims.values())
    assert claims["sparsemax_beats_softmax_as_features"]["paper_value"] == "32.4 vs 5.2"
    assert "Table 8" in claims["sparsemax_beats_softmax_as_features"]["reference"]
    assert "Table 2" in claims["fdt_beats_pooled"]["reference"]


@pytest.mark.slow
def test_fdt_and_baseline_transfer_to_unseen_concepts(fdt_run):
    findings, chance = fdt_run["findings"], fdt_run["extra"]["chance"]["emoji-unseen-google"]
    assert abs(chance - 1 / 381) < 1e-9
    # Both heads transfer to concepts they never saw: far above chance (381 classes).
    assert findings["fdt_unseen_acc1"] > 5 * chance
    assert findings["pooled_unseen_acc1"] > 20 * chance
    # On frozen features and 1,335 pairs the pooled head is ahead (recorded: 9.2 % vs 3.4 % over three seeds).
    assert findings["pooled_unseen_acc1"] > findings["fdt_unseen_acc1"]
    verdict = {c["id"]: c["verdict"] for c in fdt_run["claims"]}["fdt_beats_pooled"]
    assert verdict in ("not reproduced", "inconclusive")  # inconclusive only in the one-seed quick run
    # Fashion-MNIST photos are out of reach after 1,335 drawings: only check that they were scored.
    assert 0 < findings["pooled_fashion-mnist_acc1"] < 1 and 0 < findings["fdt_fashion-mnist_acc1"] < 1
    for head in ("fdt", "pooled"):
        for direction in ("image", "text"):
            r1 = findings[f"{head}_retrieval/{direction}_retrieval_recall@1"]
            r5 = findings[f"{head}_retrieval/{direction}_retrieval_recall@5"]
            assert r5 >= r1 > 0, (head, direction)


@pytest.mark.slow
def test_sparsity_and_a_comparison_of_two_heads_that_train(fdt_run):
    findings, chance = fdt_run["findings"], fdt_run["extra"]["chance"]["emoji-unseen-google"]
    num_codes = findings["num_codes"]
    # At initialisation: the paper's 16,384 x 512 head at the official temperature keeps a minority of its codes
    # on (recorded: 23 % on this chapter's features, 29 % on random inputs of the official widths); the 256-code
    # head at the scaled temperature about as many (21 %); at the unscaled official temperature all of them.
    assert 0.1 < findings["init_active_fraction_paper_size"] < 0.5
    assert 0.1 < findings["init_active_fraction_paper_size_random_inputs"] < 0.5
    assert 0.1 < findings["init_active_fraction_this_config"] < 0.4
    assert findings["init_active_fraction_this_config_official_temperature"] == 1.0
    # After training, sparsemax keeps a minority on (recorded ~40 of 256); at 1000 every code stays on.
    assert 1.5 < findings["fdt_active_codes_image"] < 0.5 * num_codes
    assert 1.5 < findings["fdt_active_codes_text"] < 0.5 * num_codes
    assert findings["temperature_1000_active_codes_image"] == num_codes
    assert findings["softmax_active_codes_image"] == num_codes
    # Both heads of the sparsemax-vs-softmax comparison train (validation loss well below log(batch)); at the
    # unscaled official temperature the softmax head barely leaves guessing (its weights are nearly uniform): at
    # FDT's chosen lr 3e-3 (lib.core.recipes) its best loss stays within 0.3 of log(batch), above both that train.
    guess = math.log(128)
    assert all(r["best_val_loss"] < guess - 0.3 for r in _runs(fdt_run, "FDT") + _runs(fdt_run, "softmax"))
    assert all(guess - 0.3 < r["best_val_loss"] for r in _runs(fdt_run, "softmax at 1000"))
    assert findings["sparsemax_weights_as_features_acc1"] > 3 * chance
    assert findings["softmax_weights_as_features_acc1"] > 3 * chance
    # The paper's formula without a temperature collapses to one code per item and does not learn.
    assert findings["paper_formula_active_codes_image"] < 1.5
    assert findings["paper_formula_unseen_acc1"] < 3 * chance
    # The official zero padding: identical to masking while the sparsemax threshold is positive (it was, here).
    fdt_seed0 = next(r for r in _runs(fdt_run, "FDT") if r["seed"] == 0)
    assert abs(findings["zero_padding_unseen_acc1"] - fdt_seed0["emoji-unseen-google/acc1"]) < 2 / 381
    # Both heads use the official clamp: log scale in [3, 6], so a scale between e^3 and 100.
    assert all(math.exp(3) - 0.01 <= r["logit_scale"] <= 100 for r in fdt_run["runs"])


# --- the chapter module (fast: no models) -------------------------------------------------------------------------


def test_config_loads_and_rejects_typos():
    small, full = fdt.load_config("small"), fdt.load_config("full")
    assert len(small.seeds) >= 2 and small.train.weight_decay == 0.1 and small.vision.image_size == 112
    assert (full.fdt.num_codes, full.fdt.code_dim, full.device) == (16384, 512, "cuda")
    for cfg in (small, full):
        # The official code's choices: patch tokens only, peak lr 1e-3, betas (0.9, 0.98), log scale in [3, 6].
        assert cfg.image_tokens == "patches" and cfg.train.lr == 1e-3 and cfg.train.betas == (0.9, 0.98)
        assert cfg.fdt.log_scale_bounds == cfg.baseline.log_scale_bounds == (3.0, 6.0)
        assert cfg.baseline.image_pool == "mean"  # patches only: no CLS token to pool
        # The official temperature, 1000 at 16,384 codes, scaled with the codebook size.
        assert cfg.fdt.temperature * 16384 / cfg.fdt.num_codes == 1000.0
    assert full.train.precision == "bf16" and full.train.warmup_steps == 2500
    assert {v.name for v in small.variants} >= {"softmax", "temperature 1000", "zero padding", "paper formula"}
    with pytest.raises(ConfigError, match="projector"):
        fdt.load_config("small", {"fdt": {"projector": "mlp"}})
    with pytest.raises(ConfigError, match="changes nothing"):
        fdt.load_config("small", {"variants": [{"name": "empty"}]})
    with pytest.raises(ConfigError, match="num_codes"):
        fdt.load_config("small", {"fdt": {"num_codes": 0}})
    with pytest.raises(ConfigError, match="log_scale_bounds"):
        fdt.load_config("small", {"fdt": {"log_scale_bounds": [6.0, 3.0]}})
    with pytest.raises(ConfigError, match="image_tokens"):
        fdt.load_config("small", {"image_tokens": "cls"})
    assert fdt.load_config("small", {"fdt": {"log_scale_bounds": None}}).fdt.log_scale_bounds is None


class _Recorder(dict):
    """A stand-in for lib.core.features.Features that records which entries the chapter reads."""

    def __init__(self):
        super().__init__()
        self.read = set()

    def __getitem__(self, name):
        self.read.add(name)
        return SimpleNamespace(dim=4)


def test_feature_plan_is_exactly_what_the_chapter_reads():
    cfg = fdt.load_config("small", {"data": {"limit": 8}})
    bench = fdt.benchmark(cfg)
    plan = fdt.feature_plan(cfg, bench)
    found = _Recorder()
    feats = fdt.ChapterFeatures(cfg, found)
    for images in (bench.train, bench.val, bench.retrieval, *fdt.zero_shot_sets(cfg, bench)):
        feats.image(images)
    for pairs in (bench.train, bench.val, bench.retrieval):
        feats.captions(pairs)
    for labelled in fdt.zero_shot_sets(cfg, bench):
        feats.prompts(labelled)
    assert found.read == set(plan.names())
    assert {r.kind for r in plan} == {"image-tokens", "text-tokens"}
    assert all(r.tokens == "patches" for r in plan if r.kind == "image-tokens")
    assert [s.name for s in fdt.zero_shot_sets(cfg, bench)] == ["emoji-unseen-google", "fashion-mnist"]
    prompts = plan[f"text-tokens:{cfg.text.name}:prompts:fashion-mnist"]
    assert prompts.texts == [t.replace("{c}", c) for c in bench.zero_shot[-1].classnames
                             for t in bench.zero_shot[-1].templates]


def test_precompute_lists_the_notebooks_entries(capsys):
    from provision import precompute

    cfg = fdt.load_config("small")
    assert precompute.main(["--chapter", "fdt", "--list"]) == 0
    assert capsys.readouterr().out.split() == fdt.feature_plan(cfg, fdt.benchmark(cfg)).names()


def _toy_sequences(tmp_path, n=6, dim=12, lengths=None, seed=0):
    from lib.core.sequences import sequence_features
    from lib.core.store import FeatureStore

    g = torch.Generator().manual_seed(seed)
    lengths = lengths or [3 + i % 4 for i in range(n)]
    data = [torch.randn(k, dim, generator=g) for k in lengths]
    store = FeatureStore(tmp_path, dtype="float32")
    return sequence_features(store, {"kind": "toy", "seed": seed}, [str(i) for i in range(n)],
                             lambda rows: [lengths[i] for i in rows], lambda rows: [data[i] for i in rows],
                             shard_tokens=7, progress=False)


def test_helpers_agree_with_the_head(tmp_path):
    from lib.methods.fdt import collect_codes, embed_sequences, token_code_scores, weight_encoder

    torch.manual_seed(0)
    head = fdt.build_fdt(fdt.FDTHeadConfig(num_codes=16, code_dim=8, temperature=3.0), 12, 12, weighting="sparsemax")
    assert head.temperature == 3.0 and head.num_codes == 16 and head.criterion.log_scale_bounds == (3.0, 6.0)
    seqs = _toy_sequences(tmp_path)
    codes = collect_codes(head, "text", seqs, batch_size=4)
    x, mask = seqs.batch(range(len(seqs)))
    direct = head.codes("text", x, mask)
    torch.testing.assert_close(codes.weights, direct.weights)
    torch.testing.assert_close(codes.embedding, direct.embedding)
    assert torch.equal(codes.argmax, direct.argmax) and (codes.argmax < torch.as_tensor(seqs.lengths)[:, None]).all()
    # The relevance of a code is the max over real tokens of its per-token scores.
    scores = token_code_scores(head, "text", x, mask, list(range(16)))
    torch.testing.assert_close(torch.nan_to_num(scores, nan=-torch.inf).amax(1), direct.relevance)
    assert scores[~mask].isnan().all()
    # Weights as features: unit vectors, zero where sparsemax switched a code off.
    w = embed_sequences(weight_encoder(head, "text"), seqs, batch_size=4)
    torch.testing.assert_close(w.norm(dim=-1), torch.ones(len(seqs)))
    assert torch.equal(w > 0, codes.weights > 0)


def test_zero_shot_and_retrieval_helpers(tmp_path):
    torch.manual_seed(0)
    head = fdt.build_pooled(fdt.PooledHeadConfig(embed_dim=8), 12, 12)
    images, prompts = _toy_sequences(tmp_path / "i", seed=1), _toy_sequences(tmp_path / "t", seed=2)
    labelled = SimpleNamespace(name="toy", classnames=[f"c{i}" for i in range(6)], templates=["{c}"],
                               labels=list(range(6)))
    found = fdt.zero_shot_metrics(head.encode_image, head.encode_text, images, prompts, labelled, batch_size=4)
    assert set(found) == {"acc1", "acc5", "mean_per_class_recall"} and found["acc5"] >= found["acc1"]
    # Row i of the images pairs with row i of the texts; recall can only grow with K.
    r = fdt.retrieval(head.encode_image, head.encode_text, images, prompts, batch_size=4)
    assert r["image_retrieval_recall@5"] >= r["image_retrieval_recall@1"]
    with pytest.raises(ValueError, match="prompt features for the 12 prompts"):
        fdt.zero_shot_metrics(head.encode_image, head.encode_text, images, prompts,
                              SimpleNamespace(**{**vars(labelled), "templates": ["{c}", "a {c}"]}))


def test_active_codes_at_init_scale_with_the_codebook(tmp_path):
    """The probe's rows: sparsity is decided by the relevance spread in units of 1/K."""
    seqs = _toy_sequences(tmp_path, n=8, dim=12, lengths=[5] * 8)
    cfg = fdt.load_config("small", {"fdt": {"num_codes": 64, "code_dim": 16, "temperature": 1000 * 64 / 16384},
                                    "init_probe": [16384, 32], "init_probe_items": 8})
    feats = SimpleNamespace(image=lambda s: seqs, captions=lambda s: seqs, dims=lambda b: (12, 12))
    bench = SimpleNamespace(retrieval=list(range(8)))
    rows = {(r["probe"], r["modality"]): r for r in fdt.active_codes_at_init(cfg, bench, feats)}
    assert len(rows) == 8
    assert rows[("this config, official temperature", "image")]["active fraction"] == 1.0
    fractions = [rows[(probe, "image")]["active fraction"] for probe in ("this config", "paper size",
                                                                           "paper size, random inputs")]
    assert all(0.05 < f < 0.6 for f in fractions) and max(fractions) < 1.5 * min(fractions), fractions
    assert rows[("paper size", "image")]["codebook"] == "16384 x 32"
    out = fdt.findings(cfg, SimpleNamespace(zero_shot=[SimpleNamespace(name="x", classnames=["a", "b"])]),
                       Runs(), list(rows.values()))
    assert out["init_active_fraction_this_config_official_temperature"] == 1.0


def test_claims_follow_the_one_rule():
    cfg = fdt.load_config("small")
    bench = SimpleNamespace(zero_shot=[SimpleNamespace(name="set", classnames=[str(i) for i in range(100)])])
    cfg = fdt.load_config("small", {"data": {"zero_shot": []}})
    runs = Runs()
    for seed in range(3):
        runs.add(head="FDT", seed=seed,
                 **{"set/acc1": 0.30 + 0.01 * seed, "weights_as_features/acc1": 0.20 + 0.01 * seed})
        runs.add(head="pooled", seed=seed, **{"set/acc1": 0.10 + 0.01 * seed})
        runs.add(head="softmax", seed=seed, **{"set/acc1": (0.31, 0.29, 0.33)[seed],  # per-seed gaps of both signs
                                               "weights_as_features/acc1": 0.05 + 0.01 * seed})
    verdicts = {c.id: c.verdict for c in fdt.claims(cfg, bench, runs)}
    assert verdicts == {"fdt_beats_pooled": "reproduced", "sparsemax_beats_softmax_as_features": "reproduced",
                        "sparsemax_beats_softmax": "inconclusive", "fdt_above_chance": "reproduced"}
    one_seed = Runs(r for r in runs if r["seed"] == 0)
    assert {c.verdict for c in fdt.claims(cfg, bench, one_seed)} == {"inconclusive"}


def test_caltech_photographs_decide_the_paper_claims_and_the_drawings_become_the_books_own():
    """One paper claim, one verdict: with Caltech-101 in the runs, FDT vs pooled and sparsemax vs softmax are decided
    on the photographs (their statement says so) and the drawings' comparisons are the book's own questions."""
    bench = SimpleNamespace(zero_shot=[SimpleNamespace(name="set", classnames=[str(i) for i in range(100)])])
    cfg = fdt.load_config("small", {"data": {"zero_shot": []}})
    runs = Runs()
    for seed in range(4):
        runs.add(head="FDT", seed=seed, **{"set/acc1": 0.30 + 0.01 * seed, "caltech/acc1": 0.20 - 0.01 * seed,
                                           "weights_as_features/acc1": 0.2})
        runs.add(head="pooled", seed=seed, **{"set/acc1": 0.10 + 0.01 * seed, "caltech/acc1": 0.40 - 0.01 * seed})
        runs.add(head="softmax", seed=seed, **{"set/acc1": 0.1 + 0.01 * seed, "caltech/acc1": 0.1 - 0.01 * seed,
                                               "weights_as_features/acc1": 0.1})
    claims = {c.id: c for c in fdt.claims(cfg, bench, runs)}
    assert set(claims) == {"fdt_beats_pooled", "fdt_beats_pooled_drawings", "sparsemax_beats_softmax",
                           "sparsemax_beats_softmax_drawings", "sparsemax_beats_softmax_as_features",
                           "fdt_above_chance"}
    assert claims["fdt_beats_pooled"].verdict == "not reproduced" and "Caltech" in claims["fdt_beats_pooled"].statement
    assert claims["fdt_beats_pooled_drawings"].verdict == "reproduced"
    assert claims["sparsemax_beats_softmax"].verdict == "reproduced"
    paper = [c for c in claims.values() if c.origin == "paper"]
    assert {c.id for c in paper} == {"fdt_beats_pooled", "sparsemax_beats_softmax",
                                     "sparsemax_beats_softmax_as_features"}
    assert all(claims[i].origin == "book" and claims[i].paper_pair is None
               for i in ("fdt_beats_pooled_drawings", "sparsemax_beats_softmax_drawings"))


def test_method_diagram_reads_the_heads_shapes(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    images, texts = _toy_sequences(tmp_path / "i", lengths=[9] * 6), _toy_sequences(tmp_path / "t", seed=3)
    torch.manual_seed(0)
    head = fdt.build_fdt(fdt.FDTHeadConfig(num_codes=32, code_dim=8, temperature=2.0), 12, 12)
    fig = fdt.method_diagram(head, images, texts, item=1)
    text = "\n".join(t.get_text() for t in fig.axes[0].texts)
    active = int(head.codes("image", *images.batch([1])).active()[0])
    for expected in ("shared codebook C\n32 × 8", "9 patches\n× 12", "queries 9 × 8", "9 × 32 logits",
                     f"{active} of 32", "embedding: 8", f"{int(texts.lengths[1])} word pieces", "÷ √8 ÷ 2"):
        assert expected in text, expected
    plt.close(fig)
