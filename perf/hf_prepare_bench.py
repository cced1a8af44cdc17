#!/usr/bin/env python3
"""`tokenfeed prepare --hf-tokenizer` against a straightforward Python loop over transformers'
apply_chat_template, on the same generated file of multi-turn conversations, in one run.

    python perf/hf_prepare_bench.py [--conversations 20000] [--repeats 3] [--hf-tokenizer DIR] [--cli PATH]

Both produce the same dataset (ids and the assistant mask per conversation, written with
tokenfeed.DatasetWriter): the loop calls apply_chat_template(messages, tokenize=True,
return_assistant_tokens_mask=True, return_dict=True) per conversation, which needs a template
with {% generation %} blocks; tokenfeed is timed on that template and on the same template
without them (the mask then comes from prefix renderings, several renderings per
conversation). Without --hf-tokenizer, a byte-level BPE (8,000 tokens) is trained on the
generated text. Each measurement is one process, started afresh (the loop's imports
transformers; tokenfeed's is the command and its workers): its wall-clock time and the CPU
seconds of it and its descendants. With --repeats N, the three run N times, interleaved (the
order turns each round), and the figures are the medians: on a shared machine the wall clock
depends on how many cores are free, the CPU time much less, and the load average (1 minute)
before and after each measurement is printed beside it. Checks that the datasets are
identical, every round. Needs tokenizers, jinja2 and transformers (python/run_tests.sh
installs them).
"""
import argparse
import json
import os
import random
import resource
import statistics
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tokenfeed

CHATML_GENERATION = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] + '<|im_end|>' }}"
    "{% endgeneration %}{{ '\\n' }}{% else %}{{ message['content'] + '<|im_end|>\\n' }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
CHATML_PLAIN = CHATML_GENERATION.replace("{% generation %}", "").replace("{% endgeneration %}", "")

WORDS = ("the of and to in is that for it as was with be by on not he this are or his from at which but have "
         "an they you were her she there been one all we their has would when if so what can more will no out "
         "up into do time only new some could these two may first then any like my now over such our man me "
         "even most made after also did many before must through back years where much your way well down "
         "should because each just those people how too little state good very make world still own see men "
         "work long get here between both life being under never day same another know while last might us "
         "great old year off come since against go came right used take three model data token loss training "
         "gradient batch layer attention python function return value error file").split()


def paragraph(rng, lo, hi):
    words = [rng.choice(WORDS) for _ in range(rng.randint(lo, hi))]
    out, i = [], 0
    while i < len(words):
        n = rng.randint(6, 18)
        out.append(" ".join(words[i:i + n]).capitalize() + rng.choice(".?!"))
        i += n
    return " ".join(out)


def conversations(n, seed=0):
    """Chat-like data: an optional system prompt, 1-4 turns, user messages of 5-60 words and
    replies of 20-250 words."""
    rng = random.Random(seed)
    for _ in range(n):
        messages = []
        if rng.random() < 0.3:
            messages.append({"role": "system", "content": paragraph(rng, 5, 30)})
        for _ in range(rng.randint(1, 4)):
            messages.append({"role": "user", "content": paragraph(rng, 5, 60)})
            messages.append({"role": "assistant", "content": paragraph(rng, 20, 250)})
        yield {"messages": messages}


def train_tokenizer(directory, texts):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=8000, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    tok.save(str(directory / "tokenizer.json"))


def tokenizer_dir(directory, tokenizer_json, template):
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tokenizer_json, directory / "tokenizer.json")
    (directory / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": template, "eos_token": "<|endoftext|>",
         "model_max_length": 1 << 20}))
    return directory


def transformers_loop(input_path, hf_dir, out_dir):
    """The straightforward way: one apply_chat_template call per conversation."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(hf_dir))
    dtype = "uint16" if len(tok) <= 65536 else "uint32"
    n = 0
    with tokenfeed.DatasetWriter(out_dir / "train", dtype) as writer, open(input_path, encoding="utf-8") as f:
        for line in f:
            messages = json.loads(line)["messages"]
            out = tok.apply_chat_template(messages, tokenize=True, return_assistant_tokens_mask=True, return_dict=True)
            writer.add(out["input_ids"], out["assistant_masks"])
            n += 1
    return n


def run_tokenfeed(cli, input_path, hf_dir, out_dir, workers):
    if cli:
        command = [cli, "prepare"]
    else:
        command = [sys.executable, "-m", "tokenfeed.hf_prepare"]
    command += ["--hf-tokenizer", str(hf_dir), "--input", str(input_path), "--output-dir", str(out_dir),
                "--val-split", "0"]
    if workers is not None:
        command += ["--workers", str(workers)]
    env = dict(os.environ, TOKENFEED_PYTHON=sys.executable)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=env)


def split_bytes(split_dir):
    return b"".join((shard / name).read_bytes() for shard in sorted(Path(split_dir).iterdir())
                    for name in ("tokens.bin", "mask.bin", "episodes.idx"))


def children_cpu_seconds():
    """CPU time of this process's waited-for descendants (each measurement and its workers)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return children.ru_utime + children.ru_stime


