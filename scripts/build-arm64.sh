#!/usr/bin/env bash
# Builds bin/stateful-tool-arm64 for the package: Debian's rustc (rustup cannot fetch the
# aarch64 std here) with the arm64 std from multiarch and the gcc cross linker, then runs
# the binary under qemu-user as a smoke test (first heartbeat + one request answered against
# a KV container of the host's release build, HOST_BIN, default target/release/stateful-tool).
# Prints the path of the stripped binary on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
target=aarch64-unknown-linux-gnu
need=(rustc-web cargo-web libstd-rust-web-dev:arm64 gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user)
missing=()
for p in "${need[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "arm64 build needs Debian packages: ${missing[*]} (run as root to install them)" >&2
    exit 1
  fi
  echo "installing ${missing[*]} ..." >&2
  export DEBIAN_FRONTEND=noninteractive
  dpkg --add-architecture arm64
  # Wait for any other apt/dpkg run instead of failing on its lock (see wait-apt-lock.sh).
  ./scripts/wait-apt-lock.sh
  apt-get -o DPkg::Lock::Timeout="${APT_LOCK_TIMEOUT:-600}" update -qq
  ./scripts/wait-apt-lock.sh
  apt-get -o DPkg::Lock::Timeout="${APT_LOCK_TIMEOUT:-600}" install -y -qq "${need[@]}" >/dev/null
fi
# rustup's proxies come first on PATH; the cross build must use Debian's matching rustc/std.
RUSTC=/usr/bin/rustc /usr/bin/cargo build --release --locked --target "$target" --bin stateful-tool >&2
bin="target/$target/release/stateful-tool"
file "$bin" >&2 || true
# Smoke test under qemu: a heartbeat, then an answered request, then a clean exit at EOF.
host_bin=${HOST_BIN:-target/release/stateful-tool}
[ -x "$host_bin" ] || { echo "arm64 smoke: $host_bin is missing (cargo build --release first)" >&2; exit 1; }
kv_data=$(mktemp -d)
"$host_bin" kv serve --listen 127.0.0.1:0 --data "$kv_data/data" --durability none >"$kv_data/out" 2>/dev/null &
kv_pid=$!
trap 'kill "$kv_pid" 2>/dev/null || true; rm -rf "$kv_data"' EXIT
kv_url=""
for _ in $(seq 300); do
  kv_url=$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$kv_data/out")
  [ -n "$kv_url" ] && break
  sleep 0.1
done
[ -n "$kv_url" ] || { echo "arm64 smoke: the KV container did not start" >&2; exit 1; }
line='{"session_id":"arm64-smoke","conversation_id":null,"message_id":null,"app_id":null,"endpoint_id":null,"context":null,"event":"request","data":{"action":"invoke_tool","credentials":{"kv_url":"'"$kv_url"'"},"provider":"stateful_tool","tool":"event_ingest","tool_parameters":{"event_id":"A1","event_type":"created"},"type":"tool","user_id":"ci"}}'
out=$(printf '%s\n' "$line" | INSTALL_METHOD=local \
  qemu-aarch64 -L /usr/aarch64-linux-gnu -E LD_LIBRARY_PATH=/usr/aarch64-linux-gnu/lib "$bin" serve)
echo "$out" | head -n1 | grep -q '"heartbeat"' || { echo "arm64 smoke: no heartbeat first: $out" >&2; exit 1; }
echo "$out" | grep -q '"outcome":"accepted"' || { echo "arm64 smoke: no accepted answer: $out" >&2; exit 1; }
echo "arm64 smoke test passed under qemu ($(stat -c %s "$bin") bytes)" >&2
echo "$bin"
