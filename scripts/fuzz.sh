#!/usr/bin/env bash
# Runs the libFuzzer targets of fuzz/ (docs/FUZZING.md) for a bounded time
# each, over their seed corpus (fuzz/corpus/NAME, read only) plus a working
# corpus in the build tree, and prints a summary. A finding (crash, abort,
# sanitizer report, leak, timeout, out-of-memory) leaves its reproducer in
# BUILD/fuzz-findings/NAME/ and makes the run fail.
#
#   scripts/fuzz.sh [--seconds N] [--seeds-only] BUILD_DIR [TARGET...]
#
# N defaults to $FUZZ_SECONDS or 60; no TARGET means every *_fuzz binary in
# BUILD_DIR/fuzz. --seeds-only starts from the seed corpus alone and keeps
# nothing it finds (the short run of `make test`: loading a grown working
# corpus can take longer than the run itself). Reproduce a finding with:
#   BUILD_DIR/fuzz/NAME FILE
set -uo pipefail

seconds=${FUZZ_SECONDS:-60}
seeds_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --seeds-only) seeds_only=1; shift ;;
    *) break ;;
  esac
done
if [ $# -lt 1 ]; then
  echo "usage: $0 [--seconds N] BUILD_DIR [TARGET...]" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
shift
root=$(cd "$(dirname "$0")/.." && pwd)

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for bin in "$build"/fuzz/*_fuzz; do
    [ -x "$bin" ] && targets+=("$(basename "$bin")")
  done
fi
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz: no fuzz targets in $build/fuzz (configure with -DHF_FUZZ=ON)" >&2
  exit 2
fi

# Leaks and UBSan reports are findings too; abort (not exit) so libFuzzer
# writes the reproducer.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

failed=0
summary=()
for t in "${targets[@]}"; do
  bin=$build/fuzz/$t
  seeds=$root/fuzz/corpus/$t
  work=$build/fuzz-corpus/$t
  if [ $seeds_only -eq 1 ]; then
    work=$build/fuzz-smoke/$t
    rm -rf "$work"
  fi
  findings=$build/fuzz-findings/$t
  log=$build/fuzz-logs/$t.log
  mkdir -p "$work" "$findings" "$(dirname "$log")"
  if [ ! -x "$bin" ]; then
    summary+=("$(printf '%-18s MISSING (not built: %s)' "$t" "$bin")")
    failed=1
    continue
  fi
  args=(-max_total_time="$seconds" -timeout="${FUZZ_TIMEOUT:-10}"
        -rss_limit_mb="${FUZZ_RSS_MB:-2048}" -max_len="${FUZZ_MAX_LEN:-65536}"
        -print_final_stats=1 -artifact_prefix="$findings/")
  [ -f "$root/fuzz/$t.dict" ] && args+=(-dict="$root/fuzz/$t.dict")
  before=$(ls "$findings" | wc -l)
  echo "== fuzz $t: ${seconds}s over $seeds" >&2
  "$bin" "${args[@]}" "$work" "$seeds" >"$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  if [ $rc -eq 0 ] && [ "$(ls "$findings" | wc -l)" -eq "$before" ]; then
    summary+=("$(printf '%-18s ok     %8s runs %6s/s  cov %s' "$t" \
      "${runs:-?}" "${speed:-?}" "${cov:-?}")")
  else
    failed=1
    summary+=("$(printf '%-18s FAILED (exit %s); log: %s' "$t" "$rc" "$log")")
    echo "---- $t: last lines of $log" >&2
    tail -n 40 "$log" >&2
    for f in $(ls -t "$findings" | head -n $(( $(ls "$findings" | wc -l) - before ))); do
      echo "---- reproducer: $findings/$f" >&2
      echo "     rerun:      $bin $findings/$f" >&2
    done
  fi
done

echo "== fuzz summary (${seconds}s each)"
printf '%s\n' "${summary[@]}"
if [ $failed -ne 0 ]; then
  echo "fuzz: FAILED; reproducers in $build/fuzz-findings/ (docs/FUZZING.md)"
  exit 1
fi
