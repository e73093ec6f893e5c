"""Tests of lib.core.evaluate (CLIP_benchmark conventions) and corpora.templates."""
import lib  # noqa: F401  (must precede open_clip)

import pytest
import torch
import torch.nn.functional as F
from open_clip.zero_shot_classifier import build_zero_shot_classifier
from open_clip.zero_shot_metadata import OPENAI_IMAGENET_TEMPLATES, SIMPLE_IMAGENET_TEMPLATES

from lib.core.evaluate import (
    accuracy,
    classification_metrics,
    mean_per_class_recall,
    retrieval_metrics,
    zero_shot_classifier,
)
from corpora.templates import EMOJI_TEMPLATES, IMAGENET_TEMPLATES, IMAGENET_TEMPLATES_7, PHOTO_TEMPLATES

# --------------------------------------------------------------------------- templates


def test_templates_equal_open_clip_lists():
    assert len(IMAGENET_TEMPLATES) == 80 == len(set(IMAGENET_TEMPLATES))
    assert IMAGENET_TEMPLATES == [t("{c}") for t in OPENAI_IMAGENET_TEMPLATES]
    assert IMAGENET_TEMPLATES_7 == [t("{c}") for t in SIMPLE_IMAGENET_TEMPLATES]
    assert IMAGENET_TEMPLATES_7[0] == "itap of a {c}." and len(IMAGENET_TEMPLATES_7) == 7
    assert set(IMAGENET_TEMPLATES_7) <= set(IMAGENET_TEMPLATES)
    assert PHOTO_TEMPLATES == IMAGENET_TEMPLATES_7
    assert len(EMOJI_TEMPLATES) >= 4
    for t in IMAGENET_TEMPLATES + EMOJI_TEMPLATES:
        assert t.count("{c}") == 1


# --------------------------------------------------------------------------- zero-shot classifier


class FakeTextEncoder:
    """Deterministic embedding per distinct text, with very different norms (so that normalising
    each template before averaging matters). Counts calls."""

    def __init__(self, dim=12):
        self.dim = dim
        self.table: dict[str, torch.Tensor] = {}
        self.calls: list[list[str]] = []

    def vector(self, text):
        if text not in self.table:
            g = torch.Generator().manual_seed(len(self.table) + 1)
            scale = 0.1 + 10.0 * torch.rand(1, generator=g)
            self.table[text] = torch.randn(self.dim, generator=g) * scale
        return self.table[text]

    def __call__(self, texts):
        self.calls.append(list(texts))
        return torch.stack([self.vector(t) for t in texts])


def test_zero_shot_classifier_equals_manual_average_and_calls_encoder_once():
    enc = FakeTextEncoder()
    classes = ["cat", "dog", "hot dog", "a {b} c"]  # braces inside a class name are left alone
    templates = ["a photo of a {c}.", "{c}", "art of the {c}."]
    cls = zero_shot_classifier(enc, classes, templates)
    assert cls.shape == (4, 12)
    assert len(enc.calls) == 1 and len(enc.calls[0]) == 12
    assert enc.calls[0][:3] == ["a photo of a cat.", "cat", "art of the cat."]  # class-major order
    assert enc.calls[0][9] == "a photo of a a {b} c."
    for i, c in enumerate(classes):
        per_template = [enc.vector(t.replace("{c}", c)) for t in templates]
        manual = torch.stack([v / v.norm() for v in per_template]).mean(0)
        manual = manual / manual.norm()
        torch.testing.assert_close(cls[i], manual)
        # and it is *not* the unnormalised average (the norms differ a lot)
        raw = torch.stack(per_template).mean(0)
        assert not torch.allclose(cls[i], raw / raw.norm(), atol=1e-3)
    torch.testing.assert_close(cls.norm(dim=1), torch.ones(4))


def test_zero_shot_classifier_equals_open_clip():
    enc = FakeTextEncoder()
    classes = [f"class {i}" for i in range(13)]
    templates = IMAGENET_TEMPLATES_7
    vocab = [t.replace("{c}", c) for c in classes for t in templates]

    class Model:  # open_clip's interface: tokenizer -> tokens -> encode_text(tokens, normalize=True)
        def encode_text(self, tokens, normalize=False):
            emb = torch.stack([enc.vector(vocab[i]) for i in tokens.tolist()])
            return F.normalize(emb, dim=-1) if normalize else emb

    def tokenizer(texts):
        return torch.tensor([vocab.index(t) for t in texts])

    ref = build_zero_shot_classifier(Model(), tokenizer, classes,
                                     [lambda c, t=t: t.replace("{c}", c) for t in templates],
                                     num_classes_per_batch=5)
    torch.testing.assert_close(zero_shot_classifier(enc, classes, templates), ref.T)


