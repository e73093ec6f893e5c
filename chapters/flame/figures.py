"""The FLAME chapter's figures and tables: the facet attention mask, decoupled vs separate passes, the speed
table, top-1 by language. See notebooks/flame.py, section "Facet-decoupled attention".
"""
from __future__ import annotations

import dataclasses
import json

import torch
import torch.nn.functional as F

from chapters.flame.config import Config
from chapters.flame.data import short
from lib.core import features
from lib.core.facets import decoupled_inputs
from lib.core.results import Runs


def _gap(a: torch.Tensor, b: torch.Tensor) -> dict:
    d = a - b
    return {"max |difference|": float(d.abs().max()), "largest |value|": float(a.abs().max()),
            "relative L2 (worst row)": float((d.norm(dim=-1) / a.norm(dim=-1).clamp_min(1e-12)).max()),
            "min cosine": float(F.cosine_similarity(a.flatten(0, -2), b.flatten(0, -2), dim=-1).min())}


@torch.no_grad()
def equivalence_table(cfg: Config, captions: list[str], device: str = "cpu"):
    """Facet-decoupled attention against K separate passes over ``prefix + suffix_k``, in float32 (where the two
    must agree to float rounding) and, when the run computes in a lower precision, in that precision beside the
    precision's own spread: two separate passes that differ only in their batch size. See notebooks/flame.py,
    section "Facet-decoupled attention"."""
    import pandas as pd

    from lib.core.precision import resolve_dtype

    dtype = resolve_dtype(cfg.text.dtype) if cfg.text.dtype == "auto" else cfg.text.dtype
    rows = []
    for precision in dict.fromkeys(["float32", dtype]):
        text = dataclasses.replace(cfg.text, dtype=precision)
        encoder = features.ENCODERS.get(text, device)
        decoupled = encoder.encode(captions, method="decoupled", progress=False)
        separate = encoder.encode(captions, method="separate", progress=False)
        rows.append({"precision": precision, "comparison": "decoupled vs separate passes", **_gap(decoupled, separate)})
        if precision != "float32":
            one = features.ENCODERS.get(dataclasses.replace(text, batch_size=1), device)
            rows.append({"precision": precision, "comparison": f"separate passes, batch {text.batch_size} vs batch 1",
                         **_gap(separate, one.encode(captions, method="separate", progress=False))})
    return pd.DataFrame(rows).set_index(["precision", "comparison"])


def facet_mask_figure(encoder, caption: str):
    """FLAME's facet-decoupled attention, drawn from the very inputs ``lib.core.facets`` builds for one caption
    (:func:`lib.core.facets.decoupled_inputs` on the encoder's own tokens): which key (column) each query
    (row) may see, coloured by the key's segment, the facets' read-out tokens, and the position ids."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    prefix = encoder.tokenize_prefixes([caption])[0]
    inputs = decoupled_inputs([prefix], encoder.suffix_ids, pad_id=encoder.tokenizer.pad_token_id,
                              positions=encoder.positions)
    visible = inputs["mask"][0, 0] == 0
    bounds = [0, len(prefix)] + [len(prefix) + sum(map(len, encoder.suffix_ids[: i + 1]))
                                 for i in range(len(encoder.suffix_ids))]
    segment = torch.zeros(bounds[-1], dtype=torch.long)
    for s in range(len(bounds) - 1):
        segment[bounds[s]:bounds[s + 1]] = s + 1
    colours = ["white", "#9aa5b1", *plt.get_cmap("tab10").colors[: len(encoder.suffix_ids)]]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.2, 8.2), height_ratios=[5, 1.2], sharex=True)
    top.grid(False)
    top.imshow(torch.where(visible, segment[None, :], 0).numpy(), cmap=ListedColormap(colours), interpolation="nearest",
               vmin=0, vmax=len(colours) - 1)
    finals = inputs["final"].tolist()
    top.scatter(finals, finals, marker="*", s=120, color="black", zorder=3, label="read-out token (one per facet)")
    names = ["caption prompt", *[f"facet {i + 1}: " + (f if len(f) < 30 else f[:f.rfind(" ", 0, 28)] + " …")
                                 for i, f in enumerate(encoder.facets)]]
    middles = [(bounds[s] + bounds[s + 1] - 1) / 2 for s in range(len(bounds) - 1)]
    top.set_yticks(middles, names)
    top.set(ylabel="query token", title=f"One pass, {len(encoder.facets)} facets of \"{caption[:40]}"
            f"{'…' if len(caption) > 40 else ''}\" ({len(prefix)} + {bounds[-1] - len(prefix)} tokens)")
    top.legend(loc="lower left", fontsize=9)
    positions = inputs["position_ids"][0]
    for s in range(len(bounds) - 1):
        cols = torch.arange(bounds[s], bounds[s + 1])
        bottom.plot(cols, positions[cols], color=colours[s + 1], lw=2.5)
    bottom.set(xlabel="key token (column in the one sequence)", ylabel="position id")
    for axis in (top, bottom):
        for b in bounds[1:-1]:
            axis.axvline(b - 0.5, color="black", lw=0.6, alpha=0.5)
    fig.tight_layout()
    return fig


def speed_table(path):
    """``bench/results/facets.json`` (written by ``bench/facets.py``) as a table, and the file's contents."""
    import pandas as pd

    speed = json.loads(path.read_text())
    table = pd.DataFrame([{
        "model": short(r["model"]), "captions x facets": f"{r['captions']} x {r['facets']}",
        **{f"{m} emb/s": round(r["embeddings_per_s"][m], 1) for m in ("decoupled", "separate", "stacked")},
        "speed-up vs K passes": round(r["speedup_vs_separate"], 2),
        "speed-up vs K-times batch": round(r["speedup_vs_stacked"], 2),
        "max |diff| vs separate": f"{r['max_abs_difference_vs_separate']:.1e}",
        "token positions, separate / decoupled": round(r["token_slots"]["separate"] / r["token_slots"]["decoupled"], 2),
    } for r in speed["results"]])
    return speed, table


def language_bars(runs: Runs, labels: dict[str, str], chance: float, classes: int, xlabel: str, title: str):
    """Top-1 by language, one bar per method (mean ± sd over seeds), with chance: the small config's CLDR labels
    and the medium config's Tux Paint sentences are drawn alike. Returns the table of means ± sd per method."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    from chapters import notebook

    long_form = runs.frame().melt(id_vars=["method", "seed"], value_vars=list(labels), var_name="language",
                                  value_name="top-1").replace({"language": labels})
    fig, axis = plt.subplots(figsize=(9, 3.4))
    sns.barplot(data=long_form, x="language", y="top-1", hue="method", errorbar="sd", ax=axis)
    notebook.chance_line(axis, chance)
    notebook.percent_axis(axis, "y")
    axis.set(xlabel=xlabel, ylabel=f"top-1 among {classes}", title=title)
    axis.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1))
    plt.tight_layout()
    return runs.table(list(labels), by=["method"], labels=labels).set_index("method")
