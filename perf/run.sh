#!/usr/bin/env bash
# The perf harness, end to end: installs what is missing, builds Release, generates the
# datasets, runs every benchmark and writes perf/RESULTS.md, the sweep plots and CSVs
# beside it, and the raw files every figure comes from in perf/raw/.
#
#   perf/run.sh            the full run. About 14 minutes on 2 cores once built and with the
#                          data generated (the run of 2026-11-25 took 852 s without the cold
#                          start). The first run also builds
#                          (the C++ drivers in Release, then the Python module: several
#                          minutes each on 2 cores) and generates ~4.5 GB of datasets (a few
#                          minutes); later runs reuse both.
#   perf/run.sh --quick    a smaller grid and fewer repeats, about 2 minutes once built;
#                          written to $TOKENFEED_PERF_BUILD/quick, perf/ is left alone
#   perf/run.sh --help     this text
# Any other argument is a usage error (status 2).
#
# Where things go and what runs (override with the environment):
#   TOKENFEED_PERF_BUILD  build directory            (default build/perf-rel: its own tree,
#                                                     not build/perf, which is the perf/
#                                                     subdirectory of the main build tree)
#   TOKENFEED_PERF_DATA   generated datasets, ~4.5 GB (default build/perf-data)
#   TOKENFEED_PERF_VENV   Python venv                (default build/perf-venv)
#   TOKENFEED_PERF_OUT    results                    (default perf/ for the full run,
#                                                     $TOKENFEED_PERF_BUILD/quick for --quick)
#   TOKENFEED_PERF_COLD   1 (default): measure the cold start, which drops the page cache
#                         (echo 3 > /proc/sys/vm/drop_caches, root only) before each cold
#                         run: that empties the cache of the whole machine, and of everyone
#                         else working on it, a few times. 0: skip it (RESULTS.md then says
#                         the cold start was not measured).
#   TOKENFEED_PERF_SMOKE  1: a smoke run to check the scripts after editing them: tiny
#                         datasets (in build/perf-data-smoke) and timings, every step once,
#                         results in $TOKENFEED_PERF_BUILD/smoke. Its figures mean nothing.
#
# Dependencies: ./dev.sh deps (the project's build dependencies, with sudo when not root),
# then perf's own: Debian's python3-numpy and python3-torch (CPU, 1.13), libopenblas0 and
# procps. Python: a venv over Debian's python3 with --system-site-packages, so that
# Debian's torch and numpy are used as installed; matplotlib comes from PyPI into the venv,
# pinned to the system numpy so that pip does not replace it.
#
# The machine is shared: every figure is a median over interleaved repeats, reported with
# its spread and with ratios against baselines measured in the same run, and the load
# before and after the run is recorded in RESULTS.md. Run it on a quiet machine.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
MODE=full
case "$#:${1:-}" in
  0:) ;;
  1:--quick) MODE=quick ;;
  1:--help | 1:-h) usage; exit 0 ;;
  *) echo "perf/run.sh: unknown arguments: $*" >&2; echo "usage: perf/run.sh [--quick | --help]" >&2; exit 2 ;;
esac
COMMAND="perf/run.sh${1:+ $1}"
if [ "${TOKENFEED_PERF_SMOKE:-0}" = 1 ]; then
  MODE=smoke
  COMMAND="TOKENFEED_PERF_SMOKE=1 $COMMAND"
fi
BUILD=${TOKENFEED_PERF_BUILD:-$ROOT/build/perf-rel}
if [ "$MODE" = smoke ]; then DATA=${TOKENFEED_PERF_DATA:-$ROOT/build/perf-data-smoke}; else DATA=${TOKENFEED_PERF_DATA:-$ROOT/build/perf-data}; fi
VENV=${TOKENFEED_PERF_VENV:-$ROOT/build/perf-venv}
case "$MODE" in
  full) OUT=${TOKENFEED_PERF_OUT:-$ROOT/perf} ;;
  *) OUT=${TOKENFEED_PERF_OUT:-$BUILD/$MODE} ;;
esac
COLD=${TOKENFEED_PERF_COLD:-1}
RAW=$BUILD/raw-$MODE
START=$(date +%s)

log() { printf '[perf %4ds] %s\n' $(( $(date +%s) - START )) "$*" >&2; }

# --- dependencies ------------------------------------------------------------------------
"$ROOT/dev.sh" deps python3-numpy python3-torch libopenblas0 procps  # the build's and perf's own
if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV"
  /usr/bin/python3 -m venv --system-site-packages "$VENV"
