#!/usr/bin/env bash
# Runs a command beside one competing CPU-bound process (a busy shell loop) at the given nice
# level, and stops the neighbour when the command ends. For measurements on a busy machine:
#   scripts/busy_neighbour.sh 0 build/specdec run experiments/qwen_contention.yaml --out /tmp/busy
#   scripts/busy_neighbour.sh 19 build/specdec generate --model smollm2-135m --prompt "Hi"
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 NICE COMMAND [ARGS...]" >&2; exit 1; }
level=$1
shift
[[ "$level" =~ ^-?[0-9]+$ ]] || { echo "$0: NICE must be an integer, got '$level'" >&2; exit 1; }
nice -n "$level" bash -c 'while :; do :; done' &
neighbour=$!
trap 'kill "$neighbour" 2>/dev/null || true' EXIT
"$@"
