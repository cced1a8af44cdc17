"""Turns the raw outputs of perf/run.sh into perf/RESULTS.md, perf/prefetch_sweep.png and
the CSVs beside them. Every figure is computed here from the raw files of one run:
medians over the interleaved repeats, and ratios against baselines of the same run.

  python report.py --raw RAW_DIR --out OUT_DIR --mode full|quick --command "perf/run.sh"
"""
import argparse
import csv
import glob
import json
import os
import statistics
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402


def med(values):
    values = list(values)
    return statistics.median(values) if values else float("nan")


def read_env(raw):
    env = {}
    for line in open(os.path.join(raw, "env.txt")):
        if "=" in line:
            k, v = line.rstrip("\n").split("=", 1)
            env[k] = v
    return env


def read_sweep(path):
    rows = list(csv.DictReader(open(path)))
    groups = defaultdict(list)
    for r in rows:
        key = (r["shape"], float(r["consumer_us"]), int(r["decode_threads"]), r["depth_setting"])
        groups[key].append(r)
    out = {}
    for key, rs in groups.items():
        out[key] = {
            "batches_per_s": med(float(r["batches_per_s"]) for r in rs),
            "tokens_per_s": med(float(r["tokens_per_s"]) for r in rs),
            "p50_us": med(float(r["p50_us"]) for r in rs),
            "p99_us": med(float(r["p99_us"]) for r in rs),
            "stall": med(float(r["stall_fraction"]) for r in rs),
            "depth_used": med(float(r["depth_used"]) for r in rs),
            "n": len(rs),
        }
    return out


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
                               if k[0] == shape and k[1] == step and k[2] == th and k[3] != "auto")
                if not fixed:
                    continue
                xs = [d for d, _ in fixed]
                c = colors.get(th, "k")
                ax.plot(xs, [v["batches_per_s"] for _, v in fixed], "-o", color=c, ms=3, label=f"batches/s, {th} thr")
                ax2.plot(xs, [max(v["p99_us"], 0.1) for _, v in fixed], "--", color=c, alpha=0.6,
                         label=f"p99 wait, {th} thr")
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
                ax2.set_ylabel("get_batch p99 us (dashed)", fontsize=8)
            if i == 0 and j == 0:
                h1, l1 = ax.get_legend_handles_labels()
                h2, l2 = ax2.get_legend_handles_labels()
                ax.legend(h1 + h2, l1 + l2, fontsize=6, loc="lower right")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fmt(x, digits=0):
    if x != x:  # nan
        return "n/a"
    if digits == 0:
        return f"{x:,.0f}"
    return f"{x:,.{digits}f}"