fi
NUMPY_VERSION=$(/usr/bin/python3 -c 'import numpy; print(numpy.__version__)')
"$VENV/bin/python" -c 'import matplotlib' 2>/dev/null ||
  "$VENV/bin/pip" install -q matplotlib "numpy==$NUMPY_VERSION"
PY=("env" "-u" "OPENBLAS_CORETYPE" "-u" "OPENBLAS_L2_SIZE" "$VENV/bin/python")

# --- build ---------------------------------------------------------------------------------
log "building Release in $BUILD"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTOKENFEED_BUILD_PERF=ON \
  -DTOKENFEED_BUILD_TESTS=OFF -DTOKENFEED_INSTALL=OFF >/dev/null
cmake --build "$BUILD" -j 2 --target tokenfeed_cli tokenfeed_gen_dataset tokenfeed_bench_prefetch tokenfeed_bench_compare
TF=$BUILD/tools/tokenfeed
GEN=$BUILD/perf/gen_dataset

# --- data ------------------------------------------------------------------------------------
mkdir -p "$DATA"
rm -rf "$RAW"  # this run's raw files only
mkdir -p "$RAW"
gen() {  # gen NAME ARGS...: generate once (a stamp records the arguments)
  local name=$1
  shift
  if [ "$(cat "$DATA/$name.stamp" 2>/dev/null)" != "$*" ]; then
    rm -rf "${DATA:?}/$name"
    log "generating $name: $*"
    "$GEN" --out "$DATA/$name" "$@" >"$DATA/$name.txt"
    echo "$*" >"$DATA/$name.stamp"
  fi
}
if [ "$MODE" = smoke ]; then
  gen ep1x --episodes 5000 --shards 4 --seed 1
  gen ep10x --episodes 50000 --shards 8 --seed 2
  gen ep1x_u32 --episodes 5000 --shards 4 --dtype uint32 --seed 4
  gen ep10m --episodes 200000 --shards 8 --median 16 --sigma 0.5 --max-len 256 --val-episodes 0 --seed 3
  gen stream --stream-tokens 5000000 --median 600 --seed 5
else
  gen ep1x --episodes 50000 --shards 4 --seed 1
  gen ep10x --episodes 500000 --shards 8 --seed 2
  gen ep1x_u32 --episodes 50000 --shards 4 --dtype uint32 --seed 4
  gen ep10m --episodes 10000000 --shards 8 --median 16 --sigma 0.5 --max-len 256 --val-episodes 0 --seed 3
  gen stream --stream-tokens 100000000 --median 600 --seed 5
fi
# The index at scale (full run; a small stand-in in the smoke run): 100M short episodes,
# 1.6 GB of index and 0.7 GB of tokens, about 80 s to generate the first time.
case "$MODE" in
  full) gen ep100m --episodes 100000000 --shards 8 --median 4 --sigma 0.3 --max-len 16 --val-episodes 0 --seed 3 ;;
  smoke) gen ep100m --episodes 300000 --shards 8 --median 4 --sigma 0.3 --max-len 16 --val-episodes 0 --seed 3 ;;
esac

config() {  # config NAME DATASET [extra XML]: a config file with the audit log off
  cat >"$RAW/$1.xml" <<XML
<training>
  <dataset_dir>$DATA/$2</dataset_dir>
  <batch_size>8</batch_size>
  <block_size>1024</block_size>
  <use_loss_mask>true</use_loss_mask>
  <audit_log_dir></audit_log_dir>${3:-}
</training>
XML
}
config ep1x ep1x
config ep1x_packed ep1x "
  <dataset_mode>sft_packed</dataset_mode>"
config ep10x ep10x
config ep1x_u32 ep1x_u32
config ep10m ep10m
config stream stream
if [ "$MODE" != quick ]; then config ep100m ep100m; fi

# --- environment -------------------------------------------------------------------------------
{
  echo "mode=$MODE"
  echo "command=$COMMAND"
  echo "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "dirty=$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null | wc -l | tr -d ' ') tracked files modified"
  echo "data=$DATA"
  echo "nproc=$(nproc)"
  echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  echo "os=$(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-unknown}")"
  echo "load_before=$(cut -d' ' -f1-3 /proc/loadavg)"
  echo "busy_before=$(ps -eo pcpu,comm --sort=-pcpu --no-headers | awk '$1 > 5 && $2 != "ps" {printf "%s(%s%%) ", $2, $1}')"
  echo "torch=$("${PY[@]}" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)"
  echo "numpy=$("${PY[@]}" -c 'import numpy; print(numpy.__version__)')"
} >"$RAW/env.txt"

