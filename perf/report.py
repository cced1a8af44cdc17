"""Turns the raw outputs of perf/run.sh into RESULTS.md, the sweep plots and CSVs beside
it, and a copy of the raw files every figure comes from (OUT/raw/). Every figure is
computed here from the raw files of one run: medians over the interleaved repeats, with
their spread (min..max over the repeats), and ratios against baselines of the same run.
Nothing about the data or the machine is typed in here: the dataset figures come from
perf/gen_dataset's output (or the dataset's index), the sizes from the shapes, the repeat
counts from the raw files.

  python report.py --raw RAW_DIR --out OUT_DIR --mode full|quick|smoke --command "perf/run.sh"
"""
import argparse
import csv
import glob
import json
import os
import shutil
from collections import defaultdict

import measure  # perf/measure.py: the same percentiles as the C++ tools

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

MODES = ("sft_episode", "sft_packed", "token_stream")
# The plot of each mode; sft_episode's keeps the name the README shows.
PLOT_NAME = {"sft_episode": "prefetch_sweep.png", "sft_packed": "prefetch_sweep_sft_packed.png",
             "token_stream": "prefetch_sweep_token_stream.png"}
# Raw files copied beside RESULTS.md (small ones only; never the datasets).
RAW_FILES = ("env.txt", "bench.jsonl", "compare.json", "compare.csv", "compare_packed.json", "compare_packed.csv",
             "compare_stream.json", "compare_stream.csv", "python.jsonl", "python_get_batch.jsonl",
             "python_get_batch.txt", "open_memory.jsonl")
DATASETS = ("ep1x", "ep10x", "ep1x_u32", "ep10m", "ep100m", "stream")
# The index at scale (issue 16): a 100M-episode dataset opens in under 3 s with the files in
# the page cache and adds under 64 MiB of anonymous memory beyond the kept-episode list.
OPEN_100M_TARGET_MS, OPEN_100M_EXTRA_TARGET_MB = 3000.0, 64.0
# Anonymous bytes per episode that grow with the index, at most: the kept ids (4 B, none
# when every episode is kept) and two cached epoch orders (4 B each); episodes.idx is mapped.
INDEX_BYTES_PER_EPISODE = 4 + 2 * 4
# What the targets say (issue 6).
P50_TARGET_US, P99_TARGET_US = 2.0, 20.0
FIRST_STEPS = 16  # `tokenfeed bench --waits-json`'s first_steps: auto depth's starting window


def med(values):
    return measure.median(values)


def spread(values, digits=0, unit=""):
    """'min..max' of the repeats."""
    values = list(values)
    if not values:
        return "n/a"
    return f"{fmt(min(values), digits)}..{fmt(max(values), digits)}{unit}"


def fmt(x, digits=0):
    if x != x:  # nan
        return "n/a"
    if digits == 0:
        return f"{x:,.0f}"
    return f"{x:,.{digits}f}"


def read_env(raw):
    env = {}
    for line in open(os.path.join(raw, "env.txt")):
        if "=" in line:
            k, v = line.rstrip("\n").split("=", 1)
            env[k] = v
    return env


# --- datasets -------------------------------------------------------------------------------------

def index_lengths(data_dir):
    import numpy as np
    parts = [np.fromfile(f, dtype=np.uint64).reshape(-1, 2)[:, 1]
             for f in sorted(glob.glob(os.path.join(data_dir, "train", "*", "episodes.idx")))]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)


def dataset_stats(env, name):
    """The figures of one generated dataset: from gen_dataset's `json:` line in
    $DATA/NAME.txt, else (data made by an older gen_dataset) computed from the index."""
    data = env.get("data", "")
    txt = os.path.join(data, f"{name}.txt")
    stamp = os.path.join(data, f"{name}.stamp")
    stats = None
    if os.path.exists(txt):
        for line in open(txt):
            if line.startswith("json: "):
                stats = json.loads(line[len("json: "):])
                stats["source"] = f"gen_dataset output ({name}.txt)"
    meta_path = os.path.join(data, name, "dataset_metadata.json")
    meta = json.load(open(meta_path)) if os.path.exists(meta_path) else {}
    if stats is None:
        d = os.path.join(data, name)
        if os.path.exists(os.path.join(d, "train.bin")):
            width = 2 if meta.get("token_dtype", "uint16") == "uint16" else 4
            stats = {"kind": "token_stream", "tokens": os.path.getsize(os.path.join(d, "train.bin")) // width}
        else:
            import numpy as np
            lengths = index_lengths(d)
            n = len(lengths)
            stats = {"kind": "episodes", "episodes": int(n), "tokens": int(lengths.sum()),
                     "mean": float(lengths.mean()) if n else 0.0,
                     "median": float(np.median(lengths)) if n else 0.0,
                     "over_8192": int((lengths > 8192).sum()),
                     "over_8192_pct": 100.0 * float((lengths > 8192).sum()) / max(n, 1),
                     "longest": int(lengths.max()) if n else 0}
            masks = sorted(glob.glob(os.path.join(d, "train", "*", "mask.bin")))
            if masks:
                ones = sum(int(np.count_nonzero(np.memmap(m, dtype=np.uint8, mode="r"))) for m in masks)
                stats["masked_pct"] = 100.0 * ones / max(stats["tokens"], 1)
        # The generation parameters from the stamp (gen_dataset's defaults where not given).
        args = open(stamp).read().split() if os.path.exists(stamp) else []
        for flag, key, default in (("--median", "median_param", 400.0), ("--sigma", "sigma", 1.0)):
            stats[key] = float(args[args.index(flag) + 1]) if flag in args else default
        stats["source"] = f"computed from the dataset's files ({name}.txt predates gen_dataset's json line)"
    stats["dtype"] = meta.get("token_dtype", stats.get("dtype", "?"))
    stats["shards"] = len(glob.glob(os.path.join(data, name, "train", "shard_*"))) or stats.get("shards")
    stats["generated_with"] = open(stamp).read().strip() if os.path.exists(stamp) else None
    return stats


def copy_raw(raw, out, env, datasets):
    """OUT/raw: the small raw files of this run, so that RESULTS.md can be traced. Only the
    files this report writes are replaced (the previous run's, configs included): other
    harnesses keep their raw files in the same folder (perf/prepare_text_bench.py's
    prepare_text.json, perf/packing_fill.py's packing_fill.json), and their pages cite them."""
    dest = os.path.join(out, "raw")
    os.makedirs(dest, exist_ok=True)
    owned = set(RAW_FILES) | {"datasets.json"} | {f"gen_{name}.txt" for name in DATASETS}
    for path in glob.glob(os.path.join(dest, "*")):
        name = os.path.basename(path)
        if name in owned or name.endswith(".xml"):
            os.remove(path)
    copied = []
    for name in RAW_FILES + tuple(os.path.basename(p) for p in sorted(glob.glob(os.path.join(raw, "*.xml")))):
        src = os.path.join(raw, name)
        if os.path.exists(src):
            shutil.copy(src, os.path.join(dest, name))
            copied.append(name)
    for name in DATASETS:
        src = os.path.join(env.get("data", ""), f"{name}.txt")
        if os.path.exists(src):
            shutil.copy(src, os.path.join(dest, f"gen_{name}.txt"))
            copied.append(f"gen_{name}.txt")
    with open(os.path.join(dest, "datasets.json"), "w") as f:
        json.dump(datasets, f, indent=2)
    copied.append("datasets.json")
    return copied


# --- sweep ----------------------------------------------------------------------------------------

def read_sweep(path):
    rows = list(csv.DictReader(open(path)))
    groups = defaultdict(list)
    for r in rows:
        key = (r["shape"], float(r["consumer_us"]), int(r["decode_threads"]), r["depth_setting"])
        groups[key].append(r)
    out = {}
    for key, rs in groups.items():
        rates = [float(r["batches_per_s"]) for r in rs]
        out[key] = {
            "batches_per_s": med(rates),
            "rates": rates,
            "by_repeat": {r["repeat"]: float(r["batches_per_s"]) for r in rs},
            "tokens_per_s": med(float(r["tokens_per_s"]) for r in rs),
            "p50_us": med(float(r["p50_us"]) for r in rs),
            "p99_us": med(float(r["p99_us"]) for r in rs),
            "stall": med(float(r["stall_fraction"]) for r in rs),
            "depth_used": med(float(r["depth_used"]) for r in rs),
            "seconds": med(float(r["seconds"]) for r in rs),
            "n": len(rs),
        }
    meta = {"repeats": len({r["repeat"] for r in rows}), "seconds": med(float(r["seconds"]) for r in rows),
            "shuffled": "position" in (rows[0] if rows else {})}
    return out, meta


def shape_key(s):
    b, t = s.split("x")
    return (int(t), int(b))


def plot_sweep(sweep, title, path):
    shapes = sorted({k[0] for k in sweep}, key=shape_key)
    steps = sorted({k[1] for k in sweep})
    threads = sorted({k[2] for k in sweep})
    fig, axes = plt.subplots(len(shapes), len(steps), figsize=(4.2 * len(steps), 3.2 * len(shapes)), squeeze=False)
    colors = {1: "tab:blue", 2: "tab:orange", 3: "tab:green", 4: "tab:red"}
    for i, shape in enumerate(shapes):
        for j, step in enumerate(steps):
            ax = axes[i][j]
            ax2 = ax.twinx()
            for th in threads:
                fixed = sorted((int(k[3]), v) for k, v in sweep.items()
                               if k[0] == shape and k[1] == step and k[2] == th and k[3].isdigit())
                if not fixed:
                    continue
                xs = [d for d, _ in fixed]
                c = colors.get(th, "k")
                ax.plot(xs, [v["batches_per_s"] for _, v in fixed], "-o", color=c, ms=3, label=f"batches/s, {th} thr")
                ax2.plot(xs, [max(v["p99_us"], 0.1) for _, v in fixed], "--", color=c, alpha=0.6,
                         label=f"get_batch p99 latency, {th} thr")
                auto = sweep.get((shape, step, th, "auto"))
                if auto:
                    ax.plot([max(auto["depth_used"], 1)], [auto["batches_per_s"]], "*", color=c, ms=12,
                            markeredgecolor="k", label=f"auto ({th} thr)")
            if step > 0:  # the most a trainer with this step can take
                ax.axhline(1e6 / step, color="grey", lw=0.8, ls=":")
            ax.set_xscale("log", base=2)
            ax2.set_yscale("log")
            ax2.set_ylim(0.1, 1e5)
            ax2.yaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, numticks=7))
            ax2.yaxis.set_minor_locator(matplotlib.ticker.NullLocator())
            ax.set_ylim(bottom=0, top=ax.get_ylim()[1] * 1.1)
            ax.set_title(f"{shape}, step {step:g} us", fontsize=9)
            ax.tick_params(labelsize=7)
            ax2.tick_params(labelsize=7)
            if i == len(shapes) - 1:
                ax.set_xlabel("prefetch_depth", fontsize=8)
            if j == 0:
                ax.set_ylabel("batches/s (solid)", fontsize=8)
            if j == len(steps) - 1:
                ax2.set_ylabel("get_batch p99 latency, us (dashed)", fontsize=8)
            if i == 0 and j == 0:
                h1, l1 = ax.get_legend_handles_labels()
                h2, l2 = ax2.get_legend_handles_labels()
                ax.legend(h1 + h2, l1 + l2, fontsize=6, loc="lower right")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def auto_vs_best(sweep):
    """Per (shape, step, threads): the best fixed depth's throughput against auto's, and
    auto against the fixed depth it ran at (paired by repeat) when the grid has it."""
    rows = []
    for key in sorted({k[:3] for k in sweep}, key=lambda k: (shape_key(k[0]), k[1], k[2])):
        fixed = {int(k[3]): v for k, v in sweep.items() if k[:3] == key and k[3].isdigit()}
        auto = sweep.get(key + ("auto",))
        if not fixed or not auto:
            continue
        best_depth, best = max(fixed.items(), key=lambda kv: kv[1]["batches_per_s"])
        # The smallest depth within 3% of the best: the recommendation.
        enough = min(d for d, v in fixed.items() if v["batches_per_s"] >= 0.97 * best["batches_per_s"])
        same = fixed.get(int(round(auto["depth_used"])))
        paired = []
        if same:
            paired = [auto["by_repeat"][r] / same["by_repeat"][r] for r in auto["by_repeat"] if r in same["by_repeat"]]
        rows.append((key, best_depth, best, auto, enough, same, paired))
    return rows


