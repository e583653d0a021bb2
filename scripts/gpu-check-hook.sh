#!/usr/bin/env bash
# The hook's part of the GPU check (issue 6), called by scripts/gpu-check.sh
# with the build directory, or on its own:
#   scripts/gpu-check-hook.sh BUILD OUT_JSON [--dry-run]
# It runs the hook's driver-API probe (src/hook/testing/hook_probe.cc) and,
# where PyTorch is installed, scripts/gpu-check-hook.py, with and without
# LD_PRELOAD=libhfhook.so, and writes one JSON report:
#   probe_info        cuMemGetInfo/cuDeviceTotalMem under a 4 GB quota
#   probe_fill        1 MB allocations until refused (expect 4096)
#   probe_paths       every allocation path charged and refunded
#   probe_share       kernel launches per second at 25% vs unlimited
#   torch_*           PyTorch: plain, 4 GB quota with the three allocators
#                     (native, expandable_segments, cudaMallocAsync: each
#                     with its verdicts in "checks"), 25% vs 100% compute;
#                     {"skipped": "torch not importable: ..."} without it
#   overhead, shares, vllm_probe
#                     scripts/gpu_check_lib.py hook-checks: the hook's
#                     launch overhead with no share, two slices at 25/75
#                     and 50/50 (strict, work-conserving), a KV cache sized
#                     at 90% of cuMemGetInfo's free memory under a quota
# Every process runs under a timeout and each result is written to the
# report when it ends (the driver checks before PyTorch's), so a run cut
# short leaves what it measured.
# --dry-run runs the same steps against the fake driver (no GPU; PyTorch
# steps are skipped) and checks the fake's known answers, so the script is
# exercised where there is no device. It never changes a GPU's settings.
set -uo pipefail
build=${1:?usage: gpu-check-hook.sh BUILD OUT_JSON [--dry-run]}
report=${2:?usage: gpu-check-hook.sh BUILD OUT_JSON [--dry-run]}
dry=${3:-}
hook="$build/lib/libhfhook.so"
probe="$build/src/hook/hook_probe"
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
secs=${HF_HOOK_CHECK_SECONDS:-5}

base_env=(env)
if [ "$dry" = "--dry-run" ]; then
  base_env+=(LD_LIBRARY_PATH="$build/src/hook/testing/fake-cuda"
             HF_FAKE_CUDA_MEMORY_MB=16384 HF_FAKE_CUDA_KERNEL_US=1000)
fi
slice_env() {  # slice_env MB PERCENT -> env assignments for a hooked run
  # (a share is strict: one slice alone measures its share, not the GPU)
  local region="$work/region-$RANDOM$RANDOM"
  echo LD_PRELOAD="$hook" HETEROFLOW_SLICE_MEMORY_MB="$1" \
       HETEROFLOW_HOOK_REGION="$region" \
       ${2:+HETEROFLOW_SLICE_COMPUTE_PERCENT=$2} \
       ${2:+HETEROFLOW_SLICE_COMPUTE_MODE=strict}
}
run_json() {  # run_json CMD... -> its last stdout line, or an error object
  local out
  if out=$(timeout "$((secs + 60))" "$@" 2> "$work/stderr"); then
    echo "$out" | tail -n 1
  else
    python3 -c 'import json,sys; print(json.dumps({"error": sys.argv[1], "stderr": open(sys.argv[2]).read()[-2000:]}))' \
      "exit $?" "$work/stderr"
  fi
}

