"""ViTeRB: which language model's features align best with a frozen vision model, on *unseen* classes.

The benchmark of Ruthardt et al. (*Do better language models have crisper vision?*, §4-5): for each
dataset, classes are split into *seen* and *unseen*; a ShareLock head is trained on (image feature,
class-text feature) pairs of the seen classes only, and scored by mean per-class accuracy on images
of the unseen classes, whose class texts it has never seen. The score, averaged over datasets, ranks
language models by how "visual" their representation of text is.

This module holds everything the chapter needs and nothing it shows: the splits (as data, checksummed),
the class texts of each type (each a named source with its own store key), the text generation of
``tools/generate_class_texts.py``, a model's perplexity on held-out text, and the train-and-score
loop. See notebooks/viterb.py, sections "Seen and unseen classes, as data", "Text per class" and
"Train on seen classes, score on unseen ones".
"""
from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal, Sequence

import torch
import yaml

from lib import emoji, manifests, wordnet
from lib.atomic import write_bytes, write_json
from lib.checksums import file_sha256
from lib.config import HeadConfig, LossConfig, StoreConfig, TextModelConfig, TrainSettings, VisionModelConfig
from lib.paths import REPO_ROOT

SMALL_DATASETS = ("emoji", "fashion-mnist")
TEXT_KINDS = ("name", "description", "encyclopedia", "reference")
GENERATED_KINDS = ("description", "encyclopedia")
CLASS_TEXT_DIR = REPO_ROOT / "data_manifests" / "class_texts"
CLASS_TEXT_MANIFEST = REPO_ROOT / "data_manifests" / "class_texts.yaml"
SPLIT_DIR = REPO_ROOT / "data_manifests" / "splits"

# The recorded prompts (``{c}`` = the class name) and decoding settings of the generated text types.
PROMPTS = {
    "description": "Describe what a {c} looks like in one sentence.",
    "encyclopedia": "Write a short encyclopedia entry about {c}.",
}
MAX_NEW_TOKENS = {"description": 40, "encyclopedia": 90}
# Template of the ``name`` text type. The same text is used for training and for the unseen classes'
# prototypes: a last-token decoder must see the same kind of text at test time as in training
# (notebooks/sharelock.py, "Prompts must look like the training captions").
NAME_TEMPLATE = "{c}"

# Fashion-MNIST class -> (WordNet noun lemma, sense number): the synset whose gloss is the class's
# reference text. Senses were chosen by reading the glosses (sense 1 in every case).
FASHION_WORDNET = {
    "T-shirt/top": ("t-shirt", 1), "Trouser": ("trouser", 1), "Pullover": ("pullover", 1),
    "Dress": ("dress", 1), "Coat": ("coat", 1), "Sandal": ("sandal", 1), "Shirt": ("shirt", 1),
    "Sneaker": ("sneaker", 1), "Bag": ("bag", 1), "Ankle boot": ("boot", 1),
}
FASHION_SPLIT_SEED = 0
FASHION_UNSEEN = 3


# --------------------------------------------------------------------------------------- splits
def seeded_class_split(classes: Sequence[str], n_unseen: int, seed: int, n_val: int = 0) -> dict:
    """Seeded random split of a class list into seen / (val) / unseen classes.

    The same function makes Fashion-MNIST's 7/3 split (written to ``data_manifests/splits``) and
    FGVC-Aircraft's 50/20 split of its 70 families at load time (from the manifest's class list).
    ``val`` classes are a subset of the seen ones, held out for early stopping.
    """
    order = list(classes)
    random.Random(seed).shuffle(order)
    unseen = sorted(order[:n_unseen], key=list(classes).index)
    seen = [c for c in classes if c not in unseen]
    return {"seed": seed, "rule": f"random.Random({seed}).shuffle(classes); first {n_unseen} unseen",
            "seen": seen, "unseen": unseen}


def write_fashion_split() -> Path:
    """Write ``data_manifests/splits/fashion-mnist.json`` (the manifest records its sha256)."""
    classes = manifests.load("fashion-mnist")["classes"]
    split = seeded_class_split(classes, FASHION_UNSEEN, FASHION_SPLIT_SEED)
    path = SPLIT_DIR / "fashion-mnist.json"
    write_json(path, split)
    return path


