#!/usr/bin/env bash
# Installs what the native BIP-340 verifier needs (scripts/build-native.mjs): a C compiler and
# libsecp256k1 with its headers, from Debian/Ubuntu's own packages; then builds it. Without them the
# relay checks signatures with libsecp256k1's WebAssembly build. Idempotent; starts no service.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/apt.sh
command -v cc >/dev/null 2>&1 || apt_install_missing "a C compiler" gcc libc6-dev
apt_install_missing libsecp256k1 libsecp256k1-dev
if [ -f dist/.built ] || [ -d node_modules ]; then node scripts/build-native.mjs --force; fi
