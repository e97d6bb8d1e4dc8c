#!/usr/bin/env bash
# ctest Fuzz.SeedCorporaAreCurrent: writes the seed corpora afresh from today's encoders
# (fuzz_seeds) and compares each with the copy checked in. A seed left from an older wire
# version (a Hello of an older protocol version is refused at its first check) would let the
# fuzzers start from inputs that end at once, so a wire change that forgets them fails here.
# usage: seeds_are_current.sh FUZZ_SEEDS CORPUS_DIR WORK_DIR
set -euo pipefail
seeds=$1 corpus=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
"$seeds" "$work" >/dev/null
cd "$work"
stale=0 count=0
for seed in */*; do
  count=$((count + 1))
  if ! cmp -s "$seed" "$corpus/$seed"; then
    echo "stale or missing seed: tests/fuzz/corpus/$seed"
    stale=$((stale + 1))
  fi
done
if ((count == 0)); then
  echo "fuzz_seeds wrote no seed"
  exit 1
fi
if ((stale != 0)); then
  echo "$stale of $count seeds differ from what fuzz_seeds writes now: run" \
    "build-fuzz/tests/fuzz/fuzz_seeds tests/fuzz/corpus and commit the corpora"
  exit 1
fi
echo "all $count seeds are current"
