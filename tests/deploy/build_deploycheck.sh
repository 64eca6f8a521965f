#!/bin/sh
# Builds tests/deploy/deploycheck offline against Debian's Go packages (GOPATH mode).
# usage: build_deploycheck.sh GO SRC_DIR WORK_DIR
# sprig imports github.com/Masterminds/semver/v3, which Debian ships without the /v3
# suffix: a private GOPATH under WORK_DIR supplies it as a symlink.
set -eu
go=$1 src=$2 work=$3
deb=/usr/share/gocode
mkdir -p "$work/gopath/src/github.com/Masterminds/semver"
ln -sfn "$deb/src/github.com/Masterminds/semver" "$work/gopath/src/github.com/Masterminds/semver/v3"
export GO111MODULE=off GOPROXY=off GOFLAGS= GOENV=off GOTOOLCHAIN=local
export GOPATH="$work/gopath:$deb" GOCACHE="$work/gocache"
cd "$src"
exec "$go" build -o "$work/deploycheck" .
