#!/usr/bin/env bash
# Builds the code objects of kernels/spin.hip (kfdq bench's busy work, docs/hardware.md) with the
# hipcc of the Debian sid root (scripts/sid-root.sh), one per gfx target, and writes them next to
# the source; --check builds them into a scratch directory and fails when they differ from the
# committed ones (the source or the compiler moved: run this script and commit the result).
#
#   scripts/kernels.sh          rebuild kernels/spin-<target>.co
#   scripts/kernels.sh --check  compare a fresh build with the committed files
#
# Needs root (a private mount namespace binds the work directory into the root).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

targets=(gfx942 gfx90a)
check=0
case "${1:-}" in
    --check) check=1 ;;
    "") ;;
    *) die "unknown argument $1" "usage: scripts/kernels.sh [--check]" ;;
esac
[[ $(id -u) == 0 ]] || die "needs root" "it binds a directory into the sid root in a private mount namespace"
root=$(scripts/sid-root.sh)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp kernels/spin.hip "$work/"
build="cd /mnt"
for t in "${targets[@]}"; do
    build+=" && hipcc --offload-arch=$t --offload-device-only --no-gpu-bundle-output -O2 spin.hip -o spin-$t.co 2>/dev/null"
done
unshare -m sh -c "mount --bind '$work' '$root/mnt' && mount -t proc proc '$root/proc' && mount -t tmpfs tmpfs '$root/tmp' && chroot '$root' env HOME=/tmp sh -c '$build'" ||
    die "hipcc in $root failed" "run scripts/sid-root.sh --versions to see what the root holds"
for t in "${targets[@]}"; do
    if ((check)); then
        cmp -s "$work/spin-$t.co" "kernels/spin-$t.co" ||
            die "kernels/spin-$t.co differs from a build of kernels/spin.hip" \
                "run scripts/kernels.sh and commit kernels/ (the source or the sid root's hipcc changed)"
    else
        cp "$work/spin-$t.co" "kernels/spin-$t.co"
    fi
done
if ((check)); then
    echo "kernels: ${targets[*]} match kernels/spin.hip"
else
    echo "kernels: wrote ${targets[*]/#/kernels/spin-}"
fi
