"""Zero-shot classification and retrieval metrics, following CLIP_benchmark's conventions.

Why to the letter: the papers' headline numbers come from CLIP_benchmark, and small choices (template averaging,
"any" or "all" positives in recall@5, mean-per-class recall or accuracy) move results by points.
See notebooks/sharelock.py, section
"Zero-shot evaluation" (retrieval is measured there too).
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.nn.functional as F

__all__ = [
    "zero_shot_classifier",
    "accuracy",
    "mean_per_class_recall",
    "classification_metrics",
    "retrieval_metrics",
    "prompt_texts",
    "zero_shot",
    "retrieval",
]


@torch.no_grad()
def zero_shot_classifier(
    encode_text: Callable[[list[str]], torch.Tensor],
    classnames: Sequence[str],
    templates: Sequence[str],
) -> torch.Tensor:
    """Class prototypes ``(C, D)`` from prompt templates ("prompt ensembling", CLIP section 3.1.4).

    Each template is filled with the class name (``{c}``), embedded and L2-normalised; the mean is renormalised, as
    CLIP_benchmark does. All ``C * T`` texts go to ``encode_text`` in one call, class-major."""
    classnames = list(classnames)
    templates = list(templates)
    if not classnames or not templates:
        raise ValueError("zero_shot_classifier needs at least one class name and one template")
    missing = [t for t in templates if "{c}" not in t]
    if missing:
        raise ValueError(f"every template needs a '{{c}}' placeholder for the class name; these lack it: {missing}")
    texts = [t.replace("{c}", c) for c in classnames for t in templates]
    emb = encode_text(texts)
    if not isinstance(emb, torch.Tensor) or emb.ndim != 2 or emb.shape[0] != len(texts):
        shape = tuple(emb.shape) if isinstance(emb, torch.Tensor) else type(emb).__name__
        raise ValueError(f"encode_text must return a ({len(texts)}, D) tensor for {len(texts)} texts, got {shape}")
    emb = F.normalize(emb.float(), dim=-1).reshape(len(classnames), len(templates), -1)
    return F.normalize(emb.mean(dim=1), dim=-1)


def _check_logits_labels(logits: torch.Tensor, labels: torch.Tensor, groups: Sequence[int] | None = None) -> None:
    if logits.ndim != 2 or labels.ndim != 1 or logits.shape[0] != labels.shape[0]:
        raise ValueError(
            f"expected logits (N, C) and labels (N,), got {tuple(logits.shape)} and {tuple(labels.shape)}"
        )
    if labels.numel() == 0:
        raise ValueError("no samples to evaluate")
    if groups is not None and len(groups) != logits.shape[1]:
        raise ValueError(f"groups must give one group id per class: {len(groups)} ids for {logits.shape[1]} classes")


def _hits(pred: torch.Tensor, labels: torch.Tensor, groups: Sequence[int] | None) -> torch.Tensor:
    """``pred`` (N, k) classes equal to the label, or in its group: ``groups[c]`` is class c's synonym group, so a
    test set whose names include synonyms ("ant", "ants") does not count the right answer as an error."""
    if groups is None:
        return pred == labels[:, None]
    groups = torch.as_tensor(list(groups), dtype=torch.long, device=pred.device)
    return groups[pred] == groups[labels][:, None]


@torch.no_grad()
def accuracy(logits: torch.Tensor, labels: torch.Tensor, topk: Sequence[int] = (1, 5),
             groups: Sequence[int] | None = None) -> dict[str, float]:
    """Top-k accuracy under key ``f"acc{k}"``; k is clipped to the number of classes, as CLIP_benchmark does.
    With ``groups`` a class of the true class's group counts as correct (``corpora.synonyms``)."""
    _check_logits_labels(logits, labels, groups)
    labels = labels.to(logits.device)
    num_classes = logits.shape[1]
    hit = _hits(logits.topk(min(max(topk), num_classes), dim=1).indices, labels, groups)
    return {f"acc{k}": float(hit[:, : min(k, num_classes)].any(dim=1).float().mean()) for k in topk}


