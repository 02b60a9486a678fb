#!/usr/bin/env bash
# `make package`: writes dist/stateful_tool-<version>.difypkg and the trigger package
# dist/stateful_trigger-<version>.difypkg (source tree trigger/, same binaries) from the
# release binary (amd64), and with SIGNING_KEY=path/to/private.pem also the signed packages
# next to them, verified. ARM64=1 (what a release and CI build) adds the arm64 binary through
# Debian's cross toolchain (scripts/build-arm64.sh); a local install needs only the host's.
#   BIN        the stateful-tool binary that packages and signs (default target/release/stateful-tool)
#   AMD64_BIN  the binary packaged for amd64 (default: BIN)
#   DIST       the output directory (default dist)
#   ARM64_BUILD  the arm64 build's bash script (default scripts/build-arm64.sh; prints the binary's path last)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${BIN:-target/release/stateful-tool}
dist=${DIST:-dist}
# The one key-pair hint, also in the Makefile, the README and docs/packaging.md; keys/ is
# ignored by git.
keygen_hint="$bin keygen --out-dir keys"
[ -x "$bin" ] || { echo "build first: cargo build --release" >&2; exit 1; }
# A missing key is said before any package (or the arm64 binary) is built, with how to make one.
if [ -n "${SIGNING_KEY:-}" ] && [ ! -r "$SIGNING_KEY" ]; then
  echo "no signing key at $SIGNING_KEY; make a key pair with: $keygen_hint" >&2
  exit 1
fi
args=(--out "$dist" --bin "amd64=${AMD64_BIN:-$bin}")
if [ "${ARM64:-0}" != 0 ]; then
  cat <<MSG
== arm64: cross-building the arm64 binary (scripts/build-arm64.sh), then a smoke test under qemu-user.
   About 35 minutes on 2 cores when cold (a few when cached). It uses Debian's rustc-web, cargo-web,
   libstd-rust-web-dev:arm64, gcc-aarch64-linux-gnu, libc6-dev-arm64-cross and qemu-user, installed
   when missing if run as root (dpkg --add-architecture arm64). Leave ARM64 unset for amd64 only.
MSG
  arm=$(bash "${ARM64_BUILD:-./scripts/build-arm64.sh}" | tail -n1)
  args+=(--bin "arm64=$arm")
else
  echo "== amd64 only (a Dify on an arm64 host, e.g. Docker on Apple silicon, needs: make package ARM64=1," \
    "a cross build of about 35 minutes on 2 cores)"
fi
# The tool package's README is the one written for Dify's plugin panel, not the repository's.
"$bin" package "${args[@]}" --readme docs/dify-panel-readme.md
"$bin" package "${args[@]}" --source trigger
version=$(sed -n 's/^version: *\([0-9][0-9.]*\).*/\1/p' manifest.yaml | head -n1)
pkg="$dist/stateful_tool-$version.difypkg"
trigger_pkg="$dist/stateful_trigger-$version.difypkg"
if [ -n "${SIGNING_KEY:-}" ]; then
  public="${PUBLIC_KEY:-${SIGNING_KEY%.private.pem}.public.pem}"
  for p in "$pkg" "$trigger_pkg"; do
    "$bin" sign "$p" --key "$SIGNING_KEY" --category community
    if [ -f "$public" ]; then
      # `sign` has just printed the signed package's identifier: say it once.
      "$bin" verify "${p%.difypkg}.signed.difypkg" --key "$public" | grep -v '^identifier: '
    else
      echo "note: no public key at $public; skipped verification" >&2
    fi
  done
  signed="$dist/stateful_tool-$version.signed.difypkg"
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
Sign them: make a key pair with
  $keygen_hint
then: make package SIGNING_KEY=keys/stateful_tool_signing_key.private.pem
MSG
fi
