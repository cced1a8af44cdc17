#!/usr/bin/env python3
"""How long opening a Megatron-LM indexed dataset of many documents takes.

Writes DIR/train/corpus.bin + corpus.idx (megatron-core's MMIDIDX layout, version 1, uint16
tokens): --documents documents of --tokens-per-document tokens, one sequence each (as
preprocess_data.py writes a document without --split-sentences), then runs
`tokenfeed inspect DIR --block-size 8` --repeats times and prints each run's wall time.
inspect opens the split as the loader does (the .idx mapped and validated against the .bin:
every length, pointer and document index read once) and adds its report, so its time is
an upper bound of the open's.

    perf/megatron_open.py --tokenfeed build/tools/tokenfeed --dir /tmp/megatron_100m \\
        --documents 100000000

The files are kept (pass --keep-files 0 to remove them): 100M documents of 2 tokens take a
400 MB .bin and a 2.0 GB .idx. Plain Python (no numpy): the arrays are written in chunks.
"""
import argparse
import os
import shutil
import struct
import subprocess
import sys
import time
from array import array

CHUNK = 1 << 20


def write_pair(prefix, documents, per_document):
    """The .bin (token i is i % 50000) and its .idx, in chunks of CHUNK entries."""
    with open(prefix + ".bin", "wb") as out:
        total = documents * per_document
        for start in range(0, total, CHUNK):
            out.write(array("H", (i % 50000 for i in range(start, min(total, start + CHUNK)))).tobytes())
    with open(prefix + ".idx", "wb") as out:
        out.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, documents, documents + 1))
        for start in range(0, documents, CHUNK):
            out.write((array("i", [per_document]) * (min(documents, start + CHUNK) - start)).tobytes())
        step = 2 * per_document  # bytes a sequence
        for start in range(0, documents, CHUNK):
            out.write(array("q", range(start * step, min(documents, start + CHUNK) * step, step)).tobytes())
        for start in range(0, documents + 1, CHUNK):
            out.write(array("q", range(start, min(documents + 1, start + CHUNK))).tobytes())
    assert os.path.getsize(prefix + ".idx") == 34 + 12 * documents + 8 * (documents + 1)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokenfeed", required=True, help="the tokenfeed command")
    p.add_argument("--dir", required=True, help="the dataset directory to write")
    p.add_argument("--documents", type=int, default=100_000_000)
    p.add_argument("--tokens-per-document", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--keep-files", type=int, default=1)
    a = p.parse_args()
    prefix = os.path.join(a.dir, "train", "corpus")
    if not os.path.exists(prefix + ".idx"):
        os.makedirs(os.path.dirname(prefix), exist_ok=True)
        began = time.perf_counter()
        write_pair(prefix, a.documents, a.tokens_per_document)
        print(f"wrote {a.documents} documents in {time.perf_counter() - began:.1f} s", flush=True)
    print(f".idx {os.path.getsize(prefix + '.idx') / 1e9:.2f} GB, .bin {os.path.getsize(prefix + '.bin') / 1e9:.2f} GB")
    for run in range(a.repeats):
        began = time.perf_counter()
        done = subprocess.run([a.tokenfeed, "inspect", a.dir, "--block-size", "8"], capture_output=True, text=True)
        seconds = time.perf_counter() - began
        if done.returncode != 0:
            sys.exit(f"inspect failed: {done.stderr}")
        print(f"run {run}: inspect {seconds:.3f} s", flush=True)
        if run == 0:
            print(done.stdout)
    if not a.keep_files:
        shutil.rmtree(a.dir)


if __name__ == "__main__":
    main()
