"""The ShareLock method diagram, drawn from a built model (every layer and width read from it).

See notebooks/sharelock.py, section "The projection head".
"""
from __future__ import annotations

import torch

from chapters.sharelock.experiments import short
from lib.core.config import TextModelConfig, VisionModelConfig
from lib.methods.sharelock import ShareLock


# --------------------------------------------------------------------------------------------
# The method diagram, read from a built model
# --------------------------------------------------------------------------------------------
def _layer_lines(head: torch.nn.Module) -> list[str]:
    """One line per block of the text head, read from its modules (so the drawing cannot drift from the code)."""
    lines, block = [], []
    for module in (m for m in head.modules() if not any(m.children())):  # the layers, in order
        kind = type(module).__name__
        if isinstance(module, torch.nn.Linear):
            if block:
                lines.append(" → ".join(block))
            block = [f"Linear {module.in_features}→{module.out_features}"]
        elif isinstance(module, torch.nn.Dropout):
            block.append(f"Dropout {module.p:g}")
        else:
            block.append({"BatchNorm1d": "BN"}.get(kind, kind))
    if block:
        lines.append(" → ".join(block))
    return lines + ["L2 normalise"]


def method_diagram(method: ShareLock, vision: VisionModelConfig, text: TextModelConfig, ax=None):
    """Draw ShareLock as built: what is frozen and read from the feature store, what trains (with its
    parameter count and layers, read from ``method.text_head``), and the loss with its temperature.

    Grey boxes are frozen models whose outputs are computed once and cached (``lib.core.store``); blue
    boxes train. See notebooks/sharelock.py, section "The projection head".
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    if ax is None:
        fig, ax = plt.subplots(figsize=(9.8, 3.9))
        fig.subplots_adjust(left=0.01, right=0.99, bottom=0.01, top=0.9)
    trained = sum(p.numel() for p in method.parameters() if p.requires_grad)
    spots = {}

    def box(name, x, y, w, h, text, kind):
        colours = {"frozen": ("#e0e0e0", "#555"), "trained": ("#cfe3f7", "#1f5f99"),
                   "store": ("#f4f4f4", "#888"), "input": ("white", "#888")}[kind]
        ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.06", linewidth=1.3,
                                    facecolor=colours[0], edgecolor=colours[1], zorder=2,
                                    linestyle=":" if kind == "store" else "-"))
        ax.text(x, y, text, ha="center", va="center", fontsize=9, zorder=3)
        spots[name] = (x, y, w)

    def arrow(a, b):
        (x0, y0, w0), (x1, y1, w1) = spots[a], spots[b]
        ax.annotate("", xy=(x1 - w1 / 2 - 0.05, y1), xytext=(x0 + w0 / 2 + 0.05, y0),
                    arrowprops=dict(arrowstyle="->", color="#444", lw=1.1), zorder=1)

    pool = {"last_token": "last token", "mean": "mean of tokens", "cls": "[CLS]"}[text.pooling]
    box("image", 0.55, 3.0, 0.9, 0.6, "image", "input")
    box("caption", 0.55, 0.9, 0.9, 0.6, "caption", "input")
    box("vision", 2.3, 3.0, 2.2, 0.9, f"{short(vision.name)}\nfrozen", "frozen")
    box("llm", 2.3, 0.9, 2.2, 1.0, f"{short(text.name)}\nfrozen\n{pool}, layer {text.layer}", "frozen")
    box("vstore", 4.35, 3.0, 1.3, 0.7, f"feature store\n{method.image_dim}-d, once", "store")
    box("tstore", 4.35, 0.9, 1.3, 0.7, f"feature store\n{method.text_head.in_dim}-d, once", "store")
    box("norm", 6.95, 3.0, 3.3, 0.7, "L2 normalise (no image head)", "frozen")
    lines = _layer_lines(method.text_head)
    label = "ShareLock MLP" if method.kind == "mlp" else "linear head (LiT-style baseline)"
    box("head", 6.95, 0.9, 3.5, 0.55 + 0.2 * len(lines),
        f"{label}\ntrained · {trained:,} parameters\n" + "\n".join(lines), "trained")
    arrow("image", "vision")
    arrow("caption", "llm")
    arrow("vision", "vstore")
    arrow("llm", "tstore")
    arrow("vstore", "norm")
    arrow("tstore", "head")
    tau = method.criterion.temperature
    ax.add_patch(plt.Circle((9.6, 1.95), 0.45, facecolor="#fde8c8", edgecolor="#b36b00", lw=1.4, zorder=2))
    ax.text(9.6, 1.95, "CLIP\nloss", ha="center", va="center", fontsize=9, zorder=3)
    for name in ("norm", "head"):
        x, y, w = spots[name]
        ax.plot([x + w / 2 + 0.05, 9.6 - 0.45], [y, 1.95], color="#b36b00", lw=1.0, zorder=1)
    ax.set_title(f"{label}: frozen encoders run once into the store; only the text head trains "
                 f"(τ = {tau:.2g}, {'learned' if method.criterion.learnable else 'fixed'})", fontsize=10)
    ax.set(xlim=(0, 10.1), ylim=(-0.05, 3.55))
    ax.axis("off")
    return ax
