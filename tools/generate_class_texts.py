"""Generate the ViTeRB class texts (``description``, ``encyclopedia``) with a named LLM and a recorded prompt.

Why a script and a data file: generated text is data. It is produced once, by a named model with a
recorded prompt and greedy decoding, shipped as ``data_manifests/class_texts/<dataset>-<kind>.json``
with its sha256 in ``data_manifests/class_texts.yaml``, and never written by hand (DESIGN.md §5).
The ViTeRB chapter (``notebooks/viterb.py``, section "Text per class") reads these files.

    python -m tools.generate_class_texts --dataset fashion-mnist --kind description
    python -m tools.generate_class_texts --dataset emoji --kind all --time-only 64
"""
from __future__ import annotations

import argparse
import time

from lib.chapters import viterb

MODEL = "offline/smollm2-135m-instruct"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=viterb.SMALL_DATASETS, action="append")
    parser.add_argument("--kind", choices=[*viterb.GENERATED_KINDS, "all"], default="all")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--time-only", type=int, default=0, help="only time generation on the first N classes")
    args = parser.parse_args()
    kinds = viterb.GENERATED_KINDS if args.kind == "all" else (args.kind,)
    for dataset in args.dataset or viterb.SMALL_DATASETS:
        classes = viterb.generation_classes(dataset)
        if args.time_only:
            classes = dict(list(classes.items())[: args.time_only])
        for kind in kinds:
            start = time.time()
            record = viterb.generate_texts(MODEL, classes, kind, batch_size=args.batch_size)
            seconds = time.time() - start
            print(f"{dataset}/{kind}: {len(classes)} classes in {seconds:.0f} s "
                  f"({len(classes) / seconds:.2f} classes/s)", flush=True)
            if not args.time_only:
                record["generation"]["seconds"] = round(seconds, 1)
                path = viterb.write_class_texts(dataset, kind, record)
                print(f"wrote {path}", flush=True)
            else:
                for key in list(record["texts"])[:3]:
                    print(f"  {key}: {record['texts'][key]!r}")


if __name__ == "__main__":
    main()
