#!/usr/bin/env bash
# The GPU check: run on a machine with a real NVIDIA GPU. It never changes
# a GPU's settings: no MIG mode change, no reset, no clocks; it creates and
# destroys MIG partitions only on GPUs whose MIG mode is already on, through
# the product itself.
#
# Steps, each recorded in $OUT/gpu-check.json (OUT defaults to ./gpu-check)
# as soon as it ends, so a step that fails or is killed leaves the ones
# before it:
#   build     hf-server, hf-agent, hf-task-shim, hfctl, libhfhook.so,
#             hook_probe (Release, no benches)
#   probe     hf-agent --probe --gpu-backend nvml: what NVML reports
#   hook      libhfhook.so on the real driver: scripts/gpu-check-hook.sh
#             (its probe; PyTorch with and without the hook and with three
#             allocators under a quota; the hook's launch overhead; two
#             slices at 25/75 and 50/50, strict and work-conserving; a
#             vLLM-style cache at 90% of cuMemGetInfo's free memory), its
#             report also in $OUT/gpu-check-hook.json
#   e2e       hf-server + hf-agent (nvml, process runtime, the hook) and
#             tasks: a bronze/silver slice running nvidia-smi -L under its
#             pinning; the 25/75 and 50/50 pairs again as tasks, on the
#             regions the agent creates (agent_shares,
#             scripts/gpu_check_lib.py); where a GPU is in MIG mode, a gold
#             slice (MIG create, NVIDIA_VISIBLE_DEVICES=MIG-..., destroy)
# The whole check keeps to HF_GPU_CHECK_BUDGET_S seconds (default 480):
# each step runs under a timeout from what is left.
#
# Usage: scripts/gpu-check.sh [--dry-run]   (then read $OUT/gpu-check.json)
#   --dry-run (or HF_GPU_CHECK_DRY_RUN=1): no GPU needed. Nothing is built:
#   the binaries come from BUILD (default ./build), the GPU is the fake CUDA
#   driver and the fake NVML (docs/FAKE_CUDA.md), PyTorch and MIG are
#   skipped, and at the end the fake's known answers are checked (exit 1
#   when one is wrong). It proves the script's plumbing, not a GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
usage="usage: scripts/gpu-check.sh [--dry-run]"
dry=${HF_GPU_CHECK_DRY_RUN:-0}
case "$dry" in
  0|1) ;;
  *) echo "HF_GPU_CHECK_DRY_RUN must be 0 or 1, not '$dry'" >&2; exit 2;;
esac
for arg in "$@"; do
  case "$arg" in
    --dry-run) dry=1;;
    -h|--help) echo "$usage"; exit 0;;
    *) echo "$usage (unknown argument '$arg')" >&2; exit 2;;
  esac
done
budget=${HF_GPU_CHECK_BUDGET_S:-480}
case "$budget" in
  ''|*[!0-9]*) echo "HF_GPU_CHECK_BUDGET_S must be a number of seconds" >&2
               exit 2;;
