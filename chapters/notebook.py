"""What every chapter does first: the run's environment and one figure style.

Why a module: the five chapters open with the same settings (the offline configs never touch the Hugging
Face hub; ``OMP_NUM_THREADS`` decides the torch threads on a shared machine; one legible figure style).
Written once here, a chapter cannot drift from the others. A chapter ends with
:func:`chapters.metrics.write_metrics`. See notebooks/sharelock.py, section "Configuration".
"""
from __future__ import annotations

import os
import time

__all__ = ["setup", "glue", "runtime", "percent_axis", "chance_line", "show_source", "source_text",
           "FIGURE_DPI", "OFFLINE_CONFIGS"]

FIGURE_DPI = 150  # inline figures are rendered at this resolution (and twice it on high-density screens)
OFFLINE_CONFIGS = ("small", "medium")


def setup(config: str) -> float:
    """Prepare a chapter's run of ``config``; return its start time (``time.time()``).

    * ``HF_HUB_OFFLINE``: ``1`` for the offline configs (their models are local), ``0`` for ``full``,
      unless the environment already says (a user's own setting wins);
    * torch threads: ``OMP_NUM_THREADS`` when set (CI, a shared machine), else every core;
    * figures: seaborn's whitegrid theme, text no smaller than 9 pt, rendered at :data:`FIGURE_DPI` as
      high-density PNG, so labels stay legible when the book shrinks a figure to its column;
    * one printed line: the torch threads, and what ``dtype: auto`` and ``precision: auto`` resolve to on this
      machine (:mod:`lib.core.precision`), so that a page says which formats its numbers were computed in.
    """
    import matplotlib.pyplot as plt
    import seaborn as sns
    import torch

    from lib.core.precision import cpu_bf16_units, resolve_dtype, resolve_precision

    os.environ.setdefault("HF_HUB_OFFLINE", "1" if config in OFFLINE_CONFIGS else "0")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1))
    units = ", ".join(cpu_bf16_units()) or "none"
    print(f"{torch.get_num_threads()} torch thread(s); the CPU's bfloat16 units: {units}, so `dtype: auto` computes "
          f"features in {resolve_dtype('auto')} and `precision: auto` trains in {resolve_precision('auto')}")
    sns.set_theme(style="whitegrid", context="notebook", font_scale=1.0)
    plt.rcParams.update({"figure.dpi": FIGURE_DPI, "savefig.dpi": FIGURE_DPI, "font.size": 10,
                         "axes.titlesize": 11, "axes.labelsize": 10, "xtick.labelsize": 9, "ytick.labelsize": 9,
                         "legend.fontsize": 9, "figure.autolayout": False})
    try:  # inside IPython: high-density PNGs (2x pixels at the same displayed size)
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        set_matplotlib_formats("retina")
    except ImportError:  # pragma: no cover  (plain Python: nothing is displayed inline)
        pass
    return time.time()


def glue(name: str, value, *, markdown: bool = False) -> None:
    """Make a value computed by this run available to the chapter's prose, never typed by hand.

    ``markdown=True``: ``value`` is Markdown text, pasted with ``{glue:md}`name``` inline or a
    ``{glue:md}`` directive as a block (the "Key findings" box). Outside Jupyter Book's myst-nb (a plain
    Colab kernel) this is a no-op: the numbers are still printed by the cells that compute them.
    """
    try:
        from myst_nb import glue as _glue
    except ImportError:  # pragma: no cover
        return
    if markdown:
        from IPython.display import Markdown

        value = Markdown(str(value))
    _glue(name, value, display=False)


def percent_axis(axis, which: str = "y", decimals: int = 0) -> None:
    """Show fractions on ``axis`` as percentages (tables in the book use %)."""
    from matplotlib.ticker import PercentFormatter

    target = axis.yaxis if which == "y" else axis.xaxis
    target.set_major_formatter(PercentFormatter(1.0, decimals=decimals))


def chance_line(axis, level: float, *, vertical: bool = False, label: str = "chance", **style) -> None:
    """Draw the chance level of one test set on one panel (every panel gets its own)."""
    style = {"color": "black", "ls": ":", "lw": 1.2, **style}
    (axis.axvline if vertical else axis.axhline)(level, label=label, **style)


def runtime(started: float) -> str:
    """How long this run took, in words for the chapter's opening ("48 seconds on 2 CPU threads"), and how many of
    its training runs were read back from the run cache (:mod:`lib.core.run_cache`), so a fast re-execution is
    never mistaken for the cost of training."""
    import torch

    from lib.core import run_cache

    elapsed = time.time() - started
    amount = f"{elapsed:.0f} seconds" if elapsed < 120 else f"{elapsed / 60:.0f} minutes"
    said = f"{amount} on {torch.get_num_threads()} CPU threads"
    done = run_cache.counts()
    if done["read"]:
        said += f" ({done['read']} of its {done['read'] + done['trained']} training runs read from the run cache)"
    return said


def source_text(obj, *, docstrings: bool = False) -> str:
    """The real source of a ``lib`` class or function as the library holds it, without its docstrings (the page's
    prose says what they say); read with ``inspect`` and ``ast``, so it cannot drift from the code it shows."""
    import ast
    import inspect
    import textwrap

    source = textwrap.dedent(inspect.getsource(obj))
    if docstrings:
        return source
    tree = ast.parse(source)
    lines = source.splitlines()
    drop: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):
            drop |= set(range(body[0].lineno - 1, body[0].end_lineno))
    return "\n".join(line for i, line in enumerate(lines) if i not in drop).rstrip() + "\n"


def show_source(obj, *, docstrings: bool = False):
    """Display :func:`source_text` of ``obj`` as a highlighted Python block, titled with where it lives."""
    from IPython.display import Markdown

    where = f"{obj.__module__}.{obj.__qualname__}"
    return Markdown(f"`{where}`\n\n```python\n{source_text(obj, docstrings=docstrings)}```")


def recipe_table(rows: list[dict], score: str, caption: str, unscored: str = "no score"):
    """A recipe sweep's candidates (``lib.core.recipes.choose``) as one styled table: the learning rate, the weight
    decay, the validation score in percent (named ``score``; ``unscored`` where a candidate had none, e.g. a head
    that kept its first evaluation), whether the candidate was chosen, added past the grid's edge, or chosen while
    still on the edge."""
    import pandas as pd

    lead = "lead needed (points)"  # sweep.keep_within_se: what a candidate must beat the configured recipe by
    frame = pd.DataFrame(rows).rename(columns={"weight_decay": "weight decay", "score": score,
                                               "extended": "past the grid", "at_edge": "on the edge", "lead": lead})
    frame[score] = 100 * frame[score]
    if lead in frame:
        frame[lead] = 100 * frame[lead]
    return (frame.style.hide(axis="index").format({"lr": "{:.1e}", "weight decay": "{:.0e}", score: "{:.2f}",
                                                   lead: "{:.2f}"}, na_rep=unscored)
            .set_caption(caption))
