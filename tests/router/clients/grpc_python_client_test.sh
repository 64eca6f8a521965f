#!/usr/bin/env bash
# Debian's python3-grpcio against the router's gRPC API, stubs generated here with protoc.
# Exits 77 (skipped) when python3-grpcio or the protoc plugin is missing.
set -euo pipefail
server_bin="$1"
proto_dir="$2"
script_dir="$(cd "$(dirname "$0")" && pwd)"
python=/usr/bin/python3
"$python" -c "import grpc, google.protobuf" 2>/dev/null || { echo "python3-grpcio missing"; exit 77; }
plugin="$(command -v grpc_python_plugin || true)"
[[ -n "$plugin" ]] && command -v protoc >/dev/null || { echo "protoc/grpc_python_plugin missing"; exit 77; }
work="$(mktemp -d)"
cleanup() {
  if [[ -n "${server_pid:-}" ]]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
protoc --proto_path="$proto_dir" --python_out="$work" --grpc_python_out="$work" \
  --plugin=protoc-gen-grpc_python="$plugin" "$proto_dir"/pdspark/v1/*.proto
touch "$work/pdspark/__init__.py" "$work/pdspark/v1/__init__.py"
coproc SERVER { "$server_bin"; }
server_pid=$SERVER_PID
read -r -t 30 ready <&"${SERVER[0]}"
grpc_port="$(sed -n 's/^ready http=[0-9]* grpc=\([0-9]*\).*/\1/p' <<<"$ready")"
[[ -n "$grpc_port" ]] || { echo "server did not start: $ready"; exit 1; }
status=0
PYTHONPATH="$work" timeout 60 "$python" "$script_dir/grpc_python_client.py" "127.0.0.1:$grpc_port" \
  || status=$?
exit "$status"
