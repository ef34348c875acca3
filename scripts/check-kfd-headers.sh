#!/usr/bin/env bash
# Builds kfd-sys and the kfdq library against the real amdkfd uapi headers Debian ships:
# linux-libc-dev from bookworm-backports and from sid (KFD 1.17 and newer). For each: kfd-sys's
# tests (a C program compiled against the header must see the same struct layouts and request
# numbers as the Rust bindings) and clippy -D warnings on kfd-sys and kfdq. Then a header that
# declares 1.16 must be refused with the rule. The packages come from the Debian mirror this
# machine's apt already uses; downloads are cached in $KFDQ_CACHE (default /var/cache/kfdq).
# Run by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

cache=${KFDQ_CACHE:-/var/cache/kfdq}/kfd-headers
mkdir -p "$cache"

# header SUITE: prints the path of kfd_ioctl.h from SUITE's linux-libc-dev (downloaded once).
header() {
    local suite=$1 dir=$cache/$1
    if [[ ! -f $dir/kfd_ioctl.h ]]; then
        local apt=$dir/apt url
        url=$(mirror)
        rm -rf "$dir"
        mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$dir/deb"
        echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $url $suite main" >"$apt/sources.list"
        local opts=(-q -o "Dir::Etc::SourceList=$apt/sources.list" -o "Dir::Etc::SourceParts=/nonexistent"
            -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o "APT::Get::List-Cleanup=0")
        step "fetching linux-libc-dev from $suite ($url)" >&2
        apt-get "${opts[@]}" update >"$dir/apt.log" 2>&1 ||
            die "apt-get update of $suite failed (log: $dir/apt.log)" "check that the Debian mirror $url is reachable"
        (cd "$dir/deb" && apt-get "${opts[@]}" download "linux-libc-dev/$suite") >>"$dir/apt.log" 2>&1 ||
            die "could not download linux-libc-dev from $suite (log: $dir/apt.log)"
        dpkg-deb --fsys-tarfile "$dir"/deb/linux-libc-dev_*.deb | tar -xO ./usr/include/linux/kfd_ioctl.h >"$dir/kfd_ioctl.h" ||
            die "linux-libc-dev from $suite has no usr/include/linux/kfd_ioctl.h"
        basename "$dir"/deb/linux-libc-dev_*.deb >"$dir/package"
        rm -rf "$apt" "$dir/deb"
    fi
    printf '%s\n' "$dir/kfd_ioctl.h"
}

version_of() {
    awk '$1 == "#define" && $2 == "KFD_IOCTL_MAJOR_VERSION" { M = $3 }
         $1 == "#define" && $2 == "KFD_IOCTL_MINOR_VERSION" { m = $3 }
         END { print M "." m }' "$1"
}

# A target directory of its own: the main build keeps its bindings.
export CARGO_TARGET_DIR
CARGO_TARGET_DIR=$(target_dir)/kfd-headers

for suite in bookworm-backports sid; do
    h=$(header "$suite")
    v=$(version_of "$h")
    step "KFD $v from $suite ($(cat "$(dirname "$h")/package")): kfd-sys tests, clippy on kfd-sys and kfdq"
    KFD_IOCTL_H=$h cargo test --quiet -p kfd-sys 2>&1 | grep -E '^test result|FAILED|panicked|error' || true
    KFD_IOCTL_H=$h cargo test --quiet -p kfd-sys >/dev/null 2>&1 ||
        die "kfd-sys's tests fail against KFD $v from $suite" "rerun: KFD_IOCTL_H=$h cargo test -p kfd-sys"
    KFD_IOCTL_H=$h cargo clippy --quiet -p kfd-sys -p kfdq --all-targets -- -D warnings ||
        die "clippy fails against KFD $v from $suite (above)"
done

step "a header that declares KFD 1.16 is refused with the rule"
old=$(mktemp /tmp/kfd_ioctl_1_16.XXXXXX.h)
trap 'rm -f "$old"' EXIT
sed 's/^#define KFD_IOCTL_MINOR_VERSION .*/#define KFD_IOCTL_MINOR_VERSION 16/' "$(header sid)" >"$old"
if out=$(KFD_IOCTL_H=$old cargo build --quiet -p kfd-sys 2>&1); then
    die "kfd-sys built against a KFD 1.16 header; it must refuse it"
fi
grep -q "supports 1.17 and newer" <<<"$out" || die "the refusal of a 1.16 header does not state the rule:" "$out"
echo "kfd headers: ok"
