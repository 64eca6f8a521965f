#!/usr/bin/env bash
# The official openai npm package against the router (in front of a ScriptedDecodeWorker).
# Exits 77 (skipped) when node/npm or the npm registry is not available.
set -euo pipefail
server_bin="$1"
script_dir="$(cd "$(dirname "$0")" && pwd)"
command -v node >/dev/null && command -v npm >/dev/null || { echo "node/npm missing"; exit 77; }
work="$(mktemp -d)"
cleanup() {
  if [[ -n "${server_pid:-}" ]]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work"
npm init -y >/dev/null
if ! timeout 300 npm install --no-audit --no-fund openai@4 >npm.log 2>&1; then
  echo "npm install openai failed:"; tail -5 npm.log; exit 77
fi
cp "$script_dir/openai_node_client.mjs" .
coproc SERVER { "$server_bin"; }
server_pid=$SERVER_PID
read -r -t 30 ready <&"${SERVER[0]}"
http_port="$(sed -n 's/^ready http=\([0-9]*\).*/\1/p' <<<"$ready")"
[[ -n "$http_port" ]] || { echo "server did not start: $ready"; exit 1; }
status=0
ROUTER_URL="http://127.0.0.1:$http_port/v1" timeout 120 node openai_node_client.mjs || status=$?
exit "$status"