# --- bench.jsonl ----------------------------------------------------------------------------------

def mean_us(r):
    return r["get_batch_us"].get("mean", float("nan"))


def waits_of(r):
    return r["stall_fraction"] * r["batches"]


def busy(listing):
    """The busy-process list of env.txt without ps, which sees itself busy while it samples."""
    entries = [e for e in (listing or "").split() if not e.startswith("ps(")]
    return " ".join(entries) or "none"


class Run:
    """One run's raw files, read once: the environment, the datasets, the sweeps, the
    `tokenfeed bench` runs by tag, the comparison (C++ and Python loaders) and the cold
    start's analysis. Reading copies the raw files into OUT/raw (copy_raw) and the sweep
    CSVs into OUT as prefetch_sweep_<mode>.csv. The sections below only read it."""

    def __init__(self, raw, out):
        self.raw = raw
        self.env = read_env(raw)
        self.datasets = {name: dataset_stats(self.env, name) for name in DATASETS
                         if os.path.isdir(os.path.join(self.env.get("data", ""), name))}
        self.copied = copy_raw(raw, out, self.env, self.datasets)

        self.sweeps, self.sweep_meta = {}, {}
        for mode in MODES:
            path = os.path.join(raw, f"sweep_{mode}.csv")
            if os.path.exists(path):
                self.sweeps[mode], self.sweep_meta[mode] = read_sweep(path)
                shutil.copy(path, os.path.join(out, f"prefetch_sweep_{mode}.csv"))

        om_path = os.path.join(raw, "open_memory.jsonl")
        self.open_memory = [json.loads(l) for l in open(om_path)] if os.path.exists(om_path) else []

        self.bench = defaultdict(list)
        for line in open(os.path.join(raw, "bench.jsonl")):
            j = json.loads(line)
            if "waits" in j:  # `tokenfeed bench --waits-json`, kept beside the run's JSON object
                j["result"]["waits"] = j["waits"]
            self.bench[j["tag"]].append(j["result"])

        cmp = self.cmp = json.load(open(os.path.join(raw, "compare.json")))
        # The other modes' comparisons against their own plain loops (absent in older runs).
        self.cmp_modes = {"sft_episode": cmp}
        for mode, name in (("sft_packed", "compare_packed.json"), ("token_stream", "compare_stream.json")):
            if os.path.exists(os.path.join(raw, name)):
                self.cmp_modes[mode] = json.load(open(os.path.join(raw, name)))
        py = [json.loads(l) for l in open(os.path.join(raw, "python.jsonl"))]
        self.py_check = next((r for r in py if "check" in r), None)
        py = [r for r in py if r.get("loader")]
        self.numpy_rates = [r["batches_per_s"] for r in py if r["loader"] == "numpy"]
        self.numpy_stack_rates = [r["batches_per_s"] for r in py if r["loader"] == "numpy_stack"]
        self.torch_rates = [r["batches_per_s"] for r in py if r["loader"] == "torch"]
        self.numpy_rate, self.torch_rate = med(self.numpy_rates), med(self.torch_rates)
        self.torch_version = next((r.get("torch_version") for r in py if r["loader"] == "torch"), "none")
        self.torch_workers = next((r.get("workers") for r in py if r["loader"] == "torch"), "?")
        self.bound = cmp["copy_bound_batches_per_s"]
        self.bound_reps = cmp.get("copy_bound_repeats", [self.bound])
        self.shape = cmp["shape"]
        batch_rows, block = (int(x) for x in cmp["shape"].split("x"))
        self.batch_rows, self.positions = batch_rows, batch_rows * block
        self.must_bpp = cmp.get("must_write_bytes_per_position", cmp["bytes_per_batch"] / self.positions)
        self.wr_bpp = cmp.get("written_bytes_per_position", float("nan"))
        self.wr_view_bpp = cmp.get("written_bytes_per_position_without_contract", float("nan"))
        self.variants = cmp.get("variants") or {k: {"batches_per_s": v, "repeats": [v], "decode_threads": []}
                                                for k, v in cmp["tokenfeed"].items()}
        self.cmp_repeats = cmp.get("repeats", len(self.bound_reps))
        self.v_def, self.v_two = self.variant(True, True), self.variant(False, True)
        self.v_def_view, self.v_two_view = self.variant(True, False), self.variant(False, False)

        self.cold_summary = cold_analysis(self.bench) if self.bench.get("cold_ra1") else None

    # --- bench.jsonl ---
    def bvals(self, tag, field, sub=None):
        return [(r[field][sub] if sub else r[field]) for r in self.bench.get(tag, [])]

    def bmed(self, tag, field, sub=None):
        return med(self.bvals(tag, field, sub))

    def episodes_of(self, name):
        return self.datasets.get(name, {}).get("episodes", 0)

    # --- the comparison's tokenfeed variants ---
    def threads_of(self, name):
        """(label, threads it ran with) of a variant."""
        th = name.split(":")[0].split("=")[1]
        used = sorted(set(self.variants[name].get("decode_threads", [])))
        used_s = "/".join(str(u) for u in used) if used else "?"
        if th == "default":
            return f"decode_threads default ({used_s} here)", used_s
        return f"decode_threads={th}", th

    def variant(self, th_default, contract):
        """The comparison variant: the default thread count or 2, contract fields on or off."""
        for name in self.variants:
            is_default = name.startswith("threads=default") or name.startswith("threads=1:")  # older runs: 1
            if is_default == th_default and (("contract=off" in name) != contract) and "reads=view" not in name:
                return name
        return None

    def vrate(self, name):
        return self.variants[name]["batches_per_s"] if name else float("nan")

    def vreps(self, name):
        return self.variants[name].get("repeats", []) if name else []

    def vs_bound(self, name):
        """Per repeat, this variant against the bound of the same repeat (interleaved)."""
        reps = self.vreps(name)
        ratios = [r / b for r, b in zip(reps, self.bound_reps)]
        return ratios, sum(x >= 1 for x in ratios)

    def bound_verdict(self, name, ratios, k):
        """Whether a variant reaches the copy bound, and in how many repeats."""
        x = self.vrate(name) / self.bound
        word = "yes" if x >= 1 else "no"
        if x >= 1 and k < len(ratios):
            word += f" (fragile: at or above the bound in {k} of {len(ratios)} repeats)"
        elif x < 1 and k > 0:
            word += f" (at or above it in {k} of {len(ratios)} repeats)"
        return word

    def default_label(self):
        """The label of the default variant's threads."""
        return self.threads_of(self.v_def)[0] if self.v_def else "default"


