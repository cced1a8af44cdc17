#!/usr/bin/env bash
# The perf harness, end to end: installs what is missing, builds Release, generates the
# datasets, runs every benchmark and writes perf/RESULTS.md, perf/prefetch_sweep.png and
# the CSVs beside them.
#
#   perf/run.sh            the full run (about 20 minutes on 2 cores)
#   perf/run.sh --quick    a smaller grid and fewer repeats (a few minutes)
#
# Where things go (override with the environment):
#   TOKENFEED_PERF_BUILD  build directory            (default build/perf)
#   TOKENFEED_PERF_DATA   generated datasets, ~2 GB  (default build/perf-data)
#   TOKENFEED_PERF_VENV   Python venv                (default build/perf-venv)
#   TOKENFEED_PERF_OUT    results                    (default perf/ for the full run,
#                                                     $TOKENFEED_PERF_BUILD/quick for --quick)
#
# Python: a venv over Debian's python3 with --system-site-packages, so that Debian's
# python3-torch (CPU, 1.13) and python3-numpy are used as installed; matplotlib comes from
# PyPI into the venv, pinned to the system numpy so that pip does not replace it.
#
# The machine is shared: every figure is a median over interleaved repeats, reported with
# ratios against baselines measured in the same run, and the load before and after the
# run is recorded in RESULTS.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

MODE=full
[ "${1:-}" = "--quick" ] && MODE=quick
BUILD=${TOKENFEED_PERF_BUILD:-$ROOT/build/perf}
DATA=${TOKENFEED_PERF_DATA:-$ROOT/build/perf-data}
VENV=${TOKENFEED_PERF_VENV:-$ROOT/build/perf-venv}
if [ "$MODE" = quick ]; then OUT=${TOKENFEED_PERF_OUT:-$BUILD/quick}; else OUT=${TOKENFEED_PERF_OUT:-$ROOT/perf}; fi
RAW=$BUILD/raw-$MODE
START=$(date +%s)

log() { printf '[perf %4ds] %s\n' $(( $(date +%s) - START )) "$*" >&2; }

# --- dependencies ------------------------------------------------------------------------
PACKAGES=(cmake g++ ninja-build pkg-config python3 python3-venv python3-numpy python3-torch
          libtbb-dev libpugixml-dev libboost-dev libcli11-dev nlohmann-json3-dev doctest-dev
          libsentencepiece-dev zlib1g-dev procps)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
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
mkdir -p "$DATA" "$RAW"
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
gen ep1x --episodes 50000 --shards 4 --seed 1
gen ep10x --episodes 500000 --shards 8 --seed 2
gen ep1x_u32 --episodes 50000 --shards 4 --dtype uint32 --seed 4
gen ep10m --episodes 10000000 --shards 8 --median 16 --sigma 0.5 --max-len 256 --val-episodes 0 --seed 3
gen stream --stream-tokens 100000000 --median 600 --seed 5

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
config ep10x ep10x
config ep1x_u32 ep1x_u32
config ep10m ep10m
config stream stream

# --- environment -------------------------------------------------------------------------------
{
  echo "mode=$MODE"
  echo "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "data=$DATA"
  echo "nproc=$(nproc)"
  echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  echo "load_before=$(cut -d' ' -f1-3 /proc/loadavg)"
  echo "busy_before=$(ps -eo pcpu,comm --sort=-pcpu --no-headers | awk '$1 > 5 {printf "%s(%s%%) ", $2, $1}')"
  echo "torch=$("${PY[@]}" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)"
  echo "numpy=$("${PY[@]}" -c 'import numpy; print(numpy.__version__)')"
} >"$RAW/env.txt"

if [ "$MODE" = quick ]; then
  SWEEP=(--depths 1,2,4,8,32,auto --threads 1 --repeats 1 --seconds 0.2)
  SWEEP_STREAM=(--shapes 8x1024 --depths 1,4,auto --threads 1 --repeats 1 --seconds 0.2)
  CMP=(--repeats 3 --seconds 0.5)
  PYREP=(--repeats 3 --seconds 1.5)
  PYGET=(--batches 500 --warmup 100 --repeats 1)
  REPEATS=3
  COLD_BATCHES=1000
else
  SWEEP=(--depths 1,2,4,8,16,32,64,auto --threads 1,2 --repeats 3 --seconds 0.4)
  SWEEP_STREAM=(--depths 1,2,4,8,16,64,auto --threads 1 --repeats 2 --seconds 0.3)
  CMP=(--repeats 5 --seconds 1)
  PYREP=(--repeats 5 --seconds 3)
  PYGET=(--batches 2000 --warmup 200 --repeats 3)
  REPEATS=5
  COLD_BATCHES=2000