lib="$here/gpu_check_lib.py"
# put KEY JSON: sets KEY of the report and rewrites it at once, so a step
# that hangs (and the timeout of the caller) leaves every result before it.
put() { printf '%s' "$2" | python3 "$lib" record --top "$report" "$1"; }
rm -f "$report"
put date "\"$(date -u +%Y-%m-%dT%H:%M:%SZ)\""
put dry_run "$([ "$dry" = "--dry-run" ] && echo true || echo false)"
put probe_info "$(run_json "${base_env[@]}" $(slice_env 4096) "$probe" --resolve procaddr info)"
put probe_fill "$(run_json "${base_env[@]}" $(slice_env 4096) "$probe" --resolve procaddr fill 1)"
put probe_paths "$(timeout 60 "${base_env[@]}" $(slice_env 4096) "$probe" --resolve procaddr paths 2>&1 |
  python3 -c 'import json,sys; print(json.dumps([json.loads(l) for l in sys.stdin if l.startswith("{")]))')"
ms=$((secs * 1000))
full=$(run_json "${base_env[@]}" $(slice_env 4096) "$probe" --resolve procaddr launch "$ms" kernel)
quarter=$(run_json "${base_env[@]}" $(slice_env 4096 25) "$probe" --resolve procaddr launch "$ms" kernel)
put probe_share "$(python3 -c '
import json, sys
full, quarter = json.loads(sys.argv[1]), json.loads(sys.argv[2])
out = {"unlimited": full, "at_25_percent": quarter}
if "launches" in full and "launches" in quarter and full["launches"]:
    out["share"] = quarter["launches"] / full["launches"]
print(json.dumps(out))' "$full" "$quarter")"

# The driver checks (overhead, shares, vLLM-style cache), each added to the
# report as it ends; before PyTorch, which is slower to start and may be
# missing.
timeout 300 python3 "$lib" hook-checks --build "$build" \
  --report "$report" --seconds "$secs" ${dry:+--dry-run} ||
  echo "gpu_check_lib.py hook-checks failed or timed out" >&2

py="$here/gpu-check-hook.py"
torch_keys="torch_plain torch_quota torch_expandable torch_async torch_25 torch_100"
if [ "$dry" = "--dry-run" ]; then
  for k in $torch_keys; do put "$k" '{"skipped": "dry run: no GPU"}'; done
elif ! torch_error=$(timeout 60 python3 -c 'import torch' 2>&1); then
  skip=$(python3 -c 'import json,sys; print(json.dumps({"skipped": "torch not importable: " + sys.argv[1][-300:]}))' "$torch_error")
  for k in $torch_keys; do put "$k" "$skip"; done
else
  put torch_plain "$(run_json "${base_env[@]}" python3 "$py" "$secs")"
  put torch_quota "$(run_json "${base_env[@]}" $(slice_env 4096) python3 "$py" "$secs")"
  put torch_expandable "$(run_json "${base_env[@]}" $(slice_env 4096) \
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 "$py" "$secs")"
  put torch_async "$(run_json "${base_env[@]}" $(slice_env 4096) \
    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync python3 "$py" "$secs")"
  put torch_25 "$(run_json "${base_env[@]}" $(slice_env 65536 25) python3 "$py" "$secs")"
  put torch_100 "$(run_json "${base_env[@]}" $(slice_env 65536) python3 "$py" "$secs")"
fi
python3 -m json.tool "$report" > /dev/null || { echo "bad report: $report" >&2; exit 1; }
if [ "$dry" = "--dry-run" ]; then
  python3 "$lib" check-dry-run --hook-report "$report" ||
    exit 1
  # Against the fake driver the answers are known: check them, so the dry
  # run fails when the script or the hook breaks.
  python3 - "$report" <<'PY' || exit 1
import json, sys
r = json.load(open(sys.argv[1]))
gib4 = 4096 << 20
problems = []
if r["probe_info"].get("total") != gib4:
    problems.append("probe_info total is not the 4 GB quota")
if r["probe_fill"].get("allocated_mb") != 4096:
    problems.append("probe_fill did not stop at 4096 MB")
share = r["probe_share"].get("share")
if share is None or not 0.1 < share < 0.45:
    problems.append("probe_share %r is not near 25%%" % share)
if problems:
    print("dry run: " + "; ".join(problems), file=sys.stderr)
    sys.exit(1)
PY
fi
echo "hook report: $report"
