#!/bin/sh
# Stages pdspark binaries for a runtime image and lists what the runtime stage must install.
#   stage-runtime.sh BIN_DIR OUT_DIR NAME...
# Writes OUT_DIR/bin/NAME and OUT_DIR/runtime-packages.txt: the Debian/Ubuntu packages that
# own every shared library the binaries load (ldd + dpkg -S). Deriving the list keeps the
# runtime stage exact (no guessed sonames such as libgrpc++1.51) and free of toolchains:
# the script fails if a library comes only from a -dev or compiler package. Libraries that
# no package owns (a source-built UCX in /opt, the CUDA toolkit) are left to the
# Dockerfile; they are listed in OUT_DIR/unpackaged-libs.txt.
set -eu
bin=$1 out=$2
shift 2
mkdir -p "$out/bin"
libs=$(mktemp)
for name in "$@"; do
  install -m 0755 "$bin/$name" "$out/bin/$name"
  # The GPU driver's libraries come from the node (nvidia-container-toolkit), not the image.
  missing=$(ldd "$bin/$name" | grep "not found" | grep -v -E '^\s*(libcuda|libnvidia-ml)\.so' || true)
  if [ -n "$missing" ]; then
    echo "$missing" >&2
    echo "stage-runtime: $name has unresolved libraries" >&2
    exit 1
  fi
  ldd "$bin/$name" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' >> "$libs"
done

: > "$out/runtime-packages.txt"
: > "$out/unpackaged-libs.txt"
for lib in $(sort -u "$libs"); do
  real=$(readlink -f "$lib")
  pkg=""
  # Merged /usr: dpkg may know the file as /lib/... while ldd reports /usr/lib/... (or back).
  for path in "$lib" "$real" "${lib#/usr}" "/usr$lib" "${real#/usr}" "/usr$real"; do
    pkg=$(dpkg -S "$path" 2>/dev/null | grep -v '^diversion' | head -n1 | cut -d: -f1) || true
    [ -n "$pkg" ] && break
  done
  if [ -z "$pkg" ]; then
    echo "$lib" >> "$out/unpackaged-libs.txt"
  else
    echo "$pkg" >> "$out/runtime-packages.txt"
  fi
done
rm -f "$libs"
sort -u "$out/runtime-packages.txt" -o "$out/runtime-packages.txt"

bad=$(grep -E -- '-dev$|^(gcc|g\+\+|cpp|clang|llvm|cmake|ninja-build|binutils|golang|build-essential|cuda-nvcc)' \
  "$out/runtime-packages.txt" || true)
if [ -n "$bad" ]; then
  echo "stage-runtime: runtime libraries would pull in build packages: $bad" >&2
  exit 1
fi
echo "stage-runtime: $(wc -l < "$out/runtime-packages.txt") packages, $(wc -l < "$out/unpackaged-libs.txt") unpackaged libraries"