fi

# --- the prefetch-depth sweep --------------------------------------------------------------------
log "prefetch sweep, sft_episode"
"$BUILD/perf/bench_prefetch" --config "$RAW/ep1x.xml" --csv "$RAW/sweep_sft_episode.csv" "${SWEEP[@]}" >"$RAW/sweep_sft_episode.txt"
log "prefetch sweep, token_stream"
"$BUILD/perf/bench_prefetch" --config "$RAW/stream.xml" --csv "$RAW/sweep_token_stream.csv" "${SWEEP_STREAM[@]}" >"$RAW/sweep_token_stream.txt"

# --- the comparison: pure production at 8x1024, mask on ---------------------------------------------
log "comparison: tokenfeed, plain C++ loop, memcpy bound"
"$BUILD/perf/bench_compare" --config "$RAW/ep1x.xml" --csv "$RAW/compare.csv" --json "$RAW/compare.json" \
  --variants "threads=1:depth=auto,threads=2:depth=auto,threads=1:depth=auto:contract=off,threads=2:depth=auto:contract=off" \
  "${CMP[@]}" >"$RAW/compare.txt"
log "comparison: numpy and torch DataLoader"
"$TF" dump --config "$RAW/ep1x.xml" --batches 8 --out "$RAW/dump_ep1x" >/dev/null
"${PY[@]}" "$ROOT/perf/py_loaders.py" --dataset "$DATA/ep1x" --out "$RAW/python.jsonl" --check-dir "$RAW/dump_ep1x" \
  "${PYREP[@]}" >"$RAW/python.txt"

# --- the Python trainer's thread: tokenfeed's module against the numpy loader ------------------------
log "building the Python module into $VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check "scikit-build-core>=0.10" "nanobind>=2.0"
CMAKE_BUILD_PARALLEL_LEVEL=2 "$VENV/bin/pip" install -q --disable-pip-version-check --no-build-isolation --no-deps \
  --force-reinstall --config-settings=build-dir="$BUILD/py-build" "$ROOT"
log "get_batch on the Python trainer's thread"
"${PY[@]}" "$ROOT/python/bench_get_batch.py" --config "$RAW/ep1x.xml" --step-us 0,2000 "${PYGET[@]}" \
  --json "$RAW/python_get_batch.jsonl" >"$RAW/python_get_batch.txt"

# --- tokenfeed bench runs: latency, dtypes, memory, open time ----------------------------------------
bench() {  # bench TAG ARGS...: one JSON line per run into bench.jsonl
  local tag=$1
  shift
  printf '{"tag": "%s", "result": %s}\n' "$tag" "$("$TF" bench "$@" --json)" >>"$RAW/bench.jsonl"
}
rm -f "$RAW/bench.jsonl"
log "get_batch latency with a trainer step, default settings"
for rep in $(seq "$REPEATS"); do
  bench step500 --config "$RAW/ep1x.xml" --consumer-us 500 --batches 3000 --warmup 300
  bench step2000 --config "$RAW/ep1x.xml" --consumer-us 2000 --batches 1000 --warmup 200
  bench pure_u16 --config "$RAW/ep1x.xml" --batches 20000 --warmup 500
  bench pure_u32 --config "$RAW/ep1x_u32.xml" --batches 20000 --warmup 500
  bench pure_stream --config "$RAW/stream.xml" --batches 20000 --warmup 500
done
log "anonymous memory at 1x and 10x, open time at 10M episodes"
for rep in $(seq "$REPEATS"); do
  bench mem_1x --config "$RAW/ep1x.xml" --batches 7000 --warmup 0
  bench mem_10x --config "$RAW/ep10x.xml" --batches 7000 --warmup 0
  bench open_10m --config "$RAW/ep10m.xml" --batches 200 --warmup 0
done

# --- cold start ---------------------------------------------------------------------------------------
drop_caches() { sync && echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; }
if drop_caches; then
  log "cold start: page cache dropped before each cold run"
  echo "cold=measured" >>"$RAW/env.txt"
  for rep in $(seq 3); do
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
  echo "busy_after=$(ps -eo pcpu,comm --sort=-pcpu --no-headers | awk '$1 > 5 {printf "%s(%s%%) ", $2, $1}')"
  echo "seconds=$(( $(date +%s) - START ))"
} >>"$RAW/env.txt"

log "writing $OUT/RESULTS.md"
"${PY[@]}" "$ROOT/perf/report.py" --raw "$RAW" --out "$OUT" --mode "$MODE" --command "perf/run.sh${1:+ $1}"
log "done in $(( $(date +%s) - START )) s"
