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

if ! command -v apt-get >/dev/null 2>&1; then
  cat >&2 <<'MSG'
nginx is not installed and this script only knows apt (Debian, Ubuntu).
Install nginx with your platform's package manager (it needs the ssl, http2 and proxy modules),
or point NGINX_BIN at an nginx binary: https://nginx.org/en/linux_packages.html
MSG
  exit 1
fi

if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=sudo
  else
    echo "nginx is not installed: run this script as root (or with sudo available) to install it with apt-get." >&2
    exit 1
  fi
else
  SUDO=
fi

export DEBIAN_FRONTEND=noninteractive
# nginx-light is Debian 12's small build; releases without it get the plain `nginx` package.
# The package lists are fetched only when apt does not know either package (a fresh container), or
# when the install fails (stale lists naming a version the mirror no longer has).
package() {
  if apt-cache show nginx-light >/dev/null 2>&1; then echo nginx-light
  elif apt-cache show nginx >/dev/null 2>&1; then echo nginx
  else return 1
  fi
}
updated=false
update() {
  echo "apt-get update…" >&2
  $SUDO apt-get update -q >&2
  updated=true
}
pkg="$(package)" || { update; pkg="$(package)"; } || {
  echo "apt knows no nginx-light or nginx package here; install nginx by hand or set NGINX_BIN." >&2
  exit 1
}

# The package would start the system nginx on port 80 with its default site. A policy-rc.d that
# answers 101 ("action forbidden") is Debian's way to stop a package from starting its service; put
# one in place for the install only, unless the machine already has one (containers often do).
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\n# temporary, from pgrelay scripts/install-nginx.sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
  $SUDO chmod 755 /usr/sbin/policy-rc.d
  trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
fi
install() {
  echo "installing $pkg…" >&2
  $SUDO apt-get install -y -q --no-install-recommends "$pkg" >&2
}
install || { [ "$updated" = false ] && update && install; }
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