def write_sweep_plots(run, out):
    """Writes one plot per swept mode (PLOT_NAME) into OUT."""
    for mode, sweep in run.sweeps.items():
        m = run.sweep_meta[mode]
        mask = "" if mode == "token_stream" else ", mask on"
        plot_sweep(sweep, f"prefetch-depth sweep, {mode}{mask}; medians of {m['repeats']} repeats\n"
                   "batches/s (solid), get_batch p99 latency (dashed), auto at the depth it chose (star), "
                   "the trainer's ceiling 1/step (dotted)", os.path.join(out, PLOT_NAME[mode]))


def header_section(run, command, mode):
    """RESULTS.md's title and preamble: the command and commit of the run, the raw files
    kept, the machine and its load, and the datasets."""
    env, datasets = run.env, run.datasets
    L = []
    L.append("# tokenfeed performance results")
    L.append("")
    L.append(f"Produced by `{command}` ({mode} run) on {env.get('date')} at commit {env.get('commit')} "
             f"(working tree: {env.get('dirty', 'unknown')}); every number below comes from that one run. "
             "The raw files are committed beside this file: the sweep CSVs (`prefetch_sweep_<mode>.csv`), "
             "`comparison.csv`, and in `raw/` " + ", ".join(f"`{c}`" for c in run.copied) + ".")
    if mode != "full":
        L.append("")
        L.append(f"**A {mode} run: smaller grids, fewer repeats"
                 + (", tiny datasets: its figures mean nothing" if mode == "smoke" else "") + ".**")
    L.append("")
    L.append(f"- Machine: {env.get('nproc')} cores ({env.get('cpu')}), {env.get('os', 'Debian')}; numpy "
             f"{env.get('numpy')}, torch {env.get('torch')} (Debian's python3-torch, CPU).")
    L.append(f"- Load average before / after: {env.get('load_before')} / {env.get('load_after')}. "
             f"Other processes above 5% CPU at the start: {busy(env.get('busy_before'))}; "
             f"at the end: {busy(env.get('busy_after'))}.")
    L.append(f"- Run time: {env.get('seconds')} s (`raw/env.txt`). Figures are medians over interleaved repeats, "
             "with the spread (min..max over the repeats) beside them where it matters; ratios are against "
             "baselines measured in the same run.")
    ep1 = datasets.get("ep1x", {})
    if ep1:
        line = (f"- Datasets (`perf/gen_dataset`; `raw/datasets.json`, `raw/gen_*.txt`): ep1x {ep1['episodes']:,} "
                f"conversations, log-normal lengths (median parameter {ep1.get('median_param', 400):g}, sigma "
                f"{ep1.get('sigma', 1.0):g}; as written: median {ep1['median']:.0f}, mean {ep1['mean']:.0f} tokens, "
                f"{ep1['over_8192_pct']:.2f}% past 8,192, longest {ep1['longest']:,})")
        if "masked_pct" in ep1:
            line += f", assistant-only mask ({ep1['masked_pct']:.0f}% of tokens)"
        line += f", {ep1['dtype']}, {ep1['shards']} shards"
        for name, what in (("ep10x", "10x"), ("ep1x_u32", "uint32 copy")):
            if name in datasets:
                line += f"; {what} ({name}): {datasets[name]['episodes']:,} episodes, {datasets[name]['dtype']}"
        if "ep10m" in datasets:
            line += f"; index test (ep10m): {datasets['ep10m']['episodes']:,} episodes, median {datasets['ep10m']['median']:.0f} tokens"
        if "ep100m" in datasets:
            line += (f"; index at scale (ep100m): {datasets['ep100m']['episodes']:,} episodes, median "
                     f"{datasets['ep100m']['median']:.0f} tokens")
        if "stream" in datasets:
            line += f"; token_stream: a {datasets['stream']['tokens'] / 1e6:,.0f}M-token {datasets['stream']['dtype']} stream"
        L.append(line + ".")
    L.append("")
    return L


def latency_target_rows(run):
    """The targets' get_batch latency rows: p50, p99 and waits with a 500 us and a 2 ms
    trainer step, judged on the medians and flagged fragile when some runs missed."""
    bench, bvals, bmed = run.bench, run.bvals, run.bmed
    L = []
    for tag, step_label in (("step500", "500 us"), ("step2000", "2 ms")):
        if not bench.get(tag):
            continue
        p50s, p99s = bvals(tag, "get_batch_us", "p50"), bvals(tag, "get_batch_us", "p99")
        waits = [waits_of(r) for r in bench[tag]]
        p50, p99 = med(p50s), med(p99s)
        ok50, ok99, okw = p50 < P50_TARGET_US, p99 < P99_TARGET_US, max(waits) == 0
        parts = [f"p50 {'yes' if ok50 else 'no'}", f"p99 {'yes' if ok99 else 'no'}",
                 f"no waits {'yes' if okw else 'no'}"]
        verdict = "yes" if ok50 and ok99 and okw else "no: " + ", ".join(parts)
        fragile = [f"{sum(x >= P99_TARGET_US for x in p99s)} of {len(p99s)} runs had p99 >= 20 us"] \
            if ok99 and any(x >= P99_TARGET_US for x in p99s) else []
        fragile += [f"{sum(x >= P50_TARGET_US for x in p50s)} of {len(p50s)} runs had p50 >= 2 us"] \
            if ok50 and any(x >= P50_TARGET_US for x in p50s) else []
        if fragile and verdict == "yes":
            verdict = "yes (median; " + "; ".join(fragile) + ")"
        L.append(f"| get_batch p50 < 2 us, p99 < 20 us, no waiting after warm-up; {run.shape}, {step_label} step, "
                 f"defaults | p50 {p50:.2f} us ({spread(p50s, 2)}), p99 {p99:.2f} us ({spread(p99s, 2)}), max "
                 f"{bmed(tag, 'get_batch_us', 'max'):.1f} us over {len(bench[tag])} runs of "
                 f"{bench[tag][0]['batches']} steps after {bench[tag][0]['warmup']} of warm-up; steps that waited "
                 f"> 50 us per run: {', '.join(f'{x:.0f}' for x in waits)} | {verdict} |")
    return L


# What the plain-loop targets say: tokenfeed's batches/s against a plain single-threaded
# loop of the same mode, and its CPU per batch against the loop's.
LOOP_TARGETS = {("sft_episode", "default"): 0.8, ("sft_episode", "two"): 1.4, ("sft_packed", "default"): 0.8,
                ("token_stream", "default"): 0.8}
CPU_TARGET = 1.3
IDLE_CORE_TARGET = 0.05


def plain_loop_target_rows(run):
    """Against the plain loops (bench_compare, one run per mode, repeats interleaved):
    batches/s ratios, CPU per batch, and the loader's threads while a slow trainer steps."""
    L = []
    for mode, c in run.cmp_modes.items():
        plain, plain_reps = c["plain_loop_batches_per_s"], c.get("plain_loop_repeats", [])
        variants = c.get("variants", {})
        for which, name in (("default", "threads=default:depth=auto"), ("two", "threads=2:depth=auto")):
            target = LOOP_TARGETS.get((mode, which))
            v = variants.get(name)
            if target is None or v is None:
                continue
            ratio = v["batches_per_s"] / plain
            per_rep = [t / p for t, p in zip(v["repeats"], plain_reps)]
            label = "default settings" if which == "default" else "decode_threads=2"
            L.append(f"| {mode} {c['shape']}, {label}: >= {target}x a plain single-threaded loop of the same mode | "
                     f"{fmt(v['batches_per_s'])} vs {fmt(plain)} batches/s = {ratio:.2f}x (per repeat "
                     f"{spread(per_rep, 2)}) | {'yes' if ratio >= target else 'no'} |")
        v = variants.get("threads=default:depth=auto")
        if v and "loader_cpu_us_per_batch" in v and c.get("plain_loop_cpu_us_per_batch"):
            plain_cpu = c["plain_loop_cpu_us_per_batch"]
            ratio = v["loader_cpu_us_per_batch"] / plain_cpu
            L.append(f"| {mode}, default settings: CPU per batch of tokenfeed's threads <= {CPU_TARGET}x the plain "
                     f"loop's | {v['loader_cpu_us_per_batch']:.1f} vs {plain_cpu:.1f} us (getrusage) = {ratio:.2f}x; "
                     f"with the trainer's thread, which spins briefly in get_batch before it sleeps: "
                     f"{v['cpu_us_per_batch']:.1f} us = {v['cpu_us_per_batch'] / plain_cpu:.2f}x | "
                     f"{'yes' if ratio <= CPU_TARGET else 'no'} |")
    idle = [r["loader_threads_core_fraction"] for r in run.bench.get("step2000", [])
            if "loader_threads_core_fraction" in r]
    if idle:
        m = med(idle)
        L.append(f"| a trainer stepping every 2 ms: the loader's threads < {IDLE_CORE_TARGET:.0%} of one core | "
                 f"{m:.1%} of one core (runs {spread([100 * x for x in idle], 1)} %) | "
                 f"{'yes' if m < IDLE_CORE_TARGET else 'no'} |")
    return L


