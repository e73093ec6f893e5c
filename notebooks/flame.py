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
# # FLAME: a frozen LLM read through many prompts
#
# ```{glue:md} key_findings
# :format: myst
# ```
#
# <!-- launch -->
# :::{admonition} Run it, and run it at paper scale
# :class: dropdown
#
# The small config (the default) runs top to bottom on a CPU in minutes. The full config needs internet access and the following:
#
# - **GPU:** the feature pass peaks at about 25 GiB (Mistral-Nemo's 12B parameters in fp16 plus activations) with 22 GiB of host memory; training the ViT-B/16 from scratch at batch 4,096 needs about 342 GiB of activations (Korthikanti et al.'s per-layer estimate, 16-bit), so 8 GPUs with DDP or 1 GPU with image_tower.grad_checkpointing (about 45 GiB per card either way); the 2.9M re-captions x 7 facets x 5,120 text features (194 GiB in fp16) stream from the store and the images from their tar shards, decoded per batch (train_data: streamed; 406 GiB as uint8 pixels at 224 px, never held), so no data.limit is needed (computed by provision.preflight's cost model from the real configs: `python -m tools.standins --launch-estimates`)
# - **time:** about 106 GPU-hours of features (4.6e19 FLOPs: Mistral-Nemo over 2.9M re-captions at up to 256 caption tokens plus the 7 facet prompts, and again for the last-token baseline; DINOv2-B over 3.0M images), at an assumed 120 TFLOP/s of bf16; computed, not measured; the heads' training is not in the cost model yet
# - **data:** CC3M re-captioned by MiniCPM-Llama3-V 2.5 (the paper's data) and ImageNet-1k val, each prepared by `python -m provision.prepare <dataset> --from <downloads>` (`data_manifests/flame-recap-cc3m.yaml`, `imagenet-1k.yaml`); the features take about 244 GB in the store
#
# ```bash
# papermill notebooks/flame.ipynb out.ipynb -p config full
# ```
# :::
# <!-- /launch -->
#
# > In this paper, we propose FLAME (Frozen Large lAnguage Models Enable data-efficient language-image
# > pre-training) that leverages frozen large language models as text encoders, naturally processing long
# > text inputs and demonstrating impressive multilingual generalization. [...] When trained on CC3M, FLAME
# > surpasses the previous state-of-the-art by 4.9% in ImageNet top-1 accuracy.
# >
# > — Cao, Wei and Ma, *FLAME* (CVPR 2025), abstract {cite}`cao2025flame` (the 4.9 points are over
# > DreamLIP's 31.1 %; CLIP trained on the same CC3M reaches 16.0 %, Table 3)
#
# ShareLock (the first chapter) reads a frozen LLM at the **last token of the caption** and trains a
# head on the *text* side. FLAME turns both choices around:
#
# * the caption is wrapped in a prompt that asks the LLM to sum up one **facet** of it in one word,
#   `Detailed image description: "<caption>". After thinking step by step, <facet> means in just one
#   word:"` (§3.2), and the embedding is the hidden state at the final `:"`. Several facets ("this image
#   description", "the category of the main object", ...) give several embeddings of one caption;
# * the text side has **no trainable part**: the image side learns to land among the facet embeddings
#   (a ViT trained from scratch, then a 2-layer MLP into the LLM's hidden width);
# * **facet-decoupled attention** computes all K facets in one forward pass over the caption.
#
# **What you will learn:** how one LLM pass gives K prompted embeddings of a caption (and the attention
# mask that makes it exact); whether a frozen, prompted LLM is a better text side than a text tower
# trained on the same few pairs; what more facets, the paper's one-prompt rule for short texts, the two
# losses and labels in other languages change.
#
# This chapter runs in three configs: **small** (the default and CI's: SmolLM2-135M on 200 emoji captions, CPU,
# minutes), **medium** (SmolLM2-135M on the medium corpus's long Openclipart and emoji
# captions, 1,540 unseen concepts, Caltech-101's photographs, Tux Paint photos and Tux Paint's sentences in five
# languages, a data-size curve;
# CPU, `papermill notebooks/flame.ipynb out.ipynb -p config medium` after `make setup-medium`) and **full**
# (`-p config full`: Mistral-Nemo-Instruct on the paper's re-captioned CC3M, ImageNet; a GPU). This page's run
# took {glue:md}`runtime`, and the opening line of the findings names its config: {glue:md}`run_scope`. The
# section "The medium config" says what a medium run adds (it shows output only when this page is a medium run).

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
        repo = os.environ.get("FROZEN_LIP_REPO")
        if not repo:  # this book has no public repository URL yet (book/_config.yml, repository.url)
            raise RuntimeError("The book's repository URL is not set yet, so there is nothing to clone: "
                               "set FROZEN_LIP_REPO to the git URL (or path) of a copy of the book.")
        subprocess.run(["git", "clone", "--depth", "1", repo, home], check=True)
    subprocess.run(["bash", "tools/setup.sh", "--here"], cwd=home, check=True, env={**os.environ, "PYTHON": sys.executable})
    sys.path.insert(0, home)

# %% tags=["parameters", "hide-input"]
config = "small"  # "small" (offline, CPU, minutes), "medium" (offline, CPU, ~20 min) or "full" (the paper's LLM and data, GPU)
limit = None  # keep only the first N training pairs (None: data.limit of the config)
seeds = None  # override the config's seeds, e.g. [0] (papermill: -p seeds "[0]")
quick = False  # True: seed 0 only, no loss comparison, only the 1-facet ablation (the tests' run)
output_dir = "runs/flame"  # where metrics.json is written
overrides = None  # a YAML mapping merged over the config section (rehearsals)

# %%

from IPython.display import display

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
import torch

from chapters import flame
from provision.preflight import require
from chapters import configs as chapter_configs
from chapters import notebook
from lib.core import features, paths
from lib.core.facets import clean_caption, decoupled_inputs
from lib.core.results import RULE, Runs, compare, versus
from chapters.metrics import findings_table, write_metrics
from lib.core.store import FeatureStore
from lib.methods.flame import LOSSES, OFFICIAL_TEMPLATE, FlameProjector, official_caption
from lib.nn.losses import facet_clip_loss, multi_positive_sigmoid_loss

started = notebook.setup(config)  # offline unless full, OMP_NUM_THREADS, figure style

# %% [markdown]
# ## Configuration
#
# Every setting lives in `notebooks/configs/flame.yaml` and is validated on load
# (`chapters.flame.Config`). The text model is a `lib.core.facets.FacetConfig`: the LLM, the K facet
# phrases, the layer read, the position-id scheme and the prompt template, all of which are part of the
# feature store's key. The facets of this run:

# %%
changes = chapter_configs.parameter_overrides(seeds=[0] if quick and seeds is None else seeds, limit=limit,
                                      overrides=overrides)
medium = config == "medium"
cfg = flame.load_config(config, changes)
if config == "full":  # data prepared, models reachable, device, memory and disk: one line per problem, in seconds
    require("flame", config, overrides=changes)
K = len(cfg.text.facets)
counts = [k for k in cfg.facet_counts if k < K][:1] if quick else [k for k in cfg.facet_counts if k < K]
image_side = (f"image features {cfg.vision.name}" if cfg.image_tower is None else
              f"image tower {cfg.image_tower.open_clip_model or cfg.image_tower.timm_name or cfg.image_tower.kind} "
              f"trained from scratch at {cfg.image_tower.image_size} px")
print(f"this page's run: config = {config!r} (papermill's parameters; the hidden cell above holds the defaults)")
print(f"config {config!r}: LLM {cfg.text.name} (layer {cfg.text.layer}, {cfg.text.positions} positions); "
      f"{image_side}; seeds {list(cfg.seeds)}")
pd.DataFrame({"facet": cfg.text.facets,
              "used for": ["long and short texts" if f == cfg.short_text_facet else "long texts"
                           for f in cfg.text.facets]}, index=pd.RangeIndex(1, K + 1, name="k"))

