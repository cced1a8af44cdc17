"""Writes megatron_pairs/: Megatron-LM indexed datasets made by megatron-core's own writer
(IndexedDatasetBuilder, which tools/preprocess_data.py uses), for test_megatron_dataset.cpp.

  web_text_document.{bin,idx}   uint16 tokens (numpy.uint16: dtype code 8)
  wide_text_document.{bin,idx}  int32 tokens (numpy.int32, the builder's default: code 4)

Document d (0-based) of 30 holds 1 + d % 4 sentences (sequences, as preprocess_data.py
--split-sentences writes them), sentence s holding 1 + (d * 5 + s * 3) % 11 tokens, token j
being (d * 977 + s * 31 + j * 7) % VOCAB + 1 (VOCAB 50000 for uint16, 150000 for int32);
documents 7 and 19 are empty (end_document with no sentence), as the builder writes an
empty input document. The C++ test computes the same.

megatron-core 0.16.1 needs torch >= 2.6 and its package's __init__ imports
torch.distributed's newer names, which Debian's torch 1.13 lacks; the indexed_dataset
module itself needs only numpy and torch.from_numpy. So this script registers
`megatron.core` as a bare package (its real directory, without running its __init__) and
`megatron.core.utils` as a stub holding log_single_rank, then imports the real
megatron/core/datasets/indexed_dataset.py: the writer that runs is megatron-core's own.

Run from this directory with an interpreter that has numpy, torch and megatron-core
(`pip install --no-deps megatron-core`): python3 make_megatron_fixtures.py"""
import importlib.util
import logging
import os
import sys
import types

import numpy
import torch

spec = importlib.util.find_spec("megatron")
root = os.path.join(list(spec.submodule_search_locations)[0], "core")
for name, path in [("megatron.core", root), ("megatron.core.datasets", os.path.join(root, "datasets"))]:
    package = types.ModuleType(name)
    package.__path__ = [path]
    sys.modules[name] = package
utils = types.ModuleType("megatron.core.utils")
utils.log_single_rank = lambda logger, level, *args, **kwargs: logger.log(level, *args, **kwargs)
sys.modules["megatron.core.utils"] = utils

from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder  # noqa: E402

DOCUMENTS = 30


def sentences(d, vocab):
    if d in (7, 19):
        return []
    return [[(d * 977 + s * 31 + j * 7) % vocab + 1 for j in range(1 + (d * 5 + s * 3) % 11)] for s in range(1 + d % 4)]


os.makedirs("megatron_pairs", exist_ok=True)
for name, dtype, vocab in [("web", numpy.uint16, 50000), ("wide", numpy.int32, 150000)]:
    prefix = os.path.join("megatron_pairs", f"{name}_text_document")
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=dtype)
    for d in range(DOCUMENTS):
        for sentence in sentences(d, vocab):
            builder.add_item(torch.from_numpy(numpy.array(sentence, dtype=numpy.int64)))
        builder.end_document()
    builder.finalize(prefix + ".idx")
    # megatron-core's reader opens what its writer wrote.
    dataset = IndexedDataset(prefix)
    assert len(dataset.document_indices) == DOCUMENTS + 1, len(dataset.document_indices)
    print(prefix, len(dataset), "sequences", dataset.index.dtype)
logging.shutdown()