def production_target_rows(run):
    """The targets' pure production rows: tokenfeed against numpy (>= 4x), and against the
    single-core copy bound, per repeat, with the contract fields on and off."""
    vrate, vreps, shape_s = run.vrate, run.vreps, run.shape
    v_def, v_two, v_def_view, v_two_view = run.v_def, run.v_two, run.v_def_view, run.v_two_view
    numpy_rate, bound = run.numpy_rate, run.bound
    n_ratio_def, n_ratio_two = vrate(v_def) / numpy_rate, vrate(v_two) / numpy_rate
    def_label = run.default_label()
    L = []
    L.append(f"| pure production {shape_s} mask on >= 4x numpy | {def_label}: {fmt(vrate(v_def))} vs "
             f"{fmt(numpy_rate)} batches/s = {n_ratio_def:.1f}x (per repeat {spread(vreps(v_def))} vs "
             f"{spread(run.numpy_rates)}); decode_threads=2: {n_ratio_two:.1f}x | "
             f"default: {'yes' if n_ratio_def >= 4 else 'no'}; decode_threads=2: {'yes' if n_ratio_two >= 4 else 'no'} |")
    rd, kd = run.vs_bound(v_def)
    r2, k2 = run.vs_bound(v_two)
    rdv, kdv = run.vs_bound(v_def_view)
    r2v, k2v = run.vs_bound(v_two_view)
    bound_verdict = run.bound_verdict
    L.append(f"| ... and >= the single-core copy bound | bound {fmt(bound)} batches/s ({spread(run.bound_reps)}); "
             f"contract fields on (the default): {def_label} {vrate(v_def) / bound:.2f}x of the bound "
             f"(per repeat {spread(rd, 2)}), decode_threads=2 {vrate(v_two) / bound:.2f}x ({spread(r2, 2)}); "
             f"contract_fields=false: {def_label} {vrate(v_def_view) / bound:.2f}x ({spread(rdv, 2)}), "
             f"decode_threads=2 {vrate(v_two_view) / bound:.2f}x ({spread(r2v, 2)}) | "
             f"default settings: {bound_verdict(v_def, rd, kd)}; decode_threads=2: {bound_verdict(v_two, r2, k2)}; "
             f"contract_fields=false: {bound_verdict(v_def_view, rdv, kdv)} / {bound_verdict(v_two_view, r2v, k2v)} |")
    return L


def memory_target_rows(run):
    """The targets' memory row: RssAnon from 1x to 10x grows by no more than the index
    (nothing when the run has no mem_1x runs)."""
    if not run.bench.get("mem_1x"):
        return []
    bvals = run.bvals
    mem1, mem10 = run.bmed("mem_1x", "rss_anon_mb"), run.bmed("mem_10x", "rss_anon_mb")
    # Index: mapped, not copied; kept ids (at most 4 B each) and up to two cached epoch
    # orders (4 B each), below 2^32 episodes.
    index_growth_mb = (run.episodes_of("ep10x") - run.episodes_of("ep1x")) * INDEX_BYTES_PER_EPISODE / 2 ** 20
    return [f"| anonymous memory bounded by index + batch buffers | RssAnon {mem1:.1f} MiB at 1x "
            f"({spread(bvals('mem_1x', 'rss_anon_mb'), 1)}), {mem10:.1f} MiB at 10x "
            f"({spread(bvals('mem_10x', 'rss_anon_mb'), 1)}): +{mem10 - mem1:.1f} MiB for 10x the episodes and "
            f"tokens; the index grows by {index_growth_mb:.1f} MiB (memory table) | "
            + ("yes" if mem10 - mem1 <= index_growth_mb * 1.1 else "no") + " |"]


def open_target_rows(run):
    """The targets' open row: a 10M-episode dataset opens in under 2 s, judged only when the
    dataset has 10M episodes (nothing when the run has no open_10m runs)."""
    bench, bmed = run.bench, run.bmed
    if not bench.get("open_10m"):
        return []
    open_ms = bmed("open_10m", "open_ms")
    n10m = run.episodes_of("ep10m")
    judged = n10m >= 10_000_000
    return [f"| open a 10M-episode dataset (validation included) < 2 s | {n10m:,} episodes: {open_ms:.0f} ms "
            f"({spread(run.bvals('open_10m', 'open_ms'))}) with the files in the page cache"
            + (f", {bmed('open_10m_cold', 'open_ms'):.0f} ms cold" if bench.get("open_10m_cold") else "")
            + " | " + (("yes" if open_ms < 2000 else "no") if judged else f"not judged: {n10m:,} episodes")
            + " |"]


MIXTURE_TARGET = 0.9


def mixture_target_rows(run):
    """A mixture of three sources (the ep1x dataset three times, epoch seeds 1, 2, 3, weights
    1:1:1) against the single ep1x source, pure production, interleaved runs: batches/s and
    CPU per batch."""
    bench, bvals, bmed = run.bench, run.bvals, run.bmed
    if not bench.get("mix_single") or not bench.get("mix_three"):
        return []
    single, three = bmed("mix_single", "batches_per_s"), bmed("mix_three", "batches_per_s")
    per_run = [t / s for t, s in zip(bvals("mix_three", "batches_per_s"), bvals("mix_single", "batches_per_s"))]
    cpu = ""
    if all("cpu_us_per_batch" in r for r in bench["mix_single"] + bench["mix_three"]):
        c1, c3 = bmed("mix_single", "cpu_us_per_batch"), bmed("mix_three", "cpu_us_per_batch")
        cpu = f"; CPU per batch {c3:.1f} vs {c1:.1f} us = {c3 / c1:.2f}x"
    ratio = three / single
    return [f"| a mixture of three sources costs <= 10% over one source (`tokenfeed bench`, pure production, "
            f"`raw/mix3.xml`: ep1x three times, epoch seeds 1..3, weights 1:1:1) | {fmt(three)} vs {fmt(single)} "
            f"batches/s = {ratio:.2f}x (per interleaved pair {spread(per_run, 2)}){cpu} | "
            f"{'yes' if ratio >= MIXTURE_TARGET else 'no'} |"]


def open_100m_figures(run):
    """The 100M-episode open (nothing when the run has none): open time and RssAnon from
    `tokenfeed bench` (tag open_100m), what the open alone and the first batch add
    (perf/open_memory.py), and the kept list's and an epoch order's sizes as IdList stores
    them (nothing when every episode is kept; else 4 bytes an id below 2^32 episodes)."""
    if not run.bench.get("open_100m") or not run.open_memory:
        return None
    om = run.open_memory
    episodes, kept = om[0]["episodes"], om[0]["kept_episodes"]
    width = 4 if episodes <= 2 ** 32 else 8
    f = {"episodes": episodes, "kept": kept,
         "open_ms": run.bmed("open_100m", "open_ms"), "open_spread": spread(run.bvals("open_100m", "open_ms")),
         "rss_mb": run.bmed("open_100m", "rss_anon_mb"), "rss_spread": spread(run.bvals("open_100m", "rss_anon_mb")),
         "py_open_ms": med(r["open_ms"] for r in om), "first_ms": med(r["first_batch_ms"] for r in om),
         "open_anon_mb": med(r["open_anon_mb"] for r in om),
         "open_anon_spread": spread([r["open_anon_mb"] for r in om], 1),
         "first_anon_mb": med(r["first_batch_anon_mb"] for r in om),
         "kept_mb": 0.0 if kept == episodes else kept * width / 2 ** 20,
         "order_mb": kept * width / 2 ** 20, "runs": len(run.bench["open_100m"]), "py_runs": len(om)}
    f["extra_mb"] = f["open_anon_mb"] - f["kept_mb"]
    return f


def open_100m_target_rows(run):
    """The targets' 100M open row (nothing when the run has no open_100m runs)."""
    f = open_100m_figures(run)
    if f is None:
        return []
    judged = f["episodes"] >= 100_000_000
    ok = f["open_ms"] < OPEN_100M_TARGET_MS and f["extra_mb"] < OPEN_100M_EXTRA_TARGET_MB
    return [f"| open a 100M-episode dataset < 3 s warm, adding < 64 MiB of anonymous memory beyond the kept list | "
            f"{f['episodes']:,} episodes: {f['open_ms']:.0f} ms ({f['open_spread']}); the open adds "
            f"{f['open_anon_mb']:.1f} MiB of RssAnon, of which the kept list {f['kept_mb']:.1f} MiB (Opening section) | "
            + (("yes" if ok else "no") if judged else f"not judged: {f['episodes']:,} episodes") + " |"]


