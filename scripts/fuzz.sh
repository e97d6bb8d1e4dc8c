#!/usr/bin/env bash
# Builds the libFuzzer targets of the wire decoders (tests/fuzz, docs/fuzzing.md) with clang
# under AddressSanitizer + UndefinedBehaviorSanitizer into build-fuzz/ (installing what is
# missing), replays their seed corpora (ctest Fuzz.*), then fuzzes each target for SECONDS
# (default 60) on a copy of its corpus. New inputs stay in build-fuzz/fuzz-runs/<target>/, never
# in the tree. Exits non-zero on any crash, leak, timeout, out-of-memory or UBSan report,
# printing the saved input and the command that reproduces it.
#
# usage: scripts/fuzz.sh [SECONDS]    FUZZ_TARGETS="tcp_frame_fuzzer ..." picks targets;
#                                     FUZZ_BUILD_DIR overrides build-fuzz.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
bash scripts/setup.sh

seconds="${1:-60}"
build_dir="${FUZZ_BUILD_DIR:-build-fuzz}"
targets=(${FUZZ_TARGETS:-tcp_frame_fuzzer tcp_stream_fuzzer tcp_dialer_fuzzer tcp_lane_fuzzer tcp_hello_fuzzer shm_record_fuzzer shm_hello_fuzzer shm_side_channel_fuzzer dat_cm_fuzzer cm_rendezvous_fuzzer})

# The longest input each target takes: a few frames, one handshake unit, a ring's worth of
# records (the small ring of the target is 64 KiB), an shm Hello, side-channel messages (32 of
# up to 64 bytes), a CM frame of the largest legal body.
max_len() {
  case "$1" in
    tcp_frame_fuzzer) echo 4096 ;;
    tcp_stream_fuzzer | tcp_dialer_fuzzer) echo 131072 ;;
    tcp_hello_fuzzer) echo 96 ;;
    shm_hello_fuzzer) echo 64 ;;
    shm_side_channel_fuzzer) echo 2048 ;;
    shm_record_fuzzer) echo 131072 ;;
    dat_cm_fuzzer) echo 2048 ;;
    *) echo 4096 ;;
  esac
}

if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  CC=clang CXX=clang++ cmake -S . -B "$build_dir" "${generator[@]}" -DEMURDMA_FUZZ=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$build_dir" -j"$(nproc)" --target "${targets[@]}" fuzz_seeds

echo "== fuzz: replaying the seed corpora (and checking they are what fuzz_seeds writes now)"
ctest --test-dir "$build_dir" --output-on-failure -R '^Fuzz\.'

export ASAN_OPTIONS="detect_leaks=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:${UBSAN_OPTIONS:-}"
failed=()
for target in "${targets[@]}"; do
  bin="$build_dir/tests/fuzz/$target"
  work="$build_dir/fuzz-runs/$target"
  rm -rf "$work"
  mkdir -p "$work/corpus" "$work/artifacts"
  cp tests/fuzz/corpus/"$target"/* "$work/corpus/"
  echo "== fuzz: $target for ${seconds}s"
  # -timeout: seconds per input. -rss_limit_mb: memory a peer made us really touch (2 GiB, the
  # largest legal message, is too much for these small inputs). -malloc_limit_mb (else it
  # defaults to the RSS limit): one allocation above 3 GiB, more than any legal message, is a
  # finding at once; below it only touched memory is, so a buffer reserved for an announced
  # 2 GiB frame (lazy pages) passes unless the peer makes us fill it.
  if ! "$bin" -max_total_time="$seconds" -max_len="$(max_len "$target")" -timeout=5 \
    -rss_limit_mb=2048 -malloc_limit_mb=3072 -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/" \
    "$work/corpus" >"$work/log" 2>&1; then
    failed+=("$target")
    tail -n 60 "$work/log"
    for input in "$work"/artifacts/*; do
      [[ -e "$input" ]] || continue
      echo "fuzz: $target failed on $input"
      echo "fuzz: reproduce: $bin $input"
    done
    echo "fuzz: full log: $work/log"
  else
    grep -E '^(stat::number_of_executed_units|stat::new_units_added)' "$work/log" | \
      sed "s/^/fuzz: $target: /" || true
  fi
done

if ((${#failed[@]} != 0)); then
  echo "fuzz: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: every target ran ${seconds}s without a finding"