def load_split_file(dataset: str) -> dict:
    """A dataset's split file, checked against the sha256 its manifest records under ``splits:``."""
    entry = manifests.load(dataset).get("splits", {})
    path = REPO_ROOT / entry["file"]
    if not path.is_file():
        raise manifests.DatasetMissingError(f"{path} is missing: regenerate it with `{entry.get('made_by')}`")
    expected = entry.get("sha256")
    if expected and file_sha256(path) != expected:
        raise manifests.DatasetMissingError(
            f"{path} does not match the sha256 in data_manifests/{dataset}.yaml: the split changed; "
            f"regenerate it with `{entry.get('made_by')}` and record the new hash")
    return json.loads(path.read_text())


# ---------------------------------------------------------------------------- generated texts
def generation_classes(dataset: str) -> dict[str, str]:
    """Class key -> class name for every class whose texts the script generates."""
    if dataset == "emoji":
        return {c.key: c.label for c in emoji_concepts()}
    if dataset == "fashion-mnist":
        return {c: c for c in manifests.load("fashion-mnist")["classes"]}
    raise ValueError(f"no small-config class list for {dataset!r}")


# Emoji concepts in ViTeRB's small config. Generating two texts for all 1,906 concepts with SmolLM2 on
# two CPU cores would take ~70 minutes (measured: 1.4 concepts/s for 40 new tokens), so the small
# config uses a seeded subset of each split; every text type uses the same concepts (a fair comparison).
EMOJI_SUBSET = {"train": 192, "val": 64, "unseen": 192}
EMOJI_SUBSET_SEED = 0


def emoji_split(split: str) -> list:
    """The ViTeRB emoji concepts of one split (``train`` = seen, ``val`` = seen, held out for early
    stopping, ``unseen``): a seeded subset of ``lib.emoji``'s family-disjoint split, in corpus order."""
    concepts = emoji.split_concepts(split)
    keep = {c.key for c in random.Random(f"{EMOJI_SUBSET_SEED}-{split}").sample(concepts, EMOJI_SUBSET[split])}
    return [c for c in concepts if c.key in keep]


def emoji_concepts() -> list:
    """Every ViTeRB emoji concept (seen, val and unseen), in corpus order."""
    chosen = {c.key for split in EMOJI_SUBSET for c in emoji_split(split)}
    return [c for c in emoji.load_concepts() if c.key in chosen]


