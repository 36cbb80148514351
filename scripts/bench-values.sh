#!/bin/bash
# Interleaved A/B of the gradient value format, as docs/scaling.md ("Gradient values: f32 or raw")
# measured it: five pairs of 'bench' runs, --values raw then --values f32,
# 4 peers capped at 0.4 core each (root: cgroups), ring, sync and async, each
# run two interleaved repetitions against one lone peer. Prints each run's
# speedups; the data is generated once into OUT/data.
#   usage: sudo scripts/bench-values.sh [OUT] [GOSSIPTRAIN]
set -euo pipefail
out=${1:-./bench-values}
bin=${2:-./gossiptrain}
mkdir -p "$out"
for i in 1 2 3 4 5; do
  for v in raw f32; do
    "$bin" bench --cpus 0.4 --peers 1,4 --topologies ring --modes sync,async --repeat 2 \
      --values "$v" --out "$out/run" > "$out/$v-$i.txt" 2>&1
    printf '%s run %d: ' "$v" "$i"
    grep -E '^\| ring/(sync|async)' "$out/$v-$i.txt" | awk -F'|' '{gsub(/ /, "", $2); gsub(/ /, "", $5); printf "%s %s  ", $2, $5}'
    echo
  done
done
