"""The Three Towers method diagram, drawn from a built model: every box, parameter count and loss term is read
from a :class:`lib.methods.three_towers.ThreeTowers`. See notebooks/three_towers.py, section "The three towers".
"""
from __future__ import annotations

from lib.methods.three_towers import ThreeTowers


def _count(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.1f}k" if n >= 1e3 else str(n)


def diagram(method: ThreeTowers, third_name: str = "p", ax=None):
    """Draw the method as built: its towers, heads and loss terms, each box saying whether it trains
    (and how many parameters) or is frozen. Everything is read from ``method``; ``third_name`` labels p."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    if ax is None:
        _, ax = plt.subplots(figsize=(10.5, 4.4))
    counts, at, heads = method.parameter_counts(), {}, hasattr(method, "f_h")

    def box(name, x, y, text, frozen=False, dropped=False):
        style = dict(boxstyle="round,pad=0.08", linewidth=1.4, linestyle="--" if dropped else "-", zorder=2,
                     facecolor="#e0e0e0" if frozen else "#cfe3f7", edgecolor="#555" if frozen else "#1f5f99")
        ax.add_patch(FancyBboxPatch((x - 0.9, y - 0.32), 1.8, 0.64, **style))
        ax.text(x, y, text, ha="center", va="center", fontsize=9.5, zorder=3)
        at[name] = (x, y)

    def arrow(a, b):
        (x0, y0), (x1, y1) = at[a], at[b]
        ax.annotate("", xy=(x1 - 0.93, y1), xytext=(x0 + 0.93, y0),
                    arrowprops=dict(arrowstyle="->", color="#444", lw=1.1), zorder=1)

    def trained(name):
        return f"trained · {_count(counts[name][0])} params"

    box("I", 0.95, 4.15, "image I (pixels)", frozen=True)
    box("T", 0.95, 1.0, "text T (word pieces)", frozen=True)
    if hasattr(method, "f"):
        box("f", 3.1, 3.4, f"f: image tower, L2-normed\n{trained('f')}")
        arrow("I", "f")
    if hasattr(method, "h"):
        box("p", 3.1, 4.9, f"p: {third_name.split('/')[-1]}\nfrozen · cached features", frozen=True)
        box("h", 5.3, 4.9, f"h = linear(p(I))\n{trained('h')}", dropped=method.variant == "3t")
        arrow("I", "p")
        arrow("p", "h")
    box("g", 3.1, 1.0, f"g: text tower, L2-normed\n{trained('g')}")
    arrow("T", "g")
    if heads:
        for name, y, source in (("h_f", 4.9, "h"), ("f_h", 3.4, "f"), ("h_g", 2.2, "h"), ("g_h", 1.0, "g")):
            box(name, 7.5, y, f"{name} = norm(linear(·))\n{trained(name)}", dropped=True)
            arrow(source, name)
    spots = {"fg": (5.3, 2.2, "f", "g", "f↔g"), "hg": (9.5, 2.8, "h", "g", "h↔g"),
             "fh": (9.5, 4.15, "f_h", "h_f", "f_h↔h_f") if heads else (9.5, 4.15, "f", "h", "f↔h"),
             "gh": (9.5, 1.6, "g_h", "h_g", "g_h↔h_g") if heads else (9.5, 1.6, "g", "h", "g↔h")}
    terms = method.terms if method.variant == "3t" else (("fg",) if method.variant == "scratch" else ("hg",))
    for term in terms:
        x, y, a, b, label = spots[term]
        ax.add_patch(plt.Circle((x, y), 0.42, facecolor="#fde8c8", edgecolor="#b36b00", lw=1.4, zorder=2))
        ax.text(x, y, label, ha="center", va="center", fontsize=9, zorder=3)
        for end in (a, b):
            ax.plot([at[end][0] + 0.93, x - 0.42], [at[end][1], y], color="#b36b00", lw=1.0, zorder=1)
    tau = "learned" if counts["criterion"][0] else "fixed"
    ax.set_title(f"{method.variant}{' (headless)' if method.headless else ''}: {method.formula()}, one shared "
                 f"{tau} temperature" + ("; dashed: discarded after training" if method.variant == "3t" else ""),
                 fontsize=10)
    ax.set(xlim=(0, 10.1), ylim=(0.5, 5.4))
    ax.axis("off")
    return ax
