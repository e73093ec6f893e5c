"""Scaling out with torchrun (book/scale_out.md): sharded precompute and DDP training with gathered negatives.

Everything here runs for real on 2 CPU processes (gloo), launched as a user would launch them,
``python -m torch.distributed.run --nproc_per_node 2`` on a free port (``--rdzv-endpoint localhost:0``):

* ``provision.precompute`` on 2 ranks writes a store that is **bit-identical** (every file's sha256, the
  manifest's shard checksums) to a single-process run of the same command, each rank computing its
  own shards (r, r+W, ...), and the notebook's own ``lib.core.features`` call then finds the entry cached;
* ``lib.nn.losses.ClipLoss`` on each rank's slice, gathered across ranks, gives the single-process loss
  and (after DDP's average) the single-process gradients of the whole batch;
* ``lib.core.train.fit`` under DDP reproduces a single-process fit with the same global batch (history,
  early stopping, final weights; tolerance 1e-5), every loss sees the global batch's negatives, both
  ranks end identical, and a batch that does not split over the ranks is refused with a message that
  names both numbers and the fix.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lib.core.store_files import sidecar_checksum
import torch

import _ddp_worker as W
from lib.core import distributed

ROOT = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).with_name("_ddp_worker.py")
LIMIT, SHARD_ROWS = 32, 8  # 4 shards per entry: 2 for each of the 2 ranks
ENTRIES = ["text:*all-MiniLM-L6-v2:emoji-train-google", "image:*efficientnet-lite0:emoji-train-google"]


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "CI": "1", "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def _run(args: list[str], nproc: int | None) -> subprocess.CompletedProcess:
    """``python -m torch.distributed.run --nproc_per_node N ARGS`` on a free port, or ``python ARGS``."""
    launcher = [] if nproc is None else ["-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
                                         "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0"]
    done = subprocess.run([sys.executable, *launcher, *args], cwd=ROOT, env=_env(), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def _precompute(store: Path, nproc: int | None) -> tuple[list[str], dict]:
    """Run the command; return rank 0's summary lines and its JSON report."""
    only = [arg for pattern in ENTRIES for arg in ("--only", pattern)]
    report = store.with_suffix(".json")
    done = _run(["-m", "provision.precompute", "--chapter", "sharelock", "--config", "small", "--limit", str(LIMIT),
                 "--shard-rows", str(SHARD_ROWS), "--store", str(store), "--report", str(report), *only], nproc)
    return [line for line in done.stdout.splitlines() if line.startswith("sharelock ")], json.loads(report.read_text())


