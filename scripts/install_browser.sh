#!/usr/bin/env bash
# Install what the browser tests (tests/book/browser/) need, idempotently:
#   1. Debian's chromium at /usr/bin/chromium (Playwright drives it; never `playwright install`).
#   2. axe-core from the npm registry into .cache/axe/ (gitignored), injected into pages by the tests
#      so the accessibility check never touches a CDN.
# Usage: scripts/install_browser.sh        (run as root, or with sudo available, for apt-get)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
AXE_VERSION="4.10.3"   # keep in step with tests/book/browser/package.json
AXE_DIR="${ROOT}/.cache/axe"

if [ ! -x /usr/bin/chromium ]; then
    echo "install_browser: installing chromium with apt-get" >&2
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    ${SUDO} apt-get update
    DEBIAN_FRONTEND=noninteractive ${SUDO} apt-get install -y chromium
else
    echo "install_browser: chromium present: $(/usr/bin/chromium --version 2>/dev/null || echo '?')" >&2
fi

AXE_JS="${AXE_DIR}/node_modules/axe-core/axe.min.js"
if [ ! -f "${AXE_JS}" ] || ! grep -q "\"version\": \"${AXE_VERSION}\"" \
        "${AXE_DIR}/node_modules/axe-core/package.json" 2>/dev/null; then
    if ! command -v npm >/dev/null 2>&1; then
        echo "install_browser: npm is missing (apt-get install -y npm)" >&2
        exit 1
    fi
    echo "install_browser: installing axe-core@${AXE_VERSION} into ${AXE_DIR}" >&2
    mkdir -p "${AXE_DIR}"
    cp "${ROOT}/tests/book/browser/package.json" "${AXE_DIR}/package.json"
    if [ -f "${ROOT}/tests/book/browser/package-lock.json" ]; then
        cp "${ROOT}/tests/book/browser/package-lock.json" "${AXE_DIR}/package-lock.json"
        (cd "${AXE_DIR}" && npm ci --no-audit --no-fund --ignore-scripts)
    else
        (cd "${AXE_DIR}" && npm install --no-audit --no-fund --ignore-scripts)
    fi
else
    echo "install_browser: axe-core ${AXE_VERSION} present" >&2
fi
echo "install_browser: done (chromium: /usr/bin/chromium, axe: ${AXE_JS})" >&2