def cold_target_rows(run):
    """The targets' cold start row: cold with read-ahead against warm, in throughput and in
    waits (or why it was not measured)."""
    if not run.cold_summary:
        return [f"| cold start: read-ahead | {run.env.get('cold')} | not measured |"]
    bmed, cs = run.bmed, run.cold_summary
    c1, w1, c0 = (bmed(t, "batches_per_s") for t in ("cold_ra1", "warm_ra1", "cold_ra0"))
    s1, sw, s0 = (100 * bmed(t, "stall_fraction") for t in ("cold_ra1", "warm_ra1", "cold_ra0"))
    waits_ok = s1 <= max(2 * sw, sw + 0.1)
    if c1 >= 0.95 * w1 and waits_ok:
        verdict = "yes"
    else:
        verdict = ("throughput yes" if c1 >= 0.95 * w1 else "throughput no") + "; waits: " + \
            ("yes" if waits_ok else f"no ({cs['where']})")
    return [f"| cold start no worse than warm (read-ahead) | cold {fmt(c1)} batches/s, {s1:.2f}% of steps "
            f"waited; warm {fmt(w1)}, {sw:.2f}%; cold without read-ahead {fmt(c0)}, {s0:.2f}%. After the first "
            f"{FIRST_STEPS} steps: cold {cs['after_pct']['cold_ra1']:.2f}%, warm {cs['after_pct']['warm_ra1']:.2f}% "
            f"(cold start section) | {verdict} |"]


def targets_section(run):
    """## Targets: a table of each target with its figure and whether it is met: get_batch
    latency with a trainer step, pure production against numpy and the copy bound,
    anonymous memory, open time, cold start."""
    L = ["## Targets", "", "| target | figure | met |", "| --- | --- | --- |"]
    L += latency_target_rows(run) + plain_loop_target_rows(run) + production_target_rows(run)
    L += memory_target_rows(run) + open_target_rows(run) + open_100m_target_rows(run) + mixture_target_rows(run)
    L += cold_target_rows(run)
    L.append("")
    return L


def comparison_rows(run):
    """The comparison's rows, as (loader, batches/s, per-repeat batches/s): the copy bound,
    the plain C++ loop, each tokenfeed variant, the numpy loader and PyTorch's DataLoader."""
    cmp = run.cmp
    comparison = [
        (f"copy bound: {cmp['bytes_per_batch'] / 1024:.0f} KiB per batch (x, y int64 + mask float32: "
         f"{run.must_bpp:.0f} bytes per position) / single-core memcpy {cmp['memcpy_gbs']:.1f} GB/s "
         f"({spread(cmp.get('memcpy_gbs_repeats', []), 1)})", run.bound, run.bound_reps),
        ("plain single-threaded C++ loop (same rows into one reused buffer; no pipeline)",
         cmp["plain_loop_batches_per_s"], cmp.get("plain_loop_repeats", [])),
    ]
    if "plain_loop_x86_64_v4_batches_per_s" in cmp:  # the same loop, compiled for AVX-512 (absent in older runs)
        comparison.append(("the same plain loop compiled for x86-64-v4 (AVX-512), as tokenfeed's row kernels are "
                           "on this CPU", cmp["plain_loop_x86_64_v4_batches_per_s"],
                           cmp.get("plain_loop_x86_64_v4_repeats", [])))
    named = (run.v_def, run.v_def_view, run.v_two, run.v_two_view)
    ordered = [v for v in named if v] + [v for v in run.variants if v not in named]
    for name in ordered:
        label, _ = run.threads_of(name)
        extra = ", contract_fields=false" if "contract=off" in name else ""
        if "reads=view" in name:
            extra += ", fields=x,y,mask (a trainer of the episode view)"
        comparison.append((f"tokenfeed, {label}, prefetch_depth=auto{extra}", run.vrate(name), run.vreps(name)))
    comparison.append(("numpy loader (memmap slices written into preallocated (B, T) buffers), one process",
                       run.numpy_rate, run.numpy_rates))
    if run.numpy_stack_rates:
        comparison.append(("numpy loader, straightforward (fresh arrays per row, np.stack), one process",
                           med(run.numpy_stack_rates), run.numpy_stack_rates))
    comparison.append((f"PyTorch {run.torch_version} DataLoader, map-style Dataset, {run.torch_workers} workers",
                       run.torch_rate, run.torch_rates))
    return comparison


def write_comparison_csv(run, comparison, out):
    """Writes OUT/comparison.csv: the comparison's rows with their spread, tokens/s and
    ratios against numpy and the copy bound."""
    with open(os.path.join(out, "comparison.csv"), "w") as f:
        w = csv.writer(f)
        w.writerow(["loader", "batches_per_s", "min_batches_per_s", "max_batches_per_s", "repeats", "tokens_per_s",
                    "x_numpy", "x_copy_bound"])
        for name, rate, reps in comparison:
            w.writerow([name, f"{rate:.1f}", f"{min(reps):.1f}" if reps else "", f"{max(reps):.1f}" if reps else "",
                        len(reps), f"{rate * run.positions:.0f}", f"{rate / run.numpy_rate:.2f}",
                        f"{rate / run.bound:.3f}"])


