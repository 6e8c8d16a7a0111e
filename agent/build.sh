#!/usr/bin/env bash
# Builds the static guest agent (Go standard library only) and prints the output path.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$here/build/sandglass-agent}"
mkdir -p "$(dirname "$out")"
out="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"
cd "$here"
# CGO off: a static binary that runs in any root filesystem and as the initramfs /init;
# GOPROXY=off: the agent has no dependencies, and the build must never reach the network.
CGO_ENABLED=0 GOFLAGS= GOPROXY=off go build -buildvcs=false -trimpath -ldflags='-s -w' -o "$out" .
echo "$out"
