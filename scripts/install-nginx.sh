#!/usr/bin/env bash
# Installs nginx from Debian/Ubuntu's own packages (nginx-light: small, with ssl, http2 and the proxy
# module) when `nginx` is missing, for the wss:// recipe in docs/deploy.md and its test
# (test/deploy/nginx-proxy.test.ts). Idempotent: with nginx present it only prints the version.
# It does not enable or start the system service: the test runs its own nginx instance, and a
# production server is set up by hand from docs/deploy.md.
set -euo pipefail

nginx_bin() {
  if [ -n "${NGINX_BIN:-}" ] && [ -x "$NGINX_BIN" ]; then echo "$NGINX_BIN"; return 0; fi
  if command -v nginx >/dev/null 2>&1; then command -v nginx; return 0; fi
  if [ -x /usr/sbin/nginx ]; then echo /usr/sbin/nginx; return 0; fi
  return 1
}

report() {
  # `nginx -v` prints "nginx version: nginx/1.22.1" on stderr.
  echo "$("$1" -v 2>&1) at $1"
  exit 0
}

if bin="$(nginx_bin)"; then report "$bin"; fi

# nginx-light is Debian 12's small build (ssl, http2, proxy); releases without it get `nginx`.
source "$(dirname "$0")/lib/apt.sh"
apt_install_first nginx nginx-light nginx

# The package also enables the service for the next boot; leave that choice to the operator.
# (`systemctl disable` works without a running systemd too: it only removes the links.)
if command -v systemctl >/dev/null 2>&1; then
  $SUDO systemctl disable nginx >/dev/null 2>&1 || true
elif command -v update-rc.d >/dev/null 2>&1; then
  $SUDO update-rc.d nginx disable >/dev/null 2>&1 || true
fi
echo "nginx is installed, not started and not enabled at boot (for a server: systemctl enable --now nginx)" >&2

if bin="$(nginx_bin)"; then report "$bin"; fi
echo "apt-get installed $pkg but no nginx binary was found (looked on PATH and in /usr/sbin)." >&2
exit 1
