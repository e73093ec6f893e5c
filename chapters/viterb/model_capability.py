"""How capable a text model is, measured rather than assumed: its parameter count and, for a causal LM, how well
it predicts held-out text, in bits per byte (and per-token perplexity). The ViTeRB chapter plots its score against
both.

Why bits per byte: per-token perplexity depends on the tokenizer (SmolLM2, Gemma 3 and Qwen2.5 split the same
text into different numbers of tokens), so it cannot rank models with different tokenizers; the negative
log-likelihood of the whole text divided by its UTF-8 bytes can.

Why measured: the medium config's Qwen models are Coder-Instruct variants and its checkpoints are converted from
quantised files, so neither the name nor the size says how well a model models English.
See notebooks/viterb.py, section "Does a more capable language model see better?".
"""
from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence

import torch

__all__ = ["capability"]


def capability(model_name: str, texts: Sequence[str], *, causal: bool, batch_size: int = 16,
               device: str = "cpu") -> dict:
    """Parameter count of a text model and, for a causal LM (``causal``), how well it predicts ``texts``.

    Each text is scored after a start token, the model's BOS or, for a model without one (Qwen2.5), its
    end-of-text token, the separator it saw between documents in pre-training, so that every token of the text
    is predicted (padding masked out). ``bits_per_byte`` = the summed negative log-likelihood in bits over the
    summed UTF-8 bytes of the texts (tokenizer-free); ``perplexity`` = exp(mean negative log-likelihood per
    token) (comparable only between models that share a tokenizer). An encoder gets None for both (a masked LM
    has no comparable left-to-right likelihood). Cached as JSON under the cache folder, keyed by the model
    identity and the texts.
    """
    from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

    from lib.core.atomic import write_json
    from lib.core.models import resolve
    from lib.core.paths import cache_root

    resolved = resolve(model_name, "transformers")
    key = hashlib.sha256(json.dumps([resolved.identity, list(texts), causal, "bits-per-byte-v3"],
                                    sort_keys=True).encode()).hexdigest()[:20]
    path = cache_root() / "viterb" / f"capability-{key}.json"
    if path.is_file():
        return json.loads(path.read_text())
    result = {"model": model_name, "causal": causal, "perplexity": None, "bits_per_byte": None, "texts": len(texts)}
    if not causal:
        model = AutoModel.from_pretrained(resolved.load_path)
    else:
        tokenizer = AutoTokenizer.from_pretrained(resolved.load_path)
        tokenizer.padding_side = "right"
        tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
        model, info = AutoModelForCausalLM.from_pretrained(resolved.load_path, dtype=torch.float32,
                                                           output_loading_info=True)
        model = model.eval().to(device)
        if any(k.startswith("lm_head") for k in info["missing_keys"]):
            # A checkpoint without an output layer (the offline Qwen2.5-0.5B): transformers would score with a
            # randomly initialised one. Such models tie it to the input embeddings (Qwen2.5-0.5B's own config:
            # tie_word_embeddings true), so tie it, and say so.
            model.lm_head.weight = model.get_input_embeddings().weight
            result["lm_head"] = "tied to the input embeddings (absent from the checkpoint)"
        nll, count = 0.0, 0
        start_id = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
        with torch.no_grad():
            for start in range(0, len(texts), batch_size):
                batch = tokenizer(list(texts[start:start + batch_size]), return_tensors="pt", padding=True).to(device)
                ids, mask = batch["input_ids"], batch["attention_mask"]
                if not bool((ids[:, 0] == start_id).all()):
                    first = torch.full((len(ids), 1), start_id, dtype=ids.dtype, device=ids.device)
                    ids, mask = torch.cat([first, ids], 1), torch.cat([torch.ones_like(first), mask], 1)
                logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
                losses = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
                keep = mask[:, 1:].bool()
                nll, count = nll + float(losses[keep].sum()), count + int(keep.sum())
        text_bytes = sum(len(t.encode("utf-8")) for t in texts)
        result.update(perplexity=float(torch.exp(torch.tensor(nll / count))), tokens=count, bytes=text_bytes,
                      bits_per_byte=nll / math.log(2) / text_bytes)
    result["params"] = sum(p.numel() for p in model.parameters())
    del model
    write_json(path, result)
    return result
