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
"$(dirname "$0")/apt-install.sh" "chromium, chromedriver, promtool or a font" --no-install-recommends chromium chromium-driver prometheus fonts-dejavu-core
# The package starts a Prometheus server on 9090; the tests only need promtool.
(service prometheus stop || systemctl stop prometheus || true) >/dev/null 2>&1
chromium --version
promtool --version | head -n1
