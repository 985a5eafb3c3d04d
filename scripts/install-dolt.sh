#!/usr/bin/env bash
# Builds Dolt (an independent MySQL-compatible server that acts as a MySQL-flavor binlog primary)
# once into a cache, for the MySQL-flavor end-to-end tests (e2e/dolt_test.go, testenv/dolt):
#   ${OUTBOXD_CACHE:-$HOME/.cache/outboxd}/dolt-<version>/dolt
# and does nothing when that binary is already there. The build is cgo (gcc is installed via apt
# when missing) and takes a few minutes; the binary is about 165 MB. Keep DOLT_VERSION equal to
# testenv/dolt.Version (a unit test there checks).
set -euo pipefail
# shellcheck source=scripts/apt.sh
. "$(dirname "$0")/apt.sh"

DOLT_VERSION=v0.40.5-0.20260424001550-011a27ff4303   # Dolt 1.86.4
dir="${OUTBOXD_CACHE:-$HOME/.cache/outboxd}/dolt-${DOLT_VERSION}"
[ -x "$dir/dolt" ] && exit 0

if ! command -v gcc >/dev/null 2>&1; then
	echo "installing: build-essential (Dolt needs cgo)" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt_get update -qq
	apt_get install -y -qq --no-install-recommends build-essential >/dev/null
fi

echo "building dolt ${DOLT_VERSION} into $dir (a few minutes, once)" >&2
mkdir -p "$dir"
# Into a temporary GOBIN first, so an interrupted build never leaves a binary the check above
# would take for a finished one.
tmp="$(mktemp -d "$dir/.build-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
CGO_ENABLED=1 GOBIN="$tmp" go install "github.com/dolthub/dolt/go/cmd/dolt@${DOLT_VERSION}"
mv "$tmp/dolt" "$dir/dolt"