def comparison_section(run, comparison):
    """## Comparison: pure production of every loader in a table (batches/s, spread,
    tokens/s, against numpy and the copy bound), then what limits tokenfeed: the bytes it
    writes per position, with and without the contract fields."""
    cmp, py_check, positions = run.cmp, run.py_check, run.positions
    numpy_rate, bound, must_bpp = run.numpy_rate, run.bound, run.must_bpp
    wr_bpp, wr_view_bpp = run.wr_bpp, run.wr_view_bpp
    L = []
    L.append(f"## Comparison: pure production, {run.shape}, mask on, same dataset and batch semantics")
    L.append("")
    L.append("The same batches (epoch order `RandomState(1337).permutation`, `x = t[:T]`, `y = t[1:T+1]`, "
             "`mask[1:T+1]`, padded with the pad id); the numpy loader was checked equal to `tokenfeed dump` "
             f"on the first {py_check['batches'] if py_check else '?'} batches (`raw/python.jsonl`, first line), and "
             "the plain C++ loop equal to the Loader's first batches (bench_compare stops otherwise). The consumer "
             f"does nothing but take batches. C++ rows: {run.cmp_repeats} interleaved repeats (`raw/compare.csv`, "
             f"`raw/compare.json`); Python rows: {len(run.numpy_rates)} (`raw/python.jsonl`). Medians, and the spread "
             "over the repeats.")
    L.append("")
    L.append("| loader | batches/s | min..max | tokens/s | x numpy | x copy bound |")
    L.append("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, rate, reps in comparison:
        L.append(f"| {name} | {fmt(rate)} | {spread(reps)} | {rate * positions / 1e6:,.0f} M | "
                 f"{rate / numpy_rate:.2f} | {rate / bound:.2f} |")
    L.append("")
    plain = cmp["plain_loop_batches_per_s"]
    tf1, vw1, vw2 = run.vrate(run.v_def), run.vrate(run.v_def_view), run.vrate(run.v_two_view)
    fields = ", ".join(cmp.get("written_fields", [])) or "see bench_compare"
    view_fields = ", ".join(cmp.get("written_fields_without_contract", [])) or "x, y, mask"
    L.append(f"What limits tokenfeed here: the bytes it writes. With the batch contract (the default) a sft_episode "
             f"batch writes {wr_bpp:.0f} bytes per position ({fields}; the mask is written once, as the token "
             f"weights) against the {must_bpp:.0f} that x, y and the mask "
             f"need: {wr_bpp / must_bpp:.2f}x the bytes (the pooled slot holds {cmp['slot_bytes'] / 1024:.0f} KiB "
             f"with the cu_seqlens capacity, {cmp.get('slot_bytes_without_contract', 0) / 1024:.0f} KiB without the "
             f"contract fields). With the default settings it makes {tf1 / plain:.2f}x the plain loop's "
             f"batches per second, which is {tf1 * wr_bpp / (plain * must_bpp):.2f}x the plain loop's write rate "
             "on one core. (Padding is written by fills, which need no read, so both can pass a bound computed "
             "from memcpy, which reads as much as it writes.) `contract_fields=false` writes "
             f"{wr_view_bpp:.0f} bytes per position ({view_fields}), as the plain loop does: {vw1 / plain:.2f}x the plain loop "
             f"with the default threads ({vw1 / bound:.2f}x the bound) and {vw2 / bound:.2f}x the bound with two "
             "decode threads. The second decode thread only helps while no other process holds that core, so the "
             "default keeps one core for the trainer. Further cuts (x and y sharing one (B, T+1) buffer as strided "
             "views, int32 outputs) would need a new batch layout; they are not done.")
    if "row_kernel_isa" in cmp:
        L.append("")
        isa = cmp["row_kernel_isa"]
        v4 = cmp.get("plain_loop_x86_64_v4_batches_per_s")
        L.append(f"Instruction sets: the plain loop is compiled with the library's Release flags (the baseline "
                 f"x86-64 target), while tokenfeed's row kernels pick the widest build the CPU runs at start-up "
                 f"(`{isa}` in this run). So that this is no hidden advantage, the same plain loop compiled for "
                 "x86-64-v4 is measured too" +
                 (f": {fmt(v4)} batches/s, against which tokenfeed's default settings make "
                  f"{tf1 / v4:.2f}x and decode_threads=2 {run.vrate(run.v_two) / v4:.2f}x." if v4 else
                  " where the CPU has AVX-512 (it does not here)."))
    L.append("")
    return L


def latency_section(run):
    """## get_batch on the trainer's thread: latency with a 500 us and a 2 ms consumer step
    and with none, then pure production per mode and dtype."""
    bench, bvals, bmed = run.bench, run.bvals, run.bmed
    L = []
    L.append("## get_batch on the trainer's thread (default settings: prefetch_depth=auto, decode_threads default)")
    L.append("")
    L.append("`tokenfeed bench --config ep1x.xml --consumer-us X --batches N --warmup W --json` (`raw/bench.jsonl`, "
             "tags step500, step2000, pure_*): medians of the runs, with min..max.")
    L.append("")
    L.append("| consumer step | runs | batches/s | p50 us | p99 us | max us | steps waiting > 50 us | depth chosen | "
             "decode threads |")
    L.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for tag, label in (("step500", "500 us"), ("step2000", "2 ms"), ("pure_u16", "0 (pure production)")):
        if bench.get(tag):
            L.append(f"| {label} | {len(bench[tag])} | {fmt(bmed(tag, 'batches_per_s'))} | "
                     f"{bmed(tag, 'get_batch_us', 'p50'):.2f} ({spread(bvals(tag, 'get_batch_us', 'p50'), 2)}) | "
                     f"{bmed(tag, 'get_batch_us', 'p99'):.2f} ({spread(bvals(tag, 'get_batch_us', 'p99'), 2)}) | "
                     f"{bmed(tag, 'get_batch_us', 'max'):.1f} | {100 * bmed(tag, 'stall_fraction'):.2f}% | "
                     f"{bmed(tag, 'prefetch_depth'):.0f} | {bmed(tag, 'decode_threads'):.0f} |")
    L.append("")
    L.append(f"| pure production, {run.shape} | batches/s | min..max | tokens/s | real tokens/s |")
    L.append("| --- | ---: | ---: | ---: | ---: |")
    for tag, label in (("pure_u16", "sft_episode, uint16, mask on"), ("pure_u32", "sft_episode, uint32, mask on"),
                       ("pure_packed", "sft_packed, uint16, mask on"),
                       ("pure_stream", "token_stream, uint16, random windows")):
        if bench.get(tag):
            L.append(f"| {label} | {fmt(bmed(tag, 'batches_per_s'))} | {spread(bvals(tag, 'batches_per_s'))} | "
                     f"{bmed(tag, 'tokens_per_s') / 1e6:,.0f} M | {bmed(tag, 'real_tokens_per_s') / 1e6:,.0f} M |")
    L.append("")
    return L


def python_thread_section(run):
    """## get_batch on the Python trainer's thread: what a batch costs the training thread
    through the `tokenfeed` module and through a numpy loader, per trainer step (from
    python_get_batch.jsonl; nothing when the run has none)."""
    py_get_path = os.path.join(run.raw, "python_get_batch.jsonl")
    if not os.path.exists(py_get_path):
        return []
    rows = [json.loads(l) for l in open(py_get_path)]
    first = rows[0]
    L = []
    L.append("## get_batch on the Python trainer's thread")
    L.append("")
    L.append(f"`python python/bench_get_batch.py --config ep1x.xml --step-us "
             f"{','.join(f'{s:g}' for s in sorted({r['step_us'] for r in rows}))} --batches {first['batches']} "
             f"--repeats {first['repeats']}` (`raw/python_get_batch.jsonl`, `raw/python_get_batch.txt`): what one "
             f"{first['batch_size']}x{first['block_size']} batch (x, y, mask) costs the Python thread that trains, "
             "through the `tokenfeed` module (get_batch and the numpy views, no copy; get_batch: the call alone) "
             "and through the numpy loader a Python user writes (memmap slices, pad, stack) on that thread; both "
             "checked equal first. The trainer busy-waits the step between batches, holding the GIL. The floor is "
             "`np.empty(3)` timed the same way: what the cheapest call into a C extension costs that thread after "
             "the step, which no loader can save. Medians over "
             f"{first['repeats']} interleaved repeats, in microseconds (the script keeps no per-repeat figures).")
    L.append("")
    L.append("| trainer step | loader | p50 us | p99 us | mean us | numpy mean / this mean |")
    L.append("| --- | --- | ---: | ---: | ---: | ---: |")
    for step in sorted({r["step_us"] for r in rows}):
        at = {r["loader"]: r for r in rows if r["step_us"] == step}
        for name in ("tokenfeed", "get_batch", "numpy", "floor"):
            if name in at:
                r = at[name]
                # The floor loads no batch: a ratio of loaders means nothing for it.
                ratio = at["numpy"]["mean"] / r["mean"] if "numpy" in at else float("nan")
                shown = "" if name == "floor" else f"{ratio:.2f}"
                L.append(f"| {step:g} us | {name} | {r['p50']:.1f} | {r['p99']:.1f} | {r['mean']:.1f} | {shown} |")
    L.append("")
    return L


def sweep_section(run):
    """## Prefetch-depth sweep: per swept mode its plot and a table of auto against the
    best fixed depth and against the fixed depth it ran at (nothing when nothing was
    swept)."""
    if not run.sweeps:
        return []
    L = []
    L.append("## Prefetch-depth sweep")
    L.append("")
    L.append("`bench_prefetch` (perf/bench_prefetch.cpp): a fresh Loader per point, warmed up (300 batches, 150 "
             "with a 2 ms step), then measured; the trainer stand-in spins the consumer step after each "
             "get_batch. In each plot, solid lines are batches/s, dashed the get_batch p99 latency on the "
             "trainer's thread, the star is auto at the depth it settled on, the dotted line the most a trainer "
             "with that step can take. Within each (shape, step, threads) group the depths run in a new shuffled "
             "order every repeat (the CSVs record each point's position and the depth measured before it), so "
             "that no depth is always measured first, last, or after the same other one.")
    L.append("")
    for mode, sweep in run.sweeps.items():
        m = run.sweep_meta[mode]
        L.append(f"### {mode}")
        L.append("")
        L.append(f"![prefetch sweep, {mode}]({PLOT_NAME[mode]})")
        L.append("")
        L.append(f"Medians of {m['repeats']} repeats of about {m['seconds']:.2f} s each per point; raw: "
                 f"`prefetch_sweep_{mode}.csv`. auto against the best fixed depth, and against the fixed depth it "
                 "ran at (paired by repeat; blank when the grid has no such depth):")
        L.append("")
        L.append("| shape | step us | threads | best fixed depth | its batches/s | auto batches/s (depth) | "
                 "auto / best | auto / fixed at auto's depth, per repeat | auto p99 us | smallest depth within 3% "
                 "of best |")
        L.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        within = 0
        rows = auto_vs_best(sweep)
        trailing = []
        for key, best_depth, best, auto, enough, same, paired in rows:
            ratio = auto["batches_per_s"] / best["batches_per_s"]
            within += ratio >= 0.9
            same_s = (f"{med(paired):.2f} ({spread(paired, 2)})" if paired else "")
            if ratio < 0.9:
                trailing.append((key, ratio, paired))
            L.append(f"| {key[0]} | {key[1]:g} | {key[2]} | {best_depth} | {fmt(best['batches_per_s'])} | "
                     f"{fmt(auto['batches_per_s'])} ({auto['depth_used']:.0f}) | {ratio:.2f} | {same_s} | "
                     f"{auto['p99_us']:.1f} | {enough} |")
        L.append("")
        L.append(f"auto within 10% of the best fixed depth's throughput in {within} of {len(rows)} cells. (The "
                 "best fixed depth is the largest of several noisy medians, so it is biased upward on a busy "
                 "machine; the paired column compares auto with the same depth fixed, measured in the same "
                 "repeats.)")
        for key, ratio, paired in trailing:
            if paired and max(paired) < 1:
                L.append(f"In {key[0]}, step {key[1]:g} us, {key[2]} thread(s), auto also trailed the fixed depth "
                         f"it ran at in every repeat ({spread(paired, 2)}): settle it with `perf/ab_depth.py` "
                         "(many interleaved pairs; see Reproduce).")
            elif paired:
                L.append(f"In {key[0]}, step {key[1]:g} us, {key[2]} thread(s), auto against the fixed depth it "
                         f"ran at: {spread(paired, 2)} over the repeats, so the gap to the best is within the "
                         "noise of the depths around it.")
        L.append("")
    return L


def memory_section(run):
    """## Anonymous memory at 1x and 10x: RssAnon per dataset beside the index and batch
    buffer estimates (nothing when the run has no mem_1x runs)."""
    bench = run.bench
    if not bench.get("mem_1x"):
        return []
    L = []
    L.append("## Anonymous memory at 1x and 10x dataset size")
    L.append("")
    mem_b = bench["mem_1x"][0]["batches"]
    L.append(f"`tokenfeed bench --batches {mem_b} --warmup 0` (`raw/bench.jsonl`, tags mem_1x, mem_10x; "
             f"{mem_b} x {run.batch_rows} rows cross into epoch 1 at 1x, so two epoch orders are held), RssAnon from "
             "/proc/self/status at the end. The index estimate is at most 4 bytes per kept episode (the kept "
             "ids; none when every episode is kept) + 4 per kept episode per cached epoch order (two); "
             "episodes.idx itself is memory-mapped, not copied. The buffers are the pool's slots "
             "(depth + 4 held) of the batch contract.")
    L.append("")
    L.append("| dataset | episodes | tokens on disk | RssAnon MiB | min..max | index estimate MiB | batch buffers MiB |")
    L.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for tag, name in (("mem_1x", "ep1x"), ("mem_10x", "ep10x")):
        ds = run.datasets.get(name, {})
        eps, toks = ds.get("episodes", 0), ds.get("tokens", 0)
        index_mb = eps * INDEX_BYTES_PER_EPISODE / 2 ** 20
        depth = run.bmed(tag, "prefetch_depth")
        buffers = run.cmp["slot_bytes"] * (depth + 4) / 2 ** 20
        L.append(f"| {name} | {eps:,} | {toks / 1e6:,.0f} M | {run.bmed(tag, 'rss_anon_mb'):.1f} | "
                 f"{spread(run.bvals(tag, 'rss_anon_mb'), 1)} | {index_mb:.1f} | {buffers:.1f} |")
    L.append("")
    return L


def open_section(run):
    """## Opening a 10M-episode dataset: open time warm and cold, and RssAnon after
    (nothing when the run has no open_10m runs)."""
    bench, bmed = run.bench, run.bmed
    if not bench.get("open_10m"):
        return []
    ds = run.datasets.get("ep10m", {})
    n10m = run.episodes_of("ep10m")
    open_ms = bmed("open_10m", "open_ms")
    L = []
    L.append(f"## Opening a {n10m:,}-episode dataset")
    L.append("")
    L.append(f"{n10m:,} episodes in {ds.get('shards', '?')} shards: open_ms of `tokenfeed bench --config ep10m.xml` "
             "(map, validate every record, hash the index, keep the ids; `raw/bench.jsonl`, tag open_10m): median "
             f"{open_ms:.0f} ms ({spread(run.bvals('open_10m', 'open_ms'))}) over {len(bench['open_10m'])} runs with "
             "the files in the page cache"
             + (f"; {bmed('open_10m_cold', 'open_ms'):.0f} ms right after dropping the page cache (open_10m_cold)."
                if bench.get("open_10m_cold") else ".") + f" RssAnon then: {bmed('open_10m', 'rss_anon_mb'):.0f} MiB.")
    L.append("")
    f = open_100m_figures(run)
    if f is not None:
        ds = run.datasets.get("ep100m", {})
        L.append(f"{f['episodes']:,} episodes in {ds.get('shards', '?')} shards (ep100m: "
                 f"`perf/gen_dataset {ds.get('generated_with') or '?'}`): open_ms of "
                 "`tokenfeed bench --config ep100m.xml --batches 200 --warmup 0 --json` (`raw/bench.jsonl`, tag "
                 f"open_100m): median {f['open_ms']:.0f} ms ({f['open_spread']}) over {f['runs']} runs with the files in "
                 f"the page cache; RssAnon at the end of those runs: {f['rss_mb']:.0f} MiB ({f['rss_spread']}). "
                 f"The index is read where it is mapped; what stays in anonymous memory is the kept-episode list "
                 f"({f['kept']:,} of {f['episodes']:,} episodes kept: {f['kept_mb']:.1f} MiB, nothing when every "
                 f"episode is kept) and, from the first batch on, the epoch orders ({f['order_mb']:.1f} MiB each: the "
                 "current epoch's, and the next one's made ahead).")
        L.append("")
        L.append(f"The open alone, from Python (`perf/open_memory.py --config ep100m.xml --repeats {f['py_runs']}`, "
                 f"`raw/open_memory.jsonl`: RssAnon before and right after `tokenfeed.Loader(config)`, whose pipeline "
                 f"starts at the first batch): {f['py_open_ms']:.0f} ms, +{f['open_anon_mb']:.1f} MiB "
                 f"({f['open_anon_spread']}), of which the kept list is {f['kept_mb']:.1f} MiB: "
                 f"{f['extra_mb']:.1f} MiB beyond it. The first batch then took {f['first_ms']:.0f} ms (epoch 0's "
                 f"order: a numpy permutation of {f['kept']:,} ids) and added {f['first_anon_mb']:.0f} MiB (that order, "
                 "and the next epoch's as far as it was made).")
        L.append("")
    return L


def cold_section(run):
    """## Cold start and read-ahead: cold and warm runs with read-ahead on and off, when
    their waits and major faults happened, and what that says (or why the cold start was
    not measured)."""
    bench, bmed = run.bench, run.bmed
    L = []
    L.append("## Cold start and read-ahead")
    L.append("")
    if run.cold_summary:
        cs = run.cold_summary
        n_cold = len(bench["cold_ra1"])
        cb = bench["cold_ra1"][0]["batches"]
        ds = run.datasets.get("ep10x", {})
        L.append(f"The 10x dataset ({ds.get('episodes', 0):,} episodes, {ds.get('tokens', 0) / 1e6:,.0f} M tokens), a "
                 f"500 us consumer step, the first {cb} batches of epoch 0 with no warm-up. `cold`: right after "
                 "`echo 3 > /proc/sys/vm/drop_caches`; `warm`: the same batches again at once (same order, so the "
                 f"same pages). Read-ahead off is `TOKENFEED_READ_AHEAD=0`. Medians of {n_cold} runs "
                 "(`raw/bench.jsonl`, tags cold_ra1, cold_ra0, warm_ra1, warm_ra0; each line also holds "
                 "`tokenfeed bench --waits-json`'s record of when that run's waits happened).")
        L.append("")
        L.append("| run | read-ahead | batches/s | mean get_batch us | p99 us | max us | steps waiting > 50 us | "
                 f"waits in the first {FIRST_STEPS} steps / after (all runs) | major faults (all runs) | depth chosen |")
        L.append("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for tag, run_kind, ra in (("cold_ra1", "cold", "on"), ("cold_ra0", "cold", "off"), ("warm_ra1", "warm", "on"),
                                  ("warm_ra0", "warm", "off")):
            if not bench.get(tag):
                continue
            L.append(f"| {run_kind} | {ra} | {fmt(bmed(tag, 'batches_per_s'))} | "
                     f"{med(mean_us(r) for r in bench[tag]):.0f} | "
                     f"{bmed(tag, 'get_batch_us', 'p99'):.0f} | {bmed(tag, 'get_batch_us', 'max'):.0f} | "
                     f"{100 * bmed(tag, 'stall_fraction'):.2f}% | "
                     + (f"{cs['first'][tag]} / {cs['after'][tag]}" if tag in cs["first"] else "n/a") + " | "
                     + (f"{cs['faults'][tag]:,}" if tag in cs["faults"] else "n/a")
                     + f" | {bmed(tag, 'prefetch_depth'):.0f} |")
        L.append("")
        if cs["tenths"]:
            L.append(f"When the waits happened: steps that waited > 50 us per tenth of the {cb} steps, summed over the "
                     "runs (major page faults of the process in the same tenths in brackets):")
            L.append("")
            L.append("| run | " + " | ".join(f"{10 * i}-{10 * i + 10}%" for i in range(10)) + " |")
            L.append("| --- |" + " ---: |" * 10)
            for tag in ("cold_ra1", "cold_ra0", "warm_ra1", "warm_ra0"):
                if tag in cs["tenths"]:
                    L.append(f"| {tag} | " + " | ".join(f"{w} ({f:,})" for w, f in zip(cs["tenths"][tag],
                                                                                    cs["fault_tenths"][tag])) + " |")
            L.append("")
            L.append(cs["text"])
        else:
            L.append("(This run's `tokenfeed bench` did not record when the waits happened.)")
    else:
        cold = run.env.get('cold', 'not measured')
        L.append(f"{cold[:1].upper()}{cold[1:]}.")  # capitalize() would lower-case the variable's name
    L.append("")
    return L


def reproduce_section():
    """## Reproduce: the commands that make these results again."""
    L = []
    L.append("## Reproduce")
    L.append("")
    L.append("```sh")
    L.append("perf/run.sh            # installs what is missing, builds Release, generates data, runs everything;")
    L.append("                       # writes perf/RESULTS.md, the plots, CSVs and perf/raw/ (about 15 minutes once built)")
    L.append("perf/run.sh --quick    # a smaller grid and fewer repeats, written to build/perf-rel/quick/")
    L.append("TOKENFEED_PERF_COLD=0 perf/run.sh   # the same without dropping the page cache (no cold start figures)")
    L.append("python3 perf/ab_depth.py --bench build/perf-rel/perf/bench_prefetch --config build/perf-rel/raw-full/ep1x.xml")
    L.append("                       # auto against fixed depth 16 in one cell, many interleaved pairs (about 2 minutes)")
    L.append("tokenfeed bench --config FILE --consumer-us 500 --json   # one config")
    L.append("```")
    L.append("")
    return L


# prepare-text's benchmarks (perf/prepare_text_bench.py --md, perf/packing_fill.py --md), run
# by hand (tens of minutes over a 200 MB corpus) and kept beside RESULTS.md.
PREPARE_TEXT_FILE = "RESULTS_prepare_text.md"


def prepare_text_section(out):
    """## Pretraining corpora: the target tables of RESULTS_prepare_text.md, with where they
    come from; nothing when that page is absent."""
    path = os.path.join(out, PREPARE_TEXT_FILE)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        lines = f.read().splitlines()
    L = ["## Pretraining corpora (prepare-text)", "",
         f"Measured by their own benchmarks, not by this run: every figure, the command and each run are in "
         f"[{PREPARE_TEXT_FILE}]({PREPARE_TEXT_FILE}).", ""]
    for i, line in enumerate(lines):
        if line.startswith("| target |"):
            end = i
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            L += lines[i:end] + [""]
    return L


# Smaller figures measured by hand (their commands beside them) and kept beside RESULTS.md,
# so that docs/ states no figure of its own.
BY_HAND_FILE = "RESULTS_by_hand.md"


def by_hand_section(out):
    """## Measured by hand: a link to RESULTS_by_hand.md and its topics; nothing when that
    page is absent."""
    path = os.path.join(out, BY_HAND_FILE)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        topics = [line[3:] for line in f.read().splitlines() if line.startswith("## ")]
    L = ["## Measured by hand", "",
         f"Not by this run: each figure and its command are in [{BY_HAND_FILE}]({BY_HAND_FILE}):", ""]
    L += [f"- {topic}" for topic in topics] + [""]
    if os.path.exists(os.path.join(out, SHARED_NODE_FILE)):
        L += [f"On a shared node (ranks, a busy neighbour, a CPU quota; `perf/shared_node.py`): "
              f"[{SHARED_NODE_FILE}]({SHARED_NODE_FILE}).", ""]
    return L


# perf/shared_node.py's table, run by hand and kept beside RESULTS.md.
SHARED_NODE_FILE = "RESULTS_shared_node.md"


# A long soak (perf/soak.py), run by hand for an hour and kept beside RESULTS.md: its lines
# starting with "#" say how it was run; the rest is soak.py's output.
SOAK_FILE = "soak_1h.txt"


def soak_section(out):
    """## Long run: the soak's samples (RSS, threads, fds, mappings) from start to end, and
    its verdict; nothing when OUT has no soak file."""
    path = os.path.join(out, SOAK_FILE)
    if not os.path.exists(path):
        return []
    lines = open(path).read().splitlines()
    notes = [l[1:].strip() for l in lines if l.startswith("#")]
    samples = [l for l in lines if l.startswith("soak t=")]
    verdict = next((l for l in lines if l.startswith("soak growth:")), "soak growth: (no verdict: the run did not finish)")
    L = ["## Long run (soak)", ""]
    L += [f"{n}" for n in notes] + [""]
    L.append(f"`perf/{SOAK_FILE}`: the process's resources sampled from /proc/self at the start (after the warm-up), "
             "every interval and at the end:")
    L.append("")
    L.append("```")
    L += samples + [verdict]
    L.append("```")
    L.append("")
    return L


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--raw", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--mode", default="full")
    p.add_argument("--command", default="perf/run.sh")
    a = p.parse_args()
    raw, out = a.raw, a.out
    if os.path.realpath(raw) == os.path.realpath(os.path.join(out, "raw")):
        # OUT/raw is replaced by a copy of RAW: reading from it would delete the input.
        p.error(f"--raw {raw} is OUT/raw, which the report replaces; pass the run's own raw "
                f"directory (perf/run.sh keeps it in $TOKENFEED_PERF_BUILD/raw-<mode>)")
    os.makedirs(out, exist_ok=True)
    run = Run(raw, out)
    write_sweep_plots(run, out)
    comparison = comparison_rows(run)
    write_comparison_csv(run, comparison, out)
    L = (header_section(run, a.command, a.mode) + targets_section(run) + comparison_section(run, comparison)
         + latency_section(run) + python_thread_section(run) + sweep_section(run) + memory_section(run)
         + open_section(run) + cold_section(run) + soak_section(out) + prepare_text_section(out) + by_hand_section(out)
         + reproduce_section())
    with open(os.path.join(out, "RESULTS.md"), "w") as f:
        f.write("\n".join(L) + "\n")
    print(os.path.join(out, "RESULTS.md"))


