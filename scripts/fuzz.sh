#!/usr/bin/env bash
# Runs every fuzz target in the module for FUZZTIME each (default 5s; a count
# such as 10000x also works, and is what CI uses).
# Long runs: FUZZTIME=10m scripts/fuzz.sh, or one target:
#   go test ./wire -run '^$' -fuzz '^FuzzDecodeRequest$' -fuzztime 1h
# Targets are found by name (every func Fuzz* in a _test.go file), among them
# wire's FuzzReadBatch for the READ_BATCH codec:
#   go test ./wire -run '^$' -fuzz '^FuzzReadBatch$' -fuzztime 1m
# and index's FuzzDecodeState for the state file, version 2 with its page
# runs (sparse ledgers, issue 16) and version 1:
#   go test ./index -run '^$' -fuzz '^FuzzDecodeState$' -fuzztime 1m
# New crashers land in the package's testdata/fuzz/ and fail `go test` until fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-5s}"
grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u | while read -r pkg; do
  for target in $(grep -h '^func Fuzz' "$pkg"/*_test.go | sed 's/^func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do
    echo "fuzz $pkg $target ($fuzztime)"
    go test "$pkg" -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" >/tmp/fuzz-$$.log 2>&1 || {
      cat /tmp/fuzz-$$.log; rm -f /tmp/fuzz-$$.log; exit 1; }
  done
done
rm -f /tmp/fuzz-$$.log
