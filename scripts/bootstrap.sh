#!/usr/bin/env bash
# Installs every Debian package pdspark needs. Idempotent: prints nothing when all is present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libabsl-dev libgrpc++-dev protobuf-compiler-grpc protobuf-compiler libprotobuf-dev
  libucx-dev ucx-utils prometheus-cpp-dev prometheus
  nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev libre2-dev libtbb-dev
  libopenblas-dev libcpp-httplib-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev clang-format clang-tidy
  python3-torch python3-numpy python3-tqdm python3-grpcio python3-protobuf python3-matplotlib
  golang-go golang-github-masterminds-sprig-dev golang-gopkg-yaml.v3-dev
  iproute2 curl
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "bootstrap: installing ${#missing[@]} Debian packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "bootstrap: done"
