#!/usr/bin/env bash
# What --threads 2 gains over --threads 1, against its limit: what two
# independent --threads 1 processes gain over one on the same machine.
#
# Usage: scripts/threads_figure.sh ROUNDS -- TRAIN-FLAGS...
#   e.g. scripts/threads_figure.sh 10 -- --train /tmp/gen1m/train.svm --model logreg \
#          --dim 16777216 --batch 1000 --epochs 1 --optimizer adagrad --l2 1e-6
#
# Each round times three whole processes' wall clock, in an order that
# rotates from round to round (so a drift in the machine's speed spreads
# over all three): `gossiptrain train FLAGS --threads 1` (t1), the same with
# --threads 2 (t2), and two --threads 1 processes started together (pair,
# until both exit). It prints each round, then the medians and
#   threads 2 speedup = t1/t2,  limit = 2·t1/pair,
#   share = (t1/t2 - 1) / (2·t1/pair - 1): the part of the limit's gain
#   that one process with two threads gets.
# On a shared machine quote the medians and the ranges, and say how busy the
# machine was; GOSSIPTRAIN (default: gossiptrain on the PATH) picks the binary.
set -euo pipefail
rounds=${1:?usage: $0 ROUNDS -- TRAIN-FLAGS...}
shift
[ "${1:-}" = "--" ] && shift
bin=${GOSSIPTRAIN:-gossiptrain}

one() { "$bin" train "$@" --threads 1 >/dev/null 2>&1; }
two() { "$bin" train "$@" --threads 2 >/dev/null 2>&1; }
pair() {
	"$bin" train "$@" --threads 1 >/dev/null 2>&1 &
	local a=$!
	"$bin" train "$@" --threads 1 >/dev/null 2>&1 &
	local b=$!
	wait "$a" "$b"
}
# wall prints the seconds a command took.
wall() {
	local s e
	s=$(date +%s.%N)
	"$@"
	e=$(date +%s.%N)
	awk -v s="$s" -v e="$e" 'BEGIN { printf "%.3f", e - s }'
}

"$bin" train "$@" --threads 1 >/dev/null 2>&1 || {
	echo "$bin train $* --threads 1 fails; run it by hand to see why" >&2
	exit 1
}
all=""
for r in $(seq 1 "$rounds"); do
	case $((r % 3)) in
	1) t1=$(wall one "$@"); t2=$(wall two "$@"); tp=$(wall pair "$@") ;;
	2) t2=$(wall two "$@"); tp=$(wall pair "$@"); t1=$(wall one "$@") ;;
	0) tp=$(wall pair "$@"); t1=$(wall one "$@"); t2=$(wall two "$@") ;;
	esac
	load=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo '?')
	echo "round $r: t1 $t1 s, t2 $t2 s, pair $tp s (load after: $load)"
	all="$all$t1 $t2 $tp"$'\n'
done
printf '%s' "$all" | awk '
function median(a, n,   i, j, t) {
	for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j > 0 && a[j] > t; j--) a[j+1] = a[j]; a[j+1] = t }
	return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
}
{ n++; t1[n] = $1; t2[n] = $2; tp[n] = $3
  if (n == 1 || $1 < lo1) lo1 = $1; if ($1 > hi1) hi1 = $1
  if (n == 1 || $2 < lo2) lo2 = $2; if ($2 > hi2) hi2 = $2
  if (n == 1 || $3 < lop) lop = $3; if ($3 > hip) hip = $3 }
END {
	m1 = median(t1, n); m2 = median(t2, n); mp = median(tp, n)
	s = m1 / m2; l = 2 * m1 / mp
	printf "medians of %d rounds: t1 %.2f s (%.2f-%.2f), t2 %.2f s (%.2f-%.2f), pair %.2f s (%.2f-%.2f)\n", n, m1, lo1, hi1, m2, lo2, hi2, mp, lop, hip
	printf "--threads 2: %.2fx one process; two processes (the limit): %.2fx; share of the limit'"'"'s gain: %.0f%%\n", s, l, 100 * (s - 1) / (l - 1)
}'