# %% [markdown]
# ## The data: long, multi-facet captions
#
# FLAME trains on **long** captions: the paper re-captions CC3M with MiniCPM-Llama3-V 2.5 (long and short
# captions, plus the raw ones), and the full config trains on those long re-captions
# (`data_manifests/flame-recap-cc3m.yaml`, one long caption per image; the official code also embeds the
# raw and the short caption of every image). The small config composes one long caption for each emoji
# from its CLDR text: label, keywords, group and subgroup (`corpora.emoji.caption(..., "long")`); the medium
# config adds Openclipart drawings, whose long caption is the title, the keywords and the uploader's description.
# Concepts are split into train / validation / unseen by *families* (the ShareLock chapter explains why),
# and every score below is on **unseen** concepts: zero-shot classification among all {glue:md}`n_unseen` unseen
# concepts (the prompt is the class name, a short text) and image↔caption retrieval among {glue:md}`n_retrieval`
# unseen pairs (long texts). The LLM pass is the whole cost of the offline configs, so they train on part of the
# training split (small: its first `data.limit` concepts; medium: a seeded subset); the image features are the
# ShareLock chapter's store entries for the whole splits, cut to the rows used. This run: {glue:md}`run_rows`.

# %%
bench = flame.benchmark(cfg)
rows, text_sets = flame.sizes(cfg, bench), flame.text_sets(cfg, bench)
if medium:  # seeded subsets of the splits (the image features are those of the whole splits)
    rows = {role: len(idx) for role, idx in flame.subsets(cfg, bench).items()}
zero_shot_set = bench.zero_shot[0]  # unseen concepts (small) / ImageNet-1k (full)
assert not set(bench.train.concepts[: rows["train"]]) & set(bench.retrieval.concepts), "an unseen concept leaked"
pd.DataFrame([{"set": pairs.name, "role": role, "rows used": rows[role], "rows in split": len(pairs)}
              for role, pairs in (("train", bench.train), ("val", bench.val), ("retrieval", bench.retrieval))]
             + [{"set": zero_shot_set.name, "role": f"zero-shot, {len(zero_shot_set.classnames)} classes",
                 "rows used": len(zero_shot_set), "rows in split": len(zero_shot_set)}]).set_index("set")