def _files(store: Path) -> dict[str, str]:
    """sha256 of every file of the store, by relative path (lock files excluded: empty, never data)."""
    return {str(p.relative_to(store)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(store.rglob("*")) if p.is_file() and "locks" not in p.parts}


# --------------------------------------------------------------------------- sharded precompute


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("stores")
    two = _precompute(root / "two_ranks", nproc=2)
    one = _precompute(root / "one_process", nproc=None)
    return {"two": (root / "two_ranks", two), "one": (root / "one_process", one)}


@pytest.mark.slow  # real models (MiniLM, EfficientNet-Lite0); runs in CI all the same
def test_two_ranks_write_a_store_bit_identical_to_one_process(stores):
    (two, _), (one, _) = stores["two"], stores["one"]
    files_two, files_one = _files(two), _files(one)
    manifests = [p for p in files_two if p.endswith("manifest.json")]
    assert len(manifests) == len(ENTRIES)
    assert sum(p.endswith(".npy") for p in files_two) == len(ENTRIES) * LIMIT // SHARD_ROWS
    assert files_two == files_one  # same paths, same bytes
    for path in manifests:
        shards_two = [sidecar_checksum(s) for s in json.loads((two / path).read_text())["shards"]]
        shards_one = [sidecar_checksum(s) for s in json.loads((one / path).read_text())["shards"]]
        assert shards_two == shards_one and len(set(shards_two)) == LIMIT // SHARD_ROWS


@pytest.mark.slow  # real models (MiniLM, EfficientNet-Lite0); runs in CI all the same
def test_each_rank_computes_its_own_shards_and_rank_0_reports_every_entry(stores):
    (_, (lines_two, report_two)), (_, (lines_one, report_one)) = stores["two"], stores["one"]
    for entry in report_two["entries"]:  # rank r computed exactly the shards r, r+2, ... and nothing was left
        assert entry["computed_by_rank"] == [[0, 2], [1, 3]] and entry["completed_by_rank_0"] == [], entry
    assert [e["computed_by_rank"] for e in report_one["entries"]] == [[[0, 1, 2, 3]]] * len(ENTRIES)
    assert len(lines_two) == len(ENTRIES) == len(lines_one)
    for line in lines_two:
        assert f"{LIMIT} rows x" in line and "4 shards (computed per rank [2,2], 0 reused)" in line, line
    for line in lines_one:
        assert "computed per rank [4], 0 reused" in line, line
    assert [line.split(",")[0] for line in lines_two] == [line.split(",")[0] for line in lines_one]  # keys


@pytest.mark.slow  # real models (MiniLM, EfficientNet-Lite0); runs in CI all the same
def test_a_rank_computes_only_its_shards_and_leaves_the_entry_open(tmp_path):
    """Rank 1 of 2 alone (in this process): shards 1 and 3 only, no manifest until rank 0 has run. (Two
    ranks running together cannot show this: the store's shard locks would split the work anyway.)"""
    from provision import precompute
    from lib.core.features import materialise
    from lib.core.store import FeatureStore

    _, plan = precompute.load_plan("sharelock", "small", limit=LIMIT, only=ENTRIES[:1], shard_rows=SHARD_ROWS)
    store = FeatureStore(tmp_path)
    mine = materialise(store, plan, rank=1, world_size=2)
    assert [row["computed_shards"] for row in mine.report] == [[1, 3]] and mine[plan.names()[0]] is None
    assert sorted(p.name for p in tmp_path.rglob("shard-*.json")) == ["shard-00001.json", "shard-00003.json"]
    assert not list(tmp_path.rglob("manifest.json"))
    done = materialise(store, plan)  # rank 0 after the barrier
    assert done.report[0]["computed_shards"] == [0, 2] and len(done[plan.names()[0]]) == LIMIT


@pytest.mark.slow  # real models (MiniLM, EfficientNet-Lite0); runs in CI all the same
def test_the_notebooks_plan_finds_the_precomputed_entries(stores):
    """notebooks/sharelock.py materialises chapters.sharelock.feature_plan: after the precompute, a pure hit."""
    import chapters
    from lib.core.features import materialise
    from lib.core.store import FeatureStore

    module = chapters.get("sharelock")
    cfg = module.load_config("small", {"data": {"limit": LIMIT}})
    plan = module.feature_plan(cfg, module.benchmark(cfg)).select(ENTRIES)
    found = materialise(FeatureStore(stores["two"][0], verify="always"), plan)
    assert found.counts()[0] == 0 and all(len(found[name]) == LIMIT for name in plan.names())


@pytest.mark.slow  # a real model (MiniLM); runs in CI all the same
def test_two_ranks_write_fdt_token_sequences_bit_identical_to_one_process(tmp_path):
    """A token-sequence entry (FDT's caption tokens: 8 captions, 48 tokens, 12 per shard, so items straddle
    shards) on 2 ranks and in one process (in this process: no second launch), then the chapter's plan."""
    from provision import precompute
    from lib.core.features import materialise
    from lib.core.store import FeatureStore

    only = "text-tokens:*:emoji-train-google"

    def command(name: str) -> list[str]:
        return ["-m", "provision.precompute", "--chapter", "fdt", "--limit", "8", "--shard-rows", "12",
                "--only", only, "--store", str(tmp_path / name), "--report", str(tmp_path / f"{name}.json")]

    _run(command("two"), nproc=2)
    _run(command("one"), nproc=None)  # a process of its own with one thread, as each torchrun rank has
    assert _files(tmp_path / "two") == _files(tmp_path / "one")  # tokens, lengths, manifests: same bytes
    (entry,) = json.loads((tmp_path / "two.json").read_text())["entries"]
    assert (entry["rows"], entry["items"], entry["shards"]) == (48, 8, 4), entry
    assert entry["computed_by_rank"] == [[0, 2], [1, 3]] and entry["completed_by_rank_0"] == [], entry
    _, plan = precompute.load_plan("fdt", "small", limit=8, only=[only], shard_rows=12)
    found = materialise(FeatureStore(tmp_path / "two", verify="always"), plan)
    (name,) = plan.names()
    assert found.counts()[0] == 0 and found[name].key == entry["key"] and found[name].num_tokens == 48


@pytest.mark.parametrize("argv, expected", [
    (["--chapter", "sharelok"],
     "unknown chapter 'sharelok' (did you mean 'sharelock'?): provision.precompute knows sharelock,"),
    (["--chapter", "sharelock", "--config", "huge"], "'huge' is not allowed; expected one of small,"),
    (["--chapter", "sharelock", "--only", "text:nothing*"], "--only text:nothing* matches none of the"),
    (["--chapter", "sharelock", "--limit", "0"], "--limit 0: expected a positive number"),
])
def test_precompute_refuses_bad_arguments_with_one_line(argv, expected):
    from provision import precompute

    with pytest.raises(SystemExit) as exit_info:
        precompute.main(argv)
    message = str(exit_info.value.code)
    assert message.startswith("provision.precompute: ") and expected in message and "\n" not in message


# --------------------------------------------------------------------------- DDP training


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    _run([str(WORKER), str(out)], nproc=2)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def test_gathered_clip_loss_equals_the_single_process_loss_and_gradients(ranks):
    for report in ranks:
        case = report["gathered_loss"]
        assert case["loss"] == pytest.approx(case["single_loss"], rel=1e-6)
        for got, want in zip(case["grads"], case["single_grads"]):
            torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", list(W.FITS))
def test_ddp_fit_equals_single_process_fit_with_the_same_global_batch(ranks, name):
    single = W.run_fit(name)
    assert single["world_size"] == 1
    ddp = ranks[0]["fits"][name]
    assert ddp["world_size"] == 2
    assert len(ddp["history"]) == len(single["history"])
    assert (ddp["best_step"], ddp["stopped_early"]) == (single["best_step"], single["stopped_early"])
    for got, want in zip(ddp["history"], single["history"]):
        assert got["step"] == want["step"] and got["lr"] == pytest.approx(want["lr"], rel=1e-12)
        assert (got["val_loss"] is None) == (want["val_loss"] is None)
        for key in ("train_loss", "grad_norm", "val_loss"):
            if want[key] is not None:
                assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-6), (key, got["step"])
    for key, want in single["params"].items():
        torch.testing.assert_close(torch.tensor(ddp["params"][key]), torch.tensor(want), rtol=1e-5, atol=1e-6)


