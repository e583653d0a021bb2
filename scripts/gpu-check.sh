#!/usr/bin/env bash
# The GPU check: run on a machine with a real NVIDIA GPU. It never changes
# a GPU's settings: no MIG mode change, no reset, no clocks; it creates and
# destroys MIG partitions only on GPUs whose MIG mode is already on, through
# the product itself.
#
# Steps, each recorded in $OUT/gpu-check.json (OUT defaults to ./gpu-check):
#   build     hf-server, hf-agent, hf-task-shim, hfctl (Release, no benches)
#   probe     hf-agent --probe --gpu-backend nvml: what NVML reports
#   hook      libhfhook.so on the real driver: scripts/gpu-check-hook.sh
#             (probe and PyTorch, with and without the hook), its report in
#             $OUT/gpu-check-hook.json
#   e2e       hf-server + hf-agent (nvml, process runtime) and tasks:
#             a bronze/silver slice running nvidia-smi -L under its pinning,
#             and, where a GPU is in MIG mode, a gold slice (MIG create,
#             NVIDIA_VISIBLE_DEVICES=MIG-..., destroy)
# Usage: scripts/gpu-check.sh   (then read $OUT/gpu-check.json)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-./gpu-check}
mkdir -p "$out"
build=${BUILD:-build-gpu}
work=$(mktemp -d)
port=${HF_CHECK_PORT:-3399}
url="http://127.0.0.1:$port"
result="$out/gpu-check.json"
declare -A step

record() { step[$1]=$2; }
finish() {
  {
    echo "{"
    echo "  \"date\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\","
    echo "  \"host\": \"$(uname -srm)\","
    printf '  "nvidia_smi": %s,\n' "$(nvidia-smi -L 2>&1 | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))' 2>/dev/null || echo '""')"
    first=1
    echo "  \"steps\": {"
    for k in "${!step[@]}"; do
      [ $first = 1 ] || echo ","
      first=0
      printf '    "%s": %s' "$k" "${step[$k]}"
    done
    echo
    echo "  }"
    echo "}"
  } > "$result"
  [ -n "${agent_pid:-}" ] && kill -TERM "$agent_pid" 2>/dev/null
  [ -n "${server_pid:-}" ] && kill -TERM "$server_pid" 2>/dev/null
  wait 2>/dev/null
  cp "$work"/*.log "$out/" 2>/dev/null
  echo "results: $result"
}
trap finish EXIT
quote() { python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))'; }

# 1. build
if cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
     -DHF_BUILD_BENCH=OFF > "$work/build.log" 2>&1 &&
   cmake --build "$build" --target hf-server hf-agent hf-task-shim hfctl \
     hfhook hook_probe \
     >> "$work/build.log" 2>&1; then
  record build '{"ok": true}'
else
  record build "{\"ok\": false, \"log\": $(tail -c 4000 "$work/build.log" | quote)}"
  exit 1
fi
agent_bin="$build/src/agent/hf-agent"

# 2. probe
if "$agent_bin" --probe --gpu-backend nvml > "$work/probe.json" 2> "$work/probe.log"; then
  record probe "{\"ok\": true, \"report\": $(cat "$work/probe.json")}"
else
  record probe "{\"ok\": false, \"stderr\": $(quote < "$work/probe.log")}"
  exit 1
fi

# 3. the hook (its own report; a failure there does not stop the rest)
if scripts/gpu-check-hook.sh "$build" "$out/gpu-check-hook.json" \
     > "$work/hook.log" 2>&1; then
  record hook "$(cat "$out/gpu-check-hook.json")"
else
  record hook "{\"ok\": false, \"log\": $(tail -c 4000 "$work/hook.log" | quote)}"
fi

# 4. end to end
echo "hf_gpu_check_admin_token_0001" > "$work/admin.token"
"$build/src/server/hf-server" --listen "127.0.0.1:$port" --db "sqlite:$work/db" \
  --admin-token-file "$work/admin.token" > "$work/server.log" 2>&1 &
server_pid=$!
admin=$(cat "$work/admin.token")
api() { curl -fsS -X "$1" -H "Authorization: Bearer $admin" \
          -H 'Content-Type: application/json' ${3:+--data "$3"} "$url$2"; }
for _ in $(seq 1 100); do curl -fsS "$url/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
api POST /api/v1/tokens '{"role":"node","node":"gpu"}' |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])' > "$work/node.token"
"$agent_bin" --server "$url" --token-file "$work/node.token" --node-id gpu \
  --gpu-backend nvml --runtime process --state-dir "$work/agent" \
  --mps-dir "$work/mps" --heartbeat-interval 0.5 > "$work/agent.log" 2>&1 &
agent_pid=$!
sleep 3
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
slice=$(api POST /api/v1/tasks '{"name":"slice","gpu_memory_mb":2048,"gpu_compute_ratio":0.25,"command":"env | grep -E \"^(CUDA|NVIDIA|HETEROFLOW)_\" | sort; nvidia-smi -L"}' |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
record slice_task "$(task_json "$slice")"
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