# --- smoke check: `tokenfeed bench --json` prints one JSON object with the contract's fields ---
log "checking tokenfeed bench --json"
"$TF" bench --config "$RAW/ep1x.xml" --batches 64 --warmup 8 --consumer-us 100 --json \
  --waits-json "$RAW/bench_waits_check.json" >"$RAW/bench_json_check.txt"
/usr/bin/python3 - "$RAW/bench_json_check.txt" "$RAW/bench_waits_check.json" <<'PY'
import json, sys
w = json.load(open(sys.argv[2]))
if not {"count", "first_steps", "in_first_steps", "tenths", "major_faults_tenths", "steps", "longest"} <= set(w):
    sys.exit(f"tokenfeed bench --waits-json: missing fields: {sorted(w)}")
lines = open(sys.argv[1]).read().splitlines()
if len(lines) != 1:
    sys.exit(f"tokenfeed bench --json printed {len(lines)} lines on stdout, not one JSON object")
j = json.loads(lines[0])
number = (int, float)
need = {"batches_per_s": number, "tokens_per_s": number, "get_batch_us": dict, "stall_fraction": number,
        "open_ms": number, "prefetch_depth": int, "decode_threads": int, "rss_anon_mb": number}
bad = [k for k, t in need.items() if not isinstance(j.get(k), t) or isinstance(j.get(k), bool)]
if bad:
    sys.exit(f"tokenfeed bench --json: missing or mistyped fields: {bad}")
if not {"p50", "p99", "max"} <= set(j["get_batch_us"]) or not all(isinstance(v, number) for v in j["get_batch_us"].values()):
    sys.exit(f"tokenfeed bench --json: get_batch_us must hold p50, p99 and max: {j['get_batch_us']}")
if not 0 <= j["stall_fraction"] <= 1:
    sys.exit(f"tokenfeed bench --json: stall_fraction {j['stall_fraction']} is not a fraction")
PY

# --- settings per mode ---------------------------------------------------------------------------
# Sweep: every point is a fresh Loader, warmed up (300 batches, 150 with a 2 ms step), then
# measured for --seconds; the depths of a group run in a new shuffled order each repeat.
case "$MODE" in
  full)
    SWEEP=(--depths 1,2,4,8,16,32,64,auto --threads 1,2 --repeats 3 --seconds 0.2)
    SWEEP_PACKED=("${SWEEP[@]}")
    SWEEP_STREAM=("${SWEEP[@]}")
    CMP=(--repeats 5 --seconds 1)
    PYREP=(--repeats 5 --seconds 3)
    PYGET=(--batches 2000 --warmup 200 --repeats 3)
    REPEATS=5
    STEP500=(--batches 3000 --warmup 300)
    STEP2000=(--batches 1000 --warmup 200)
    PURE=(--batches 20000 --warmup 500)
    MEM=(--batches 7000 --warmup 0)  # 7000 x 8 rows cross into epoch 1 of 50,000 episodes
    COLD_REPEATS=3
    COLD_BATCHES=2000
    ;;
  quick)
    SWEEP=(--depths 1,2,4,8,32,auto --threads 1 --repeats 1 --seconds 0.2)
    SWEEP_PACKED=(--shapes 8x1024 --depths 1,4,16,auto --threads 1 --repeats 1 --seconds 0.2)
    SWEEP_STREAM=("${SWEEP_PACKED[@]}")
    CMP=(--repeats 3 --seconds 0.5)
    PYREP=(--repeats 3 --seconds 1.5)
    PYGET=(--batches 500 --warmup 100 --repeats 1)
    REPEATS=3
    STEP500=(--batches 3000 --warmup 300)
    STEP2000=(--batches 1000 --warmup 200)
    PURE=(--batches 20000 --warmup 500)
    MEM=(--batches 7000 --warmup 0)
    COLD_REPEATS=2
    COLD_BATCHES=1000
    ;;
  smoke)
    SWEEP=(--shapes 8x1024,32x512 --steps 0,2000 --depths 4,16,auto --threads 1,2 --repeats 2 --seconds 0.05 --warmup 50)
    SWEEP_PACKED=("${SWEEP[@]}")
    SWEEP_STREAM=("${SWEEP[@]}")
    CMP=(--repeats 2 --seconds 0.1 --memcpy-mb 32)
    PYREP=(--repeats 2 --seconds 0.3)
    PYGET=(--batches 100 --warmup 20 --repeats 1)
    REPEATS=2
    STEP500=(--batches 300 --warmup 50)
    STEP2000=(--batches 100 --warmup 20)
    PURE=(--batches 2000 --warmup 100)
    MEM=(--batches 700 --warmup 0)  # 700 x 8 rows cross into epoch 1 of 5,000 episodes
    COLD_REPEATS=1
    COLD_BATCHES=300
    ;;
