#!/usr/bin/env bash
# The official openai npm package (the version pinned in tests/integration/openai_client, which
# scripts/bootstrap.sh installs) against the router in front of a ScriptedDecodeWorker: plain
# completions and chat, then an agent's conversation (tool call round trip, reasoning) against
# `router_scripted_server --agent`.
set -euo pipefail
server_bin="$1"
script_dir="$(cd "$(dirname "$0")" && pwd)"
client_dir="$script_dir/../../integration/openai_client"
if [[ ! -d "$client_dir/node_modules/openai" ]]; then
  echo "the openai npm client is not installed in $client_dir: run scripts/bootstrap.sh" \
       "(it runs npm ci there)"
  exit 1
fi
work="$(mktemp -d)"
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
# Node resolves `import "openai"` next to the script: run the checks beside the pinned client.
ln -s "$(cd "$client_dir" && pwd)/node_modules" "$work/node_modules"
cp "$script_dir/openai_node_client.mjs" "$script_dir/openai_agent_client.mjs" "$work/"

# Runs `node CHECKS` against a fresh server started with ARGS.
run_checks() {
  local checks="$1"
  shift
  coproc SERVER { "$server_bin" "$@"; }
  server_pid=$SERVER_PID
  local ready
  read -r -t 30 ready <&"${SERVER[0]}"
  local http_port
  http_port="$(sed -n 's/^ready http=\([0-9]*\).*/\1/p' <<<"$ready")"
  [[ -n "$http_port" ]] || { echo "server did not start: $ready"; exit 1; }
  ROUTER_URL="http://127.0.0.1:$http_port/v1" timeout 120 node "$work/$checks"
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}
run_checks openai_node_client.mjs
run_checks openai_agent_client.mjs --agent