esac
out=${OUT:-./gpu-check}
mkdir -p "$out"
if [ "$dry" = 1 ]; then build=${BUILD:-build}; else build=${BUILD:-build-gpu}; fi
lib=scripts/gpu_check_lib.py
work=$(mktemp -d)
port=${HF_CHECK_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
url="http://127.0.0.1:$port"
result="$out/gpu-check.json"
rm -f "$result"
started=$(date +%s)

record() { printf '%s' "$2" | python3 "$lib" record "$result" "$1"; }
record_top() { printf '%s' "$2" | python3 "$lib" record --top "$result" "$1"; }
quote() { python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))'; }
# left [RESERVE]: seconds of the budget left, less RESERVE, at least 10.
left() {
  local l=$((budget - ($(date +%s) - started) - ${1:-0}))
  [ "$l" -lt 10 ] && l=10
  echo "$l"
}
finish() {
  record_top date "\"$(date -u +%Y-%m-%dT%H:%M:%SZ)\""
  record_top host "\"$(uname -srm)\""
  record_top dry_run "$([ "$dry" = 1 ] && echo true || echo false)"
  record_top seconds "$(($(date +%s) - started))"
  record_top nvidia_smi "$(nvidia-smi -L 2>&1 | quote)"
  [ -n "${agent_pid:-}" ] && kill -TERM "$agent_pid" 2>/dev/null
  [ -n "${server_pid:-}" ] && kill -TERM "$server_pid" 2>/dev/null
  wait 2>/dev/null
  cp "$work"/*.log "$out/" 2>/dev/null
  rm -rf "$work"
  echo "results: $result"
}
trap finish EXIT

agent_env=()
agent_flags=()
task_env='{}'
if [ "$dry" = 1 ]; then
  # 1. nothing to build: the tree's binaries, the fake GPU
  missing=""
  for f in src/server/hf-server src/agent/hf-agent src/agent/hf-task-shim \
           lib/libhfhook.so src/hook/hook_probe \
           src/hook/testing/fake-cuda/libcuda.so.1 \
           src/gpu/nvml/fake/libnvidia-ml.so.1; do
    [ -e "$build/$f" ] || missing="$missing $f"
  done
  if [ -n "$missing" ]; then
    record build "{\"ok\": false, \"error\": $(echo "dry run: missing in $build:$missing" | quote)}"
    exit 1
  fi
  record build '{"skipped": "dry run: the binaries of BUILD are used"}'
  fake_cuda="$(cd "$build" && pwd)/src/hook/testing/fake-cuda"
  mkdir -p "$work/fake-gpu"
  cat > "$work/nvml.json" <<EOF
{"devices": [{"name": "HeteroFlow Fake GPU", "uuid": "GPU-fa4e0000-0000-4000-8000-000000000001",
  "memory_total_mib": 16384, "cc": [9, 0], "mig": false,
  "fake_cuda": {"dir": "$work/fake-gpu", "index": 0}}]}
EOF
  agent_env=(env HF_FAKE_NVML_CONFIG="$work/nvml.json"
             HF_FAKE_CUDA_GPU_DIR="$work/fake-gpu" HF_FAKE_CUDA_MEMORY_MB=16384)
  agent_flags=(--nvml-library "$build/src/gpu/nvml/fake/libnvidia-ml.so.1"
               --mps off)
  task_env="{\"LD_LIBRARY_PATH\": \"$fake_cuda\", \"HF_FAKE_CUDA_GPU_DIR\": \"$work/fake-gpu\", \"HF_FAKE_CUDA_KERNEL_US\": \"1000\"}"
else
  # 1. build
  if timeout "$(left 180)" cmake -S . -B "$build" -G Ninja \
       -DCMAKE_BUILD_TYPE=Release -DHF_BUILD_BENCH=OFF \
       -DHF_BUILD_CONSOLE=OFF > "$work/build.log" 2>&1 &&
     timeout "$(left 180)" cmake --build "$build" --target hf-server \
       hf-agent hf-task-shim hfctl hfhook hook_probe \
       >> "$work/build.log" 2>&1; then
    record build '{"ok": true}'
  else
    record build "{\"ok\": false, \"log\": $(tail -c 4000 "$work/build.log" | quote)}"
    exit 1
  fi
fi
agent_bin="$build/src/agent/hf-agent"

# 2. probe
if timeout 60 "${agent_env[@]}" "$agent_bin" --probe --gpu-backend nvml \
     "${agent_flags[@]}" > "$work/probe.json" 2> "$work/probe.log"; then
  record probe "{\"ok\": true, \"report\": $(cat "$work/probe.json")}"
else
  record probe "{\"ok\": false, \"stderr\": $(quote < "$work/probe.log")}"
  exit 1
fi

# 3. the hook (its own report; a failure there does not stop the rest)
if timeout "$(left 120)" scripts/gpu-check-hook.sh "$build" \
     "$out/gpu-check-hook.json" $([ "$dry" = 1 ] && echo --dry-run) \
     > "$work/hook.log" 2>&1; then
  record hook "$(cat "$out/gpu-check-hook.json")"
else
  record hook "{\"ok\": false, \"report\": $(cat "$out/gpu-check-hook.json" 2>/dev/null || echo null), \"log\": $(tail -c 4000 "$work/hook.log" | quote)}"
fi

# 4. end to end
echo "hf_gpu_check_admin_token_0001" > "$work/admin.token"
"$build/src/server/hf-server" --listen "127.0.0.1:$port" --db "sqlite:$work/db" \
  --admin-token-file "$work/admin.token" > "$work/server.log" 2>&1 &
server_pid=$!
admin=$(cat "$work/admin.token")
api() { curl -fsS -m 10 -X "$1" -H "Authorization: Bearer $admin" \
          -H 'Content-Type: application/json' ${3:+--data "$3"} "$url$2"; }
for _ in $(seq 1 100); do curl -fsS "$url/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
api POST /api/v1/tokens '{"role":"node","node":"gpu"}' |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])' > "$work/node.token"
"${agent_env[@]}" "$agent_bin" --server "$url" --token-file "$work/node.token" \
  --node-id gpu --gpu-backend nvml --runtime process --state-dir "$work/agent" \
  --mps-dir "$work/mps" --heartbeat-interval 0.5 \
  --hook-library "$(cd "$build" && pwd)/lib/libhfhook.so" "${agent_flags[@]}" \
  > "$work/agent.log" 2>&1 &
agent_pid=$!
for _ in $(seq 1 40); do
  api GET /api/v1/nodes/gpu 2>/dev/null | grep -q '"gpus": *\[ *{' && break
  sleep 0.25
done
node=$(api GET /api/v1/nodes/gpu || echo '{}')
record node "$node"

wait_task() {  # wait_task ID -> final task JSON
  for _ in $(seq 1 120); do
    t=$(api GET "/api/v1/tasks/$1")
    case "$(echo "$t" | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"])')" in
      succeeded|failed|cancelled) echo "$t"; return;;
    esac
    sleep 0.5
  done
  echo "$t"
}
task_json() {  # task_json ID -> {"task":..., "log":...}
  t=$(wait_task "$1")
  l=$(api GET "/api/v1/tasks/$1/logs" || echo '{}')
  echo "{\"task\": $t, \"log\": $l}"
}
slice=$(api POST /api/v1/tasks "{\"name\":\"slice\",\"gpu_memory_mb\":2048,\"gpu_compute_ratio\":0.25,\"env\":$task_env,\"command\":\"env | grep -E \\\"^(CUDA|NVIDIA|HETEROFLOW)_\\\" | sort; nvidia-smi -L\"}" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
record slice_task "$(task_json "$slice")"

# The shares through the platform: the agent writes the slices' environment
# and creates the GPU's region.
timeout "$(left 40)" python3 "$lib" agent-shares --url "$url" \
  --token-file "$work/admin.token" --build "$build" --report "$result" \
  --seconds "${HF_HOOK_CHECK_SECONDS:-5}" \
  --baseline-report "$out/gpu-check-hook.json" \
  $([ "$dry" = 1 ] && echo --dry-run-gpu-dir "$work/fake-gpu") \
  > "$work/agent-shares.log" 2>&1 ||
  echo "agent-shares failed or timed out" >> "$work/agent-shares.log"

if echo "$node" | grep -q '"mig_capable": *true'; then
  gold=$(api POST /api/v1/tasks '{"name":"gold","gpu_memory_mb":10000,"gpu_compute_ratio":0.1,"command":"echo $NVIDIA_VISIBLE_DEVICES; nvidia-smi -L"}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  record gold_task "$(task_json "$gold")"
  sleep 3
  record slice_requests "$(api GET /api/v1/slice-requests || echo '{}')"
else
  record gold_task '{"skipped": "no GPU in MIG mode (the check never enables it)"}'
fi
record history "$(api GET '/api/v1/slices/history?limit=100' || echo '{}')"

if [ "$dry" = 1 ]; then
  python3 "$lib" check-dry-run --hook-report "$out/gpu-check-hook.json" \
    --check-report "$result" || exit 1
fi
