#!/usr/bin/env bash
# Makes sure the tools of the status-page and alerting tests are installed, from Debian's
# packages: chromium + chromium-driver (the browser test drives the real /ui page headless
# over WebDriver) and promtool, from the `prometheus` package (checks and unit-tests
# deploy/prometheus/alerts.yaml). Also a font: dify_screens:: screenshots the README the package
# ships and the icons as Dify shows them. Quick when they are already there.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 \
  && command -v promtool >/dev/null 2>&1 && [ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "chromium, chromedriver, promtool or a font is missing: run 'sudo apt-get install -y chromium chromium-driver prometheus fonts-dejavu-core'" >&2
  exit 1
fi
echo "installing chromium, chromium-driver and prometheus (for promtool) from Debian's packages..." >&2
export DEBIAN_FRONTEND=noninteractive
here=$(dirname "$0")
"$here/wait-apt-lock.sh"
apt-get -o DPkg::Lock::Timeout="${APT_LOCK_TIMEOUT:-600}" update -qq
"$here/wait-apt-lock.sh"
apt-get -o DPkg::Lock::Timeout="${APT_LOCK_TIMEOUT:-600}" install -y -qq --no-install-recommends \
  chromium chromium-driver prometheus fonts-dejavu-core >/dev/null
# The package starts a Prometheus server on 9090; the tests only need promtool.
(service prometheus stop || systemctl stop prometheus || true) >/dev/null 2>&1
chromium --version
promtool --version | head -n1