def test_full_batch_run_stops_early_on_both_ranks_at_once(ranks):
    """The setting is meant to trigger early stopping; both ranks took the same decisions."""
    assert ranks[0]["fits"]["full_batch"]["stopped_early"]
    for name in W.FITS:
        assert ranks[1]["fits"][name]["history"] == ranks[0]["fits"][name]["history"]
        assert ranks[1]["fits"][name]["params"] == ranks[0]["fits"][name]["params"]  # bit-identical weights


@pytest.mark.parametrize("name", list(W.FITS))
def test_each_loss_sees_the_global_batch_as_negatives(ranks, name):
    global_rows = W.FITS[name].get("micro_batch_size") or W.FITS[name]["batch_size"]
    for report in ranks:
        fit = report["fits"][name]
        assert fit["train_logit_rows"] == [global_rows]  # every training logit matrix: global x global
        assert fit["negatives"] == global_rows - 1


def test_a_batch_that_does_not_split_over_the_ranks_is_refused_with_the_fix(ranks):
    errors = ranks[0]["errors"]
    assert "batch_size 15 is not divisible by the world size 2" in errors["odd_batch"]
    assert "multiple of 2 (e.g. 14 or 16)" in errors["odd_batch"]
    assert "micro_batch_size 5" in errors["odd_micro"] and "multiple of 2" in errors["odd_micro"]


def test_batchnorm_on_cpu_warns_that_it_is_not_synchronised(ranks):
    assert any("SyncBatchNorm needs a GPU" in m for m in ranks[0]["batchnorm_warnings"])


def test_single_process_needs_no_process_group():
    x = torch.randn(3, 2, requires_grad=True)
    assert not distributed.is_distributed() and distributed.gather_with_grad(x) is x
    assert (distributed.rank(), distributed.world_size()) == (0, 1)
    assert distributed.broadcast_float(1.5) == 1.5 == distributed.mean_float(1.5)


@pytest.mark.parametrize(("asked", "local", "expected"), [
    ("cuda", 3, "cuda:3"),      # a command line's bare cuda: each rank its own GPU (a GPU refused the bare name)
    ("cuda:1", 3, "cuda:1"),    # an explicit index is kept
    ("cpu", 3, "cpu"),
])
def test_a_bare_cuda_means_the_ranks_own_gpu(asked, local, expected):
    assert distributed.rank_device(asked, local) == torch.device(expected)
