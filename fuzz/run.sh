#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan, in build-fuzz/) and fuzzes each for a
# bounded time, two at a time; exits non-zero on any finding (a crash, a sanitizer report,
# a leak, a timeout or an out-of-memory), printing the end of its log and the reproducer.
#
#   fuzz/run.sh [SECONDS] [TARGET...]   SECONDS per target (default 60); all targets by default
#
# Each target starts from its committed seed corpus fuzz/corpus/TARGET/ (read-only: inputs
# found on the way go to build-fuzz/corpus/TARGET/, kept between runs) and, where one
# exists, the dictionary fuzz/dict/TARGET.dict. A finding is written to
# build-fuzz/artifacts/TARGET/; once fixed, add it to fuzz/corpus/TARGET/ as a regression
# seed. To fuzz one target for longer by hand:
#   build-fuzz/fuzz/fuzz_config build-fuzz/corpus/config fuzz/corpus/config -dict=fuzz/dict/config.dict
#
# Environment: JOBS (build and run parallelism, default 2), TOKENFEED_FUZZ_BUILD (default
# build-fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-60}
shift || true
ALL=(config resume_state npy_header dataset_metadata conversation_line sentencepiece_model dataset_open text_input
     hf_tokenizer_json megatron_index datatrove_index)
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=("${ALL[@]}")
BUILD=${TOKENFEED_FUZZ_BUILD:-build-fuzz}
JOBS=${JOBS:-2}

./dev.sh deps clang libclang-rt-14-dev
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g -DNDEBUG" -DTOKENFEED_SANITIZE=address -DTOKENFEED_BUILD_FUZZ=ON \
  -DTOKENFEED_BUILD_TESTS=OFF -DTOKENFEED_BUILD_TOOLS=OFF -DTOKENFEED_BUILD_PERF=OFF -DTOKENFEED_INSTALL=OFF >/dev/null
cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]/#/fuzz_}"

# fuzz_one TARGET: runs it; its exit status is libFuzzer's (0: nothing found).
fuzz_one() {
  local t=$1
  local work="$BUILD/corpus/$t" artifacts="$BUILD/artifacts/$t/"
  mkdir -p "$work" "$artifacts"
  local dict=()
  [ -f "fuzz/dict/$t.dict" ] && dict=("-dict=fuzz/dict/$t.dict")
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$BUILD/fuzz/fuzz_$t" "$work" "fuzz/corpus/$t" "${dict[@]}" -max_total_time="$SECONDS_PER_TARGET" \
    -timeout=20 -rss_limit_mb=2560 -max_len=65536 -artifact_prefix="$artifacts" -print_final_stats=1 \
    >"$BUILD/fuzz_$t.log" 2>&1
}

start=$SECONDS
declare -A status
running=()
for t in "${TARGETS[@]}"; do
  fuzz_one "$t" & running+=("$t:$!")
  if [ ${#running[@]} -ge "$JOBS" ]; then
    entry=${running[0]}; running=("${running[@]:1}")
    if wait "${entry#*:}"; then status[${entry%%:*}]=0; else status[${entry%%:*}]=1; fi
  fi
done
for entry in "${running[@]}"; do
  if wait "${entry#*:}"; then status[${entry%%:*}]=0; else status[${entry%%:*}]=1; fi
done

passed=0 failed=0
for t in "${TARGETS[@]}"; do
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$BUILD/fuzz_$t.log" | grep -o '[0-9]*$' || echo "?")
  if [ "${status[$t]}" -eq 0 ]; then
    passed=$((passed + 1))
    echo "fuzz: $t ok ($runs runs in ${SECONDS_PER_TARGET} s)"
  else
    failed=$((failed + 1))
    echo "fuzz: $t FOUND A PROBLEM; the end of $BUILD/fuzz_$t.log:" >&2
    tail -n 40 "$BUILD/fuzz_$t.log" >&2
    ls -l "$BUILD/artifacts/$t/" >&2 || true
  fi
done
echo "fuzz: $((SECONDS - start)) s"
echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
