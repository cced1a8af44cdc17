#!/usr/bin/env bash
# prepare-text end to end with --hf-tokenizer: the native encoder (--verify-sample 0: the
# command's own C++ run), the native encoder with the default --verify-sample 0.001 (handed to
# the Python program, the tokenizers package verifying), and the tokenizers package's run;
# ROUNDS interleaved rounds, each variant's seconds and its first shard's SHA-256 (the three
# must agree). perf/RESULTS_prepare_text.md has a run.
#
#   perf/prepare_text_native.sh CORPUS.jsonl HF_TOKENIZER_DIR [ROUNDS]
#
# Environment: CLI (default build/tools/tokenfeed), TOKENFEED_PYTHON (a Python with the
# tokenfeed module and tokenizers; default build/py-venv-debian/bin/python), WORKERS (2).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
corpus=$1 hf=$2 rounds=${3:-3}
cli=${CLI:-$repo/build/tools/tokenfeed}
export TOKENFEED_PYTHON=${TOKENFEED_PYTHON:-$repo/build/py-venv-debian/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for r in $(seq 1 "$rounds"); do
  for v in native verify tokenizers; do
    case $v in
      native) opts=(--verify-sample 0) ;;
      verify) opts=() ;;
      tokenizers) opts=(--tokenizer-impl tokenizers) ;;
    esac
    rm -rf "$work/out"
    t0=$(date +%s.%N)
    "$cli" prepare-text "$corpus" --output-dir "$work/out" --hf-tokenizer "$hf" --workers "${WORKERS:-2}" \
      --progress-seconds 0 "${opts[@]}" >"$work/stdout" 2>/dev/null
    t1=$(date +%s.%N)
    printf 'round %s %-10s %6.2f s  shard %s  %s\n' "$r" "$v" "$(echo "$t1 - $t0" | bc)" \
      "$(sha256sum "$work/out/train/shard_00000.npy" | cut -c1-16)" "$(grep -o 'verified .* documents' "$work/stdout" || true)"
  done
done
