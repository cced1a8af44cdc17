#!/usr/bin/env python3
"""`tokenfeed prepare-text` against the tokenizer's own speed and a Megatron-style reference,
on the same generated corpus, in one interleaved run.

    python perf/prepare_text_bench.py [--mb 200] [--workers 2] [--repeats 3] [--out FILE.json]

The corpus (JSONL, realistic-looking text: a Zipfian vocabulary of made-up words in
sentences and paragraphs, log-normal document lengths) is generated once into --cache and
reused; a byte-level BPE of --vocab ids (tokenizers) and a SentencePiece BPE model
(spm_train) are trained on a sample of it. Each measurement is a process of its own, started
afresh; its wall-clock time, CPU time and peak RSS are recorded, and the variants run
interleaved, the order turning each round, so that a busy machine weighs on all of them:

  tokenfeed_hf     tokenfeed.prepare_text(--hf-tokenizer): read, split, tokenize with the
                   tokenizers package, write (--tokenizer-impl tokenizers when the installed
                   package has the option, whose default, auto, is the native encoder)
  tokenfeed_native tokenfeed prepare-text --hf-tokenizer --tokenizer-impl native
                   --verify-sample 0 (the command, the native byte-level BPE, no Python)
  encode_batch     the texts already in memory (read before the clock starts), encoded with
                   Tokenizer.encode_batch_fast (encode_batch before tokenizers 0.21) in
                   batches of 1,024, on the same thread pool size; "ids" also takes each
                   Encoding's ids, which any consumer needs
  megatron_style   what Megatron's preprocess_data.py does: a multiprocessing pool of
                   --workers processes, each json.loads + encode per line (chunksize 25),
                   the ids sent back to one writer that appends them to a .bin and keeps
                   the document sizes for an index
  tokenfeed_spm    tokenfeed prepare-text --tokenizer sentencepiece:MODEL (the command)
  spm_encode       SentencePiece's own encode over the texts in memory, with the library the
                   command links (perf/bench_spm_encode, --workers threads); spm_encode_pypi:
                   the sentencepiece package's encode(num_threads=--workers), a newer release
  tokenfeed_rss    peak RSS of tokenfeed_hf and tokenfeed_native on the corpus and on a
                   quarter of it (the *_quarter variants)

--variants NAME,... runs only those (the full summary and --md need all of them).

Ratios are medians over the rounds. Needs tokenizers, sentencepiece (pip) and spm_train
(Debian's sentencepiece).
"""
import argparse
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def make_words(rng, n):
    syllables = ["ka", "to", "ri", "en", "sa", "lo", "mi", "tu", "ne", "ar", "is", "on", "de", "la", "qu", "ph",
                 "th", "ch", "st", "er", "an", "or", "al", "ic", "ow", "ea", "io", "um", "ex", "pr"]
    words = set()
    while len(words) < n:
        words.add("".join(rng.choice(syllables) for _ in range(rng.choice((1, 2, 2, 3, 3, 4)))))
    return sorted(words)


def generate_corpus(path, megabytes, seed=0):
    """JSONL of documents of log-normal length (median about 2 KB), Zipfian word use."""
    rng = random.Random(seed)
    words = make_words(rng, 50000)
    weights = [1.0 / (i + 1) ** 1.07 for i in range(len(words))]
    cumulative = []
    total = 0.0
    for w in weights:
        total += w
        cumulative.append(total)
    pool = rng.choices(words, cum_weights=cumulative, k=2_000_000)  # reused with random offsets
    target = megabytes * 1_000_000
    written = 0
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        while written < target:
            n_words = max(3, int(rng.lognormvariate(math.log(330), 1.0)))
            start = rng.randrange(len(pool) - n_words)
            chunk = pool[start:start + n_words]
            out, sentence = [], 0
            for i, w in enumerate(chunk):
                if sentence == 0:
                    w = w.capitalize()
                sentence += 1
                if sentence > rng.randint(6, 20):
                    w += rng.choice((".", ".", ".", "?", "!", ";"))
                    sentence = 0
                    if rng.random() < 0.15:
                        w += "\n\n"
                elif rng.random() < 0.06:
                    w += ","
                out.append(w)
            text = " ".join(out).replace("\n\n ", "\n\n")
            if rng.random() < 0.02:
                text += " Ünïcödé: café, naïve, 東京, данные, 🙂."
            line = json.dumps({"text": text, "url": f"https://example.com/{written}"}, ensure_ascii=False) + "\n"
            f.write(line)
            written += len(line.encode("utf-8"))
    tmp.rename(path)


