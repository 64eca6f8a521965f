#!/bin/sh
# The README's two commands share one build: `make run` and `make test` must configure CMake
# identically whether or not ccache was on PATH when make started (the first command on a fresh
# machine starts before the bootstrap installs it). Compares the commands `make -n configure`
# would run with an empty PATH and with a PATH holding a ccache.
# usage: configure_is_path_independent_test.sh SOURCE_DIR
set -eu
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/without" "$tmp/with"
printf '#!/bin/sh\nexec "$@"\n' >"$tmp/with/ccache"
chmod +x "$tmp/with/ccache"
without=$(PATH="$tmp/without" /usr/bin/make -s -n -C "$src" configure)
with=$(PATH="$tmp/with" /usr/bin/make -s -n -C "$src" configure)
if [ "$without" != "$with" ]; then
  echo "configure differs with ccache on PATH:"
  echo "without: $without"
  echo "with:    $with"
  exit 1
fi
echo "same configure command either way: $with"
