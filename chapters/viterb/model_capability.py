"""How capable a text model is, measured rather than assumed: its parameter count and, for a causal LM, its
perplexity on held-out text. The ViTeRB chapter plots its score against both.

Why measured: the medium config's Qwen models are Coder-Instruct variants and its checkpoints are converted from
quantised files, so neither the name nor the size says how well a model models English.
See notebooks/viterb.py, section "Does a more capable language model see better?".
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

import torch

__all__ = ["capability"]


def capability(model_name: str, texts: Sequence[str], *, causal: bool, batch_size: int = 16,
               device: str = "cpu") -> dict:
    """Parameter count of a text model and, for a causal LM (``causal``), its perplexity on ``texts``.

    Perplexity = exp(mean negative log-likelihood per predicted token), each text scored after the model's
    BOS token when it has one (padding masked out). An encoder gets ``perplexity = None`` (a masked LM has
    no comparable left-to-right likelihood). Cached as JSON under the cache folder, keyed by the model
    identity and the texts.
    """
    from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

    from lib.core.atomic import write_json
    from lib.core.models import resolve
    from lib.core.paths import cache_root

    resolved = resolve(model_name, "transformers")
    key = hashlib.sha256(json.dumps([resolved.identity, list(texts), causal, "lm_head-v2"],
                                    sort_keys=True).encode()).hexdigest()[:20]
    path = cache_root() / "viterb" / f"capability-{key}.json"
    if path.is_file():
        return json.loads(path.read_text())
    result = {"model": model_name, "causal": causal, "perplexity": None, "texts": len(texts)}
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
        with torch.no_grad():
            for start in range(0, len(texts), batch_size):
                batch = tokenizer(list(texts[start:start + batch_size]), return_tensors="pt", padding=True).to(device)
                ids, mask = batch["input_ids"], batch["attention_mask"]
                if tokenizer.bos_token_id is not None and not bool((ids[:, 0] == tokenizer.bos_token_id).all()):
                    bos = torch.full((len(ids), 1), tokenizer.bos_token_id, dtype=ids.dtype, device=ids.device)
                    ids, mask = torch.cat([bos, ids], 1), torch.cat([torch.ones_like(bos), mask], 1)
                logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
                losses = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
                keep = mask[:, 1:].bool()
                nll, count = nll + float(losses[keep].sum()), count + int(keep.sum())
        result.update(perplexity=float(torch.exp(torch.tensor(nll / count))), tokens=count)
    result["params"] = sum(p.numel() for p in model.parameters())
    del model
    write_json(path, result)
    return result
