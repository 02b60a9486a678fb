#!/usr/bin/env bash
# Makes sure headless Chromium (Debian's `chromium`) and fonts are installed: tests/it/dify_face.rs
# renders the README the package ships and the icons as Dify shows them and screenshots them
# (docs/screenshots/). Quick when already installed; called by `make test` and .ci/run.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "chromium is missing: run 'sudo apt-get install -y chromium fonts-dejavu-core' (the screenshot tests need it)" >&2
  exit 1
fi
echo "installing chromium from Debian's packages..." >&2
export DEBIAN_FRONTEND=noninteractive
here=$(dirname "$0")
"$here/wait-apt-lock.sh"
apt-get -o DPkg::Lock::Timeout="${APT_LOCK_TIMEOUT:-600}" update -qq
"$here/wait-apt-lock.sh"
apt-get -o DPkg::Lock::Timeout="${APT_LOCK_TIMEOUT:-600}" install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
chromium --version
