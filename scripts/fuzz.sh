#!/usr/bin/env bash
# Fuzzing campaign: runs every libFuzzer target (tests/fuzz/) one after the other, each on a
# fresh copy of its committed seeds, for a fixed number of executions, and prints a table of
# executions, speed, final coverage (cov: edges, ft: features), corpus size and crashes.
#   scripts/fuzz.sh                      # all six targets, 1,000,000 executions each
#   scripts/fuzz.sh --runs 50000 bpe     # some targets, fewer executions
# Needs the fuzzers built (scripts/build.sh --sanitize builds them, with clang++).
# Everything goes to build-asan/fuzz/campaign/<target>/: corpus/, artifacts/ (crash-*, timeout-*,
# oom-* inputs), log. Exit code 1 when any target crashed. One worker per target: the machine
# is shared; no -jobs/-workers.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=1000000
build=build-asan
targets=()
while [ $# -gt 0 ]; do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    -h|--help) sed -n 2,10p "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(gguf safetensors tokenizer_json bpe prompts experiment)

dict_of() {
  case $1 in
    tokenizer_json|prompts) echo "-dict=tests/fuzz/json.dict" ;;
    experiment) echo "-dict=tests/fuzz/experiment.dict" ;;
  esac
}

for t in "${targets[@]}"; do
  if [ ! -x "$build/fuzz/fuzz_$t" ]; then
    echo "fuzz.sh: $build/fuzz/fuzz_$t not built (needs clang++; run scripts/build.sh --sanitize)" >&2
    exit 2
  fi
done

out=$build/fuzz/campaign
mkdir -p "$out"
summary=$out/summary.md
{
  echo "| target | execs | exec/s | cov | ft | corpus (files / bytes) | crashes | time (s) |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|"
} > "$summary"
failed=0
for t in "${targets[@]}"; do
  dir=$out/$t
  rm -rf "$dir"
  mkdir -p "$dir/artifacts"
  cp -r "tests/fuzz/seeds_$t" "$dir/corpus"
  echo "fuzz.sh: fuzz_$t, $runs executions ($(date -u +%H:%M:%S) UTC)"
  start=$(date +%s)
  # A crash ends the run (libFuzzer exits non-zero); the table reports it and we go on.
  set +e
  # shellcheck disable=SC2046
  "$build/fuzz/fuzz_$t" -runs="$runs" -timeout=25 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$dir/artifacts/" $(dict_of "$t") "$dir/corpus" > "$dir/log" 2>&1
  rc=$?
  set -e
  secs=$(( $(date +%s) - start ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$dir/log" | tail -1)
  last=$(grep -E '^#[0-9]+' "$dir/log" | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<< "$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<< "$last")
  files=$(find "$dir/corpus" -type f | wc -l)
  bytes=$(du -sb "$dir/corpus" | cut -f1)
  crashes=$(find "$dir/artifacts" -type f | wc -l)
  [ "$rc" -eq 0 ] && [ "$crashes" -eq 0 ] || failed=1
  [ "$rc" -eq 0 ] || [ "$crashes" -gt 0 ] || crashes="exit $rc"
  echo "| $t | ${execs:-?} | ${speed:-?} | ${cov:-?} | ${ft:-?} | $files / $bytes | $crashes | $secs |" >> "$summary"
  echo "fuzz.sh: fuzz_$t: execs ${execs:-?}, ${speed:-?}/s, cov ${cov:-?}, ft ${ft:-?}, crashes $crashes (${secs} s)"
done
echo
cat "$summary"
echo
echo "fuzz.sh: logs, corpora and crash inputs in $out/"
exit $failed
