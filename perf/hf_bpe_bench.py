#!/usr/bin/env python3
"""tokenfeed's native byte-level BPE (hf-bpe:) against the `tokenizers` package's encode_batch
and tiktoken, on the same texts in memory, the same BPE and the same cores, in one
interleaved run.

    python perf/hf_bpe_bench.py [--mb 50] [--workers 2] [--repeats 3] [--out FILE.json]

The corpus is perf/prepare_text_bench.py's (generated once into --cache); two byte-level BPEs
of --vocab ids are trained on a sample of it with `tokenizers`: GPT-2's configuration
(ByteLevel with its regex) and Llama 3's (a Split with its regex, ByteLevel without, and
ignore_merges). tiktoken's Encoding is built from each trained file's ranks (each token's
bytes, ranked by id: a trained file's merges make ids in merge order) and pattern. Before
timing, the ids of the three encoders are compared on the first --check documents: the
native encoder must equal `tokenizers` exactly (the run stops otherwise); tiktoken's
agreement is reported. Each measurement is a fresh process that reads the texts before its
clock starts and times only the encoding:

  native       perf/bench_hf_bpe_encode, --workers threads (native_1t: one thread)
  encode_batch Tokenizer.encode_batch_fast (encode_batch before 0.21) in batches of 1,024,
               each Encoding's ids taken, on a pool of --workers threads (encode_batch_1t: one)
  tiktoken     Encoding.encode_ordinary_batch(num_threads=--workers) in batches of 1,024
               (tiktoken_1t: encode_ordinary, one text at a time)

Ratios are of medians over the rounds; MB/s counts the texts' UTF-8 bytes. Needs tokenizers
and tiktoken (pip).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import prepare_text_bench as ptb  # noqa: E402

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
VARIANTS = ["native", "native_1t", "encode_batch", "encode_batch_1t", "tiktoken", "tiktoken_1t"]


def train(corpus, path, vocab, family):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    if family == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(ptb.sample_texts(corpus, 30_000_000), trainer)
    tok.save(str(path))
    if family == "llama3":
        spec = json.loads(path.read_text(encoding="utf-8"))
        spec["model"]["ignore_merges"] = True
        path.write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")


def tiktoken_encoding(path, family):
    import tiktoken
    spec = json.loads(Path(path).read_text(encoding="utf-8"))
    byte_of = {}
    n = 256
    for b in range(256):  # GPT-2's bytes_to_unicode
        printable = 33 <= b <= 126 or 161 <= b <= 172 or b >= 174
        byte_of[chr(b) if printable else chr(n)] = b
        n += 0 if printable else 1
    specials = {t["content"]: t["id"] for t in spec["added_tokens"]}
    ranks = {bytes(byte_of[c] for c in token): i for token, i in spec["model"]["vocab"].items() if token not in specials}
    pattern = GPT2_PATTERN if family == "gpt2" else LLAMA3_PATTERN
    return tiktoken.Encoding(name=f"tokenfeed-{family}", pat_str=pattern, mergeable_ranks=ranks,
                             special_tokens=specials)


def read_texts(corpus):
    return [json.loads(line)["text"] for line in open(corpus, encoding="utf-8")]


def child(args):
    """One timed variant: prints {"seconds", "tokens"}."""
    texts = read_texts(args.corpus)
    workers = 1 if args.child.endswith("_1t") else args.workers
    if args.child.startswith("encode_batch"):
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(args.tokenizer)
        encode = getattr(tok, "encode_batch_fast", tok.encode_batch)
        start, tokens = time.perf_counter(), 0
        for i in range(0, len(texts), 1024):
            tokens += sum(len(e.ids) for e in encode(texts[i:i + 1024], add_special_tokens=False))
    elif args.child == "tiktoken":
        enc = tiktoken_encoding(args.tokenizer, args.family)
        start, tokens = time.perf_counter(), 0
        for i in range(0, len(texts), 1024):
            tokens += sum(len(ids) for ids in enc.encode_ordinary_batch(texts[i:i + 1024], num_threads=workers))
    elif args.child == "tiktoken_1t":
        enc = tiktoken_encoding(args.tokenizer, args.family)
        start, tokens = time.perf_counter(), 0
        for t in texts:
            tokens += len(enc.encode_ordinary(t))
    else:
        raise SystemExit(f"unknown child {args.child}")
    print(json.dumps({"seconds": time.perf_counter() - start, "tokens": tokens}))


def run_variant(name, args, corpus, tokenizer, family):
    if name.startswith("native"):
        workers = 1 if name.endswith("_1t") else args.workers
        cmd = [args.bench, corpus, tokenizer, str(workers)]
        env = None
    else:
        cmd = [sys.executable, __file__, "--child", name, "--corpus", corpus, "--tokenizer", tokenizer,
               "--family", family, "--workers", str(args.workers)]
        env = dict(os.environ, RAYON_RS_NUM_CPUS="1" if name.endswith("_1t") else str(args.workers),
                   TOKENIZERS_PARALLELISM="true")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"{name} failed: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def check_ids(args, corpus, tokenizer, family, scratch):
    """The native encoder's ids must equal tokenizers' on the first --check texts; tiktoken's
    agreement is counted."""
    from tokenizers import Tokenizer
    texts = read_texts(corpus)[:args.check]
    sample = scratch / f"check_{family}.jsonl"
    sample.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    ids_out = scratch / f"check_{family}.ids"
    subprocess.run([args.bench, str(sample), tokenizer, "1", str(ids_out)], check=True, capture_output=True)
    native = [json.loads(line) for line in open(ids_out)]
    ref = Tokenizer.from_file(tokenizer)
    enc = tiktoken_encoding(tokenizer, family)
    tiktoken_equal = 0
    for i, t in enumerate(texts):
        want = ref.encode(t, add_special_tokens=False).ids
        if native[i] != want:
            raise SystemExit(f"{family}: native ids differ from tokenizers' on document {i}")
        tiktoken_equal += enc.encode_ordinary(t) == want
    return {"documents": len(texts), "native_equal": len(texts), "tiktoken_equal": tiktoken_equal}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=int, default=50)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--check", type=int, default=2000)
    p.add_argument("--families", default="gpt2,llama3")
    p.add_argument("--cache", default="build/perf-data/hf_bpe")
    p.add_argument("--bench", default="build/perf/bench_hf_bpe_encode")
    p.add_argument("--out", default=None)
    p.add_argument("--child", default=None)
    p.add_argument("--corpus"), p.add_argument("--tokenizer"), p.add_argument("--family")
    args = p.parse_args()
    if args.child:
        return child(args)
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    corpus = cache / f"corpus_{args.mb}mb.jsonl"
    if not corpus.exists():
        ptb.generate_corpus(corpus, args.mb)
    corpus_bytes = sum(len(t.encode("utf-8")) for t in read_texts(corpus))
    results = {"mb": args.mb, "text_bytes": corpus_bytes, "workers": args.workers, "repeats": args.repeats,
               "cpus": os.cpu_count(), "families": {}}
    for family in args.families.split(","):
        tokenizer = cache / f"{family}_{args.vocab}.json"
        if not tokenizer.exists():
            train(corpus, tokenizer, args.vocab, family)
        check = check_ids(args, str(corpus), str(tokenizer), family, cache)
        seconds = {v: [] for v in VARIANTS}
        tokens = {}
        for r in range(args.repeats):
            order = VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]
            for v in order:
                m = run_variant(v, args, str(corpus), str(tokenizer), family)
                seconds[v].append(m["seconds"])
                tokens[v] = m["tokens"]
        med = {v: statistics.median(s) for v, s in seconds.items()}
        results["families"][family] = {
            "check": check, "seconds": seconds, "tokens": tokens,
            "mb_per_s": {v: corpus_bytes / 1e6 / med[v] for v in VARIANTS},
            "native_vs_encode_batch": med["encode_batch"] / med["native"],
            "native_vs_tiktoken": med["tiktoken"] / med["native"],
            "native_1t_vs_encode_batch_1t": med["encode_batch_1t"] / med["native_1t"],
            "native_1t_vs_tiktoken_1t": med["tiktoken_1t"] / med["native_1t"],
        }
        print(json.dumps({family: results["families"][family]}, indent=1), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
