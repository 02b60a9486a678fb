#!/usr/bin/env bash
# `make package`: builds the release binaries (amd64 natively; arm64 through Debian's cross
# toolchain unless ARM64=0), writes dist/stateful_tool-<version>.difypkg and the trigger
# package dist/stateful_trigger-<version>.difypkg (source tree trigger/, same binaries), and
# with SIGNING_KEY=path/to/private.pem also the signed packages next to them, verified.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=target/release/stateful-tool
[ -x "$bin" ] || { echo "build first: cargo build --release" >&2; exit 1; }
args=(--out dist --bin "amd64=$bin")
if [ "${ARM64:-1}" != 0 ]; then
  arm=$(./scripts/build-arm64.sh | tail -n1)
  args+=(--bin "arm64=$arm")
fi
# The tool package's README is the one written for Dify's plugin panel, not the repository's.
"$bin" package "${args[@]}" --readme docs/dify-panel-readme.md
"$bin" package "${args[@]}" --source trigger
version=$(sed -n 's/^version: *\([0-9][0-9.]*\).*/\1/p' manifest.yaml | head -n1)
pkg="dist/stateful_tool-$version.difypkg"
trigger_pkg="dist/stateful_trigger-$version.difypkg"
if [ -n "${SIGNING_KEY:-}" ]; then
  public="${PUBLIC_KEY:-${SIGNING_KEY%.private.pem}.public.pem}"
  for p in "$pkg" "$trigger_pkg"; do
    "$bin" sign "$p" --key "$SIGNING_KEY" --category community
    if [ -f "$public" ]; then
      "$bin" verify "${p%.difypkg}.signed.difypkg" --key "$public"
    else
      echo "note: no public key at $public; skipped verification" >&2
    fi
  done
  signed="dist/stateful_tool-$version.signed.difypkg"
  cat <<MSG

Signed packages: $signed
                 ${trigger_pkg%.difypkg}.signed.difypkg
Unsigned packages: $pkg $trigger_pkg

To let a Dify plugin daemon trust it (Community Edition, docker compose):
  1. copy the PUBLIC key to docker/volumes/plugin_daemon/public_keys/stateful_tool.public.pem
  2. on the plugin_daemon service set
       THIRD_PARTY_SIGNATURE_VERIFICATION_ENABLED=true
       THIRD_PARTY_SIGNATURE_VERIFICATION_PUBLIC_KEYS=/app/storage/public_keys/stateful_tool.public.pem
  3. docker compose down && docker compose up -d   (restart alone does not reload env)
  4. Plugins -> Install plugin -> Local package file -> $signed (and the trigger package)
MSG
else
  cat <<MSG

Unsigned packages: $pkg $trigger_pkg
Sign them with: make package SIGNING_KEY=path/to/private.pem   (make a key pair: $bin keygen)
MSG
fi
