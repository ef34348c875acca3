#!/usr/bin/env bash
# Builds the Debian package of kfdq: kfdq and kfdqd (release), kfdq-bench-hip (kfdq bench's
# helper on the node's HIP runtime, beside kfdq where the bench finds it), kfdq-hipwork (kfdq demo's
# workloads on the node's HIP runtime, beside kfdq likewise), libkfdq_shim.so, the systemd
# unit, an example /etc/kfdq/kfdq.toml (a conffile), the man pages and the bash, zsh and fish
# completions build.rs renders. Writes target/debian/kfdq_<version>-1_<arch>.deb, prints its
# path and its file list. Install it with: apt install ./target/debian/kfdq_*.deb
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

case ${1:-} in
"") ;;
-h | --help)
    sed -n '2,5s/^# \{0,1\}//p' "$0"
    exit 0
    ;;
*) die "unknown option $1" "scripts/package.sh takes no options" ;;
esac

for tool in dpkg-deb objdump gzip; do
    command -v "$tool" >/dev/null || die "$tool is missing" "install Debian's dpkg and binutils (scripts/setup.sh does)"
done

step "building kfdq, kfdqd and libkfdq_shim.so (release)"
cargo build --quiet --release --locked -p kfdq --bin kfdq --bin kfdqd ||
    die "cargo build --release of kfdq failed (errors above)"
cargo build --quiet --release --locked -p kfdq-bench-hip --bin kfdq-bench-hip ||
    die "cargo build --release of kfdq-bench-hip failed (errors above)"
cargo build --quiet --release --locked -p kfdq-hip-workloads --bin kfdq-hipwork ||
    die "cargo build --release of kfdq-hipwork failed (errors above)"
cargo build --quiet --release --locked -p kfdq-shim --lib ||
    die "cargo build --release of the shim failed (errors above)"
cargo build --quiet --release --locked -p kfdq-device-plugin --bin kfdq-device-plugin ||
    die "cargo build --release of the device plugin failed (errors above)"

target=$(target_dir)
rel=$target/release
version=$(cargo metadata --format-version 1 --no-deps |
    grep -o '"name":"kfdq","version":"[^"]*"' | head -n 1 | cut -d'"' -f8)
[[ -n $version ]] || die "could not read kfdq's version from cargo metadata"
arch=$(dpkg --print-architecture)
deb_version=$version-1
out=$target/debian
stage=$out/kfdq_${deb_version}_$arch
rm -rf "$stage"
mkdir -p "$stage/DEBIAN"

step "staging $stage"
install -D -m 0755 "$rel/kfdq" "$stage/usr/bin/kfdq"
install -D -m 0755 "$rel/kfdqd" "$stage/usr/bin/kfdqd"
install -D -m 0755 "$rel/kfdq-bench-hip" "$stage/usr/bin/kfdq-bench-hip"
install -D -m 0755 "$rel/kfdq-hipwork" "$stage/usr/bin/kfdq-hipwork"
install -D -m 0755 "$rel/kfdq-device-plugin" "$stage/usr/bin/kfdq-device-plugin"
install -D -m 0644 "$rel/libkfdq_shim.so" "$stage/usr/lib/kfdq/libkfdq_shim.so"
strip --strip-debug "$stage/usr/bin/kfdq" "$stage/usr/bin/kfdqd" "$stage/usr/bin/kfdq-device-plugin" \
    "$stage/usr/bin/kfdq-bench-hip" "$stage/usr/bin/kfdq-hipwork" \
    "$stage/usr/lib/kfdq/libkfdq_shim.so"
install -D -m 0644 deploy/systemd/kfdqd.service "$stage/lib/systemd/system/kfdqd.service"
install -D -m 0644 deploy/kfdq.toml "$stage/etc/kfdq/kfdq.toml"
install -D -m 0644 deploy/device-plugin.toml "$stage/etc/kfdq/device-plugin.toml"

assets=$rel/assets
[[ -f $assets/man/kfdq.1 ]] || die "$assets/man/kfdq.1 is missing" "build.rs writes it; run 'cargo build --release -p kfdq'"
for page in "$assets"/man/*.1; do
    install -D -m 0644 "$page" "$stage/usr/share/man/man1/${page##*/}"
done
install -D -m 0644 "$assets/man/kfdqd.8" "$stage/usr/share/man/man8/kfdqd.8"
gzip -9n "$stage"/usr/share/man/man*/*
for cmd in kfdq kfdqd; do
    install -D -m 0644 "$assets/completions/bash/$cmd" "$stage/usr/share/bash-completion/completions/$cmd"
    install -D -m 0644 "$assets/completions/zsh/_$cmd" "$stage/usr/share/zsh/vendor-completions/_$cmd"
    install -D -m 0644 "$assets/completions/fish/$cmd.fish" "$stage/usr/share/fish/vendor_completions.d/$cmd.fish"
done
install -D -m 0644 README.md "$stage/usr/share/doc/kfdq/README.md"
install -D -m 0644 docs/operations.md "$stage/usr/share/doc/kfdq/operations.md"
install -D -m 0644 docs/agent.md "$stage/usr/share/doc/kfdq/agent.md"
cat >"$stage/usr/share/doc/kfdq/copyright" <<COPYRIGHT
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: kfdq
License: MIT or Apache-2.0

Files: *
License: MIT or Apache-2.0
COPYRIGHT

# The highest glibc symbol version the binaries need is the package's libc6 dependency.
glibc=$(objdump -T "$stage/usr/bin/kfdq" "$stage/usr/bin/kfdqd" "$stage/usr/bin/kfdq-device-plugin" \
    "$stage/usr/bin/kfdq-bench-hip" "$stage/usr/bin/kfdq-hipwork" \
    "$stage/usr/lib/kfdq/libkfdq_shim.so" |
    grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -n 1)
[[ -n $glibc ]] || die "no glibc symbol versions found in the binaries"
size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)

cat >"$stage/DEBIAN/control" <<CONTROL
Package: kfdq
Version: $deb_version
Architecture: $arch
Maintainer: kfdq developers <kfdq-dev@example.org>
Installed-Size: $size
Depends: libc6 (>= $glibc)
Section: admin
Priority: optional
Description: GPU queue priorities and preemption for AMD Instinct nodes
 kfdq gives a latency-critical GPU service its tail latency back next to
 best-effort jobs on AMD Instinct GPUs (MI300X, MI308X), through queue
 priorities and preemption driven by the upstream amdkfd interface: no
 patched kernel, no patched ROCm.
 .
 This package holds the node agent kfdqd (a systemd service), the kfdq
 command line, and the launch shim libkfdq_shim.so that kfdq run preloads.
CONTROL
printf '%s\n' /etc/kfdq/kfdq.toml /etc/kfdq/device-plugin.toml >"$stage/DEBIAN/conffiles"
cat >"$stage/DEBIAN/postinst" <<'POSTINST'
#!/bin/sh
set -e
# The unit is installed, not started: it needs /dev/kfd, and the operator chooses when
# (systemctl enable --now kfdqd; docs in /usr/share/doc/kfdq/operations.md).
if [ "$1" = configure ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null || true
fi
POSTINST
cat >"$stage/DEBIAN/postrm" <<'POSTRM'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null || true
fi
POSTRM
chmod 0755 "$stage/DEBIAN/postinst" "$stage/DEBIAN/postrm"

deb=$out/kfdq_${deb_version}_$arch.deb
step "dpkg-deb --build $deb"
dpkg-deb --root-owner-group --build "$stage" "$deb" >/dev/null
dpkg-deb --contents "$deb"
echo "package: $deb"