@torch.no_grad()
def mean_per_class_recall(logits: torch.Tensor, labels: torch.Tensor, groups: Sequence[int] | None = None) -> float:
    """Mean over the classes present in ``labels`` of each class's top-1 recall (``groups``: as :func:`accuracy`).

    CLIP_benchmark's "mean_per_class_recall" and ViTeRB's score: every class weighs the same, not every image."""
    _check_logits_labels(logits, labels, groups)
    labels = labels.to(logits.device)
    hit = _hits(logits.argmax(dim=1, keepdim=True), labels, groups)[:, 0]
    classes, counts = labels.unique(return_counts=True)
    correct = torch.zeros_like(counts).index_add_(0, torch.searchsorted(classes, labels), hit.to(counts.dtype))
    return float((correct.double() / counts.double()).mean())


@torch.no_grad()
def classification_metrics(
    image_emb: torch.Tensor, classifier: torch.Tensor, labels: torch.Tensor, groups: Sequence[int] | None = None
) -> dict[str, float]:
    """acc1, acc5 and mean_per_class_recall of ``image_emb @ classifier.T``.

    ``classifier`` is the ``(C, D)`` output of :func:`zero_shot_classifier`; ``image_emb`` the
    ``(N, D)`` (normalised) image embeddings. With ``groups`` (synonym groups, :func:`accuracy`) the three
    count a synonym of the true class as correct, and the plain scores are kept as ``*_unmerged``.
    See notebooks/sharelock.py, section "Zero-shot evaluation".
    """
    if image_emb.ndim != 2 or classifier.ndim != 2 or image_emb.shape[1] != classifier.shape[1]:
        raise ValueError(
            f"expected image_emb (N, D) and classifier (C, D), got {tuple(image_emb.shape)} and "
            f"{tuple(classifier.shape)}"
        )
    logits = image_emb.float() @ classifier.float().to(image_emb.device).T
    out = {**accuracy(logits, labels, (1, 5), groups),
           "mean_per_class_recall": mean_per_class_recall(logits, labels, groups)}
    if groups is not None:
        plain = {**accuracy(logits, labels), "mean_per_class_recall": mean_per_class_recall(logits, labels)}
        out.update({f"{k}_unmerged": v for k, v in plain.items()})
    return out