# %%
if cfg.data.corpus == "emoji":
    fig, axes = plt.subplots(1, 6, figsize=(9.8, 2.1))
    for axis, i in zip(axes, range(0, rows["train"], rows["train"] // 6)):
        axis.imshow(bench.train.load_image(i))
        axis.set_title(bench.train.captions[i].split(".")[0][:20], fontsize=9)
        axis.axis("off")
    fig.suptitle("Training drawings (Noto) with the label that starts their long caption")
    plt.tight_layout()

# %% [markdown]
# One training caption under the first facet, as the paper writes the prompt (§3.2) and as the official
# code feeds it (its single-prompt template: no "Detailed", a space before ":", "." and ",", and a "."
# appended to the caption; `lib.methods.flame.OFFICIAL_TEMPLATE`, `prompt: official` in the config):

# %%
example = clean_caption(text_sets["train"][0][0])
with pd.option_context("display.max_colwidth", None):
    display(pd.DataFrame({"prompt": [
        cfg.text.template.replace("{caption}", example).replace("{facet}", cfg.text.facets[0]),
        OFFICIAL_TEMPLATE.replace("{caption}", official_caption(example)).replace("{facet}", cfg.text.facets[0]),
    ]}, index=["this run (" + cfg.prompt + ")", "official code"]))

# %% [markdown]
# ## Facet-decoupled attention
#
# The K prompts of a caption share everything up to `step by step,`. Run naively, that prefix is read
# K times (K forward passes, or one pass over a K-times-larger batch). `lib.core.facets.FacetEncoder`
# reads it once: the sequence is `[prefix][facet 1 suffix]…[facet K suffix]`, a 4-D attention mask
# lets every suffix token see the prefix and its own suffix only, and each suffix's position ids
# restart where the prefix ends. The figure is drawn from the very mask and position ids the encoder
# builds for one real caption (`chapters.flame.facet_mask_figure`): a coloured cell is a key (column)
# that the query (row) sees, coloured by the key's segment; a star is a facet's read-out token.

# %%
encoder = features.ENCODERS.get(cfg.text, cfg.device)  # the same pool the features below are computed with
fig = flame.facet_mask_figure(encoder, min(text_sets["train"][0], key=len))

# %% [markdown]
# In symbols: with segment $s(j)\in\{\text{pad}, 0, 1, \dots, K\}$ of token $j$ (0 is the shared prefix), query $i$
# may attend to key $j$ iff
#
# $$j \le i,\qquad s(j) \ne \text{pad},\qquad s(j) = 0 \;\lor\; s(j) = s(i),$$
#
# and suffix $k$'s positions restart at the prefix length $P$: $\text{pos}(j) = P + (j - \text{start}_k)$. This is
# the function that builds the mask, the position ids and the read-out columns (`lib.core.facets`):

# %%
notebook.show_source(decoupled_inputs)

# %% [markdown]
# Each facet's final state is then what a separate pass over `prefix + suffix_k` gives, up to the arithmetic's
# rounding. The check below runs both on a few captions with the chapter's LLM, in float32 (where they must agree
# to float rounding: about 1e-5 on values up to ~50) and, when the run computes in bfloat16, in bfloat16 too,
# beside bfloat16's own spread: two separate passes that differ only in their batch size. In bfloat16 the
# decoupled and the separate states differ by about 1 % (relative L2); so do two separate passes, so that gap is
# rounding, not a difference between the two ways of attending.

# %%
few = text_sets["train"][0][:4]
equivalence = flame.equivalence_table(cfg, few, cfg.device)
equivalence_gap = float(equivalence.loc[("float32", "decoupled vs separate passes"), "max |difference|"])
print(f"{len(few)} captions x {K} facets, {encoder.dim}-d")
display(equivalence.style.format({"max |difference|": "{:.1e}", "largest |value|": "{:.1f}",
                                  "relative L2 (worst row)": "{:.1e}", "min cosine": "{:.6f}"}))

# %% [markdown]
# How much it saves was measured once by `bench/facets.py` (64 long emoji captions, 7 facets, the
# same machine and process for the three methods; the notebook reads its results rather than
# re-running it). The saving comes from the token positions each method pushes through the model:
# the caption prefix once instead of K times (last column).

# %%
speed, speed_table = flame.speed_table(paths.REPO_ROOT / "bench" / "results" / "facets.json")
print(f"bench/results/facets.json: {speed['threads']} threads, {speed['machine']}, torch {speed['torch']}")
speed_table.set_index("model")

# %% [markdown]
# ## The frozen features
#
# `chapters.flame.feature_plan` lists every feature the chapter reads, and
# `lib.core.features.materialise` reads each from the store (`lib.core.store`), computing it only on a miss:
# the image features of every image set (the ShareLock chapter's entries), the LLM's K facet embeddings
# (`facets:…`, stored `[N·K, D]` caption-major) and each baseline's plain features (`text:…`) of the
# training, validation and retrieval captions, of the zero-shot prompts and of the labels in other
# languages. `python -m provision.precompute --chapter flame` runs the same plan.

# %%
store = FeatureStore(paths.store_dir(), verify=cfg.store.verify)
plan = flame.feature_plan(cfg, bench)  # the medium config's plan adds the Tux Paint sets
found = features.materialise(store, plan, device=cfg.device)
feats = flame.chapter_features(cfg, bench, found)
print(found.summary())

# %% [markdown]
# ## The image projector and the two losses
#
# With the LLM frozen and no text head, all the training happens on the image side. In the paper a
# ViT-B/16 is trained from scratch and a 2-layer MLP maps it to the LLM's width; here the image tower
# is the frozen, cached EfficientNet feature and only the MLP trains (`lib.methods.flame.FlameProjector`:
# `Linear → GELU → Linear → LayerNorm`, L2-normalised; hidden width 1,024 instead of the official max(LLM width, 4,096) (5,120 for Mistral-Nemo)
# in the small and medium configs).
#
# **Paper, Eq. 1**: one CLIP InfoNCE per facet, summed, a learnable temperature starting at 0.07
# (`lib.nn.losses.facet_clip_loss`): the image must pick out its own caption's facet-k embedding among the
# batch's facet-k embeddings, for every k. With $v_i$ the image embedding and $t_i^{k}$ caption $i$'s facet-$k$
# embedding (both L2-normalised) and $\tau$ the temperature,
#
# $$\mathcal{L} = \sum_{k=1}^{K} \frac{1}{2N}\sum_{i=1}^{N}\left[-\log\frac{e^{\langle v_i, t_i^k\rangle/\tau}}{\sum_j e^{\langle v_i, t_j^k\rangle/\tau}}
# -\log\frac{e^{\langle v_i, t_i^k\rangle/\tau}}{\sum_j e^{\langle v_j, t_i^k\rangle/\tau}}\right].$$
#
# **Official code**: a multi-positive *sigmoid* loss (`lib.nn.losses.multi_positive_sigmoid_loss`): every
# image–embedding pair is a binary problem, all of an image's embeddings are positives, τ = 0.1 and a
# bias of −10 at the start (SigLIP's initialisation).
#
# At test time a caption's single embedding is the mean of its K facet states, renormalised (the
# official `encode_text(infer=True)`); a short text is embedded under one prompt only (next sections).
# The projector and the two losses, as `lib` implements them:

# %%
display(notebook.show_source(FlameProjector), notebook.show_source(facet_clip_loss),
        notebook.show_source(multi_positive_sigmoid_loss))

# %% [markdown]
# ## Three ways to align the same data
#
# Every method trains on the same training concepts, image features, steps, batch and seeds with
# `lib.core.train.fit` (best weights on the validation concepts), and is tested on the same unseen
# concepts (`chapters.flame.train_and_evaluate`, `lib.core.evaluate.zero_shot` and `retrieval`):
#
# * **FLAME**: frozen LLM through the facet prompts, no text head, image MLP (`lib.methods.flame.Flame`);
# * **ShareLock head**: the same frozen LLM read at the caption's last token, ShareLock's 4-layer MLP
#   on the *text* side, no image head (`lib.methods.sharelock.ShareLock`); also on MiniLM (mean pooling);
# * **from scratch**: a CLIP-style text tower (a bag of token pieces + MLP, read through the frozen LLM's own
#   tokenizer, so both sides spell every language alike) trained from nothing
#   against the frozen image features and a linear map, i.e. LiT's recipe
#   (`lib.methods.three_towers.ThreeTowers("lit")`): the analogue of the paper's CLIP baseline, whose
#   text side learns only from the same pairs.
#
# **A recipe per method.** Each method's learning rate is chosen on the validation concepts (never the unseen
# ones) from the config's `sweep:` grid, on the first seed, by retrieval R@1 on the validation pairs
# (`lib.core.recipes.choose`; a first version chose by the validation loss, which fell steadily up to lr 0.027,
# where FLAME's embeddings had collapsed onto a few hubs); every later run of the method (seeds, the prompt and loss ablations, the data-size
# curve) takes it. A frozen LLM read through fixed prompts and a text tower learning from nothing need not like
# the same step size, but a lead counts only when the validation pairs can tell it from noise: the configured
# rate stays unless a candidate beats it by `sweep.keep_within_se` (2) binomial standard errors of its R@1
# (the *lead needed* column). Under the plain best-score rule the bfloat16 and float32 runs of this chapter gave the
# scratch tower different rates (9e-3 and 1e-3) on half-point leads over 500 pairs, i.e. on rounding.

# %%
kinds = ["flame", *[b.name for b in cfg.baselines], "scratch"]
configs, recipe_rows = flame.choose_recipes(cfg, bench, feats, kinds) if not quick else ({}, [])
if recipe_rows:
    display(notebook.recipe_table(recipe_rows, "validation R@1 %",
                                  "Each candidate's validation retrieval R@1, both directions (first seed); chosen = used for every seed"))


# %%
def train(kind: str, seed: int, **options):
    """One method, one seed, with its recipe: (row, training result); the medium config adds its tests
    (`chapters.flame.run`)."""
    return flame.run(configs.get(kind, cfg), bench, feats, kind, seed, **options)


runs, curves = Runs(), {}
for seed in cfg.seeds:
    for kind in kinds:
        row, result = train(kind, seed)
        runs.add(row)
        if seed == cfg.seeds[0]:
            curves[flame.run_key(row, cfg)] = result.history_frame()
fig, axis = plt.subplots(figsize=(7, 3.4))
for label, curve in curves.items():
    val = curve.dropna(subset=["val_loss"])
    axis.plot(val.step, val.val_loss / val.val_loss.iloc[0], marker="o", ms=3, label=label)
axis.set(xlabel="optimiser step", ylabel="validation loss / first value",
         title=f"Validation loss, seed {cfg.seeds[0]} (each method's own objective)")
axis.legend(fontsize=9)
plt.tight_layout()

# %% [markdown]
# ## FLAME vs ShareLock vs from scratch on unseen concepts
#
# Mean ± standard deviation over seeds, in percent. "text→image R@1" finds an unseen drawing from its
# long caption; "image→text R@1" the other way round; chance is one over the number of candidates
# ({glue:md}`chance_text`).

# %%
chance = {"zero-shot": 1 / len(zero_shot_set.classnames), "retrieval": 1 / rows["retrieval"]}
labels = {"zero-shot/acc1": "zero-shot top-1", "zero-shot/acc5": "zero-shot top-5",
          "retrieval/image_retrieval_recall@1": "text→image R@1", "retrieval/image_retrieval_recall@5": "text→image R@5",
          "retrieval/text_retrieval_recall@1": "image→text R@1", "retrieval/text_retrieval_recall@5": "image→text R@5"}
main = flame.main_runs(cfg, runs)
main.table(list(labels), by=["method"], labels=labels).set_index("method").T

# %%
plot = main.frame()
fig, axes = plt.subplots(1, 3, figsize=(9.8, 3.2), sharey=True)
for axis, metric, level in zip(axes, ["zero-shot/acc1", "retrieval/image_retrieval_recall@1",
                                      "retrieval/text_retrieval_recall@1"],
                               [chance["zero-shot"], chance["retrieval"], chance["retrieval"]]):
    sns.barplot(data=plot, y="method", x=metric, errorbar="sd", ax=axis, color="steelblue")
    notebook.chance_line(axis, level, vertical=True)
    notebook.percent_axis(axis, "x")
    axis.set(xlabel=labels[metric], ylabel="")
axes[0].legend(loc="lower right")
fig.suptitle("Unseen concepts: same data, budget and seeds (mean ± sd over seeds)")
plt.tight_layout()

# %% [markdown]
# ## Zero-shot: one prompt or the average of K
#
# The paper embeds short texts differently from long ones (§4.1):
#
# > For tasks with short text input, we apply a single prompt for inference, which is the first prompt at
# > the scene level provided in the supplementary material.
#
# That prompt is "this image description". Every zero-shot number of this chapter follows that rule (the
# class name under one prompt); the average of the K facet embeddings of a class name, which is what a
# long caption gets, is measured on the very same trained projectors as a variant:

# %%
one_prompt = compare(runs.values("zero-shot/acc1", **flame.main_setting(cfg)), runs.values("zero-shot-avg/acc1", **flame.main_setting(cfg)))
rule_sentence = one_prompt.says("one prompt (paper)", f"average of {K} facets")
print(rule_sentence)

# %% [markdown]
# ## The prompt ablation: 1 → K facets
#
# The paper's Table 6 goes from one prompt to seven and Urban-1k text→image R@1 rises from 41.3 to 66.6
# (long captions); ImageNet top-1 (a short-text task) moves from 33.8 to 36.0. With reset position ids a
# facet's embedding does not depend on the other facets, so the embeddings for k < K facets are the
# first k of the K cached ones: the ablation costs no LLM pass. Each k trains a fresh projector (same
# seeds, same budget); retrieval averages the k facets of a caption, zero-shot uses the one short-text
# prompt.

# %%
for seed in cfg.seeds:
    for k in counts:
        runs.add(train("flame", seed, k=k)[0])
ablation = runs.where(method="flame", loss=cfg.loss)
ablation.table(list(labels), by=["facets"], labels=labels).set_index("facets").T

# %%
by_k = ablation.frame().melt(id_vars=["facets", "seed"], value_vars=["zero-shot/acc1", "retrieval/image_retrieval_recall@1",
                                                                    "retrieval/text_retrieval_recall@1"],
                             var_name="metric", value_name="score").replace({"metric": labels})
fig, (left, right) = plt.subplots(1, 2, figsize=(9.8, 3.4), width_ratios=[1.4, 1])
sns.lineplot(data=by_k, x="facets", y="score", hue="metric", marker="o", errorbar="sd", ax=left)
notebook.percent_axis(left, "y", decimals=1)
left.set(xlabel="facet prompts per caption (k)", ylabel="on unseen concepts", xticks=sorted(by_k.facets.unique()),
         title="More facets of one caption (mean ± sd over seeds)")
similarity = flame.facet_similarity(feats.facets("train"))
sns.heatmap(similarity.numpy(), annot=True, fmt=".2f", vmin=0, vmax=1, cmap="viridis", ax=right,
            xticklabels=range(1, K + 1), yticklabels=range(1, K + 1), cbar=False)
right.set(title="cosine between facets of one caption\n(each facet's mean over captions removed)", xlabel="facet",
          ylabel="facet")
plt.tight_layout()

# %% [markdown]
# The right panel says how different the facets are: the mean cosine between facet i and facet j of the
# same training caption, after removing what every caption's facet-i state shares (a decoder's states share
# one large direction, so raw cosines are near 1 for any two texts). More facets can only help if the facets
# say different things; values near 1 mean the extra prompts read nearly the same state.

# %% [markdown]
# ## Two losses: Eq. 1 vs the official multi-positive sigmoid
#
# Same projector, data and budget; only the objective changes (not run with `quick=True`).

# %%
if cfg.compare_losses and not quick:
    for seed in cfg.seeds:
        for loss in [name for name in LOSSES if name != cfg.loss]:
            runs.add(train("flame", seed, loss=loss)[0])
hub = {**labels, "retrieval/hub_share": "captions whose nearest image is the top hub"}
runs.where(method="flame", facets=K).table(list(hub), by=["loss"], labels=hub).set_index("loss").T

# %% [markdown]
# The last row measures *hubness*: the share of the unseen captions whose nearest image is the one image
# retrieved most often (one caption of the {glue:md}`n_retrieval` would be {glue:md}`one_caption`). A loss that lets one image sit close to every
# caption makes text→image retrieval return that image for most captions, whatever they say; then R@1 can
# take the same value on every seed (the hub's own caption, plus a few), as the table of degenerate results
# below lists when it happens. InfoNCE's text-to-image term (a softmax over the images of the batch for each
# caption) penalises such an image; the sigmoid loss scores every pair on its own, and with its bias of −10
# and scale of 10 a negative pair costs little even at a high cosine (0.9 is still a logit of −1), so a short
# budget pushes a hub away only slowly. This run: {glue:md}`hubs`.

# %% [markdown]
# ## Multilingual zero-shot
#
# The paper's multilingual claim (Table 4): trained on English captions only, FLAME classifies ImageNet
# with class names in other languages, because the frozen LLM already maps languages close together; CLIP,
# trained on English, falls to near chance outside Latin scripts. In the small config, the emoji corpus carries
# every CLDR label in 12 locales (emojibase-data; `corpora.emoji.locale_labels`), and every trained model,
# unchanged, classifies the unseen drawings by their labels in English and in other languages (one
# prompt, the bare label; the figure below). The medium config has no CLDR labels for its Openclipart concepts:
# its multilingual test uses Tux Paint's translated sentences, in the section "The medium config" below.
# all-MiniLM-L6-v2 was trained on English only. SmolLM2-135M is mostly English too,
# so this is a weak test of the claim; Gemma 3 (140 languages) or the full config's Mistral-Nemo are the fair
# candidates.

# %%
locales = list(flame.label_sets(cfg, bench))
if locales:
    display(flame.language_bars(main, {f"labels:{loc}/acc1": loc for loc in locales}, chance["zero-shot"],
                                       len(zero_shot_set.classnames), "CLDR label language (every model trained on "
                                       "English captions)", "Unseen concepts classified by their labels"))

# %% [markdown]
# **Is the from-scratch tower at chance by construction?** It would be if its tokenizer could not spell the test
# languages, and then the comparison would measure a vocabulary, not what the frozen LLM knows. So the tower reads
# text through **the frozen LLM's own tokenizer** (SmolLM2's byte-level BPE in small and medium, Mistral-Nemo's in
# full): FLAME and the baseline see exactly the same pieces, and no piece of any script is unknown. What the tower
# lacks is training: a piece that never occurs in an English training caption keeps the random embedding it started
# with. The table measures both on the class texts of each language (small: the CLDR labels; medium: Tux Paint's
# sentences). The second column, not the first, is why the tower cannot read other languages. The paper's Table 4
# compares models trained on English-dominated data too (FLAME on YFCC15M, CLIP on WIT-400M), and its averages 40.6
# vs 19.2 include English: FLAME's advantage there is what its frozen LLM already knows. Here the scratch tower is
# near chance in English as well (the unseen concepts' words), so this test shows that FLAME reads these sentences at
# all, not Table 4's contrast of a baseline strong in English that collapses elsewhere.

# %%
class_texts = (feats.tux_sentences if medium else
               {loc: labelled.classnames for loc, labelled in flame.label_sets(cfg, bench).items()})
if class_texts:
    tokenizer = feats.tokenizer
    special = set(tokenizer.all_special_ids)
    in_training = {i for text in flame.text_sets(cfg, bench)["train"][0] for i in tokenizer(text)["input_ids"]}
    coverage = []
    for loc, texts in class_texts.items():
        ids = [i for text in texts for i in tokenizer(text)["input_ids"] if i not in special]
        coverage.append({"language": loc, "word pieces": len(ids),
                         "unknown to the tokenizer %": round(100 * sum(i == tokenizer.unk_token_id for i in ids) / len(ids), 1),
                         "never in an English training caption %": round(100 * sum(i not in in_training for i in ids) / len(ids), 1)})
    display(pd.DataFrame(coverage).set_index("language"))

# %% [markdown]
# ## The medium config: more concepts, longer descriptions, five languages
#
# The **medium config** trains on the medium corpus (`corpora.medium`: Openclipart,
# OpenMoji, Fluent UI emoji and game-icons drawings, concept families split 70/10/20, the ShareLock chapter's
# split) with **long** captions: an Openclipart drawing's title, keywords and the uploader's description, an
# emoji's label, keywords and group, a game icon's name. The LLM pass is the cost: measured at about 0.1 s per
# caption for the three facets with SmolLM2-135M on 2 CPU cores, so the run uses fixed seeded subsets of the
# splits (`chapters.flame.subsets`; the same rows for every method and seed): {glue:md}`medium_sizes`.
# Every method trains under one budget rule: AdamW, batch 256, evaluated on the validation subset every 5 steps,
# stopped after 30 evaluations without improvement (at most 600 steps), the best weights kept. (Validating every 25 steps
# was too coarse: the heads overfit the curve's smaller training sets within 25 steps, and most of those runs
# kept their first evaluation.) A run whose best evaluation is its first
# has not trained (the ShareLock chapter counts such *stuck* runs): {glue:md}`medium_stuck`.
#
# Besides the unseen concepts (zero-shot among all {glue:md}`medium_classes` unseen concepts, chance
# {glue:md}`medium_chance`; a synonym of the true concept, "ants" for "ant", counts as correct, as in the ShareLock
# chapter's "Zero-shot evaluation") the medium config tests two things the small one cannot: **Tux Paint's photo-like
# stamps** of unseen concepts (never trained on: drawings to photo-like cut-outs) and **multilingual zero-shot**:
# every Tux Paint stamp whose sentence exists in {glue:md}`medium_locales`, one class per concept, the class prompt
# being the sentence of the concept in that language ("A frog.", "Ein Frosch.", "Лягушка.", "カエル"), a short text
# under FLAME's one prompt. Every model was trained on English captions only.

# %%
if medium:
    per_run = runs.frame().assign(facets=lambda f: f["facets"].map(lambda k: "–" if pd.isna(k) else f"{int(k)}"),
                                  loss=lambda f: f["loss"].fillna("–"))
    display(per_run.groupby(["method", "facets", "loss"])[["best_step", "train_s"]].agg(["min", "mean", "max"])
            .round(1).rename(columns={"best_step": "best step", "train_s": "training seconds"}))
    extra = {"tux-photo/acc1": f"Tux Paint photo-like, {len(bench.zero_shot[1].classnames)} unseen classes",
             "retrieval-openclipart/image_retrieval_recall@1": "text→image R@1, Openclipart rows",
             "retrieval-openclipart/text_retrieval_recall@1": "image→text R@1, Openclipart rows"}
    medium_findings = flame.findings(cfg, bench, runs)
    table = main.table(list(extra), by=["method"], labels=extra).set_index("method").T
    chance_of = dict(zip(extra.values(), ("chance_tux_photo", "chance_openclipart_retrieval", "chance_openclipart_retrieval")))
    table["chance"] = [f"{100 * medium_findings[chance_of[row]]:.2f}" if row in chance_of else "" for row in table.index]
    display(table)

# %%
if medium:
    display(flame.language_bars(main, {f"tux:{loc}/acc1": loc for loc in cfg.tux_locales},
                                       medium_findings["chance_tux"], len(feats.tux_images.classnames),
                                       "language of the class sentence (every model trained on English captions)",
                                       "Tux Paint stamps classified by their sentences"))


# %% [markdown]
# **Photographs: Caltech-101.** Table 3's test is ImageNet's photographs named zero-shot by a model trained on
# CC3M's captions, whose words cover most of ImageNet's classes. The closest offline analogue: Caltech-101's 101
# object categories (real photographs, a user's download: `make setup-medium` prepares it), named by "a photo of a
# {name}." after training on the drawings' captions alone, every method with its recipe and seeds above. Each seed is
# scored on its own seeded sample of {glue:md}`caltech_sample`, so the interval over seeds spans the photos as well as
# the training. {glue:md}`caltech_cover`

# %%
if medium and feats.caltech is not None:
    photos = {"caltech/acc1": "Caltech-101 top-1", "caltech/acc5": "Caltech-101 top-5"}
    caltech_table = main.table(list(photos), by=["method"], labels=photos).set_index("method").T
    level = {"Caltech-101 top-1": 1, "Caltech-101 top-5": 5}  # chance: k of the 101 categories
    caltech_table["chance"] = [f"{100 * level[row] / len(feats.caltech.classnames):.2f}" if row in level else ""
                               for row in caltech_table.index]
    display(caltech_table)
    fig, axis = plt.subplots(figsize=(6.4, 2.8))
    sns.barplot(data=main.frame(), y="method", x="caltech/acc1", errorbar="sd", ax=axis, color="steelblue")
    notebook.chance_line(axis, 1 / len(feats.caltech.classnames), vertical=True)
    notebook.percent_axis(axis, "x")
    axis.set(xlabel="Caltech-101 zero-shot top-1 (101 categories)", ylabel="")
    axis.legend(loc="lower right")
    axis.set_title("Photographs, trained on the drawings' captions (mean ± sd over seeds)")
    plt.tight_layout()

# %% [markdown]
# **Facets on longer descriptions.** The three facets of an emoji caption are near-copies of each other (the
# heatmap of the prompt ablation). Openclipart's captions are the longest of the corpus (some carry a description of several
# sentences); if the facets pull different things out of a caption anywhere, it is there. The mean cosine
# between two facets of one caption (each facet's mean removed), per source of the training subset, and the
# 1-facet vs 3-facet retrieval on the Openclipart rows of the unseen subset:

# %%
if medium:
    by_source = flame.facet_similarity_by_source(feats, bench)
    display(pd.DataFrame({"mean facet cosine": by_source}).round(3))
    oc = {"retrieval-openclipart/image_retrieval_recall@1": "Openclipart text→image R@1",
          "retrieval-openclipart/text_retrieval_recall@1": "Openclipart image→text R@1"}
    display(runs.where(method="flame", loss=cfg.loss).table(list(oc), by=["facets"], labels=oc).set_index("facets").T)

# %% [markdown]
# **More data.** The headline comparison, FLAME against the text tower trained from scratch, at
# {glue:md}`medium_curve_sizes` training pairs: nested prefixes of the training subset, {glue:md}`medium_curve_seeds`
# each, the same budget rule. The paper's claim is about *data efficiency*: a frozen LLM should matter most when pairs are few,
# and a text tower that learns its words from the pairs should close part of the gap as they grow.

# %%
if medium:
    curve = flame.data_size_curve(cfg, bench, feats, runs, configs)
    every = Runs({(flame.run_key(r, cfg), r["seed"], r["train_pairs"]): r for r in [*runs, *curve]}.values())  # each run once
    stuck = flame.stuck_runs(every, cfg)
    print(f"{len(every)} training runs, {len(stuck)} stuck (best step = first evaluation)")
    display(flame.curve_frame(curve, "zero-shot/acc1").set_index("training pairs"))
    fig, axes = plt.subplots(1, 2, figsize=(9.8, 3.4))
    for axis, metric, level in zip(axes, ["zero-shot/acc1", "retrieval/image_retrieval_recall@1"],
                                   [chance["zero-shot"], chance["retrieval"]]):
        sns.lineplot(data=curve.frame(), x="train_pairs", y=metric, hue="method", marker="o", errorbar="sd", ax=axis)
        notebook.chance_line(axis, level)
        notebook.percent_axis(axis, "y", decimals=1)
        axis.set(xscale="log", xlabel="training pairs (nested subsets)", ylabel=labels[metric])
        axis.set_xticks(list(cfg.curve_sizes), [f"{n:,}" for n in cfg.curve_sizes])
    fig.suptitle("FLAME vs the text tower from scratch as the data grow (mean ± sd over seeds)")
    plt.tight_layout()

# %% [markdown]
# {glue:md}`medium_story`

# %% [markdown]
# ## What the comparisons say
#
# Every verdict has one meaning in the whole book, a paired interval over the seeds:

# %%
print(RULE)

# %%
facet_cosine = float(similarity[~torch.eye(K, dtype=torch.bool)].mean()) if K > 1 else None
diagnosis = {"more_facets_help": (
    f"the facets of one caption are near-copies of each other: mean cosine {facet_cosine:.2f} between facets of "
    "one caption, each facet's mean over captions removed") if facet_cosine is not None else None}
if medium:
    diagnosis["more_facets_help"] += f" (Openclipart's captions alone: {by_source['openclipart']:.2f})"
    diagnosis["frozen_llm_beats_scratch"] = flame.curve_trend(curve, "zero-shot/acc1")
    if feats.caltech is not None:
        covered, n_names = flame.caltech_word_cover(cfg, bench)
        diagnosis["frozen_llm_beats_scratch_photos"] = (
            f"{covered} of Caltech-101's {n_names} category names have every word in the {rows['train']:,} training "
            "captions (a text tower from scratch can know those words); data-size curve on the unseen drawings: "
            + flame.curve_trend(curve, "zero-shot/acc1"))
    matches = {loc: flame.translation_match(feats, loc) for loc in cfg.tux_locales if loc != "en"}
    diagnosis["multilingual_transfer"] = (
        "FLAME's top-1 with English sentences " + runs.summary("tux:en/acc1", **flame.main_setting(cfg)).text()
        + " %, with the others " + runs.summary("tux:other/acc1", **flame.main_setting(cfg)).text() + " %; before "
        "training, a sentence's nearest English sentence under SmolLM2's prompt is the same class for "
        + ", ".join(f"{100 * v:.0f} % ({loc})" for loc, v in matches.items())
        + f" of the {len(feats.tux_images.classnames)} classes")
claims = flame.claims(cfg, bench, runs, diagnosis=diagnosis)
coincidences = pd.DataFrame(flame.coincidences(cfg, bench, runs))
for claim in claims:
    print(f"{claim.statement}:\n  {claim.evidence} -> {claim.verdict}")
if len(coincidences):
    display(coincidences.set_index("results"))

# %% [markdown]
# The table above (`chapters.flame.coincidences`), when it is not empty, lists the results that look
# degenerate, with the values of every seed: two settings whose means agree to the shown digit, and a
# metric with one value on every seed. Where the seeds differ, a tie is a coincidence of a coarse metric (a
# seed's R@1 among N candidates moves in steps of 100/N points: {glue:md}`step_text`). A value
# repeated on every seed is either a small count near chance (a few correct answers) or a sign that the seed did not change what the metric sees (the hub images of
# the sigmoid loss, above: the same hub on every seed, its own caption and one more retrieved).
#
# How to read the comparisons:
#
# * **FLAME vs the ShareLock head on the same LLM** asks where the trainable part should sit and how
#   the LLM is read. FLAME keeps the LLM's space and moves the images into it; ShareLock moves the text
#   into the image space. The readout matters most for **zero-shot**, where the prompt (a bare class
#   name) looks nothing like the long training captions: ShareLock reads the name's last word, a state
#   unlike the final "." of every training caption (the ShareLock chapter measures the same effect),
#   whereas FLAME wraps names and captions in the same prompt and always reads the same final `:"`.
#   Retrieval with long captions has no such mismatch and is the fairer test of the two heads.
# * **MiniLM**, a 22M-parameter sentence encoder (a sixth of SmolLM2), is a strong baseline on English: at
#   135M parameters the LLM's space is far less organised than Mistral-Nemo's, and the paper's
#   decoder advantage is a scale effect (see the ViTeRB chapter).
# * **Against the text tower trained from scratch**: the paper's data-efficiency claim (ImageNet 36.0 vs
#   CLIP's 16.0 on CC3M) is about what a frozen language model brings when pairs are few; this run's
#   {glue:md}`n_train` training pairs are very few, and the scratch tower only learns the pieces it saw. On unseen
#   drawn concepts (held-out concept families) it is asked for words it may never have read, a test its
#   construction nearly decides, so the medium config decides the paper's claim on Caltech-101's photographs
#   (Table 3's setting: photos named after training on captions) and keeps the drawings as the book's own question.
# * **1 → K facets**: more prompts of one caption help only if the facets say different things (the
#   heatmap above). The first three official facets ("this image description", "the category of the main
#   object", "its prominent characteristic") are near-paraphrases on a one-object emoji caption; the
#   paper's seven on long photo descriptions (minor objects, actions, atmosphere) are not.
# * **The two losses**: the sigmoid loss starts with a bias of −10, i.e. every pair predicted
#   negative, and spends its first steps undoing it; at this run's budget ({glue:md}`budget_text`) it may be
#   far from converged (and lets hub images form, above), so this compares the losses at this budget, not at
#   the official one.
# * **Multilingual**: an English-trained projector classifying with German or Japanese labels works only
#   as far as the frozen text model places translations near each other. Read each language against the
#   same model's English column.

# %% [markdown]
# ## Paper, official code, this book
#
# | | paper (Cao et al. 2025) | official code ([MIV-XJTU/FLAME @ 4d2b9a9](https://github.com/MIV-XJTU/FLAME/tree/4d2b9a932f205cbfc1d5a9ec9320e4e240ec66de)) | this book |
# |---|---|---|---|
# | text encoder | Mistral-Nemo (12B), frozen | Mistral-Nemo-Instruct-2407, fp16 | small and medium: SmolLM2-135M-Instruct (de-quantised from GGUF; small in fp32, medium in `dtype: auto`, bfloat16 on a CPU with bfloat16 units); full: Mistral-Nemo-Instruct |
# | layer read | "the final hidden state" | block 39 of 40, before the final norm | after the final norm (`layer: -1`); `layer: 39` reproduces the code |
# | prompt | template P below | template C below (single prompt; the long template starts "Detailed Image description :"), a "." appended to the caption | the paper's; `prompt: official` uses the code's single-prompt template and caption ending |
# | facets | 7 for long texts; 1 for short texts ("this image description", §4.1) | 7 long + 3 short + 1 raw = 11 cached embeddings per image | small and medium: the first 3 of the 7 on long CLDR / Openclipart captions; full: the 7; short texts under the one prompt |
# | position ids | each facet as its own pass | *contiguous* across facets (facets 2..K differ from separate passes) | *reset*: checked equal to separate passes above; `positions: contiguous` reproduces the code |
# | image tower | ViT-B/16 trained from scratch + 2-layer MLP | same; MLP on every token, then averaged | small and medium: frozen, cached image feature; only the MLP trains (hidden 1,024, on one pooled vector); full: open_clip's ViT-B-16 trained from scratch at 224 px (`lib.methods.image_tower.WithImageTower`), its 2.9M training images decoded per batch from the prepared tar shards, + the MLP on its pooled output (`image_tower: null`: frozen DINOv2-B features) |
# | loss | Eq. 1: Σ over facets of CLIP InfoNCE (summed over images as printed), τ₀ = 0.07 | multi-positive sigmoid (6 of 11 positives, τ = 0.1, bias −10) | Eq. 1 averaged over the batch (a constant factor); the sigmoid loss compared (all K positives) |
# | optimiser (CC3M) | Table A1: AdamW, batch 4,096, lr 5e-4, wd 0.5, β (0.9, 0.98), ε 1e-8, 2,000 warm-up iterations, 32 epochs, cosine | `Training.md`: batch 384 × 8 = **3,072** (512 × 8 in its first release), **β₂ 0.95**, otherwise the same | full: Table A1 (22,703 steps = 32 epochs of 2,905,954 pairs); small: AdamW, β (0.9, 0.98), 90 steps of 128; medium: the same AdamW, batch 256, at most 600 steps, early stopping on validation loss (every 5 steps, patience 30) |
# | data | CC3M re-captioned by MiniCPM-Llama3-V 2.5: long + short + raw captions | same (its ReCap-CC3M release, hub id below) | full: its long captions only (manifest below); small: 200 emoji with long CLDR captions; medium: a seeded 3,000 of the medium corpus's 11,416 training drawings with long captions |
# | zero-shot evaluation | one prompt (§4.1) | one prompt, CLIP's ImageNet templates averaged | one prompt; the K-facet average measured as a variant; medium adds Caltech-101's photographs (Table 3's claim is decided there), Tux Paint photos and Tux Paint's sentences in four more languages |
# | headline | ImageNet 36.0 (CLIP 16.0, Table 3); Urban-1k T2I R@1 41.3 → 66.6 with 1 → 7 prompts (Table 6); multilingual ImageNet 40.6 vs CLIP 19.2 (Table 4) | — | this run, below |
#
# The released captions are the hub dataset `caj/FLAME-ReCap-CC3M-MiniCPM-Llama3-V-2_5`, read by the full config
# through `data_manifests/flame-recap-cc3m.yaml`.
#
# The two prompt templates (`<facet>` is one facet phrase):
#
# * P (paper, §3.2): `Detailed image description: "<caption>". After thinking step by step,
#   <facet> means in just one word:"`
# * C (official code, `model.py`): `Image description : "<caption>." . After thinking step by step ,
#   <facet> means in just one word:"`
#
# **What the frozen image side changes.** The paper's image tower *learns* from the LLM's targets; in the small
# and medium configs it cannot: the image features are fixed, and the MLP only maps them. So those configs test
# FLAME's *text side* (prompted, frozen LLM as the target space; facets; decoupled attention) with every method
# on the same fixed image features, not FLAME's data efficiency for training a ViT. Likewise their from-scratch
# baseline trains a text tower against locked image features (LiT's recipe) rather than CLIP's two towers from
# scratch; the Three Towers chapter shows what two towers from scratch reach on a few thousand drawings. The
# **full** config is the paper's setting: every method trains a ViT-B/16 from scratch in front of its own image
# side, and the from-scratch baseline is CLIP (two towers from scratch), as in Table 3. Its 2.9M training images
# stream from their tar shards, decoded per batch, and the facet features from the store's shards
# (`train_data: streamed`), so no `data.limit` is needed; the pre-flight computes the GPUs and checkpointing that fit.
#
# **Penultimate vs last layer, contiguous vs reset positions.** Both are one field of
# `lib.core.facets.FacetConfig`; `tests/test_facets.py` checks that the penultimate layer also equals
# separate passes under decoupled attention, and that contiguous positions do not (after the first
# facet), which is what the official code computes.

# %% [markdown]
# ## What reproduced, what did not
#
# One line per claim of the paper that this run can test, with the paper's number, this run's and the
# verdict of the rule above (reproduced: the interval of A − B lies on the paper's side of 0; not reproduced:
# on the other side; no effect at this scale: inside ± the paper's effect applied here; inconclusive:
# otherwise, with the MDE).

# %%
verdicts = pd.DataFrame([{"claim": c.statement, "from": c.origin, "paper": c.paper_column,
                          "this run": c.evidence, "verdict": c.verdict} for c in claims])
with pd.option_context("display.max_colwidth", None):
    display(verdicts.style.hide(axis="index"))

# %% tags=["remove-cell"]
findings = flame.findings(cfg, bench, runs)
findings.update({"equivalence_max_abs_diff": equivalence_gap,
                 "facet_mean_cosine": facet_cosine})
findings.update({f"bench/{flame.short(r['model'])}/speedup_vs_separate": r["speedup_vs_separate"] for r in speed["results"]})
findings.update({f"bench/{flame.short(r['model'])}/speedup_vs_stacked": r["speedup_vs_stacked"] for r in speed["results"]})
hub_text = "; ".join(f"{name}: {runs.summary('retrieval/hub_share', method='flame', facets=K, loss=name).text()} %"
                     for name in LOSSES if runs.where(method="flame", facets=K, loss=name))
notebook.glue("hubs", hub_text or "(the loss comparison did not run)", markdown=True)
notebook.glue("runtime", notebook.runtime(started), markdown=True)
notebook.glue("run_scope", f"this page shows the **{config}** config's run, and every number in its prose comes from "
              "that run", markdown=True)
notebook.glue("n_unseen", f"{len(zero_shot_set.classnames):,}", markdown=True)
notebook.glue("n_retrieval", f"{rows['retrieval']:,}", markdown=True)
notebook.glue("n_train", f"{rows['train']:,}", markdown=True)
notebook.glue("run_rows", f"{rows['train']:,} training, {rows['val']:,} validation and {rows['retrieval']:,} "
              f"retrieval pairs; {len(zero_shot_set.classnames):,} unseen classes", markdown=True)
notebook.glue("chance_text", f"{100 * chance['zero-shot']:.3f} % for zero-shot among {len(zero_shot_set.classnames):,} "
              f"classes, {100 * chance['retrieval']:.2f} % for retrieval among {rows['retrieval']:,} captions",
              markdown=True)
notebook.glue("one_caption", f"{100 * chance['retrieval']:.2f} %", markdown=True)
notebook.glue("step_text", f"{100 * chance['retrieval']:.2f} points for this run's retrieval, a mean over "
              f"{len(cfg.seeds)} seeds in steps of {100 * chance['retrieval'] / len(cfg.seeds):.3f}", markdown=True)
notebook.glue("budget_text", f"at most {cfg.train.steps} steps of {cfg.train.batch_size} on {rows['train']:,} pairs",
              markdown=True)
if medium:
    stuck_text = f"{len(stuck)} of the {len(every)} training runs stuck"
    notebook.glue("medium_sizes", f"{rows['train']:,} of the {len(bench.train):,} training pairs, {rows['val']:,} of "
                  f"{len(bench.val):,} validation pairs and {rows['retrieval']:,} of the {len(bench.retrieval):,} unseen "
                  "pairs for retrieval (chance 0.1 %)", markdown=True)
    notebook.glue("medium_stuck", stuck_text + ("" if not stuck else " (" + ", ".join(
        f"{r['method']} seed {r['seed']} at {r['train_pairs']} pairs" for r in stuck) + ")"), markdown=True)
    notebook.glue("medium_classes", f"{len(zero_shot_set.classnames):,}", markdown=True)
    notebook.glue("medium_chance", f"{100 * chance['zero-shot']:.3f} %", markdown=True)
    notebook.glue("medium_locales", f"all of {', '.join(cfg.tux_locales)} ({len(feats.tux_images):,} stamps, "
                  f"{len(feats.tux_images.classnames)} classes, chance {100 * findings['chance_tux']:.2f} %)", markdown=True)
    notebook.glue("medium_curve_sizes", ", ".join(f"{n:,}" for n in cfg.curve_sizes), markdown=True)
    if feats.caltech is not None:
        notebook.glue("caltech_sample", f"{cfg.caltech_per_class} photos a category ({cfg.caltech_per_class * len(feats.caltech.classnames):,} "
                      f"of the {len(feats.caltech):,}; chance {100 / len(feats.caltech.classnames):.2f} %)", markdown=True)
        notebook.glue("caltech_cover", f"{covered} of the {n_names} category names have every word in the "
                      f"{rows['train']:,} training captions, so a text tower from scratch can know their words; the "
                      "others it can only spell.", markdown=True)
        findings["caltech_names_covered"] = covered / n_names
    else:
        notebook.glue("caltech_sample", "(Caltech-101 not in this config)", markdown=True)
        notebook.glue("caltech_cover", "", markdown=True)
    notebook.glue("medium_curve_seeds", f"{len(cfg.curve_run_seeds)} seeds ({', '.join(map(str, cfg.curve_run_seeds))})",
                  markdown=True)
    for (method, size), group in curve.frame().groupby(["method", "train_pairs"]):
        findings[f"curve/{method}/{int(size)}/zero_shot_acc1"] = float(group["zero-shot/acc1"].mean())
    findings.update({f"facet_cosine/{k}": v for k, v in by_source.items()})
    findings.update({f"translation_match/{k}": v for k, v in matches.items()})
    findings["stuck_runs"] = len(stuck)
    def mean_sd(metric: str, **where) -> str:
        return runs.summary(metric, **where).text() + " %"

    def each(metric: str) -> str:  # FLAME's main setting only: not the facet or loss ablations' runs
        return "; ".join(f"{r} {mean_sd(metric, **(flame.main_setting(cfg) if m == 'flame' else {'method': m}))}"
                         for r, m in (
            ("FLAME", "flame"), *[(f"ShareLock head on {flame.short(b.name)}", f"sharelock/{flame.short(b.name)}")
                                  for b in cfg.baselines], ("text tower from scratch", "scratch")))

    verdict = {c.id: c.verdict for c in claims}
    photo_line = [] if feats.caltech is None else [
        f"- *Caltech-101's photographs, zero-shot top-1 among {len(feats.caltech.classnames)}* (chance "
        f"{100 / len(feats.caltech.classnames):.2f} %; {cfg.caltech_per_class} photos a category, a sample per seed): "
        f"{each('caltech/acc1')}. FLAME vs scratch (Table 3's claim): **{verdict['frozen_llm_beats_scratch']}**; "
        f"{covered} of the {n_names} category names have every word in the training captions."]
    drawn = "frozen_llm_beats_scratch_unseen_words" if feats.caltech is not None else "frozen_llm_beats_scratch"
    notebook.glue("medium_story", "\n".join([
        "**What the medium run shows** (means ± sd over seeds "
        f"{', '.join(map(str, cfg.seeds))}; every number computed by this run).", "", *photo_line,
        f"- *Unseen concepts, zero-shot top-1 among {len(zero_shot_set.classnames):,}* (chance "
        f"{100 * chance['zero-shot']:.3f} %): {each('zero-shot/acc1')}. FLAME vs scratch: "
        f"**{verdict[drawn]}**.",
        f"- *Unseen captions, text→image R@1 among {rows['retrieval']:,}* (chance {100 * chance['retrieval']:.1f} %): "
        f"{each('retrieval/image_retrieval_recall@1')}.",
        f"- *Tux Paint's photo-like stamps of unseen concepts, top-1 among {len(bench.zero_shot[1].classnames)}* "
        f"(chance {100 * findings['chance_tux_photo']:.1f} %): {each('tux-photo/acc1')}.",
        f"- *Tux Paint in {len(cfg.tux_locales) - 1} other languages, mean top-1 among "
        f"{len(feats.tux_images.classnames)}* (chance {100 * findings['chance_tux']:.2f} %): {each('tux:other/acc1')}; "
        f"in English: {each('tux:en/acc1')}. FLAME vs scratch: **{verdict['multilingual_transfer']}**.",
        f"- *3 vs 1 facets*, text→image R@1: {mean_sd('retrieval/image_retrieval_recall@1', **flame.main_setting(cfg))}"
        f" vs {mean_sd('retrieval/image_retrieval_recall@1', method='flame', facets=1)} "
        f"(**{verdict.get('more_facets_help', '–')}**); on the Openclipart rows "
        f"{mean_sd('retrieval-openclipart/image_retrieval_recall@1', **flame.main_setting(cfg))} vs "
        f"{mean_sd('retrieval-openclipart/image_retrieval_recall@1', method='flame', facets=1)}; the facets of one "
        f"caption have a mean cosine of {facet_cosine:.2f} (Openclipart: {by_source['openclipart']:.2f}).",
        f"- *Data-size curve*, zero-shot top-1: {flame.curve_trend(curve, 'zero-shot/acc1')}.",
    ]), markdown=True)
else:
    for name in ("medium_sizes", "medium_stuck", "medium_classes", "medium_chance", "medium_locales",
                 "medium_curve_sizes", "medium_curve_seeds", "medium_story", "caltech_sample", "caltech_cover"):
        notebook.glue(name, "(medium config only)", markdown=True)
box = [":::{admonition} Key findings (computed by this run)", ":class: tip", ""]
box += [f"This page shows the **{config}** config's run ({len(cfg.seeds)} seeds).", ""]
box += [findings_table(claims), ""]
arms = [("Caltech-101 photographs", "caltech/acc1", findings["chance_caltech"])] if "chance_caltech" in findings else []
arms += [(f"{len(zero_shot_set.classnames):,} unseen concepts", "zero-shot/acc1", chance["zero-shot"])]
box += [f"- zero-shot top-1 on {where}: FLAME {runs.summary(metric, **flame.main_setting(cfg)).text()} %, text tower "
        f"from scratch {runs.summary(metric, method='scratch').text()} %, chance {100 * level:.2f} %"
        for where, metric, level in arms]
if locales:
    above = versus(runs.values("labels:other/acc1", **flame.main_setting(cfg)), chance["zero-shot"])
    box += [f"- FLAME with the {', '.join(locales[1:])} labels against chance: "
            f"{above.says('FLAME', 'chance')}"]
if medium and feats.caltech is not None:
    above = versus(runs.values("caltech/acc1", **flame.main_setting(cfg)), findings["chance_caltech"])
    box += [f"- FLAME on Caltech-101's photographs (trained on drawings' captions) against chance: "
            f"{above.says('FLAME', 'chance')}"]
if medium:
    above = versus(runs.values("tux:other/acc1", **flame.main_setting(cfg)), findings["chance_tux"])
    box += [f"- FLAME with Tux Paint's {', '.join(cfg.tux_locales[1:])} sentences against chance: "
            f"{above.says('FLAME', 'chance')}",
            f"- data-size curve (zero-shot top-1 on unseen concepts, {len(cfg.curve_run_seeds)} seeds): "
            f"{flame.curve_trend(curve, 'zero-shot/acc1')}", f"- {stuck_text} (best step = first evaluation)"]
box += [f"- zero-shot with the paper's one short-text prompt vs the average of all facets: {rule_sentence}",
        f"- facet-decoupled attention equals {K} separate passes (max difference {equivalence_gap:.0e} in float32); "
        f"one pass is {min(r['speedup_vs_separate'] for r in speed['results']):.1f}–"
        f"{max(r['speedup_vs_separate'] for r in speed['results']):.1f}× faster than K passes (bench/facets.py)", ":::"]
notebook.glue("key_findings", "\n".join(box), markdown=True)
path = write_metrics(output_dir, chapter="flame", config=config, settings=cfg, started=started, runs=runs,
                     findings=findings, claims=claims, features=found,
                     extra={"chance": chance, "facets": list(cfg.text.facets), "sizes": rows,
                            "facet_similarity": similarity.tolist(), "coincidences": coincidences.to_dict("records"),
                            "one_prompt_vs_average": one_prompt.as_dict(), "sweep": recipe_rows,
                            "recipes": {k: {"lr": c.train.lr, "weight_decay": c.train.weight_decay}
                                        for k, c in configs.items()},
                            **({"curve": list(curve), "stuck_runs": stuck} if medium else {})})
print(f"wrote {path}")

# %% tags=["remove-cell"]
# NBVAL_CHECK_OUTPUT
print(f"unseen concepts: {len(zero_shot_set.classnames)}; retrieval set: {rows['retrieval']}; facets: {K}")
print(f"FLAME above 5x chance on unseen emoji: {findings['flame/zero_shot_acc1'] > 5 * chance['zero-shot']}")
print(f"decoupled attention equals separate passes (max diff <= 1e-4): {equivalence_gap <= 1e-4}")
print(f"benchmarked speed-up over K separate passes > 2x: {min(r['speedup_vs_separate'] for r in speed['results']) > 2}")

# %% [markdown]
# ## What to try next
#
# * `lib.core.facets.FacetConfig`: read the official code's layer (`layer: 29`, block 29 of SmolLM2's 30,
#   is the analogue of block 39 of 40), switch `positions: contiguous`, or use all seven facets
#   (`lib.core.facets.FACET_SETS["long"]`) and `offline/gemma-3-270m`, a multilingual LLM.
# * `chapters.flame.Config`: `prompt: official` embeds every text as the official code does.
# * `lib.core.facets.FacetEncoder.encode(method=...)` and `bench/facets.py`: time decoupled attention
#   against K passes on your hardware.
# * `lib.methods.flame.Flame(loss="mp_sigmoid", positives=...)`: the official loss with a random subset of
#   positives per image; `lib.methods.flame.FlameProjector(hidden_dim=None)` for the official width, max(LLM width, 4,096) (5,120 for Mistral-Nemo).
# * `lib.core.train.fit`, `lib.core.evaluate.zero_shot` and `lib.core.evaluate.retrieval` work with any of
#   these methods; `corpora.emoji.locale_labels` gives the labels in 12 locales.

# %% [markdown]
# ## References
#
# ```{bibliography}
# :filter: docname in docnames
# ```