def generate_texts(model_name: str, classes: dict[str, str], kind: str, *, batch_size: int = 64,
                   device: str = "cpu") -> dict:
    """Generate one text per class with an instruction-tuned causal LM: its chat template around the
    recorded prompt, greedy decoding, batched with left padding. Returns the record that
    ``write_class_texts`` stores (model, prompt, generation settings, texts)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lib.models import resolve

    resolved = resolve(model_name, "transformers")
    tokenizer = AutoTokenizer.from_pretrained(resolved.load_path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(resolved.load_path, dtype=torch.float32).eval().to(device)
    prompt = PROMPTS[kind]
    settings = {"do_sample": False, "max_new_tokens": MAX_NEW_TOKENS[kind], "repetition_penalty": 1.1}
    chats = {key: tokenizer.apply_chat_template([{"role": "user", "content": prompt.replace("{c}", name)}],
                                                add_generation_prompt=True, tokenize=False)
             for key, name in classes.items()}
    keys = sorted(chats, key=lambda k: len(chats[k]))  # similar lengths per batch: little padding
    texts = {}
    with torch.no_grad():
        for start in range(0, len(keys), batch_size):
            batch_keys = keys[start : start + batch_size]
            batch = tokenizer([chats[k] for k in batch_keys], return_tensors="pt", padding=True,
                              add_special_tokens=False).to(device)
            out = model.generate(**batch, **settings, pad_token_id=tokenizer.pad_token_id)
            for key, row in zip(batch_keys, out[:, batch["input_ids"].shape[1]:]):
                texts[key] = " ".join(tokenizer.decode(row, skip_special_tokens=True).split())
    return {
        "model": {"name": model_name, **resolved.identity},
        "prompt": prompt,
        "chat_template": "the model's own (tokenizer.apply_chat_template, add_generation_prompt=True)",
        "generation": {**settings, "batch_size": batch_size, "padding_side": "left", "dtype": "float32"},
        "texts": {k: texts[k] for k in classes},
    }


def class_text_path(dataset: str, kind: str) -> Path:
    return CLASS_TEXT_DIR / f"{dataset}-{kind}.json"


def _text_manifest() -> dict:
    if CLASS_TEXT_MANIFEST.is_file():
        return yaml.safe_load(CLASS_TEXT_MANIFEST.read_text()) or {}
    return {}


def write_class_texts(dataset: str, kind: str, record: dict) -> Path:
    """Write a generated-text file and record its sha256 in ``data_manifests/class_texts.yaml``."""
    path = class_text_path(dataset, kind)
    write_json(path, record)
    manifest = _text_manifest()
    manifest.setdefault("name", "class_texts")
    manifest.setdefault("description", "ViTeRB class texts generated by tools/generate_class_texts.py "
                        "(never edited by hand); one JSON file per dataset and text type.")
    manifest.setdefault("made_by", "python -m tools.generate_class_texts --dataset <dataset> --kind <kind>")
    manifest.setdefault("obtain", "shipped in this repository; regenerate with `python -m tools.generate_class_texts "
                        "--dataset <dataset> --kind <kind>`")
    manifest.setdefault("location", "data_manifests/class_texts")
    files = [f for f in manifest.get("files", []) if f["file"] != path.name]
    files.append({"file": path.name, "dataset": dataset, "kind": kind, "model": record["model"]["name"],
                  "prompt": record["prompt"], "classes": len(record["texts"]), "sha256": file_sha256(path)})
    manifest["files"] = sorted(files, key=lambda f: f["file"])
    write_bytes(CLASS_TEXT_MANIFEST, yaml.safe_dump(manifest, sort_keys=False, allow_unicode=True, width=110).encode())
    return path


def load_class_texts(dataset: str, kind: str) -> dict:
    """A generated-text file, checked against the sha256 in ``data_manifests/class_texts.yaml``."""
    path = class_text_path(dataset, kind)
    entries = {f["file"]: f for f in _text_manifest().get("files", [])}
    how = f"python -m tools.generate_class_texts --dataset {dataset} --kind {kind}"
    if not path.is_file() or path.name not in entries:
        raise manifests.DatasetMissingError(f"{path} (or its manifest entry) is missing: generate it with `{how}`")
    if file_sha256(path) != entries[path.name]["sha256"]:
        raise manifests.DatasetMissingError(f"{path} does not match its sha256 in {CLASS_TEXT_MANIFEST}: "
                                            f"regenerate it with `{how}`")
    return json.loads(path.read_text())


# ------------------------------------------------------------------------------------ config
@dataclass(frozen=True)
class FashionImages:
    """Fashion-MNIST t10k images per class in ViTeRB's small config (the vision models run at ~20 img/s)."""

    train_per_class: int = 150  # seen classes: head training
    val_per_class: int = 50  # seen classes: early stopping
    test_per_class: int = 200  # unseen classes: the score


TextKind = Literal["name", "description", "encyclopedia", "reference"]


