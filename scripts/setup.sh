#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build and run kfdq (fonts-dejavu-core: the font of
# preempt-lab's PNG plots); with --tests also what the
# tests use (man-db renders the man pages, prometheus scrapes the agent, zsh checks its
# completion, strace is the debugger the tracer tests meet, mmdebstrap builds the Debian sid
# root with the real ROCm user space: scripts/sid-root.sh; rocminfo is Debian 12's 5.2.3, an older
# ROCm the emulator also serves). Idempotent: installs only missing
# packages, runs apt-get update only when something is missing.
set -euo pipefail

pkgs=(libclang1-14 libclang-common-14-dev fuse3 gcc libc6-dev linux-libc-dev libamdhip64-5 binutils
    python3-venv python3-dev systemd fonts-dejavu-core)
case ${1:-} in
--tests) pkgs+=(man-db prometheus zsh strace mmdebstrap rocminfo) ;;
"") ;;
*)
    echo "setup: unknown option $1 (use --tests, or nothing)" >&2
    exit 2
    ;;
esac
need=()
for pkg in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if ((${#need[@]})); then
    if [[ $(id -u) -ne 0 ]]; then
        echo "setup: missing Debian packages: ${need[*]} — run this script as root (or install them)" >&2
        exit 1
    fi
    echo "setup: installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
    echo "setup: cargo not found. kfdq needs a stable Rust toolchain (rustup) on PATH." >&2
    exit 1
fi
if [[ ! -e /dev/fuse ]]; then
    echo "setup: /dev/fuse is missing; the emulator (kfd-emu) needs FUSE (modprobe fuse, or run the container with --device /dev/fuse)" >&2
    exit 1
fi
# Crates are fetched by cargo from the registry on first build.
cargo fetch --locked >/dev/null 2>&1 || cargo fetch
echo "setup: ok"
