"""How many of each chapter's paired seeds its verdicts need: every claim judged again on the first k seeds only.

Why: the medium book from an empty store costs about two and a half hours on two cores, and the paired seeds are a
large part of it (README, budgets). A run is deterministic per seed, so a config with ``seeds: [0, ..., k-1]`` would
train exactly the first k of the runs already recorded (the recipe sweep runs on the first seed either way): the
verdict it would give is :data:`lib.core.results.RULE` on the first k per-seed values of each claim, which this tool
computes from ``book/metrics/<chapter>.json`` and the float32 kept run beside it. Nothing is trained.

It reads no further than that. The fewest seeds found here keep the verdicts *on these runs*; they are chosen after
seeing the data, so a fresh run at that count would decide less often than this table suggests: each row's MDE at k
seeds (80 % power, the spread measured over all seeds) says how much less.

    python -m tools.seed_budget          # one row per claim; the fewest seeds every verdict of a chapter keeps
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from lib.core.results import LEVEL, POWER, Claim, compare, t_quantile

ROOT = Path(__file__).resolve().parents[1]
METRICS = ROOT / "book" / "metrics"
CHAPTERS = ("sharelock", "viterb", "flame", "three_towers", "fdt")


def claim_on_first(record: dict, k: int) -> Claim:
    """The claim of a metrics.json ``claims`` entry, judged on the first ``k`` per-seed values of A and B."""
    cmp = record["comparison"]
    pair = record.get("paper_pair")
    return Claim(id=record["id"], statement=record["statement"], reference=record["reference"],
                 comparison=compare(cmp["a"]["values"][:k], cmp["b"]["values"][:k]), names=tuple(record["names"]),
                 expected=record.get("expected", "a"), origin=record.get("origin", "paper"),
                 paper_pair=tuple(pair) if pair else None, scale=record.get("scale", 100.0),
                 unit=record.get("unit", " %"))


def judged_by_seeds(record: dict) -> bool:
    """Whether a claim's verdict is the paired rule over seeds (a rank correlation over models is not)."""
    cmp = record.get("comparison") or {}
    values = [cmp.get(side, {}).get("values") for side in ("a", "b")]
    return ("rho" not in cmp and cmp.get("paired") is True and all(isinstance(v, list) for v in values)
            and len(values[0]) == len(values[1]) >= 2)


@dataclass(frozen=True)
class Budget:
    """One claim: its verdict on all ``seeds``, the verdicts on the first 2, 3, ... seeds (both arithmetics where a
    kept run exists), and ``fewest``: the smallest k from which every prefix of k or more seeds gives the full
    verdict in each arithmetic."""

    chapter: str
    claim: str
    seeds: int
    verdict: str
    by_seeds: dict[str, list[str]]  # arithmetic -> the verdict on the first 2..seeds seeds
    fewest: int
    mde_at_fewest: float | None  # in points: the rule's MDE at ``fewest`` seeds, the spread of all seeds
    smallest_effect: float | None  # in points: the paper's effect applied here (None: no paper pair)


def budget(chapter: str, shown: dict, kept: dict | None) -> list[Budget]:
    """:class:`Budget` for every claim of a chapter judged over seeds; ``kept`` is the other arithmetic's metrics
    (its claims are matched by id; a claim with another seed count there is judged on the shown run alone)."""
    others = {c["id"]: c for c in (kept or {}).get("claims", [])}
    out = []
    for record in shown.get("claims", []):
        if not judged_by_seeds(record):
            continue
        runs = {"shown": record}
        other = others.get(record["id"])
        if other and judged_by_seeds(other) and other["comparison"]["a"]["n"] == record["comparison"]["a"]["n"]:
            runs["kept"] = other
        n = record["comparison"]["a"]["n"]
        by_seeds = {name: [claim_on_first(r, k).verdict for k in range(2, n + 1)] for name, r in runs.items()}
        fewest = n
        while fewest > 2 and all(v[fewest - 3] == v[-1] for v in by_seeds.values()):
            fewest -= 1
        whole = claim_on_first(record, n)
        mde = whole.comparison.mde
        mde_at = None if mde is None else mde * _mde_factor(n, fewest)
        smallest = whole.smallest_effect
        out.append(Budget(chapter, record["id"], n, whole.verdict, by_seeds, fewest,
                          None if mde_at is None else whole.scale * mde_at,
                          None if smallest is None else whole.scale * smallest))
    return out


def _mde_factor(n: int, k: int) -> float:
    """The MDE at k paired seeds over the MDE at n, at the same spread of the differences: the rule's multiplier
    ``(t_{0.975} + t_{0.80})`` with k − 1 degrees of freedom over sqrt(k), against the same at n."""
    def multiplier(m: int) -> float:
        return (t_quantile(0.5 + LEVEL / 2, m - 1) + t_quantile(POWER, m - 1)) / m ** 0.5

    return multiplier(k) / multiplier(n)


def load(chapter: str, metrics_dir: Path = METRICS) -> tuple[dict, dict | None]:
    """A chapter's shown metrics and its float32 kept run (None when absent)."""
    shown = json.loads((metrics_dir / f"{chapter}.json").read_text(encoding="utf-8"))
    kept_path = metrics_dir / "float32" / f"{chapter}.json"
    kept = json.loads(kept_path.read_text(encoding="utf-8")) if kept_path.is_file() else None
    return shown, kept


def table(rows: list[Budget]) -> list[str]:
    """Markdown: one row per claim, then per chapter the fewest seeds all its verdicts keep."""
    lines = ["| chapter | claim | verdict on all seeds | seeds | fewest that keep it (both arithmetics) | "
             "MDE there (points) | paper's effect here (points) |", "|---|---|---|---|---|---|---|"]
    for b in rows:
        mde = "" if b.mde_at_fewest is None else f"{b.mde_at_fewest:.2f}"
        effect = "" if b.smallest_effect is None else f"{b.smallest_effect:.2f}"
        lines.append(f"| {b.chapter} | {b.claim} | {b.verdict} | {b.seeds} | {b.fewest} | {mde} | {effect} |")
    lines.append("")
    for chapter in dict.fromkeys(b.chapter for b in rows):
        mine = [b for b in rows if b.chapter == chapter]
        lines.append(f"- {chapter}: {max(b.fewest for b in mine)} of {mine[0].seeds} seeds keep all "
                     f"{len(mine)} verdicts judged over seeds")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--metrics", type=Path, default=METRICS, help="the folder with <chapter>.json and float32/")
    parser.add_argument("chapters", nargs="*", default=list(CHAPTERS))
    args = parser.parse_args(argv)
    rows = []
    for chapter in args.chapters:
        if not (args.metrics / f"{chapter}.json").is_file():
            raise SystemExit(f"no {args.metrics / (chapter + '.json')}: run the chapter (make book) or name another")
        rows += budget(chapter, *load(chapter, args.metrics))
    print("\n".join(table(rows)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