def test_zero_shot_classifier_rejects_bad_inputs():
    enc = FakeTextEncoder()
    with pytest.raises(ValueError, match="placeholder"):
        zero_shot_classifier(enc, ["cat"], ["a photo of a {}."])
    with pytest.raises(ValueError, match="encode_text must return"):
        zero_shot_classifier(lambda texts: torch.zeros(1, 3), ["cat", "dog"], ["{c}"])


# --------------------------------------------------------------------------- classification metrics


def test_accuracy_by_hand():
    logits = torch.tensor(
        [
            [0.9, 0.5, 0.1, 0.0],  # label 0: rank 1
            [0.9, 0.5, 0.1, 0.0],  # label 1: rank 2
            [0.9, 0.5, 0.1, 0.0],  # label 2: rank 3
            [0.1, 0.2, 0.3, 0.4],  # label 3: rank 1
            [0.1, 0.2, 0.3, 0.4],  # label 0: rank 4
        ]
    )
    labels = torch.tensor([0, 1, 2, 3, 0])
    out = accuracy(logits, labels, topk=(1, 2, 3, 5))
    assert out == pytest.approx({"acc1": 2 / 5, "acc2": 3 / 5, "acc3": 4 / 5, "acc5": 1.0})  # k=5 clipped to 4
    assert set(accuracy(logits, labels)) == {"acc1", "acc5"}


def test_mean_per_class_recall_differs_from_accuracy_when_imbalanced():
    # 8 images of class 0, 2 of class 1, 0 of class 2; the model always says 0
    labels = torch.tensor([0] * 8 + [1] * 2)
    logits = torch.tensor([[1.0, 0.0, 0.5]]).repeat(10, 1)
    assert accuracy(logits, labels)["acc1"] == pytest.approx(0.8)
    # class 2 never occurs in the labels and is left out: (8/8 + 0/2) / 2
    assert mean_per_class_recall(logits, labels) == pytest.approx(0.5)

    # mixed case: class 0 recall 3/4, class 1 recall 1/2, class 3 recall 1/1 (class 2 absent)
    labels = torch.tensor([0, 0, 0, 0, 1, 1, 3])
    preds = torch.tensor([0, 0, 0, 1, 1, 0, 3])
    logits = F.one_hot(preds, 4).float()
    assert mean_per_class_recall(logits, labels) == pytest.approx((3 / 4 + 1 / 2 + 1) / 3)
    assert accuracy(logits, labels)["acc1"] == pytest.approx(5 / 7)


def test_classification_metrics_uses_image_times_classifier():
    g = torch.Generator().manual_seed(0)
    img = F.normalize(torch.randn(30, 8, generator=g), dim=-1)
    cls = F.normalize(torch.randn(6, 8, generator=g), dim=-1)
    labels = torch.randint(0, 6, (30,), generator=g)
    out = classification_metrics(img, cls, labels)
    logits = img @ cls.T
    ranks = (logits > logits.gather(1, labels[:, None])).sum(1)  # 0 = top-1
    assert out["acc1"] == pytest.approx(float((ranks < 1).float().mean()))
    assert out["acc5"] == pytest.approx(float((ranks < 5).float().mean()))
    per_class = [float((ranks[labels == c] == 0).float().mean()) for c in labels.unique()]
    assert out["mean_per_class_recall"] == pytest.approx(sum(per_class) / len(per_class))


# --------------------------------------------------------------------------- retrieval


def brute_force_retrieval(img, txt, t2i, ks):
    """Reference by ranks on the full score matrix: a query's hit@k <=> fewer than k candidates
    score strictly higher than its best positive."""
    scores = txt @ img.T  # (T, I)
    pos_score = scores[torch.arange(len(t2i)), t2i]
    t2i_rank = (scores > pos_score[:, None]).sum(1)
    out = {}
    for k in ks:
        out[f"image_retrieval_recall@{k}"] = float((t2i_rank < k).float().mean())
    i2t_best = []
    for i in range(img.shape[0]):
        positives = (t2i == i).nonzero().flatten()
        if len(positives) == 0:
            continue
        s = scores[:, i]  # the image's scores against every text
        i2t_best.append(min(int((s > s[p]).sum()) for p in positives))
    i2t_best = torch.tensor(i2t_best)
    for k in ks:
        out[f"text_retrieval_recall@{k}"] = float((i2t_best < k).float().mean())
    return out


@pytest.mark.parametrize("chunk_size", [None, 1, 3, 7])
def test_retrieval_equals_brute_force_with_several_texts_per_image(chunk_size):
    g = torch.Generator().manual_seed(1)
    n_img, d = 40, 6  # low dimension: imperfect retrieval, so recall@1 < recall@5 < recall@10
    img = F.normalize(torch.randn(n_img, d, generator=g), dim=-1)
    per_image = torch.randint(1, 5, (n_img,), generator=g)  # 1..4 texts per image
    t2i = torch.repeat_interleave(torch.arange(n_img), per_image)
    t2i = t2i[torch.randperm(len(t2i), generator=g)]  # texts in any order
    txt = F.normalize(img[t2i] + 0.8 * torch.randn(len(t2i), d, generator=g), dim=-1)
    ks = (1, 5, 10)
    got = retrieval_metrics(img, txt, t2i, ks=ks, chunk_size=chunk_size)
    want = brute_force_retrieval(img, txt, t2i, ks)
    assert got == pytest.approx(want, abs=1e-7)
    r = [got[f"text_retrieval_recall@{k}"] for k in ks]
    assert 0 < r[0] < r[1] < r[2] <= 1  # the data exercises the metric (not all hits, not all misses)