esac

# --- the prefetch-depth sweep, per mode ---------------------------------------------------------
# Reads a config's dataset into the page cache first: on a shared machine the cache may have
# dropped it since it was made, and the sweep's first points would then read from disk (100x
# slower at one decode thread), which drags their cells' medians.
warm_cache() {  # warm_cache CONFIG
  local dir
  dir=$(sed -n 's:.*<dataset_dir>\(.*\)</dataset_dir>.*:\1:p' "$1")
  [ -d "$dir" ] || { log "error: no dataset_dir in $1"; exit 1; }
  find "$dir" -type f -exec cat {} + >/dev/null
}
sweep() {  # sweep MODE CONFIG ARGS...
  local mode=$1 config=$2
  shift 2
  log "prefetch sweep, $mode"
  warm_cache "$RAW/$config.xml"
  "$BUILD/perf/bench_prefetch" --config "$RAW/$config.xml" --csv "$RAW/sweep_$mode.csv" "$@" >"$RAW/sweep_$mode.txt"
}
sweep sft_episode ep1x "${SWEEP[@]}"
sweep sft_packed ep1x_packed "${SWEEP_PACKED[@]}"
sweep token_stream stream "${SWEEP_STREAM[@]}"

# --- the comparison: pure production at 8x1024, mask on ---------------------------------------------
log "comparison: tokenfeed, plain C++ loop, memcpy bound"
"$BUILD/perf/bench_compare" --config "$RAW/ep1x.xml" --csv "$RAW/compare.csv" --json "$RAW/compare.json" \
  --variants "threads=default:depth=auto,threads=2:depth=auto,threads=default:depth=auto:reads=view,threads=default:depth=auto:contract=off,threads=2:depth=auto:contract=off" \
  "${CMP[@]}" >"$RAW/compare.txt"
log "comparison: sft_packed and token_stream against their own plain loops"
for cmp_mode in packed stream; do
  cmp_config=$([ $cmp_mode = packed ] && echo ep1x_packed || echo stream)
  "$BUILD/perf/bench_compare" --config "$RAW/$cmp_config.xml" --csv "$RAW/compare_$cmp_mode.csv" \
    --json "$RAW/compare_$cmp_mode.json" --variants "threads=default:depth=auto,threads=2:depth=auto" \
    "${CMP[@]}" >"$RAW/compare_$cmp_mode.txt"
done
log "comparison: numpy (preallocated and stacked) and torch DataLoader"
"$TF" dump --config "$RAW/ep1x.xml" --batches 8 --out "$RAW/dump_ep1x" >/dev/null
"${PY[@]}" "$ROOT/perf/py_loaders.py" --dataset "$DATA/ep1x" --out "$RAW/python.jsonl" --check-dir "$RAW/dump_ep1x" \
  "${PYREP[@]}" >"$RAW/python.txt"
rm -rf "$RAW/dump_ep1x"

# --- the Python trainer's thread: tokenfeed's module against the numpy loader ------------------------
log "building the Python module into $VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check "scikit-build-core>=0.10" "nanobind>=2.0"
CMAKE_BUILD_PARALLEL_LEVEL=2 "$VENV/bin/pip" install -q --disable-pip-version-check --no-build-isolation --no-deps \
  --force-reinstall --config-settings=build-dir="$BUILD/py-build" "$ROOT"
log "get_batch on the Python trainer's thread"
"${PY[@]}" "$ROOT/python/bench_get_batch.py" --config "$RAW/ep1x.xml" --step-us 0,500,2000 "${PYGET[@]}" \
  --json "$RAW/python_get_batch.jsonl" >"$RAW/python_get_batch.txt"

# --- tokenfeed bench runs: latency, dtypes, memory, open time ----------------------------------------
bench() {  # bench TAG ARGS...: one JSON line per run into bench.jsonl (a failed run stops the script):
           # the tag, bench's --json object, and when its waits happened (--waits-json)
  local tag=$1 out
  shift
  out=$("$TF" bench "$@" --json --waits-json "$RAW/waits.json")
  printf '{"tag": "%s", "result": %s, "waits": %s}\n' "$tag" "$out" "$(cat "$RAW/waits.json")" >>"$RAW/bench.jsonl"
  rm -f "$RAW/waits.json"
}
log "get_batch latency with a trainer step, default settings; pure production per mode and dtype"
for rep in $(seq "$REPEATS"); do
  bench step500 --config "$RAW/ep1x.xml" --consumer-us 500 "${STEP500[@]}"
  bench step2000 --config "$RAW/ep1x.xml" --consumer-us 2000 "${STEP2000[@]}"
  bench pure_u16 --config "$RAW/ep1x.xml" "${PURE[@]}"
  bench pure_u32 --config "$RAW/ep1x_u32.xml" "${PURE[@]}"
  bench pure_packed --config "$RAW/ep1x_packed.xml" "${PURE[@]}"
  bench pure_stream --config "$RAW/stream.xml" "${PURE[@]}"
