"""The distributed half of tests/test_distributed.py, run by ``torchrun --nproc_per_node 2`` on CPU (gloo).

Not a test module (no ``test_`` prefix). Each rank writes ``OUT/rank<r>.json`` with:

* ``gathered_loss``: the CLIP loss of this rank's slice of a fixed batch, gathered across ranks, and the
  gradients of the shared parameters averaged over ranks (what DDP does), next to the single-process
  loss and gradients of the whole batch computed on this rank inside ``lib.core.distributed.no_gather()``;
* ``fits``: for each setting of :data:`FITS`, ``lib.core.train.fit``'s history, final parameters, reported
  negatives and the rows of every CLIP logit matrix the loss computed;
* ``errors``: the messages of settings that must be refused (batch not divisible by the world size).

The test process runs the same fits in a single process (``run_fit`` with the same data) and compares.

    python -m torch.distributed.run --nproc_per_node 2 --standalone tests/_ddp_worker.py OUT
"""
from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

TEXT_DIM, IMAGE_DIM, N_TRAIN, N_VAL = 12, 8, 64, 24

# name -> TrainSettings fields; linear ShareLock head (no BatchNorm, no dropout), learnable temperature
FITS = {
    "full_batch": dict(steps=14, batch_size=16, lr=3e-2, warmup_steps=2, eval_every=2, patience=2, min_delta=0.3),
    "accumulated": dict(steps=6, batch_size=16, micro_batch_size=8, lr=3e-2, warmup_steps=1, eval_every=2),
}
REFUSED = {"odd_batch": dict(steps=1, batch_size=15), "odd_micro": dict(steps=1, batch_size=16, micro_batch_size=5)}


def make_data(n: int, seed: int) -> dict[str, torch.Tensor]:
    """Paired features with a learnable relation (text = image @ M + noise), fixed by ``seed``."""
    g = torch.Generator().manual_seed(seed)
    image = torch.randn(n, IMAGE_DIM, generator=g)
    mix = torch.randn(IMAGE_DIM, TEXT_DIM, generator=torch.Generator().manual_seed(99))
    text = image @ mix + 0.5 * torch.randn(n, TEXT_DIM, generator=g)
    return {"image": image, "text": text}


def build_method():
    from lib.core.config import HeadConfig, LossConfig
    from lib.methods.sharelock import ShareLock
    from lib.core.train import seed_everything

    seed_everything(0)
    return ShareLock(TEXT_DIM, IMAGE_DIM, HeadConfig(), LossConfig(temperature=0.07, learnable=True), kind="linear")


def run_fit(name: str) -> dict:
    """One fit of :data:`FITS` (single process or under torch.distributed, whichever is active)."""
    from lib.nn import losses
    from lib.core.config import TrainSettings
    from lib.core.train import fit

    logit_rows = []
    original = losses.clip_loss

    def recording(image_emb, text_emb, scale):
        logit_rows.append(image_emb.shape[0])
        return original(image_emb, text_emb, scale)

    method = build_method()
    losses.clip_loss = recording
    try:
        result = fit(method, make_data(N_TRAIN, 1), make_data(N_VAL, 2), TrainSettings(**FITS[name]), progress=False)
    finally:
        losses.clip_loss = original
    return {"history": result.history, "best_step": result.best_step, "stopped_early": result.stopped_early,
            "negatives": result.negatives_per_loss, "world_size": result.world_size,
            "train_logit_rows": sorted(set(logit_rows[:result.steps_run])),
            "params": {k: v.double().flatten().tolist() for k, v in method.state_dict().items()}}


def _gathered_loss_case(rank: int, world: int) -> dict:
    """Per-rank ClipLoss on a slice vs single-process ClipLoss on the whole batch: value and gradients."""
    from lib.core import distributed
    from lib.nn.losses import ClipLoss

    n = 8
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(n, 6, generator=g), torch.randn(n, 7, generator=g)
    torch.manual_seed(3)
    image_map, text_map = nn.Linear(6, 4), nn.Linear(7, 4)
    criterion = ClipLoss(temperature=0.1, learnable=True)
    params = [*image_map.parameters(), *text_map.parameters(), criterion.log_scale]

    def loss_and_grads(rows):
        for p in params:
            p.grad = None
        loss = criterion(F.normalize(image_map(a[rows]), dim=-1), F.normalize(text_map(b[rows]), dim=-1))
        loss.backward()
        return float(loss.detach()), [p.grad.clone() for p in params]

    size = n // world
    local_loss, local_grads = loss_and_grads(slice(rank * size, (rank + 1) * size))
    for grad in local_grads:  # DDP's average over ranks
        torch.distributed.all_reduce(grad)
        grad /= world
    with distributed.no_gather():
        single_loss, single_grads = loss_and_grads(slice(0, n))
    return {"loss": local_loss, "single_loss": single_loss,
            "grads": [x.flatten().tolist() for x in local_grads],
            "single_grads": [x.flatten().tolist() for x in single_grads]}


def _refused(name: str) -> str:
    from lib.core.config import TrainSettings
    from lib.core.train import fit

    try:
        fit(build_method(), make_data(N_TRAIN, 1), None, TrainSettings(**REFUSED[name]), progress=False)
    except ValueError as error:
        return str(error)
    return "no error"


def _batchnorm_warning() -> list[str]:
    """ShareLock's MLP head has BatchNorm: on CPU, DDP training must say that it is not synchronised."""
    from lib.core.config import HeadConfig, LossConfig
    from lib.methods.sharelock import ShareLock
    from lib.core.config import TrainSettings
    from lib.core.train import fit

    method = ShareLock(TEXT_DIM, IMAGE_DIM, HeadConfig(hidden_dim=8, num_layers=2, dropout=0.0), LossConfig())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(method, make_data(N_TRAIN, 1), None, TrainSettings(steps=1, batch_size=16, warmup_steps=0), progress=False)
    return [str(w.message) for w in caught if "BatchNorm" in str(w.message)]


def main(out: str) -> None:
    from lib.core import distributed

    torch.set_num_threads(1)
    distributed.init()
    rank, world = distributed.rank(), distributed.world_size()
    try:
        report = {"rank": rank, "world_size": world, "gathered_loss": _gathered_loss_case(rank, world),
                  "fits": {name: run_fit(name) for name in FITS},
                  "errors": {name: _refused(name) for name in REFUSED},
                  "batchnorm_warnings": _batchnorm_warning()}
    finally:
        distributed.cleanup()
    Path(out, f"rank{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1])
