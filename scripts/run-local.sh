#!/usr/bin/env bash
# `make run`: starts hf-server on an embedded SQLite database under ./var/
# and one hf-agent on this machine: on its NVIDIA GPUs when it has them
# (NVML), otherwise on the simulated inventory configs/local-node.json.
# Prints the API URL, the admin token and a first session, and stops both on
# Ctrl-C (tasks the agent started keep their state under ./var/agent/ and
# are adopted by the next `make run`).
# Environment: HF_LISTEN (default 127.0.0.1:3333), HF_VAR (default ./var),
# HF_GPU_BACKEND (nvml or sim; default: nvml when nvidia-smi sees a GPU).
set -euo pipefail

build=${BUILD:-build}
listen=${HF_LISTEN:-127.0.0.1:3333}
var=${HF_VAR:-./var}
url="http://${listen}"
server_bin="$build/src/server/hf-server"
agent_bin="$build/src/agent/hf-agent"
hfctl="$build/src/cli/hfctl"
node=local
mkdir -p "$var"

backend=${HF_GPU_BACKEND:-}
if [ -z "$backend" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    backend=nvml
  else
    backend=sim
  fi
fi

# A stable admin token for this checkout (the file is the credential).
token_file="$var/admin.token"
if [ ! -s "$token_file" ]; then
  (umask 077; head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' |
     sed 's/^/hf_/' > "$token_file")
fi
admin=$(cat "$token_file")

"$server_bin" --listen "$listen" --db "sqlite:$var/heteroflow.db" \
  --admin-token-file "$token_file" --console-dir "$build/web/dist" \
  > "$var/server.log" 2>&1 &
server_pid=$!
agent_pid=""
cleanup() {
  trap - INT TERM EXIT
  if [ -n "$agent_pid" ]; then
    kill -TERM "$agent_pid" 2>/dev/null || true
    wait "$agent_pid" 2>/dev/null || true
  fi
  kill -TERM "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  echo
  echo "stopped (state kept in $var/)"
}
trap cleanup INT TERM EXIT

for _ in $(seq 1 100); do
  if curl -fsS "$url/healthz" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "hf-server failed to start:" >&2
    cat "$var/server.log" >&2
    exit 1
  fi
  sleep 0.1
done

api() {  # api METHOD PATH TOKEN [BODY]
  curl -fsS -X "$1" -H "Authorization: Bearer $3" \
    -H 'Content-Type: application/json' ${4:+--data "$4"} "$url$2"
}

# A node token bound to this node, kept across runs.
node_token_file="$var/node.token"
if [ ! -s "$node_token_file" ] || \
   ! api GET /api/v1/whoami "$(cat "$node_token_file")" >/dev/null 2>&1; then
  (umask 077; api POST /api/v1/tokens "$admin" \
    "{\"role\":\"node\",\"node\":\"$node\",\"description\":\"make run agent\"}" |
    sed -n 's/.*"token":"\([^"]*\)".*/\1/p' > "$node_token_file")
fi

agent_args=(--server "$url" --token-file "$node_token_file" --node-id "$node"
            --runtime process --state-dir "$var/agent")
if [ "$backend" = sim ]; then
  agent_args+=(--gpu-backend sim --inventory configs/local-node.json
               --mps-dir "$var/mps")
  gpus="simulated GPUs from configs/local-node.json"
else
  agent_args+=(--gpu-backend nvml)
  gpus="this machine's NVIDIA GPUs (NVML)"
fi
# The hook (docs/HOOK.md) for every slice that is not a MIG partition,
# where it was built (it needs the CUDA headers at build time).
case "$build" in
  /*) hook_lib="$build/lib/libhfhook.so" ;;
  *) hook_lib="$(pwd)/$build/lib/libhfhook.so" ;;
esac
if [ -f "$hook_lib" ]; then
  agent_args+=(--hook-library "$hook_lib")
fi
"$agent_bin" "${agent_args[@]}" > "$var/agent.log" 2>&1 &
agent_pid=$!

for _ in $(seq 1 100); do
  if api GET "/api/v1/nodes/$node" "$admin" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$agent_pid" 2>/dev/null; then
    echo "hf-agent failed to start:" >&2
    cat "$var/agent.log" >&2
    exit 1
  fi
  sleep 0.1
done

if [ "$backend" = sim ]; then
  cat <<'WARN'

  ************************************************************************
  *  NO NVIDIA GPU FOUND: the local node runs on SIMULATED GPUs            *
  *  (configs/local-node.json: an H100 in MIG mode = gold, an A100 with    *
  *  a simulated MPS daemon = silver, a P100 = bronze). Tasks really run   *
  *  as processes, but no CUDA work reaches a GPU.                         *
  ************************************************************************
WARN
fi
cat <<MSG

HeteroFlow is running.
  API:          $url   (OpenAPI: $url/api/v1/openapi.json)
  console:      $url/   (sign in with the admin token below)
  admin token:  $admin   (also in $token_file)
  local node:   $node, $gpus
  logs:         $var/server.log, $var/agent.log

A first session (in another terminal):
  export HF_SERVER=$url HF_TOKEN=$admin
  $hfctl tenants create team-a
  $hfctl tasks create --tenant team-a --name hello --memory 4096 --compute 0.5 --command 'echo "slice \$HETEROFLOW_SLICE_ID on GPU \$CUDA_VISIBLE_DEVICES"; sleep 30'
  $hfctl slices list

Ctrl-C stops the server and the agent.
MSG
wait "$server_pid"
