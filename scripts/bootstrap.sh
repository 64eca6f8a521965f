#!/usr/bin/env bash
# Installs every Debian package pdspark needs, and the openai npm client its API tests drive.
# Idempotent: prints nothing when all is present.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libabsl-dev libgrpc++-dev protobuf-compiler-grpc protobuf-compiler libprotobuf-dev
  libucx-dev ucx-utils prometheus-cpp-dev prometheus
  nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev libre2-dev libtbb-dev
  libopenblas-dev libcpp-httplib-dev libboost-dev libssl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev clang-format clang-tidy
  python3-torch python3-numpy python3-tqdm python3-grpcio python3-protobuf python3-matplotlib
  golang-go golang-github-masterminds-sprig-dev golang-gopkg-yaml.v3-dev
  iproute2 curl
)
# Node.js and npm (for tests/integration/openai_client): Debian's, unless some are installed.
command -v node >/dev/null || packages+=(nodejs)
command -v npm >/dev/null || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "bootstrap: installing ${#missing[@]} Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "bootstrap: done"
fi

# The pinned openai client, from its lock file. Only the API tests need it: without the npm
# registry the system still builds and runs, and those tests say what is missing.
client=tests/integration/openai_client
if [ ! -f "$client/node_modules/.package-lock.json" ] ||
   [ "$client/package-lock.json" -nt "$client/node_modules/.package-lock.json" ]; then
  echo "bootstrap: npm ci in $client"
  npm ci --prefix "$client" --no-fund --no-audit --loglevel=error >/dev/null ||
    echo "bootstrap: npm ci failed; the openai client tests will fail until it succeeds" >&2
fi