def sample_texts(corpus, limit_bytes):
    texts, size = [], 0
    with open(corpus, encoding="utf-8") as f:
        for line in f:
            texts.append(json.loads(line)["text"])
            size += len(line)
            if size > limit_bytes:
                break
    return texts


def train_hf(corpus, out_dir, vocab):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(sample_texts(corpus, 30_000_000), trainer)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"))
    (out_dir / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>"}))


def train_spm(corpus, prefix, vocab):
    sample = prefix.with_suffix(".txt")
    with open(sample, "w", encoding="utf-8") as f:
        for t in sample_texts(corpus, 10_000_000):
            f.write(t.replace("\n", " ") + "\n")
    subprocess.run(["spm_train", f"--input={sample}", f"--model_prefix={prefix}", f"--vocab_size={vocab}",
                    "--model_type=bpe", "--character_coverage=1.0", "--byte_fallback=true", "--num_threads=2",
                    "--minloglevel=2", "--input_sentence_size=200000", "--shuffle_input_sentence=true"],
                   check=True, capture_output=True)


# Each variant is this script again with --child NAME, so that its time and memory are its own.
def child(args):
    corpus, workers = Path(args.corpus), args.workers
    if args.child in ("encode_batch", "encode_batch_ids"):
        os.environ["RAYON_RS_NUM_CPUS"] = str(workers)
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(str(Path(args.hf) / "tokenizer.json"))
        encode = getattr(tok, "encode_batch_fast", tok.encode_batch)
        texts = [json.loads(line)["text"] for line in open(corpus, encoding="utf-8")]
        start = time.perf_counter()
        tokens = 0
        for i in range(0, len(texts), 1024):
            encodings = encode(texts[i:i + 1024], add_special_tokens=False)
            if args.child == "encode_batch_ids":
                tokens += sum(len(e.ids) for e in encodings)
        return time.perf_counter() - start, tokens
    if args.child == "spm_encode_pypi":
        import sentencepiece as spm
        sp = spm.SentencePieceProcessor(model_file=args.spm)
        texts = [json.loads(line)["text"] for line in open(corpus, encoding="utf-8")]
        start = time.perf_counter()
        tokens = 0
        for i in range(0, len(texts), 1024):
            tokens += sum(len(ids) for ids in sp.encode(texts[i:i + 1024], num_threads=workers))
        return time.perf_counter() - start, tokens
    if args.child == "megatron_style":
        return megatron_style(corpus, Path(args.hf), workers, Path(args.scratch))
    raise SystemExit(f"unknown child {args.child}")


_TOK = None
_EOS = None


def _worker_init(hf_dir):
    global _TOK, _EOS
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    from tokenizers import Tokenizer
    _TOK = Tokenizer.from_file(str(Path(hf_dir) / "tokenizer.json"))
    _EOS = _TOK.token_to_id("<|endoftext|>")


def _encode_line(line):
    text = json.loads(line)["text"]
    return _TOK.encode(text, add_special_tokens=False).ids + [_EOS], len(line)


def megatron_style(corpus, hf_dir, workers, scratch):
    import multiprocessing
    import numpy as np
    start = time.perf_counter()
    sizes, tokens = [], 0
    with open(corpus, encoding="utf-8") as f, open(scratch / "megatron.bin", "wb") as out, \
            multiprocessing.Pool(workers, initializer=_worker_init, initargs=(str(hf_dir),)) as pool:
        for ids, _ in pool.imap(_encode_line, f, 25):
            out.write(np.asarray(ids, dtype=np.uint16).tobytes())
            sizes.append(len(ids))
            tokens += len(ids)
    np.save(scratch / "megatron.idx.npy", np.asarray(sizes, dtype=np.int32))
    return time.perf_counter() - start, tokens


def measure(cmd, env=None):
    """Wall, CPU seconds and peak RSS (MiB) of one fresh process tree, through a wrapper."""
    wrapper = ("import resource, subprocess, sys, time, json\n"
               "t = time.perf_counter(); r = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
               "wall = time.perf_counter() - t; u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
               "print(json.dumps({'rc': r.returncode, 'wall': wall, 'cpu': u.ru_utime + u.ru_stime, "
               "'rss_mib': u.ru_maxrss / 1024, 'stdout': r.stdout[-2000:], 'stderr': r.stderr[-2000:]}))\n")
    r = subprocess.run([sys.executable, "-c", wrapper, *map(str, cmd)], capture_output=True, text=True, env=env)
    m = json.loads(r.stdout)
    if m["rc"] != 0:
        raise SystemExit(f"{cmd} failed: {m['stderr']}")
    return m


def load_average():
    return os.getloadavg()[0]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=int, default=200)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--cache", default="build/perf-data/prepare_text")
    p.add_argument("--cli", default="build/tools/tokenfeed")
    p.add_argument("--spm-bench", default="build/perf/bench_spm_encode")
    p.add_argument("--out", default=None)
    p.add_argument("--md", default=None, help="also write the results as markdown (perf/RESULTS_prepare_text.md)")
    p.add_argument("--render", default=None, help="only write --md from the JSON an earlier run wrote with --out")
    p.add_argument("--variants", default=None, help="comma-separated subset of the variants to run")
    p.add_argument("--child", default=None)
    p.add_argument("--corpus"), p.add_argument("--hf"), p.add_argument("--spm"), p.add_argument("--scratch")
    args = p.parse_args()
    if args.child:
        seconds, tokens = child(args)
        print(json.dumps({"seconds": seconds, "tokens": tokens}))
        return 0
    if args.render:
        Path(args.md).write_text(markdown(json.loads(Path(args.render).read_text()), " ".join(sys.argv)))
        return 0

    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    corpus = cache / f"corpus_{args.mb}mb.jsonl"
    if not corpus.exists():
        print(f"generating {corpus} ...", flush=True)
        generate_corpus(corpus, args.mb)
    quarter = cache / f"corpus_{args.mb}mb_quarter.jsonl"
    if not quarter.exists():
        with open(corpus, "rb") as src, open(quarter, "wb") as dst:
            limit = corpus.stat().st_size // 4
            for line in src:
                dst.write(line)
                if dst.tell() >= limit:
                    break
    hf = cache / f"hf_bpe_{args.vocab}"
    if not (hf / "tokenizer.json").exists():
        print("training the BPE tokenizer ...", flush=True)
        train_hf(corpus, hf, args.vocab)
    spm_prefix = cache / "spm_bpe_8000"
    if not Path(str(spm_prefix) + ".model").exists() and (not args.variants or "spm" in args.variants):
        print("training the SentencePiece model ...", flush=True)
        train_spm(corpus, spm_prefix, 8000)
    spm_model = str(spm_prefix) + ".model"

    scratch = Path(tempfile.mkdtemp(prefix="tf_prepare_text_bench_"))
    me = [sys.executable, os.path.abspath(__file__), "--corpus", corpus, "--hf", hf, "--spm", spm_model,
          "--scratch", scratch, "--workers", args.workers]

    # A tokenfeed package from before the native encoder has no --tokenizer-impl and always runs
    # the tokenizers package; a newer one needs it said, its default (auto) being native.
    import importlib.util
    spec = importlib.util.find_spec("tokenfeed.text_corpus")
    package_impl = ["--tokenizer-impl", "tokenizers"] if "--tokenizer-impl" in Path(spec.origin).read_text() else []

    def tokenfeed_hf(source):
        out = scratch / "tf_hf"
        shutil.rmtree(out, ignore_errors=True)
        return [sys.executable, "-m", "tokenfeed.text_corpus", source, "--output-dir", out, "--hf-tokenizer", hf,
                "--workers", args.workers, "--val-split", "0.0005", "--progress-seconds", "1000", *package_impl]

    def tokenfeed_native(source):
        out = scratch / "tf_native"
        shutil.rmtree(out, ignore_errors=True)
        return [args.cli, "prepare-text", source, "--output-dir", out, "--hf-tokenizer", hf, "--tokenizer-impl",
                "native", "--verify-sample", "0", "--workers", args.workers, "--val-split", "0.0005",
                "--progress-seconds", "1000"]

    def tokenfeed_spm():
        out = scratch / "tf_spm"
        shutil.rmtree(out, ignore_errors=True)
        return [args.cli, "prepare-text", corpus, "--output-dir", out, "--tokenizer", f"sentencepiece:{spm_model}",
                "--workers", args.workers, "--progress-seconds", "1000"]

    variants = {
        "tokenfeed_hf": lambda: tokenfeed_hf(corpus),
        "encode_batch": lambda: me + ["--child", "encode_batch"],
        "encode_batch_ids": lambda: me + ["--child", "encode_batch_ids"],
        "megatron_style": lambda: me + ["--child", "megatron_style"],
        "tokenfeed_spm": tokenfeed_spm,
        "spm_encode": lambda: [args.spm_bench, corpus, spm_model, args.workers],
        "spm_encode_pypi": lambda: me + ["--child", "spm_encode_pypi"],
        "tokenfeed_hf_quarter": lambda: tokenfeed_hf(quarter),
        "tokenfeed_native": lambda: tokenfeed_native(corpus),
        "tokenfeed_native_quarter": lambda: tokenfeed_native(quarter),
    }
    if args.variants:
        variants = {name: variants[name] for name in args.variants.split(",")}
    results = {name: [] for name in variants}
    names = list(variants)
    for round_ in range(args.repeats):
        order = names[round_ % len(names):] + names[:round_ % len(names)]
        for name in order:
            before = load_average()
            m = measure(variants[name]())
            seconds = m["wall"]
            if m["stdout"].strip().startswith("{"):
                seconds = json.loads(m["stdout"].strip().splitlines()[-1])["seconds"]  # the timed part only
            m.update(seconds=seconds, load_before=before, load_after=load_average())
            results[name].append(m)
            print(f"round {round_} {name:<22} {seconds:8.2f} s  cpu {m['cpu']:8.2f} s  rss {m['rss_mib']:7.1f} MiB  "
                  f"load {before:.2f}->{m['load_after']:.2f}", flush=True)
    shutil.rmtree(scratch, ignore_errors=True)

    med = {name: statistics.median(r["seconds"] for r in rs) for name, rs in results.items()}
    rss = {name: max(r["rss_mib"] for r in rs) for name, rs in results.items()}
    mb = corpus.stat().st_size / 1e6
    if args.variants:  # a subset: medians, peak RSS, and the native encoder's ratios to what ran
        summary = {"corpus_mb": round(mb, 1), "workers": args.workers, "repeats": args.repeats,
                   "median_seconds": {k: round(v, 3) for k, v in med.items()},
                   "peak_rss_mib": {k: round(v, 1) for k, v in rss.items()},
                   "mb_per_s": {k: round(mb / v, 2) for k, v in med.items() if "quarter" not in k}}
        if "tokenfeed_native" in med:
            summary["tokenfeed_native_vs"] = {k: round(med[k] / med["tokenfeed_native"], 3) for k in med
                                              if k != "tokenfeed_native" and "quarter" not in k}
            summary["tokenfeed_native_vs_rounds"] = {
                k: [round(b["seconds"] / a["seconds"], 2) for a, b in zip(results["tokenfeed_native"], rs)]
                for k, rs in results.items() if k != "tokenfeed_native" and "quarter" not in k}
        summary["runs"] = results
        print(json.dumps({k: v for k, v in summary.items() if k != "runs"}, indent=2))
        if args.out:
            Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")
        return 0
    summary = {
        "corpus_mb": round(mb, 1), "workers": args.workers, "repeats": args.repeats, "vocab": args.vocab,
        "median_seconds": {k: round(v, 3) for k, v in med.items()},
        "tokenfeed_hf_vs_encode_batch": round(med["encode_batch"] / med["tokenfeed_hf"], 3),
        "tokenfeed_hf_vs_encode_batch_ids": round(med["encode_batch_ids"] / med["tokenfeed_hf"], 3),
        "tokenfeed_hf_vs_megatron_style": round(med["megatron_style"] / med["tokenfeed_hf"], 3),
        "tokenfeed_spm_vs_spm_encode": round(med["spm_encode"] / med["tokenfeed_spm"], 3),
        "tokenfeed_spm_vs_spm_encode_pypi": round(med["spm_encode_pypi"] / med["tokenfeed_spm"], 3),
        "tokenfeed_hf_mb_per_s": round(mb / med["tokenfeed_hf"], 2),
        "peak_rss_mib": {"corpus": round(rss["tokenfeed_hf"], 1), "quarter": round(rss["tokenfeed_hf_quarter"], 1)},
        "runs": results,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")
    if args.md:
        Path(args.md).write_text(markdown(summary, " ".join(sys.argv)))
    return 0


def markdown(s, command):
    """The results as a page: the targets with their figures, then every run."""
    med, runs = s["median_seconds"], s["runs"]

    def spread(name):
        values = [r["seconds"] for r in runs[name]]
        return f"{med[name]:.2f} s ({min(values):.2f}..{max(values):.2f})"

    def ratio(key, baseline, wanted):
        # The ratio of the medians, and each round's own (the variants of a round ran back to back).
        value = s[key]
        ours = "tokenfeed_spm" if "spm" in baseline else "tokenfeed_hf"
        rounds = [b["seconds"] / a["seconds"] for a, b in zip(runs[ours], runs[baseline])]
        per_round = ", ".join(f"{r:.2f}" for r in rounds)
        return f"{value:.2f}x (rounds: {per_round})", "yes" if value >= wanted else "no"

    rows = [
        ("`prepare-text --hf-tokenizer` >= 0.9x the tokenizer's own `encode_batch` over the texts in memory",
         f"{spread('tokenfeed_hf')} vs {spread('encode_batch')}", *ratio("tokenfeed_hf_vs_encode_batch", "encode_batch", 0.9)),
        ("... against `encode_batch` taking each Encoding's ids",
         f"vs {spread('encode_batch_ids')}", *ratio("tokenfeed_hf_vs_encode_batch_ids", "encode_batch_ids", 0.9)),
        (">= 2x a Megatron-style reference (pool of `encode` per line, one writer), same workers",
         f"vs {spread('megatron_style')}", *ratio("tokenfeed_hf_vs_megatron_style", "megatron_style", 2.0)),
        ("`--tokenizer sentencepiece:` >= 0.9x SentencePiece's own encode (the same library, in memory)",
         f"{spread('tokenfeed_spm')} vs {spread('spm_encode')}", *ratio("tokenfeed_spm_vs_spm_encode", "spm_encode", 0.9)),
        ("... against the sentencepiece package from PyPI (a newer release than Debian's)",
         f"vs {spread('spm_encode_pypi')}", *ratio("tokenfeed_spm_vs_spm_encode_pypi", "spm_encode_pypi", 0.9)),
    ]
    L = ["# prepare-text performance", "",
         f"Produced by `{command}`: a {s['corpus_mb']} MB generated JSONL corpus, {s['workers']} workers on "
         f"this machine's cores, a byte-level BPE of {s['vocab']} ids and a SentencePiece BPE of 8,000; "
         f"{s['repeats']} interleaved rounds, medians with (min..max). Each figure is one fresh process's "
         "timed part (tokenfeed: the whole run, from reading to the renamed dataset; the baselines: encoding "
         "only, the texts read beforehand).", "",
         "| target | figure | ratio | met |", "| --- | --- | ---: | --- |"]
    L += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    # What any tool that tokenizes with this tokenizer can reach against the reference: the
    # tokenizer's own encode over texts already in memory, nothing read and nothing written.
    ceiling = med["megatron_style"] / med["encode_batch"]
    ceiling_ids = med["megatron_style"] / med["encode_batch_ids"]
    L += ["", f"The Megatron-style target's ceiling in this run: the tokenizer's own `encode_batch` over the "
          f"texts in memory (no reading, no writing) is {ceiling:.2f}x the reference ({ceiling_ids:.2f}x taking "
          "the ids), so no tool tokenizing with this tokenizer on these cores reaches 2x it."]
    rss = s["peak_rss_mib"]
    L += ["", f"Throughput: {s['tokenfeed_hf_mb_per_s']} MB/s of JSONL with the Hugging Face tokenizer on "
          f"{s['workers']} cores.", "",
          f"Peak RSS of `prepare-text --hf-tokenizer` (the process: Python, the tokenizer, the pipeline): "
          f"{rss['corpus']} MiB on the whole corpus, {rss['quarter']} MiB on a quarter of it.", "",
          "| round | variant | seconds | CPU s | peak RSS MiB | load before -> after |", "| ---: | --- | ---: | ---: | ---: | --- |"]
    for name, rs in runs.items():
        for i, r in enumerate(rs):
            L.append(f"| {i} | {name} | {r['seconds']:.2f} | {r['cpu']:.2f} | {r['rss_mib']:.1f} | "
                     f"{r['load_before']:.2f} -> {r['load_after']:.2f} |")
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    sys.exit(main())