def cold_analysis(bench):
    """Where the cold start's waits are: in the first steps (no batch can be ready before
    its data is read) or spread through the run. From `tokenfeed bench`'s `waits`."""
    cs = {"first": {}, "after": {}, "after_pct": {}, "tenths": {}, "fault_tenths": {}, "faults": {}}
    for tag in ("cold_ra1", "cold_ra0", "warm_ra1", "warm_ra0"):
        runs = bench.get(tag, [])
        with_waits = [r for r in runs if "waits" in r]
        if not with_waits:
            cs["after_pct"][tag] = 100 * med(r["stall_fraction"] for r in runs) if runs else float("nan")
            continue
        first = sum(r["waits"]["in_first_steps"] for r in with_waits)
        count = sum(r["waits"]["count"] for r in with_waits)
        after_steps = sum(r["batches"] - r["waits"]["first_steps"] for r in with_waits)
        cs["first"][tag], cs["after"][tag] = first, count - first
        cs["after_pct"][tag] = 100 * (count - first) / max(after_steps, 1)
        cs["tenths"][tag] = [sum(r["waits"]["tenths"][i] for r in with_waits) for i in range(10)]
        cs["fault_tenths"][tag] = [sum(r["waits"]["major_faults_tenths"][i] for r in with_waits) for i in range(10)]
        cs["faults"][tag] = sum(cs["fault_tenths"][tag])
    tag = "cold_ra1"
    if tag in cs["tenths"]:
        first, after = cs["first"][tag], cs["after"][tag]
        tenths = cs["tenths"][tag]
        busy_tenths = sum(1 for i, w in enumerate(tenths) if w > 0 and i > 0)
        warm_after = cs["after_pct"].get("warm_ra1", float("nan"))
        if after == 0:
            cs["where"] = f"all in the first {FIRST_STEPS} steps: the first reads, which no loader can hide"
        elif busy_tenths >= 5:
            cs["where"] = f"spread through the run: {after} of {first + after} after the first {FIRST_STEPS} steps"
        else:
            cs["where"] = (f"{first} in the first {FIRST_STEPS} steps, {after} after them, in {busy_tenths} of the "
                           "9 later tenths")
        text = (f"Cold with read-ahead: {first + after} waits over the runs, {first} of them in the first "
                f"{FIRST_STEPS} steps (the pipeline starts empty and no batch can be ready before its data is read; "
                f"the warm runs wait there too: {cs['first'].get('warm_ra1', 'n/a')}) and {after} after them, "
                f"{cs['after_pct'][tag]:.2f}% of those steps against {warm_after:.2f}% warm; later tenths with waits: "
                f"{busy_tenths} of 9. ")
        if after == 0:
            text += "So the excess over the warm case is the first reads at the start only."
        elif busy_tenths >= 5:
            text += ("So the cold waits are not only the first reads: they are spread through the run, while every "
                     "batch of a first epoch reads episodes that are not in the page cache, so read-ahead does not "
                     "reach far enough ahead of the trainer.")
        else:
            text += "So most of the excess is near the start, with a few waits later."
        faults, faults0 = cs["faults"].get(tag, 0), cs["faults"].get("cold_ra0", float("nan"))
        later = sum(cs["fault_tenths"][tag][1:])
        text += (f" Major page faults (reads that went to the disk on a decoder's thread, not ahead of it): {faults:,} "
                 f"in the cold runs with read-ahead, {later:,} of them after the first tenth; "
                 f"{fmt(faults0)} without read-ahead. Waits after the start with few such faults are waits on reads "
                 "already issued but not finished (read-ahead not far enough ahead in time); with many, reads the "
                 "read-ahead did not cover.")
        cs["text"] = text
    else:
        cs["where"] = "this run did not record when"
        cs["text"] = ""
        cs["after_pct"].setdefault(tag, float("nan"))
    cs["after_pct"].setdefault("warm_ra1", float("nan"))
    return cs


if __name__ == "__main__":
    main()
