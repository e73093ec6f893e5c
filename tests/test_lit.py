"""lib.methods.lit: ShareLock's LiT baseline (a pretrained text encoder tuned end to end on locked image features).

Checked against independent computations: the mask read back from the padded ids equals the tokenizer's, the
embedding equals the encoder's pooled state through the projection, chunked evaluation equals one pass, the loss is
CLIP's on those embeddings, every encoder weight receives a gradient (the tower is tuned, not frozen), and it trains
with lib.core.train.fit on token-id tensors.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import BertConfig, BertModel, BertTokenizerFast

from lib.core.config import LossConfig, TrainSettings
from lib.core.encoders import pool
from lib.core.train import fit, seed_everything
from lib.methods.lit import LiT, token_ids
from lib.nn.losses import ClipLoss

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "red", "blue", "boat", "man", "rowing", "hat", "a", "dog", "cat"]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    vocab = tmp_path_factory.mktemp("tok") / "vocab.txt"
    vocab.write_text("\n".join(WORDS) + "\n")
    return BertTokenizerFast(vocab_file=str(vocab))


def _lit(image_dim=6, pooling="mean"):
    seed_everything(0)
    # no dropout: exact checks
    encoder = BertModel(BertConfig(vocab_size=len(WORDS), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                   intermediate_size=32, max_position_embeddings=32, hidden_dropout_prob=0.0,
                                   attention_probs_dropout_prob=0.0), add_pooling_layer=False)
    return LiT(encoder, image_dim, LossConfig(temperature=0.07, learnable=False), pooling=pooling, pad_id=0, chunk=3)


TEXTS = ["man rowing boat", "red hat", "a blue dog", "cat", "a red boat", "dog", "blue hat", "man"]


def test_token_ids_are_right_padded_and_the_mask_reads_back(tokenizer):
    ids = token_ids(tokenizer, TEXTS)
    reference = tokenizer(TEXTS, padding=True, return_tensors="pt")
    assert ids.dtype == torch.int64 and torch.equal(ids, reference["input_ids"])
    assert torch.equal(ids != 0, reference["attention_mask"].bool())


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_embedding_is_the_pooled_state_projected_and_normalised(tokenizer, pooling):
    lit, ids = _lit(pooling=pooling).eval(), token_ids(tokenizer, TEXTS)
    with torch.no_grad():
        mask = ids != 0
        hidden = lit.text_model(input_ids=ids, attention_mask=mask.long()).last_hidden_state
        expected = F.normalize(lit.projection(pool(hidden, mask, pooling)), dim=-1)
        got = lit.embed_text(ids)  # 8 rows in chunks of 3, padding columns trimmed per chunk
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_loss_is_clip_on_the_embeddings_and_every_encoder_weight_learns(tokenizer):
    lit, ids = _lit().train(), token_ids(tokenizer, TEXTS)
    image = torch.randn(len(TEXTS), 6, generator=torch.Generator().manual_seed(1))
    loss = lit.loss({"image": image, "text": ids})
    with torch.no_grad():
        lit.eval()
        expected = ClipLoss(temperature=0.07)(F.normalize(image, dim=-1), lit.embed_text(ids))
    torch.testing.assert_close(loss, expected, atol=1e-5, rtol=0)
    loss.backward()
    frozen = [n for n, p in lit.named_parameters() if p.grad is None and "position" not in n and "token_type" not in n]
    assert not frozen, f"LiT tunes the whole text tower, but these got no gradient: {frozen}"


def test_cached_float_features_are_refused_with_the_reason(tokenizer):
    with pytest.raises(ValueError, match=r"LiT reads token ids .* cached text features belong to a head"):
        _lit().embed_text(torch.randn(4, 16))


def test_trains_with_fit_on_token_ids(tokenizer):
    lit, ids = _lit(), token_ids(tokenizer, TEXTS * 4)
    image = torch.randn(len(ids), 6, generator=torch.Generator().manual_seed(2))
    result = fit(lit, {"image": image, "text": ids}, {"image": image[:8], "text": ids[:8]},
                 TrainSettings(steps=30, batch_size=16, lr=3e-3, eval_every=10, warmup_steps=2, patience=None),
                 progress=False)
    losses = [h["train_loss"] for h in result.history]
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5  # it learns on its own training pairs


@pytest.mark.parametrize("bucket", [1, 3, 64])
def test_length_buckets_give_the_one_call_embedding_and_gradient(tokenizer, bucket):
    # Grouping rows by length must change nothing but the padding the encoder sees: the same embeddings, in the
    # rows' own order, and the same gradient.
    ids = token_ids(tokenizer, TEXTS)
    reference, bucketed = _lit().train(), _lit().train()
    bucketed.bucket = bucket
    image = torch.randn(len(TEXTS), 6, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        mask = ids != 0
        hidden = reference.text_model(input_ids=ids, attention_mask=mask.long()).last_hidden_state
        one_call = F.normalize(reference.projection(pool(hidden, mask, "mean")), dim=-1)
    torch.testing.assert_close(bucketed.embed_text(ids), one_call, atol=1e-5, rtol=0)
    states = reference.text_model(input_ids=ids, attention_mask=mask.long()).last_hidden_state
    text = F.normalize(reference.projection(pool(states, mask, "mean")), dim=-1)
    reference.criterion(F.normalize(image, dim=-1), text).backward()
    bucketed.loss({"image": image, "text": ids}).backward()
    for (name, a), (_, b) in zip(reference.named_parameters(), bucketed.named_parameters()):
        if a.grad is not None:
            torch.testing.assert_close(b.grad, a.grad, atol=1e-5, rtol=1e-4, msg=name)