def auto_vs_best(sweep):
    """Per (shape, step, threads): the best fixed depth's throughput against auto's."""
    rows = []
    for key in sorted({k[:3] for k in sweep}, key=lambda k: (shape_key(k[0]), k[1], k[2])):
        fixed = {int(k[3]): v for k, v in sweep.items() if k[:3] == key and k[3] != "auto"}
        auto = sweep.get(key + ("auto",))
        if not fixed or not auto:
            continue
        best_depth, best = max(fixed.items(), key=lambda kv: kv[1]["batches_per_s"])
        # The smallest depth within 3% of the best: the recommendation.
        enough = min(d for d, v in fixed.items() if v["batches_per_s"] >= 0.97 * best["batches_per_s"])
        rows.append((key, best_depth, best, auto, enough, fixed))
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--raw", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--mode", default="full")
    p.add_argument("--command", default="perf/run.sh")
    a = p.parse_args()
    raw, out = a.raw, a.out
    os.makedirs(out, exist_ok=True)
    env = read_env(raw)

    sweeps = {}
    for mode in ("sft_episode", "token_stream"):
        path = os.path.join(raw, f"sweep_{mode}.csv")
        if os.path.exists(path):
            sweeps[mode] = read_sweep(path)
            with open(os.path.join(out, f"prefetch_sweep_{mode}.csv"), "w") as f:
                f.write(open(path).read())
    if "sft_episode" in sweeps:
        plot_sweep(sweeps["sft_episode"], "prefetch-depth sweep, sft_episode, mask on: batches/s (solid), get_batch p99 (dashed), "
                   "auto at the depth it chose (star), the trainer's ceiling 1/step (dotted)", os.path.join(out, "prefetch_sweep.png"))
    if "token_stream" in sweeps:
        plot_sweep(sweeps["token_stream"], "prefetch-depth sweep, token_stream",
                   os.path.join(out, "prefetch_sweep_token_stream.png"))

    bench = defaultdict(list)
    for line in open(os.path.join(raw, "bench.jsonl")):
        j = json.loads(line)
        bench[j["tag"]].append(j["result"])

    def bmed(tag, field, sub=None):
        vals = [(r[field][sub] if sub else r[field]) for r in bench.get(tag, [])]
        return med(vals)

    cmp = json.load(open(os.path.join(raw, "compare.json")))
    py = [json.loads(l) for l in open(os.path.join(raw, "python.jsonl"))]
    numpy_rate = med(r["batches_per_s"] for r in py if r["loader"] == "numpy")
    torch_rate = med(r["batches_per_s"] for r in py if r["loader"] == "torch")
    torch_version = next((r.get("torch_version") for r in py if r["loader"] == "torch"), "none")
    bound = cmp["copy_bound_batches_per_s"]
    positions = 8 * 1024

    comparison = [
        ("copy bound: 160 KiB per batch (x, y int64 + mask float32) / single-core memcpy "
         f"{cmp['memcpy_gbs']:.1f} GB/s", bound),
        ("plain single-threaded C++ loop (same rows into one reused buffer; no pipeline)", cmp["plain_loop_batches_per_s"]),
    ]
    for name, rate in cmp["tokenfeed"].items():
        th = name.split(":")[0].split("=")[1]
        extra = ", contract_fields=false" if "contract=off" in name else ""
        comparison.append((f"tokenfeed, decode_threads={th}, prefetch_depth=auto{extra}", rate))
    comparison.append(("numpy loader (memmap slices, pad, stack), one process", numpy_rate))
    comparison.append((f"PyTorch {torch_version} DataLoader, map-style Dataset, 2 workers", torch_rate))
    with open(os.path.join(out, "comparison.csv"), "w") as f:
        w = csv.writer(f)
        w.writerow(["loader", "batches_per_s", "tokens_per_s", "x_numpy", "x_copy_bound"])
        for name, rate in comparison:
            w.writerow([name, f"{rate:.1f}", f"{rate * positions:.0f}", f"{rate / numpy_rate:.2f}", f"{rate / bound:.3f}"])

    L = []
    L.append("# tokenfeed performance results")
    L.append("")
    L.append(f"Produced by `{a.command}` ({a.mode} run) on {env.get('date')} at commit {env.get('commit')} "
             "plus the working tree; every number below comes from that one run, and the raw files "
             "(CSV/JSONL) are beside this file or in the build directory's `raw-*` folder.")
    L.append("")
    L.append(f"- Machine: {env.get('nproc')} cores ({env.get('cpu')}), Debian bookworm; numpy {env.get('numpy')}, "
             f"torch {env.get('torch')} (Debian's python3-torch, CPU).")
    L.append(f"- Load average before / after: {env.get('load_before')} / {env.get('load_after')}. "
             f"Other processes above 5% CPU at the start: {env.get('busy_before') or 'none'}; "
             f"at the end: {env.get('busy_after') or 'none'}.")
    L.append(f"- Run time: {env.get('seconds')} s. Figures are medians over interleaved repeats; ratios are "
             "against baselines measured in the same run.")
    L.append("- Dataset (`perf/gen_dataset`): 50,000 conversations, log-normal lengths (median 400, sigma 1.0, "
             "mean ~660 tokens, 0.13% past 8,192), uint16, 4 shards, assistant-only mask; 10x: 500,000; "
             "10M-episode index: median 16 tokens; a 100M-token uint16 stream for pretraining.")
    L.append("")

    # Targets.
    L.append("## Targets")
    L.append("")
    s500 = "step500"
    p50, p99 = bmed(s500, "get_batch_us", "p50"), bmed(s500, "get_batch_us", "p99")
    stall500 = bmed(s500, "stall_fraction")
    maxw = bmed(s500, "get_batch_us", "max")
    tf1 = cmp["tokenfeed"].get("threads=1:depth=auto", float("nan"))
    tf2 = cmp["tokenfeed"].get("threads=2:depth=auto", float("nan"))
    vw1 = cmp["tokenfeed"].get("threads=1:depth=auto:contract=off", float("nan"))
    vw2 = cmp["tokenfeed"].get("threads=2:depth=auto:contract=off", float("nan"))
    best_tf = max(tf1, tf2)
    best_view = max(vw1, vw2)
    mem1, mem10 = bmed("mem_1x", "rss_anon_mb"), bmed("mem_10x", "rss_anon_mb")

    def episodes_of(name):
        data = os.path.join(env.get("data", ""), name)
        return sum(os.path.getsize(f) for f in glob.glob(os.path.join(data, "train", "*", "episodes.idx"))) // 16

    # Index: spans (16 B per episode), kept ids (8 B), up to two cached epoch orders (8 B each).
    index_growth_mb = (episodes_of("ep10x") - episodes_of("ep1x")) * 40 / 2 ** 20
    open_ms = bmed("open_10m", "open_ms")
    L.append("| target | figure | met |")
    L.append("| --- | --- | --- |")
    stalls500 = [r["stall_fraction"] * r["batches"] for r in bench.get(s500, [])]
    L.append(f"| get_batch p50 < 2 us, p99 < 20 us, no waiting after warm-up; 8x1024, 500 us step, defaults | "
             f"p50 {p50:.2f} us, p99 {p99:.2f} us, max {maxw:.1f} us; steps that waited > 50 us per run of "
             f"{bench[s500][0]['batches'] if bench.get(s500) else 0}: {', '.join(f'{x:.0f}' for x in stalls500)} | "
             f"{'yes' if p50 < 2 and p99 < 20 and max(stalls500, default=1) == 0 else ('p50/p99 yes; waits: no' if p50 < 2 and p99 < 20 else 'no')} |")
    L.append(f"| pure production 8x1024 mask on >= 4x numpy | {fmt(best_tf)} vs {fmt(numpy_rate)} batches/s = "
             f"{best_tf / numpy_rate:.1f}x (decode_threads=1: {tf1 / numpy_rate:.1f}x) | "
             f"{'yes' if best_tf >= 4 * numpy_rate else 'no'} |")
    if best_tf >= bound:
        bound_met = "yes"
    elif best_view >= bound:
        bound_met = "with contract_fields=false (see below)"
    else:
        bound_met = "no (see below)"
    L.append(f"| ... and >= the single-core copy bound | contract fields on (default): {fmt(best_tf)} vs {fmt(bound)} "
             f"batches/s = {best_tf / bound:.2f}x of the bound; contract_fields=false: {fmt(best_view)} = "
             f"{best_view / bound:.2f}x (decode_threads=1: {vw1 / bound:.2f}x) | {bound_met} |")
    L.append(f"| anonymous memory bounded by index + batch buffers | RssAnon {mem1:.1f} MiB at 1x, {mem10:.1f} MiB "
             f"at 10x: +{mem10 - mem1:.1f} MiB for 10x the episodes and tokens, within the index's growth "
             "(memory table) | " + ("yes" if mem10 - mem1 <= index_growth_mb * 1.1 else "no") + " |")
    L.append(f"| open a 10M-episode dataset (validation included) < 2 s | {open_ms:.0f} ms (warm page cache)"
             + (f", {bmed('open_10m_cold', 'open_ms'):.0f} ms cold" if bench.get("open_10m_cold") else "")
             + f" | {'yes' if open_ms < 2000 else 'no'} |")
    if bench.get("cold_ra1"):
        c1, w1, c0 = (bmed(t, "batches_per_s") for t in ("cold_ra1", "warm_ra1", "cold_ra0"))
        s1, sw, s0 = (100 * bmed(t, "stall_fraction") for t in ("cold_ra1", "warm_ra1", "cold_ra0"))
        L.append(f"| cold start no worse than warm (read-ahead) | cold {fmt(c1)} batches/s, {s1:.2f}% of steps waited; "
                 f"warm {fmt(w1)}, {sw:.2f}%; cold without read-ahead {fmt(c0)}, {s0:.2f}% | "
                 + ("yes" if c1 >= 0.95 * w1 and s1 <= max(2 * sw, sw + 0.1)
                    else "throughput yes; waits: no" if c1 >= 0.95 * w1 else "no") + " |")
    else:
        L.append(f"| cold start: read-ahead | {env.get('cold')} | not measured |")
    L.append("")

    # Comparison.
    L.append("## Comparison: pure production, 8x1024, mask on, same dataset and batch semantics")
    L.append("")
    L.append("The same batches (epoch order `RandomState(1337).permutation`, `x = t[:T]`, `y = t[1:T+1]`, "
             "`mask[1:T+1]`, padded with the pad id); the numpy loader was checked equal to `tokenfeed dump` "
             "on the first 8 batches, and the plain C++ loop equal to the Loader's first batches. The consumer "
             "does nothing but take batches.")
    L.append("")
    L.append("| loader | batches/s | tokens/s | x numpy | x copy bound |")
    L.append("| --- | ---: | ---: | ---: | ---: |")
    for name, rate in comparison:
        L.append(f"| {name} | {fmt(rate)} | {rate * positions / 1e6:,.0f} M | {rate / numpy_rate:.2f} | "
                 f"{rate / bound:.2f} |")
    L.append("")
    plain = cmp["plain_loop_batches_per_s"]
    L.append("What limits tokenfeed here: the bytes it writes, not the pipeline. With the batch contract "
             "(the default) a sft_episode batch also writes labels (int64) and position_ids (int32) beside x, y "
             "and the mask, which is written once as the token weights: 32 bytes per position against the 20 "
             "that x, y and the mask need (the pooled slot holds "
             f"{cmp['slot_bytes'] / 1024:.0f} KiB with the cu_seqlens capacity, "
             f"{cmp.get('slot_bytes_without_contract', 0) / 1024:.0f} KiB without the contract fields). With one "
             f"decode thread the default makes {tf1 / plain:.2f}x the plain loop's batches per second while "
             f"writing 1.6x the bytes per batch: {tf1 * 32 / (plain * 20):.2f}x the plain loop's write rate on the "
             "same core. (Padding is written by fills, which need no read, so both can pass a bound computed "
             "from memcpy, which reads as much as it writes.) `contract_fields=false` writes only x, y and the "
             f"mask, the plain loop's 20 bytes: {vw1 / plain:.2f}x the plain loop with one decode thread "
             f"({vw1 / bound:.2f}x the bound) and {vw2 / bound:.2f}x the bound with two. The second decode thread "
             "only helps while no other process holds that core, so the default keeps one core for the trainer. "
             "Further cuts (x and y sharing one (B, T+1) buffer as strided views, int32 outputs) would need a "
             "new batch layout; they are not done.")
    L.append("")

    # Latency.
    L.append("## get_batch on the trainer's thread (default settings: prefetch_depth=auto, decode_threads=1)")
    L.append("")
    L.append("`tokenfeed bench --config ep1x.xml --consumer-us X --batches N --warmup W --json`, median of the runs.")
    L.append("")
    L.append("| consumer step | runs | batches/s | p50 us | p99 us | max us | steps waiting > 50 us | depth chosen |")
    L.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for tag, label in (("step500", "500 us"), ("step2000", "2 ms"), ("pure_u16", "0 (pure production)")):
        if bench.get(tag):
            L.append(f"| {label} | {len(bench[tag])} | {fmt(bmed(tag, 'batches_per_s'))} | "
                     f"{bmed(tag, 'get_batch_us', 'p50'):.2f} | {bmed(tag, 'get_batch_us', 'p99'):.2f} | "
                     f"{bmed(tag, 'get_batch_us', 'max'):.1f} | {100 * bmed(tag, 'stall_fraction'):.2f}% | "
                     f"{bmed(tag, 'prefetch_depth'):.0f} |")
    L.append("")
    L.append("| pure production, 8x1024 | batches/s | tokens/s | real tokens/s |")
    L.append("| --- | ---: | ---: | ---: |")
    for tag, label in (("pure_u16", "sft_episode, uint16, mask on"), ("pure_u32", "sft_episode, uint32, mask on"),
                       ("pure_stream", "token_stream, uint16, random windows")):
        if bench.get(tag):
            L.append(f"| {label} | {fmt(bmed(tag, 'batches_per_s'))} | {bmed(tag, 'tokens_per_s') / 1e6:,.0f} M | "
                     f"{bmed(tag, 'real_tokens_per_s') / 1e6:,.0f} M |")
    L.append("")

    # The Python trainer's thread.
    py_get_path = os.path.join(raw, "python_get_batch.jsonl")
    if os.path.exists(py_get_path):
        rows = [json.loads(l) for l in open(py_get_path)]
        first = rows[0]
        L.append("## get_batch on the Python trainer's thread")
        L.append("")
        L.append(f"`python python/bench_get_batch.py --config ep1x.xml --step-us 0,2000 --batches {first['batches']} "
                 f"--repeats {first['repeats']}`: what one {first['batch_size']}x{first['block_size']} batch (x, y, "
                 "mask) costs the Python thread that trains, through the `tokenfeed` module (get_batch and the "
                 "numpy views, no copy) and through the numpy loader a Python user writes (memmap slices, pad, "
                 "stack) on that thread; both checked equal first. The trainer busy-waits the step between "
                 "batches, holding the GIL. Medians over interleaved repeats, in microseconds.")
        L.append("")
        L.append("| trainer step | loader | p50 us | p99 us | mean us | numpy mean / this mean |")
        L.append("| --- | --- | ---: | ---: | ---: | ---: |")
        for step in sorted({r["step_us"] for r in rows}):
            at = {r["loader"]: r for r in rows if r["step_us"] == step}
            for name in ("tokenfeed", "numpy"):
                if name in at:
                    r = at[name]
                    ratio = at["numpy"]["mean"] / r["mean"] if "numpy" in at else float("nan")
                    L.append(f"| {step:g} us | {name} | {r['p50']:.1f} | {r['p99']:.1f} | {r['mean']:.1f} | "
                             f"{ratio:.2f} |")
        L.append("")

    # Sweep.
    if "sft_episode" in sweeps:
        L.append("## Prefetch-depth sweep")
        L.append("")
        L.append("![prefetch sweep](prefetch_sweep.png)")
        L.append("")
        L.append("`bench_prefetch` (perf/bench_prefetch.cpp): a fresh Loader per point, the trainer stand-in spins "
                 "the consumer step after each get_batch; solid lines are batches/s, dashed the get_batch p99, "
                 "the star is auto at the depth it settled on. Raw: `prefetch_sweep_sft_episode.csv`, "
                 "`prefetch_sweep_token_stream.csv` (and `prefetch_sweep_token_stream.png`).")
        L.append("")
        for mode, sweep in sweeps.items():
            L.append(f"### auto against the best fixed depth, {mode}")
            L.append("")
            L.append("| shape | step us | threads | best fixed depth | its batches/s | auto batches/s (depth) | "
                     "auto / best | auto p99 us | smallest depth within 3% of best |")
            L.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
            within = 0
            rows = auto_vs_best(sweep)
            for key, best_depth, best, auto, enough, _ in rows:
                ratio = auto["batches_per_s"] / best["batches_per_s"]
                within += ratio >= 0.9
                L.append(f"| {key[0]} | {key[1]:g} | {key[2]} | {best_depth} | {fmt(best['batches_per_s'])} | "
                         f"{fmt(auto['batches_per_s'])} ({auto['depth_used']:.0f}) | {ratio:.2f} | "
                         f"{auto['p99_us']:.1f} | {enough} |")
            L.append("")
            L.append(f"auto within 10% of the best fixed depth's throughput in {within} of {len(rows)} cells. "
                     "(The best fixed depth is the largest of several noisy medians, so it is biased upward on a "
                     "busy machine; a cell where a fixed depth at auto's own depth also trails the best shows "
                     "the noise.)")
            L.append("")

    # Memory.
    if bench.get("mem_1x"):
        L.append("## Anonymous memory at 1x and 10x dataset size")
        L.append("")
        L.append("`tokenfeed bench --batches 7000 --warmup 0` (crosses into epoch 1 at 1x, so two epoch orders are "
                 "held), RssAnon from /proc/self/status at the end. The index estimate is 16 bytes per episode "
                 "(spans) + 8 per kept episode + 8 per kept episode per cached epoch order (two); the buffers are "
                 "the pool's slots (depth + 4 held) of the batch contract.")
        L.append("")
        L.append("| dataset | episodes | tokens on disk | RssAnon MiB | index estimate MiB | batch buffers MiB |")
        L.append("| --- | ---: | ---: | ---: | ---: | ---: |")
        for tag, name in (("mem_1x", "ep1x"), ("mem_10x", "ep10x")):
            data = os.path.join(env.get("data", ""), name)
            eps = sum(os.path.getsize(f) for f in glob.glob(os.path.join(data, "train", "*", "episodes.idx"))) // 16
            toks = sum(os.path.getsize(f) for f in glob.glob(os.path.join(data, "train", "*", "tokens.bin"))) // 2
            index_mb = eps * (16 + 8 + 16) / 2 ** 20
            depth = bmed(tag, "prefetch_depth")
            buffers = cmp["slot_bytes"] * (depth + 4) / 2 ** 20
            L.append(f"| {name} | {eps:,} | {toks / 1e6:,.0f} M | {bmed(tag, 'rss_anon_mb'):.1f} | {index_mb:.1f} | "
                     f"{buffers:.1f} |")
        L.append("")

    # Open.
    if bench.get("open_10m"):
        eps = sum(os.path.getsize(f) for f in glob.glob(os.path.join(env.get("data", ""), "ep10m", "train", "*",
                                                                     "episodes.idx"))) // 16
        L.append("## Opening a 10M-episode dataset")
        L.append("")
        L.append(f"{eps:,} episodes in 8 shards: open_ms of `tokenfeed bench --config ep10m.xml` (map, validate every "
                 "record, hash the index, keep the ids): median "
                 f"{open_ms:.0f} ms over {len(bench['open_10m'])} runs with the files in the page cache"
                 + (f"; {bmed('open_10m_cold', 'open_ms'):.0f} ms right after dropping the page cache." if
                    bench.get("open_10m_cold") else ".") + f" RssAnon then: {bmed('open_10m', 'rss_anon_mb'):.0f} MiB.")
        L.append("")

    # Cold start.
    L.append("## Cold start and read-ahead")
    L.append("")
    if bench.get("cold_ra1"):
        L.append("The 10x dataset (~1 GB), a 500 us consumer step, the first batches of epoch 0 with no warm-up. "
                 "`cold`: right after `echo 3 > /proc/sys/vm/drop_caches`; `warm`: the same batches again at once "
                 "(same order, so the same pages). Read-ahead off is `TOKENFEED_READ_AHEAD=0`. Medians of 3.")
        L.append("")
        L.append("| run | read-ahead | batches/s | mean get_batch us | p99 us | max us | steps waiting > 50 us | "
                 "depth chosen |")
        L.append("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for tag, run, ra in (("cold_ra1", "cold", "on"), ("cold_ra0", "cold", "off"), ("warm_ra1", "warm", "on"),
                             ("warm_ra0", "warm", "off")):
            L.append(f"| {run} | {ra} | {fmt(bmed(tag, 'batches_per_s'))} | {bmed(tag, 'get_batch_us', 'mean'):.0f} | "
                     f"{bmed(tag, 'get_batch_us', 'p99'):.0f} | {bmed(tag, 'get_batch_us', 'max'):.0f} | "
                     f"{100 * bmed(tag, 'stall_fraction'):.2f}% | {bmed(tag, 'prefetch_depth'):.0f} |")
    else:
        L.append(f"Not measured: {env.get('cold')}.")
    L.append("")

    L.append("## Reproduce")
    L.append("")
    L.append("```sh")
    L.append(f"{a.command}            # installs what is missing, builds Release, generates data, runs everything")
    L.append("perf/run.sh --quick    # a smaller grid and fewer repeats, written to build/perf/quick/")
    L.append("```")
    L.append("")
    with open(os.path.join(out, "RESULTS.md"), "w") as f:
        f.write("\n".join(L) + "\n")
    print(os.path.join(out, "RESULTS.md"))


if __name__ == "__main__":
    main()