@torch.no_grad()
def retrieval_metrics(
    image_emb: torch.Tensor,
    text_emb: torch.Tensor,
    text_to_image: torch.Tensor,
    ks: Sequence[int] = (1, 5, 10),
    chunk_size: int | None = None,
) -> dict[str, float]:
    """Recall@K for retrieval in both directions, with one or more texts per image (CLIP_benchmark's definitions).

    ``text_to_image[t]`` is the index of text t's image. ``image_retrieval_recall@k``: fraction of *texts* whose image
    is among the k nearest images; ``text_retrieval_recall@k``: fraction of *images* with **any** of their texts among
    the k nearest texts. Images without text are left out; k is clipped; scores are computed in chunks.
    """
    if image_emb.ndim != 2 or text_emb.ndim != 2 or image_emb.shape[1] != text_emb.shape[1]:
        raise ValueError(
            f"expected image_emb (I, D) and text_emb (T, D), got {tuple(image_emb.shape)} and {tuple(text_emb.shape)}"
        )
    n_img, n_txt = image_emb.shape[0], text_emb.shape[0]
    device = image_emb.device
    text_to_image = torch.as_tensor(text_to_image, dtype=torch.long).to(device)
    if text_to_image.shape != (n_txt,):
        raise ValueError(f"text_to_image must have one entry per text ({n_txt}), "
                         f"got shape {tuple(text_to_image.shape)}")
    if n_txt and (text_to_image.min() < 0 or text_to_image.max() >= n_img):
        raise ValueError(f"text_to_image must index images in [0, {n_img}), got values outside")
    if n_img == 0 or n_txt == 0:
        raise ValueError("retrieval needs at least one image and one text")
    image_emb = image_emb.float()
    text_emb = text_emb.float().to(device)

    def chunk_rows(n_cols: int) -> int:
        return chunk_size if chunk_size is not None else max(1, 2**24 // max(1, n_cols))

    out: dict[str, float] = {}

    # text -> image: rank images for each text.
    k_img = min(max(ks), n_img)
    hits_t2i = torch.zeros(n_txt, k_img, dtype=torch.bool, device=device)
    step = chunk_rows(n_img)
    for s in range(0, n_txt, step):
        scores = text_emb[s : s + step] @ image_emb.T
        top = scores.topk(k_img, dim=1).indices
        hits_t2i[s : s + step] = top == text_to_image[s : s + step, None]
    for k in ks:
        out[f"image_retrieval_recall@{k}"] = float(hits_t2i[:, : min(k, n_img)].any(dim=1).float().mean())

    # image -> text: rank texts for each image; a hit is any text belonging to the image.
    has_text = torch.zeros(n_img, dtype=torch.bool, device=device)
    has_text[text_to_image] = True
    k_txt = min(max(ks), n_txt)
    hits_i2t = torch.zeros(n_img, k_txt, dtype=torch.bool, device=device)
    step = chunk_rows(n_txt)
    for s in range(0, n_img, step):
        scores = image_emb[s : s + step] @ text_emb.T
        top = scores.topk(k_txt, dim=1).indices
        rows = torch.arange(s, s + scores.shape[0], device=device)
        hits_i2t[s : s + step] = text_to_image[top] == rows[:, None]
    hits_i2t = hits_i2t[has_text]
    for k in ks:
        out[f"text_retrieval_recall@{k}"] = float(hits_i2t[:, : min(k, n_txt)].any(dim=1).float().mean())
    return out


def prompt_texts(labelled) -> list[str]:
    """Class-major prompt texts of a zero-shot set (every template of class 0, then class 1, ...): the
    order :func:`zero_shot_classifier` asks for, and the rows of a set's cached prompt features."""
    return [t.replace("{c}", c) for c in labelled.classnames for t in labelled.templates]


@torch.no_grad()
def zero_shot(method, image_features: torch.Tensor, prompt_features: torch.Tensor, labelled) -> dict[str, float]:
    """acc@1, acc@5 and mean per-class recall of a trained ``method`` on one labelled set, on cached features
    (synonyms merged when the set has ``groups``: :func:`classification_metrics`).

    ``method`` has ``embed_image(features)`` and ``embed_text(features)``; ``prompt_features`` are the frozen text
    features of :func:`prompt_texts` (class-major); ``labelled`` has ``classnames``, ``templates`` and ``labels``.
    See notebooks/sharelock.py, section "Zero-shot evaluation".
    """
    method.eval()
    texts = prompt_texts(labelled)
    if len(prompt_features) != len(texts):
        raise ValueError(f"{len(prompt_features)} prompt features for the {len(texts)} prompts of "
                         f"{getattr(labelled, 'name', 'this set')}: compute them from prompt_texts(labelled)")
    row = {text: i for i, text in enumerate(texts)}
    classifier = zero_shot_classifier(lambda batch: method.embed_text(prompt_features[[row[t] for t in batch]]),
                                      labelled.classnames, labelled.templates)
    return classification_metrics(method.embed_image(image_features), classifier, torch.as_tensor(labelled.labels),
                                  getattr(labelled, "groups", None))


@torch.no_grad()
def retrieval(method, image_features: torch.Tensor, caption_features: torch.Tensor) -> dict[str, float]:
    """Image <-> caption R@1/5/10 of a trained ``method`` with one caption per image (row i pairs with row i)."""
    method.eval()
    return retrieval_metrics(method.embed_image(image_features), method.embed_text(caption_features),
                             torch.arange(len(image_features)))
