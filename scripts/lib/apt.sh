# Sourced by the scripts that install tools from Debian/Ubuntu's own packages (install-nginx.sh,
# install-chromium.sh, install-strfry.sh), as root or through sudo, without starting any service:
# - `apt_install_first WHAT PACKAGE...` installs the first package apt knows and sets $pkg to it;
# - `apt_install_missing WHAT PACKAGE...` installs each package that is not installed yet, and with
#   all of them installed does nothing (not even ask for root).
# Package lists are fetched only when apt does not know a package it needs (a fresh container) or when
# the install fails (stale lists naming a version the mirror no longer has).

apt_updated=false

# apt-get is there and may be run: sets $SUDO, or exits saying why not.
apt_ready() {
  local what="$1"
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "$what is not installed and this script only knows apt (Debian, Ubuntu): install it with your platform's package manager." >&2
    exit 1
  fi
  SUDO=
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
      echo "$what is not installed: run this script as root (or with sudo available) to install it with apt-get." >&2
      exit 1
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
}

apt_update() {
  echo "apt-get update…" >&2
  $SUDO apt-get update -q >&2
  apt_updated=true
}

# apt-get install PACKAGE..., fetching the lists once more if it fails on stale ones.
apt_install() {
  # A policy-rc.d answering 101 ("action forbidden") is Debian's way to keep a package from starting
  # its service (nginx would take port 80); in place for the install only, unless the machine
  # already has one (containers often do).
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\n# temporary, from pgrelay scripts/lib/apt.sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod 755 /usr/sbin/policy-rc.d
    trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  echo "installing $*…" >&2
  $SUDO apt-get install -y -q --no-install-recommends "$@" >&2 && return 0
  [ "$apt_updated" = false ] || return 1
  apt_update
  $SUDO apt-get install -y -q --no-install-recommends "$@" >&2
}

apt_install_first() {
  local what="$1"
  shift
  apt_ready "$what"
  local candidates=("$@")
  known() {
    local p
    for p in "${candidates[@]}"; do
      if apt-cache show "$p" >/dev/null 2>&1; then echo "$p"; return 0; fi
    done
    return 1
  }
  pkg="$(known)" || { apt_update; pkg="$(known)"; } || {
    echo "apt knows none of: ${candidates[*]}; install $what by hand." >&2
    exit 1
  }
  apt_install "$pkg"
}

apt_install_missing() {
  local what="$1"
  shift
  local p missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
  done
  [ "${#missing[@]}" -gt 0 ] || return 0
  apt_ready "$what"
  for p in "${missing[@]}"; do
    if ! apt-cache show "$p" >/dev/null 2>&1; then apt_update; break; fi
  done
  apt_install "${missing[@]}"
}