def run_loop(input_path, hf_dir, out_dir):
    """The loop in a process of its own, started like the command, so that both are timed from
    a process start, imports included, and the CPU figures of both are their processes'."""
    subprocess.run([sys.executable, __file__, "--run-loop", str(input_path), str(hf_dir), str(out_dir)], check=True)


def load_average():
    return os.getloadavg()[0]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--conversations", type=int, default=20000)
    p.add_argument("--repeats", type=int, default=3, help="rounds of the three measurements (medians are reported)")
    p.add_argument("--hf-tokenizer", help="a tokenizer directory to use instead of the trained BPE (its "
                                          "tokenizer.json; the templates are the benchmark's)")
    p.add_argument("--cli", default=os.environ.get("TOKENFEED_CLI"),
                   help="the tokenfeed command (default: $TOKENFEED_CLI, else python -m tokenfeed.hf_prepare)")
    p.add_argument("--workers", type=int, default=None, help="tokenfeed's --workers (default: one per core)")
    p.add_argument("--keep", help="keep the work directory here")
    p.add_argument("--run-loop", nargs=3, metavar=("INPUT", "HF_DIR", "OUT"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.run_loop:
        transformers_loop(*(Path(a) for a in args.run_loop))
        return 0
    if args.repeats < 1:
        p.error("--repeats must be at least 1")

    work = Path(args.keep or tempfile.mkdtemp(prefix="hf_prepare_bench-"))
    work.mkdir(parents=True, exist_ok=True)
    input_path = work / "chats.jsonl"
    with open(input_path, "w", encoding="utf-8") as f:
        for c in conversations(args.conversations):
            f.write(json.dumps(c) + "\n")
    if args.hf_tokenizer:
        tokenizer_json = Path(args.hf_tokenizer) / "tokenizer.json"
    else:
        sample = [m["content"] for c in conversations(min(args.conversations, 2000), seed=1) for m in c["messages"]]
        train_tokenizer(work, sample)
        tokenizer_json = work / "tokenizer.json"
    generation = tokenizer_dir(work / "tok_generation", tokenizer_json, CHATML_GENERATION)
    plain = tokenizer_dir(work / "tok_plain", tokenizer_json, CHATML_PLAIN)
    size_mb = input_path.stat().st_size / 1e6
    print(f"input: {args.conversations} conversations, {size_mb:.1f} MB; {os.cpu_count()} cores; "
          f"{args.repeats} round(s)")

    loop_name = "transformers apply_chat_template loop"
    runs = ((loop_name, lambda out: run_loop(input_path, generation, out)),
            ("tokenfeed prepare --hf-tokenizer ({% generation %})",
             lambda out: run_tokenfeed(args.cli, input_path, generation, out, args.workers)),
            ("tokenfeed prepare --hf-tokenizer (prefix renderings)",
             lambda out: run_tokenfeed(args.cli, input_path, plain, out, args.workers)))
    results = {name: [] for name, _ in runs}  # name -> [(wall s, CPU s), ...] in round order
    same = True
    for round_no in range(args.repeats):
        order = runs[round_no % len(runs):] + runs[:round_no % len(runs)]
        outs = {}
        for name, fn in order:
            out = work / f"out{len(outs)}"
            shutil.rmtree(out, ignore_errors=True)
            load_before = load_average()
            start, cpu_start = time.perf_counter(), children_cpu_seconds()
            fn(out)
            seconds, cpu = time.perf_counter() - start, children_cpu_seconds() - cpu_start
            results[name].append((seconds, cpu))
            outs[name] = out
            print(f"round {round_no + 1}  {name:<53} {seconds:7.2f} s {args.conversations / seconds:7.0f} conv/s "
                  f"{cpu:7.2f} CPU s   load {load_before:.2f} -> {load_average():.2f}", flush=True)
        reference = split_bytes(outs[loop_name] / "train")
        identical = all(split_bytes(out / "train") == reference for name, out in outs.items() if name != loop_name)
        same = same and identical
        for out in outs.values():
            shutil.rmtree(out, ignore_errors=True)

    print(f"medians of {args.repeats} round(s):")
    loop_wall = statistics.median(w for w, _ in results[loop_name])
    loop_cpu = statistics.median(c for _, c in results[loop_name])
    for name, values in results.items():
        wall, cpu = statistics.median(w for w, _ in values), statistics.median(c for _, c in values)
        line = f"  {name:<53} {wall:7.2f} s {args.conversations / wall:7.0f} conv/s {cpu:7.2f} CPU s"
        if name != loop_name:
            per_round = statistics.median(lw / w for (lw, _), (w, _) in zip(results[loop_name], values))
            line += (f"   speed-up {loop_wall / wall:.2f}x wall (per round {per_round:.2f}x), "
                     f"{loop_cpu / cpu:.2f}x CPU")
        print(line)
    print(f"datasets identical: {same}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