@dataclass(frozen=True)
class ViterbConfig:
    """``notebooks/configs/viterb.yaml``, validated field by field on load (``lib.config``)."""

    datasets: tuple[str, ...]
    text_kinds: tuple[TextKind, ...]
    vision: tuple[VisionModelConfig, ...]  # the first is the chapter's main image model
    text: tuple[TextModelConfig, ...]
    head: HeadConfig = field(default_factory=HeadConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    train: TrainSettings = field(default_factory=TrainSettings)
    store: StoreConfig = field(default_factory=StoreConfig)
    fashion: FashionImages = field(default_factory=FashionImages)
    vision_check_seeds: int = 1  # the other vision models run only the first N seeds (a check, not the table)
    vision_check_kinds: tuple[TextKind, ...] = ("name", "reference")  # ... and only these text types
    perplexity_texts: int = 200  # held-out WordNet glosses for each decoder's own perplexity
    device: str = "cpu"
    seeds: tuple[int, ...] = (0,)


def load_config(name: str, overrides: dict | None = None) -> ViterbConfig:
    """``small`` / ``full`` of ``notebooks/configs/viterb.yaml`` (or a YAML path), validated."""
    from lib import config as configs

    return configs.load("viterb", name, ViterbConfig, overrides)


# ----------------------------------------------------------------------------- the benchmark
@dataclass(frozen=True)
class ImageSource:
    """A set of images whose features are cached as one store entry (ids and source key it)."""

    name: str
    ids: tuple[str, ...]
    load_image: Callable
    source: dict


@dataclass(frozen=True)
class Benchmark:
    """One ViTeRB dataset: classes with a role each, images with a class and a role each.

    ``class_role``: ``seen`` (train images), ``val`` (emoji: held-out seen-side concepts) or ``unseen``.
    ``image_role``: ``train``, ``val`` or ``test`` (test images are always of unseen classes).
    Image ``i`` is row ``image_rows[i][1]`` of the features of ``image_sources[image_rows[i][0]]``.
    """

    name: str
    class_keys: tuple[str, ...]
    class_names: tuple[str, ...]
    class_role: tuple[str, ...]
    image_sources: tuple[ImageSource, ...]
    image_rows: tuple[tuple[int, int], ...]
    image_labels: tuple[int, ...]  # index into class_keys
    image_role: tuple[str, ...]

    def classes(self, role: str) -> list[int]:
        return [i for i, r in enumerate(self.class_role) if r == role]

    def images(self, role: str) -> list[int]:
        return [i for i, r in enumerate(self.image_role) if r == role]

    def check_no_leak(self) -> None:
        """No image of an unseen class is used for training or validation; test images are all unseen."""
        unseen = set(self.classes("unseen"))
        for i, (label, role) in enumerate(zip(self.image_labels, self.image_role)):
            if (role == "test") != (label in unseen):
                raise AssertionError(f"{self.name}: image {i} ({role}) is of class {self.class_keys[label]!r} "
                                     f"({self.class_role[label]}): an unseen class leaked into training")


def emoji_benchmark(style: str = "google") -> Benchmark:
    """Emoji concepts: one drawing per concept, so seen concepts give the training pairs, the val
    concepts the early-stopping pairs, the unseen concepts the test. Image features are those of the
    ShareLock chapter's full ``emoji_pairs`` sets (same store entries), rows selected by concept."""
    from lib.datasets import emoji_pairs

    keys, names, roles, rows, labels, image_roles, sources = [], [], [], [], [], [], []
    for split, class_role, image_role in (("train", "seen", "train"), ("val", "val", "val"), ("unseen", "unseen", "test")):
        pairs = emoji_pairs(split, style, "label")
        sources.append(ImageSource(pairs.name, pairs.ids, pairs.load_image, pairs.source))
        position = {key: row for row, key in enumerate(pairs.concepts)}
        for concept in emoji_split(split):
            labels.append(len(keys))
            keys.append(concept.key)
            names.append(concept.label)
            roles.append(class_role)
            rows.append((len(sources) - 1, position[concept.key]))
            image_roles.append(image_role)
    return Benchmark("emoji", tuple(keys), tuple(names), tuple(roles), tuple(sources), tuple(rows),
                     tuple(labels), tuple(image_roles))


def fashion_benchmark(images: FashionImages = FashionImages()) -> Benchmark:
    """Fashion-MNIST photos (t10k): seen classes give training and validation images, unseen classes
    the test images. One cached feature entry (``datasets.fashion_mnist_labelled``) covers them all."""
    from lib.datasets import fashion_mnist_labelled

    split = load_split_file("fashion-mnist")
    per_class = max(images.train_per_class + images.val_per_class, images.test_per_class)
    photos = fashion_mnist_labelled(per_class, prompts="name")
    source = ImageSource(photos.name, photos.ids, photos.load_image, photos.source)
    classnames = list(photos.classnames)
    role = {c: "seen" for c in split["seen"]} | {c: "unseen" for c in split["unseen"]}
    rows, labels, image_roles, seen_count = [], [], [], {}
    for row, label in enumerate(photos.labels):
        name = classnames[label]
        k = seen_count.get(name, 0)
        seen_count[name] = k + 1
        if role[name] == "unseen":
            take = "test" if k < images.test_per_class else None
        else:
            take = "train" if k < images.train_per_class else "val" if k < images.train_per_class + images.val_per_class else None
        if take:
            rows.append((0, row))
            labels.append(label)
            image_roles.append(take)
    return Benchmark("fashion-mnist", tuple(classnames), tuple(classnames), tuple(role[c] for c in classnames),
                     (source,), tuple(rows), tuple(labels), tuple(image_roles))


def full_split(dataset: str, classes: Sequence[str]) -> dict:
    """Seen / unseen class lists of a full-config dataset from its manifest (``classes`` = the dataset's
    own class list, read at load time). AWA2 / CUB: Xian et al.'s proposed split; FGVC-Aircraft: a seeded
    random 50 / 20 split of the 70 families."""
    splits = manifests.load(dataset)["splits"]
    if "unseen" in splits and isinstance(splits["unseen"], list):
        unseen = list(splits["unseen"])
        missing = [c for c in unseen if c not in classes]
        if missing:
            raise manifests.DatasetMissingError(f"{dataset}: unseen classes {missing[:3]} are not in the dataset's class list")
        return {"seen": [c for c in classes if c not in unseen], "unseen": unseen}
    if "n_unseen" in splits:
        return seeded_class_split(classes, int(splits["n_unseen"]), int(splits["seed"]))
    raise manifests.DatasetMissingError(f"{dataset}: {splits.get('unseen', 'no class list')}")


def load_benchmark(dataset: str, cfg: ViterbConfig) -> Benchmark:
    if dataset == "emoji":
        return emoji_benchmark()
    if dataset == "fashion-mnist":
        return fashion_benchmark(cfg.fashion)
    from lib.datasets import _manifest_folder

    _manifest_folder(dataset, "")  # a full-config dataset: says where to get it if it is absent
    raise NotImplementedError(f"{dataset}: the full-config image loader is described in data_manifests/{dataset}.yaml "
                              "but not run in this repository (no GPU, no data); see the chapter's last section")


# ------------------------------------------------------------------------------- class texts
def class_texts(bench: Benchmark, kind: str) -> list[str]:
    """One text per class of ``bench`` (in ``class_keys`` order) of the given type.

    ``name``: the class name in ``NAME_TEMPLATE``; ``description`` / ``encyclopedia``: generated by
    ``tools/generate_class_texts.py`` (checksummed files); ``reference``: real reference text — emoji:
    the CLDR label and keywords ("label: tag, tag"), Fashion-MNIST: the WordNet 3.0 gloss.
    """
    if kind == "name":
        return [NAME_TEMPLATE.replace("{c}", name) for name in bench.class_names]
    if kind in GENERATED_KINDS:
        texts = load_class_texts(bench.name, kind)["texts"]
        missing = [k for k in bench.class_keys if k not in texts]
        if missing:
            raise manifests.DatasetMissingError(f"{class_text_path(bench.name, kind)} has no text for {missing[:3]}: regenerate it")
        return [texts[k] for k in bench.class_keys]
    if kind == "reference":
        if bench.name == "emoji":
            by_key = {c.key: c for c in emoji.load_concepts()}
            return [emoji.caption(by_key[k], "label_tags") for k in bench.class_keys]
        if bench.name == "fashion-mnist":
            return [f"{name}: {wordnet.gloss(*FASHION_WORDNET[name])}" for name in bench.class_names]
        raise manifests.DatasetMissingError(f"{bench.name}: reference text (Wikipedia articles in the paper) is not shipped")
    raise ValueError(f"text kind {kind!r} is not one of {TEXT_KINDS}")


def text_source(bench: Benchmark, kind: str) -> dict:
    """The named source of a text type: part of its store key (the texts themselves are keyed too)."""
    source = {"viterb": bench.name, "kind": kind, "classes_sha256": hashlib.sha256(
        json.dumps(list(bench.class_keys)).encode()).hexdigest()}
    if kind in GENERATED_KINDS:
        source["file_sha256"] = file_sha256(class_text_path(bench.name, kind))
    elif kind == "reference" and bench.name == "fashion-mnist":
        source["wordnet"] = "3.0 (Debian wordnet-base)"
    return source


def token_lengths(model_name: str, texts: Sequence[str]) -> list[int]:
    """Token counts under a model's tokenizer (to report what ``max_length`` truncates)."""
    from transformers import AutoTokenizer

    from lib.models import resolve

    tokenizer = AutoTokenizer.from_pretrained(resolve(model_name, "transformers").load_path)
    return [len(ids) for ids in tokenizer(list(texts))["input_ids"]]


# ------------------------------------------------------------------------ capability measures
def capability(model_name: str, texts: Sequence[str], *, batch_size: int = 16, device: str = "cpu") -> dict:
    """Parameter count of a text model and, for a causal LM, its perplexity on ``texts``.

    Perplexity = exp(mean negative log-likelihood per predicted token), each text scored alone after
    the model's BOS token when it has one (padding masked out). Encoders get ``perplexity = None``
    (a masked LM has no comparable left-to-right likelihood). Cached as JSON under the cache folder,
    keyed by the model identity and the texts.
    """
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer

    from lib.atomic import write_json as _write
    from lib.models import resolve
    from lib.paths import cache_root

    resolved = resolve(model_name, "transformers")
    key = hashlib.sha256(json.dumps([resolved.identity, list(texts)], sort_keys=True).encode()).hexdigest()[:20]
    path = cache_root() / "viterb" / f"capability-{key}.json"
    if path.is_file():
        return json.loads(path.read_text())
    config = AutoConfig.from_pretrained(resolved.load_path)
    decoder = bool(getattr(config, "is_decoder", False)) or any("CausalLM" in a for a in (config.architectures or []))
    decoder = decoder or config.model_type in ("gemma3_text", "gemma3", "llama", "mistral", "qwen2", "gpt2")
    tokenizer = AutoTokenizer.from_pretrained(resolved.load_path)
    result = {"model": model_name, "decoder": decoder, "perplexity": None, "texts": len(texts)}
    if not decoder:
        model = AutoModel.from_pretrained(resolved.load_path)
        result["params"] = sum(p.numel() for p in model.parameters())
    else:
        model = AutoModelForCausalLM.from_pretrained(resolved.load_path, dtype=torch.float32).eval().to(device)
        result["params"] = sum(p.numel() for p in model.parameters())
        tokenizer.padding_side = "right"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        nll, count = 0.0, 0
        with torch.no_grad():
            for start in range(0, len(texts), batch_size):
                batch = tokenizer(list(texts[start : start + batch_size]), return_tensors="pt", padding=True).to(device)
                ids, mask = batch["input_ids"], batch["attention_mask"]
                if tokenizer.bos_token_id is not None and not bool((ids[:, 0] == tokenizer.bos_token_id).all()):
                    bos = torch.full((len(ids), 1), tokenizer.bos_token_id, dtype=ids.dtype)
                    ids, mask = torch.cat([bos, ids], 1), torch.cat([torch.ones_like(bos), mask], 1)
                logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
                target, keep = ids[:, 1:], mask[:, 1:].bool()
                losses = torch.nn.functional.cross_entropy(logits.transpose(1, 2), target, reduction="none")
                nll += float(losses[keep].sum())
                count += int(keep.sum())
        result["perplexity"] = float(torch.exp(torch.tensor(nll / count)))
        result["tokens"] = count
    del model
    _write(path, result)
    return result


# ------------------------------------------------------------------------- train and score
@torch.no_grad()
def unseen_score(method, image_features: torch.Tensor, class_text_features: torch.Tensor, bench: Benchmark) -> float:
    """ViTeRB's score: mean per-class accuracy on test images, classified among the unseen classes
    only, whose prototypes are the head's embeddings of their class texts."""
    from lib.evaluate import mean_per_class_recall

    method.eval()
    unseen = bench.classes("unseen")
    test = bench.images("test")
    remap = {c: i for i, c in enumerate(unseen)}
    prototypes = method.embed_text(class_text_features[unseen])
    logits = method.embed_image(image_features[test]) @ prototypes.T
    labels = torch.tensor([remap[bench.image_labels[i]] for i in test])
    return mean_per_class_recall(logits, labels)


def train_and_score(bench: Benchmark, image_features: torch.Tensor, class_text_features: torch.Tensor,
                    cfg: ViterbConfig, seed: int, *, shuffle_texts: bool = False) -> dict:
    """Train a ShareLock head on (image, class text) pairs of the seen classes, early-stop on the val
    images, score on the unseen classes. ``image_features`` has one row per benchmark image,
    ``class_text_features`` one row per class. ``shuffle_texts``: the control (class texts permuted among
    the seen classes: the pairing is broken, everything else kept)."""
    from lib import train as training
    from lib.config import as_dict
    from lib.sharelock import ShareLock

    bench.check_no_leak()
    training.seed_everything(seed)
    method = ShareLock(class_text_features.shape[1], image_features.shape[1], cfg.head, cfg.loss, kind="mlp")
    text_rows = torch.arange(len(bench.class_keys))
    if shuffle_texts:
        seen = torch.tensor(bench.classes("seen"))
        text_rows[seen] = seen[torch.randperm(len(seen), generator=torch.Generator().manual_seed(seed))]
    labels = torch.tensor(bench.image_labels)

    def pairs(role):
        rows = torch.tensor(bench.images(role))
        return {"image": image_features[rows], "text": class_text_features[text_rows[labels[rows]]]}

    settings = training.TrainConfig(**{**as_dict(cfg.train), "seed": seed, "device": cfg.device})
    result = training.fit(method, pairs("train"), pairs("val"), settings)
    return {"score": unseen_score(method, image_features, class_text_features, bench),
            "chance": 1 / len(bench.classes("unseen")), "best_step": result.best_step,
            "train_s": round(result.seconds, 2)}