def test_any_positive_in_top_k():
    # image 0 has texts 0 and 1; only text 1 is its nearest text. Image 1 has text 2.
    img = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    txt = F.normalize(torch.tensor([[0.2, 1.0], [1.0, 0.1], [0.1, 1.0]]), dim=-1)
    t2i = torch.tensor([0, 0, 1])
    out = retrieval_metrics(img, txt, t2i, ks=(1, 2))
    # image->text: image 0's top-1 is text 1 (a positive) -> hit; image 1's top-1 is text 2 -> hit
    assert out["text_retrieval_recall@1"] == 1.0
    # text->image: text 0 is closer to image 1 -> miss at 1, hit at 2; texts 1, 2 hit
    assert out["image_retrieval_recall@1"] == pytest.approx(2 / 3)
    assert out["image_retrieval_recall@2"] == 1.0


def test_images_without_text_are_left_out_and_k_is_clipped():
    g = torch.Generator().manual_seed(3)
    img = F.normalize(torch.randn(5, 4, generator=g), dim=-1)
    t2i = torch.tensor([0, 2, 4])  # images 1 and 3 have no text
    txt = img[t2i]
    out = retrieval_metrics(img, txt, t2i, ks=(1, 10))
    assert out["text_retrieval_recall@1"] == 1.0  # mean over images 0, 2, 4 only
    assert out["image_retrieval_recall@1"] == 1.0
    assert out["text_retrieval_recall@10"] == 1.0 and out["image_retrieval_recall@10"] == 1.0
    with pytest.raises(ValueError, match="index images"):
        retrieval_metrics(img, txt, torch.tensor([0, 2, 5]))
    with pytest.raises(ValueError, match="one entry per text"):
        retrieval_metrics(img, txt, torch.tensor([0, 2]))


# ---- synonym groups (corpora.synonyms): a prediction inside the true class's group is correct ----

def _reference_merged(logits, labels, groups, k):
    """Brute force: for each image, is any of its k best classes in the true class's group?"""
    hits = []
    for row, label in zip(logits.tolist(), labels.tolist()):
        best = sorted(range(len(row)), key=lambda c: -row[c])[:k]
        hits.append(any(groups[c] == groups[label] for c in best))
    return sum(hits) / len(hits)


def test_merged_accuracy_equals_a_brute_force_reference_and_never_falls_below_the_plain_one():
    from lib.core.evaluate import accuracy

    gen = torch.Generator().manual_seed(3)
    logits, labels = torch.randn(200, 12, generator=gen), torch.randint(0, 12, (200,), generator=gen)
    groups = [0, 0, 2, 3, 3, 3, 6, 7, 8, 9, 9, 11]
    merged, plain = accuracy(logits, labels, groups=groups), accuracy(logits, labels)
    for k in (1, 5):
        assert merged[f"acc{k}"] == pytest.approx(_reference_merged(logits, labels, groups, k))
        assert merged[f"acc{k}"] >= plain[f"acc{k}"]


def test_singleton_groups_change_nothing_and_the_plain_scores_are_kept_beside():
    from lib.core.evaluate import classification_metrics

    gen = torch.Generator().manual_seed(4)
    image = torch.nn.functional.normalize(torch.randn(60, 8, generator=gen), dim=-1)
    classifier = torch.nn.functional.normalize(torch.randn(7, 8, generator=gen), dim=-1)
    labels = torch.randint(0, 7, (60,), generator=gen)
    plain = classification_metrics(image, classifier, labels)
    grouped = classification_metrics(image, classifier, labels, groups=list(range(7)))
    for key, value in plain.items():
        assert grouped[key] == pytest.approx(value) and grouped[f"{key}_unmerged"] == pytest.approx(value)


def test_a_prediction_of_the_synonym_counts_and_a_wrong_group_length_is_refused():
    from lib.core.evaluate import accuracy, mean_per_class_recall

    logits = torch.tensor([[0.1, 0.9, 0.0], [0.0, 0.2, 0.8]])  # image 0 (class 0) answers its synonym, class 1
    labels = torch.tensor([0, 1])
    assert accuracy(logits, labels, (1,), groups=[0, 0, 2])["acc1"] == 0.5
    assert mean_per_class_recall(logits, labels, groups=[0, 0, 2]) == 0.5
    with pytest.raises(ValueError, match="one group id per class"):
        accuracy(logits, labels, groups=[0, 0])
