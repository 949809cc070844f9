# Sourced by the scripts that install a tool from Debian/Ubuntu's own packages (install-nginx.sh,
# install-chromium.sh): `apt_install_first WHAT PACKAGE...` installs the first package apt knows,
# as root or through sudo, without starting any service, and sets $pkg to the one it installed.
# Package lists are fetched only when apt knows none of the packages (a fresh container) or when the
# install fails (stale lists naming a version the mirror no longer has).

apt_install_first() {
  local what="$1"
  shift
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
  local candidates=("$@") updated=false
  known() {
    local p
    for p in "${candidates[@]}"; do
      if apt-cache show "$p" >/dev/null 2>&1; then echo "$p"; return 0; fi
    done
    return 1
  }
  update() {
    echo "apt-get update…" >&2
    $SUDO apt-get update -q >&2
    updated=true
  }
  pkg="$(known)" || { update; pkg="$(known)"; } || {
    echo "apt knows none of: ${candidates[*]}; install $what by hand." >&2
    exit 1
  }
  # A policy-rc.d answering 101 ("action forbidden") is Debian's way to keep a package from starting
  # its service (nginx would take port 80); in place for the install only, unless the machine
  # already has one (containers often do).
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\n# temporary, from pgrelay scripts/lib/apt.sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod 755 /usr/sbin/policy-rc.d
    trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  install() {
    echo "installing $pkg…" >&2
    $SUDO apt-get install -y -q --no-install-recommends "$pkg" >&2
  }
  install || { [ "$updated" = false ] && update && install; }
}
