"""Writes datatrove/: tokenized files made by datatrove's own writer (TokenizedFile, through
which DocumentTokenizer and DocumentTokenizerMerger write), for test_datatrove_dataset.cpp.

  web_00000_unshuffled.ds (+ .index, .metadata)  token_size 2, tokenizer "gpt2"
  wide_00000_unshuffled.ds (+ .index, .metadata) token_size 4, tokenizer "meta-llama/Llama-3.1-8B"

Document d (0-based) of a file holds 1 + (d * 7) % 23 tokens, token j being
(d * 131 + j * 17) % VOCAB + 1 (VOCAB 50000 for size 2, 120000 for size 4): the C++ test
computes the same. Documents 2 and 5 are written as one write_bytes call of several
documents, as DocumentTokenizer does for batches.

Run from this directory: python3 make_datatrove_fixtures.py (needs `pip install datatrove`;
made with datatrove 0.10.1)."""
import struct

import datatrove
from datatrove.pipeline.tokens.tokenizer import TokenizedFile

DOCUMENTS = 40


def document(d, vocab):
    return [(d * 131 + j * 17) % vocab + 1 for j in range(1 + (d * 7) % 23)]


for name, size, vocab, tokenizer in [("web", 2, 50000, "gpt2"), ("wide", 4, 120000, "meta-llama/Llama-3.1-8B")]:
    f = TokenizedFile("datatrove", f"{name}_00000_unshuffled.ds", save_index=True, tokenizer_name_or_path=tokenizer,
                      save_final_metadata=True, token_size=size)
    fmt = "I" if size == 4 else "H"
    d = 0
    while d < DOCUMENTS:
        if d in (2, 5):  # two documents in one call, with their ends
            a, b = document(d, vocab), document(d + 1, vocab)
            f.write_bytes(struct.pack(f"<{len(a) + len(b)}{fmt}", *(a + b)), doc_ends=[len(a), len(a) + len(b)])
            d += 2
        else:
            f.write(document(d, vocab), None)
            d += 1
    f.close()