done
log "a mixture of three sources against a single source of the same shape"
{
  printf '<training>\n  <batch_size>8</batch_size>\n  <block_size>1024</block_size>\n'
  printf '  <use_loss_mask>true</use_loss_mask>\n  <audit_log_dir></audit_log_dir>\n  <mixture>\n'
  for seed in 1 2 3; do
    printf '    <source name="s%s" dataset_dir="%s" weight="1" epoch_seed="%s"/>\n' "$seed" "$DATA/ep1x" "$seed"
  done
  printf '  </mixture>\n</training>\n'
} >"$RAW/mix3.xml"
for rep in $(seq "$REPEATS"); do
  bench mix_single --config "$RAW/ep1x.xml" "${PURE[@]}"
  bench mix_three --config "$RAW/mix3.xml" "${PURE[@]}"
done
log "anonymous memory at 1x and 10x, open time at 10M episodes"
for rep in $(seq "$REPEATS"); do
  bench mem_1x --config "$RAW/ep1x.xml" "${MEM[@]}"
  bench mem_10x --config "$RAW/ep10x.xml" "${MEM[@]}"
  bench open_10m --config "$RAW/ep10m.xml" --batches 200 --warmup 0
done
if [ "$MODE" != quick ]; then
  # About 20 s a run at 100M episodes: the open, then the first epoch's order (a permutation
  # of 100M ids) before the first batch, and the next epoch's made ahead.
  log "open time and anonymous memory at 100M episodes (ep100m): tokenfeed bench, then the open alone from Python"
  for rep in 1 2 3; do
    bench open_100m --config "$RAW/ep100m.xml" --batches 200 --warmup 0
  done
  "${PY[@]}" "$ROOT/perf/open_memory.py" --config "$RAW/ep100m.xml" --repeats 3 --out "$RAW/open_memory.jsonl"
fi

# --- cold start ---------------------------------------------------------------------------------------
# The redirect sits inside the braces so that 2>/dev/null also covers the shell's own
# "Permission denied" when the file cannot be opened.
drop_caches() { sync && { echo 3 >/proc/sys/vm/drop_caches; } 2>/dev/null; }
if [ "$COLD" = 0 ]; then
  log "cold start not measured: TOKENFEED_PERF_COLD=0"
  echo "cold=not measured: TOKENFEED_PERF_COLD=0 (dropping the page cache was not allowed for this run)" >>"$RAW/env.txt"
elif drop_caches; then
  log "cold start: the page cache (of the whole machine) dropped before each cold run"
  echo "cold=measured" >>"$RAW/env.txt"
  for rep in $(seq "$COLD_REPEATS"); do
    for ra in 1 0; do
      drop_caches
      TOKENFEED_READ_AHEAD=$ra bench "cold_ra$ra" --config "$RAW/ep10x.xml" --consumer-us 500 --batches "$COLD_BATCHES" --warmup 0
      TOKENFEED_READ_AHEAD=$ra bench "warm_ra$ra" --config "$RAW/ep10x.xml" --consumer-us 500 --batches "$COLD_BATCHES" --warmup 0
    done
  done
  drop_caches
  bench open_10m_cold --config "$RAW/ep10m.xml" --batches 1 --warmup 0
else
  log "cold start not measured: cannot write /proc/sys/vm/drop_caches (needs root outside a container)"
  echo "cold=not measured: /proc/sys/vm/drop_caches is not writable here" >>"$RAW/env.txt"
fi

{
  echo "load_after=$(cut -d' ' -f1-3 /proc/loadavg)"
  echo "busy_after=$(ps -eo pcpu,comm --sort=-pcpu --no-headers | awk '$1 > 5 && $2 != "ps" {printf "%s(%s%%) ", $2, $1}')"
  echo "seconds=$(( $(date +%s) - START ))"
} >>"$RAW/env.txt"

log "writing $OUT/RESULTS.md (raw files into $OUT/raw)"
"${PY[@]}" "$ROOT/perf/report.py" --raw "$RAW" --out "$OUT" --mode "$MODE" --command "$COMMAND"
log "done in $(( $(date +%s) - START )) s"
