#!/usr/bin/env bash
# Builds the static jailer (Go standard library only) and prints the output path.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$here/build/sandglass-jailer}"
mkdir -p "$(dirname "$out")"
out="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"
cd "$here"
# CGO off: one static binary with no loader or libraries of its own, so the jail it builds needs nothing for it;
# GOPROXY=off: no dependencies, and the build must never reach the network.
CGO_ENABLED=0 GOFLAGS= GOPROXY=off go build -buildvcs=false -trimpath -ldflags='-s -w' -o "$out" .
echo "$out"
