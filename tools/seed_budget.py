"""How many of each chapter's paired seeds its verdicts need: every claim judged again on the first k seeds only.

Why: the medium book from an empty store costs about two and a half hours on two cores, and the paired seeds are a
large part of it (README, budgets). A run is deterministic per seed, so a config with ``seeds: [0, ..., k-1]`` would
train exactly the first k of the runs already recorded (the recipe sweep runs on the first seed either way): the
verdict it would give is :data:`lib.core.results.RULE` on the first k per-seed values of each claim, which this tool
computes from ``book/metrics/<chapter>.json`` and the kept run in the other arithmetic, where the results page
accepts it as the same experiment (:func:`tools.results_page.arithmetic_pairs`). Nothing is trained.

It reads no further than that. The fewest seeds found here keep the verdicts *on these runs*; they are chosen after
seeing the data, so a fresh run at that count would decide less often than this table suggests: each row's MDE at k
seeds (80 % power, the spread measured over all seeds) says how much less.

    python -m tools.seed_budget          # one row per claim; the fewest seeds every verdict of a chapter keeps
"""
from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path

from lib.core.results import Claim, compare
from tools.results_page import METRICS, arithmetic_pairs, load_metrics
from tools.run_notebooks import chapters as chapter_sources


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
        mde_at = dataclasses.replace(whole.comparison, pairs=fewest).mde  # the rule's MDE, fewer pairs, same spread
        smallest = whole.smallest_effect
        out.append(Budget(chapter, record["id"], n, whole.verdict, by_seeds, fewest,
                          None if mde_at is None else whole.scale * mde_at,
                          None if smallest is None else whole.scale * smallest))
    return out


def load(chapter: str, metrics_dir: Path = METRICS) -> tuple[dict, dict | None]:
    """A chapter's shown metrics and its kept run in the other arithmetic (``float32/`` or ``bfloat16/`` beside
    them), or None where there is none that :func:`tools.results_page.arithmetic_pairs` accepts: a kept run of
    another config or of a changed experiment judges other runs, and its prefixes say nothing about these."""
    shown = load_metrics(chapter, metrics_dir)
    pair = arithmetic_pairs([chapter], metrics_dir, (metrics_dir / "float32", metrics_dir / "bfloat16")).get(chapter)
    if pair is None:
        return shown, None
    return shown, pair.bfloat16 if pair.shown == "float32" else pair.float32


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
    parser.add_argument("chapters", nargs="*", default=[source.stem for source in chapter_sources()])
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
