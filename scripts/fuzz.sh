#!/usr/bin/env bash
# Coverage-guided fuzzing of the protocol decoder + session loop, tool parameter validation,
# the storage-key encoding and the canonical payload text (fuzz/, cargo-fuzz + libFuzzer).
# Needs a nightly toolchain and `cargo install cargo-fuzz`; without them it says so and exits 0
# (the same properties run on stable as proptest tests, tests/it/prop_*.rs, in every `cargo test`).
#   scripts/fuzz.sh [seconds per target, default 60]
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-60}"
if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "fuzz: no nightly toolchain here (cargo-fuzz needs -Zsanitizer); skipped" >&2
  exit 0
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: cargo-fuzz is not installed (cargo install cargo-fuzz --locked); skipped" >&2
  exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for target in protocol_lines tool_params storage_key canonical; do
  mkdir -p "$work/$target"
  echo "== fuzz $target for ${secs}s"
  # New corpus entries go to the temporary dir; the committed seeds are only read.
  cargo +nightly fuzz run "$target" "$work/$target" "fuzz/seeds/$target" -- \
    -max_total_time="$secs" -rss_limit_mb=2048 -max_len=65536
done
