#!/usr/bin/env bash
# `make run`: starts hf-server on an embedded SQLite database under ./var/
# and a local node, prints the admin token and a first session, and stops
# everything on Ctrl-C.
#
# Until hf-agent exists (issue 5), the local node is a stand-in: this script
# registers a simulated inventory (configs/local-node.json) through the
# agent API and heartbeats for it, so tasks get bound and slices appear. It
# runs no tasks. Environment: HF_LISTEN (default 127.0.0.1:3333),
# HF_VAR (default ./var).
set -euo pipefail

build=${BUILD:-build}
listen=${HF_LISTEN:-127.0.0.1:3333}
var=${HF_VAR:-./var}
url="http://${listen}"
server_bin="$build/src/server/hf-server"
hfctl="$build/src/cli/hfctl"
mkdir -p "$var"

# A stable admin token for this checkout (the file is the credential).
token_file="$var/admin.token"
if [ ! -s "$token_file" ]; then
  (umask 077; head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' |
     sed 's/^/hf_/' > "$token_file")
fi
admin=$(cat "$token_file")

"$server_bin" --listen "$listen" --db "sqlite:$var/heteroflow.db" \
  --admin-token-file "$token_file" > "$var/server.log" 2>&1 &
server_pid=$!
heartbeat_pid=""
cleanup() {
  trap - INT TERM EXIT
  [ -n "$heartbeat_pid" ] && kill "$heartbeat_pid" 2>/dev/null || true
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

node_token_file="$var/node.token"
if [ ! -s "$node_token_file" ] || \
   ! api GET /api/v1/whoami "$(cat "$node_token_file")" >/dev/null 2>&1; then
  api POST /api/v1/tokens "$admin" \
    '{"role":"node","description":"make run local node"}' |
    sed -n 's/.*"token":"\([^"]*\)".*/\1/p' > "$node_token_file"
fi
node_token=$(cat "$node_token_file")
inventory=$(tr -d '\n' < configs/local-node.json)
node=$(printf '%s' "$inventory" | sed -n 's/.*"node_id": *"\([^"]*\)".*/\1/p')
api POST /api/v1/nodes/register "$node_token" "$inventory" >/dev/null
(
  while sleep 5; do
    api POST "/api/v1/nodes/$node/heartbeat" "$node_token" "$inventory" \
      >/dev/null 2>&1 || true
  done
) &
heartbeat_pid=$!

cat <<MSG

HeteroFlow is running.
  API:          $url   (OpenAPI: $url/api/v1/openapi.json)
  admin token:  $admin   (also in $token_file)
  local node:   $node, simulated GPUs from configs/local-node.json
  server log:   $var/server.log

A first session (in another terminal):
  export HF_SERVER=$url HF_TOKEN=$admin
  $hfctl tenants create team-a
  $hfctl tasks create --tenant team-a --name inference --memory 4096 --compute 0.5
  $hfctl slices list

Ctrl-C stops the server and the node.
MSG
wait "$server_pid"
