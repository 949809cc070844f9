#!/usr/bin/env bash
# Puts a prebuilt strfry at load/bin/strfry (load/bin/ is ignored by git), where the interop tests
# (test/ops/router-strfry.test.ts) and `npm run bench:relay-mix -- --relay strfry` look for it, and
# installs its runtime libraries with apt. It only unpacks a build it is given, gzipped or not: the
# argument, else $STRFRY_ARCHIVE, else the one strfry-*.gz in ../shared/anchors/ next to this
# repository's folder. It never downloads or builds strfry (that is done from its own repository,
# github.com/hoytech/strfry). Idempotent. Prints the binary's path on its last line.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
out="$here/load/bin/strfry"

archive="${1:-${STRFRY_ARCHIVE:-}}"
if [ -z "$archive" ]; then
  shopt -s nullglob
  found=("$here"/../shared/anchors/strfry-*.gz)
  if [ "${#found[@]}" -ne 1 ]; then
    cat >&2 <<MSG
No strfry build given, and ../shared/anchors/ holds ${#found[@]} strfry-*.gz files instead of one.
Run: scripts/install-strfry.sh /path/to/strfry (or strfry.gz), a Linux build of
github.com/hoytech/strfry. Without strfry the interop tests are skipped.
MSG
    exit 1
  fi
  archive="${found[0]}"
fi
if [ ! -f "$archive" ]; then
  echo "$archive: no such file" >&2
  exit 1
fi

# Unpack beside the target and move it into place: a binary in use is replaced, never overwritten.
mkdir -p "$(dirname "$out")"
tmp="$(mktemp "$out.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
case "$archive" in
  *.gz) gunzip -c "$archive" >"$tmp" ;;
  *) cat "$archive" >"$tmp" ;;
esac
chmod 755 "$tmp"
if cmp -s "$tmp" "$out"; then
  rm -f "$tmp"
else
  mv -f "$tmp" "$out"
  echo "unpacked $(basename "$archive") to load/bin/strfry" >&2
fi
trap - EXIT

# What the build links against (its `ldd`), by Debian's package names.
source "$(dirname "$0")/lib/apt.sh"
apt_install_missing "strfry's libraries" liblmdb0 libsecp256k1-1 libzstd1 libssl3 zlib1g
if ldd "$out" | grep -q 'not found'; then
  echo "load/bin/strfry still misses libraries:" >&2
  ldd "$out" | grep 'not found' >&2
  exit 1
fi

"$out" --version >&2
echo "$out"
