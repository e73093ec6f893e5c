"""FDT's method diagram, drawn from a real head: every shape and count in it is read from one forward pass.

See notebooks/fdt.py, section "The FDT head".
"""
from __future__ import annotations

import torch

from lib.core.sequences import SequenceFeatures
from lib.methods.fdt import FDTHead


@torch.no_grad()
def method_diagram(head: FDTHead, image_seqs: SequenceFeatures, text_seqs: SequenceFeatures, item: int = 0):
    """FDT's codebook flow drawn from a real head run on one item: tokens -> projector -> logits against
    the shared codebook -> max over tokens -> sparsemax -> weighted sum of the codes -> loss. Every shape
    and count in the figure is read from the tensors of that forward pass. Returns the figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    head.eval()
    fig, axis = plt.subplots(figsize=(10.5, 3.7))
    axis.set(xlim=(0, 12.6), ylim=(0, 4.4))
    axis.axis("off")

    def box(x, y, text, colour, w=1.8, h=0.9):
        axis.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.05", fc=colour, ec="0.3", lw=1))
        axis.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=9.5)
        return x, y, w, h

    def arrow(start, end):
        axis.annotate("", xy=end, xytext=start, arrowprops=dict(arrowstyle="->", color="0.25", lw=1.2))

    projector = "LN-Linear-GELU-\nLN-Linear" if head.projector_kind == "ln_mlp" else "Linear + GELU"
    scale = f"÷ √{head.code_dim} ÷ {head.temperature:g}" if head.scaled_dot else f"÷ {head.temperature:g}"
    cx, cy, cw, ch = box(5.3, 1.75, f"shared codebook C\n{head.num_codes} × {head.code_dim}", "#f6d8a8", w=2.0)
    for modality, seqs, y, colour in (("image", image_seqs, 3.3, "#cfe2f3"), ("text", text_seqs, 0.2, "#d9ead3")):
        x, mask = seqs.batch([item])
        q = (head.image_projector if modality == "image" else head.text_projector)(x.to(head.codebook.dtype))
        codes = head.codes(modality, x, mask)
        tokens, what = int(mask.sum()), ("patches" if modality == "image" else "word pieces")
        boxes = [box(0.05, y, f"{tokens} {what}\n× {x.shape[-1]} (frozen)", colour),
                 box(2.1, y, f"projector\n{projector}\nqueries {q.shape[1]} × {q.shape[2]}", colour),
                 box(4.15, y, f"⟨q, c⟩ {scale}\n{tokens} × {head.num_codes} logits", colour, w=2.0),
                 box(6.4, y, f"max over {what}\nrelevance r: {codes.relevance.shape[-1]}", colour),
                 box(8.45, y, f"{head.weighting}(r)\n{int(codes.active()[0])} of {head.num_codes}\ncodes non-zero",
                     colour),
                 box(10.5, y, f"w @ C, L2-normalised\nembedding: {codes.embedding.shape[-1]}", colour, w=2.0)]
        for (xa, ya, wa, ha), (xb, yb, _, hb) in zip(boxes, boxes[1:]):
            arrow((xa + wa, ya + ha / 2), (xb, yb + hb / 2))
        edge, far, loss = (cy + ch, y, 2.5) if modality == "image" else (cy, y + 0.9, 1.9)
        arrow((cx + cw / 2, edge), (boxes[2][0] + boxes[2][2] / 2, far))
        arrow((cx + cw / 2, edge), (boxes[5][0] + 0.4, far))
        arrow((11.5, far), (11.5, loss))
    axis.text(11.5, 2.2, "symmetric InfoNCE\n(image ↔ caption)", ha="center", va="center", fontsize=9,
              bbox={"boxstyle": "round", "fc": "white", "ec": "0.5"})
    axis.set_title("FDT on one held-out pair: every shape and count read from this chapter's head", fontsize=10)
    return fig
