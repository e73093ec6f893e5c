"""Generate the ViTeRB class texts (``description``, ``encyclopedia``) with a named LLM and recorded prompts.

Why a script and a data file: generated text is data. It is produced once, by a named model with recorded
prompts and decoding settings, shipped as ``data_manifests/class_texts/<dataset>-<kind>.json`` with its
sha256 in ``data_manifests/class_texts.yaml``, and never written by hand. The ViTeRB chapter
(``notebooks/viterb.py``, section "Text per class") reads these files through ``corpora.class_texts``.

    python -m tools.generate_class_texts --dataset fashion-mnist --kind description
    python -m tools.generate_class_texts --dataset emoji --kind all --time-only 64
    python -m tools.generate_class_texts --dataset awa2 --kind all --per-class 5 \\
        --model meta-llama/Meta-Llama-3-8B-Instruct --device cuda       # the paper's generator (full config)

The shipped small-config files hold one greedy text per class from SmolLM2-135M-Instruct; ``--per-class N``
adds N - 1 sampled texts per class with the recorded prompt variants (``corpora.class_texts.PROMPT_VARIANTS``).
"""
from __future__ import annotations

import argparse
import time

from corpora import class_texts
from corpora.full_sets import FULL_LOADERS

MODEL = "offline/smollm2-135m-instruct"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=[*class_texts.SMALL_DATASETS, *FULL_LOADERS], action="append")
    parser.add_argument("--kind", choices=[*class_texts.GENERATED_KINDS, "all"], default="all")
    parser.add_argument("--model", default=MODEL, help=f"an instruction-tuned causal LM (default {MODEL})")
    parser.add_argument("--per-class", type=int, default=1, help="texts per class (the first greedy, the rest sampled)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--time-only", type=int, default=0, help="only time generation on the first N classes")
    args = parser.parse_args()
    kinds = class_texts.GENERATED_KINDS if args.kind == "all" else (args.kind,)
    for dataset in args.dataset or class_texts.SMALL_DATASETS:
        classes = class_texts.generation_classes(dataset)
        if args.time_only:
            classes = dict(list(classes.items())[: args.time_only])
        for kind in kinds:
            start = time.time()
            record = class_texts.generate_texts(args.model, classes, kind, per_class=args.per_class,
                                                batch_size=args.batch_size, device=args.device)
            seconds = time.time() - start
            print(f"{dataset}/{kind}: {len(classes)} classes x {args.per_class} in {seconds:.0f} s "
                  f"({len(classes) * args.per_class / seconds:.2f} texts/s)", flush=True)
            if not args.time_only:
                record["generation"]["seconds"] = round(seconds, 1)
                path = class_texts.write_class_texts(dataset, kind, record)
                print(f"wrote {path}", flush=True)
            else:
                for key in list(record["texts"])[:3]:
                    print(f"  {key}: {record['texts'][key]!r}")


if __name__ == "__main__":
    main()
