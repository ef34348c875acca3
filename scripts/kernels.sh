#!/usr/bin/env bash
# Builds the code objects of kernels/spin.hip (kfdq bench's busy work, docs/hardware.md) with the
# hipcc of the Debian sid root (scripts/sid-root.sh), one per gfx target, and writes them next to
# the source; --check builds them into a scratch directory and fails when they differ from the
# committed ones (the source or the compiler moved: run this script and commit the result).
#
#   scripts/kernels.sh          rebuild kernels/spin-<target>.co and kernels/spin.toolchain
#   scripts/kernels.sh --check  compare a fresh build with the committed files
#
# kernels/spin.toolchain records what the objects were built from: the source's sha256 and the
# root's compiler (clang and hipcc package versions). --check always fails when the source moved
# without a rebuild. The byte comparison needs the same compiler: the sid root follows Debian sid,
# so a fresh root (CI builds one) can carry a newer clang, whose objects differ in their notes and
# code. Then --check still builds the source for every target and requires the kernel's
# descriptor in each object, and says the committed objects were made by another compiler (run
# this script and commit to move them), instead of failing on a compiler it cannot pin.
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
# The commands that run inside the root, as a script in the bound directory (no nested quoting).
{
    echo 'set -e; cd /mnt'
    for t in "${targets[@]}"; do
        echo "hipcc --offload-arch=$t --offload-device-only --no-gpu-bundle-output -O2 spin.hip -o spin-$t.co 2>/dev/null"
    done
    echo "{ echo 'source $(sha256sum kernels/spin.hip | cut -d' ' -f1)'; dpkg-query -W -f='\${Package} \${Version}\n' hipcc 'clang-[0-9]*' 2>/dev/null | awk 'NF == 2' | sort; } >toolchain"
} >"$work/build.sh"
unshare -m sh -c "mount --bind '$work' '$root/mnt' && mount -t proc proc '$root/proc' && mount -t tmpfs tmpfs '$root/tmp' && chroot '$root' env HOME=/tmp sh /mnt/build.sh" ||
    die "hipcc in $root failed" "run scripts/sid-root.sh --versions to see what the root holds"
if ((check)); then
    recorded=kernels/spin.toolchain
    [[ -f $recorded ]] || die "$recorded is missing" "run scripts/kernels.sh and commit kernels/"
    [[ $(head -1 "$recorded") == $(head -1 "$work/toolchain") ]] ||
        die "kernels/spin.hip changed since its code objects were built ($recorded records another sha256)" \
            "run scripts/kernels.sh and commit kernels/"
    same_compiler=0
    cmp -s "$recorded" "$work/toolchain" && same_compiler=1
    for t in "${targets[@]}"; do
        if ((same_compiler)); then
            cmp -s "$work/spin-$t.co" "kernels/spin-$t.co" ||
                die "kernels/spin-$t.co differs from a build of kernels/spin.hip by the same compiler" \
                    "run scripts/kernels.sh and commit kernels/"
        else
            grep -q kfdq_spin.kd "$work/spin-$t.co" ||
                die "a build of kernels/spin.hip for $t has no kfdq_spin.kd descriptor" \
                    "check the kernel's name in kernels/spin.hip and src/bin/kfdq/bench/spin.rs"
        fi
    done
    if ((same_compiler)); then
        echo "kernels: ${targets[*]} match kernels/spin.hip"
    else
        echo "kernels: the source matches; the committed objects come from another compiler than this root's:"
        diff "$recorded" "$work/toolchain" | sed -n 's/^[<>] /  /p'  || true
        echo "kernels: a fresh build for ${targets[*]} has the kernel; not compared byte for byte (run scripts/kernels.sh to refresh)"
    fi
else
    for t in "${targets[@]}"; do cp "$work/spin-$t.co" "kernels/spin-$t.co"; done
    cp "$work/toolchain" kernels/spin.toolchain
    echo "kernels: wrote ${targets[*]/#/kernels/spin-} and kernels/spin.toolchain"
fi
