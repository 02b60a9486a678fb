#!/usr/bin/env bash
# Dependency check. With cargo-audit AND a local RustSec advisory-db checkout
# (ADVISORY_DB=/path/to/advisory-db), runs a real advisory audit of Cargo.lock. Otherwise it
# says so and only lists crates present in several versions (`cargo tree -d`): that is NOT an
# advisory audit, just a look at duplication. Exit status: non-zero only when the audit
# finds a vulnerability.
#
# Nothing is accepted: RUSTSEC-2023-0071 (rsa, Marvin timing side channel) no longer applies,
# `rsa` is not in Cargo.lock (ring signs and verifies); the check below keeps it out.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
if cargo audit --version >/dev/null 2>&1 && [ -n "${ADVISORY_DB:-}" ] && [ -d "${ADVISORY_DB}/crates" ]; then
  echo "== cargo audit against ${ADVISORY_DB} ($(git -C "$ADVISORY_DB" log -1 --format=%cs 2>/dev/null || echo 'date unknown'))"
  cargo audit --no-fetch --db "$ADVISORY_DB" || status=$?
else
  echo "== no advisory audit: needs cargo-audit (cargo install cargo-audit --locked) and ADVISORY_DB=<advisory-db checkout>;"
  echo "   the advisory database is fetched from GitHub, which this machine cannot reach"
fi
# Crates whose advisories we removed (rsa: RUSTSEC-2023-0071; rustls-pemfile: RUSTSEC-2025-0134)
# must not come back, audit or not.
for crate in rsa rustls-pemfile; do
  if grep -qx "name = \"$crate\"" Cargo.lock; then
    echo "!! $crate is back in Cargo.lock (cargo tree -i $crate shows who brings it)" >&2
    status=1
  fi
done
echo "== crates present in more than one version (cargo tree -d; not an advisory audit)"
cargo tree --duplicates --depth 0 --locked --edges normal,build | grep -v '^$' || true
exit $status
