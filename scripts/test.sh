#!/usr/bin/env bash
# The test command: vet, the whole test suite, and the race detector on the
# packages that run goroutines. CI (.ci/run) calls exactly this script.
# Usage: scripts/test.sh            (from anywhere in the repository)
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== go vet"
go vet ./...

echo "== go test"
go test -count=1 -timeout 20m ./...

# Packages with goroutines: the race detector runs their tests again. Not
# the protocol simulator: it runs the core (which starts no goroutine,
# node/train/arch_test.go) on one goroutine, and its seeds took 9 minutes
# under the detector for nothing it could find.
race_pkgs=$(go list ./... | grep -E '/(sgd|report|gossip|node|cluster|metrics|job)(/|$)' | grep -v '/node/train/sim$' || true)
if [ -n "$race_pkgs" ]; then
  echo "== go test -race"
  go test -count=1 -race -timeout 20m $race_pkgs
fi
