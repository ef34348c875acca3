#!/usr/bin/env bash
# Builds kfdq's container image, the one deploy/kubernetes/kfdqd-daemonset.yaml runs
# (localhost/kfdq/kfdq:<version>), as an OCI image archive that a node's runtime imports:
#
#   ctr -n k8s.io images import kfdq-0.1.0.oci.tar     (containerd, the kubelet's namespace)
#   podman load -i kfdq-0.1.0.oci.tar                  (podman, CRI-O's storage)
#   skopeo copy oci-archive:kfdq-0.1.0.oci.tar docker://REGISTRY/kfdq/kfdq:0.1.0  (your registry)
#
# The image is Debian bookworm's essential packages (mmdebstrap --variant=essential: libc6,
# coreutils, dash, dpkg ...; what kfdqd, kfdq and kfdq-device-plugin need at run time, and the
# /bin/sh, cp and mv of the DaemonSet's init container) with the Debian package of
# scripts/package.sh installed by dpkg (so /var/lib/dpkg/status lists kfdq for scanners). One
# gzip layer; entry point /usr/bin/kfdqd --config /etc/kfdq/kfdq.toml. No container runtime and
# no registry is used: the base comes from the Debian mirror this machine's apt uses.
#
#   scripts/image.sh                   build the package (scripts/package.sh), then the image
#   scripts/image.sh --output FILE     write the archive to FILE
#                                      (default: target/image/kfdq-<version>.oci.tar)
#   scripts/image.sh --deb FILE        use this package instead of building one
#   scripts/image.sh --rebuild-base    download the base again (security updates); the cached
#                                      base is replaced when the new one is ready
#
# The base root is built once (about 3 minutes and 30 MB to download) and cached as a tar in
# $KFDQ_CACHE (default /var/cache/kfdq)/image-base-bookworm.tar, with its package versions in
# image-base-bookworm.versions. Needs root (dpkg installs into the image's root). Prints the
# archive's path last. scripts/check-image.sh checks an archive and runs its entry points.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

output='' deb='' rebuild_base=''
while (($#)); do
    case $1 in
    -h | --help)
        sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//p}' "$0"
        exit 0
        ;;
    --output | --deb)
        (($# >= 2)) || die "$1 needs a file" "e.g. scripts/image.sh $1 /tmp/kfdq.oci.tar"
        [[ $1 == --output ]] && output=$2 || deb=$2
        shift 2
        ;;
    --rebuild-base)
        rebuild_base=1
        shift
        ;;
    *) die "unknown option $1" "scripts/image.sh takes --output FILE, --deb FILE and --rebuild-base (--help says more)" ;;
    esac
done

[[ $(id -u) -eq 0 ]] || die "building the image needs root (dpkg installs the package into the image's root and keeps its owners)" \
    "run scripts/image.sh as root"
for tool in dpkg dpkg-deb sha256sum gzip tar; do
    command -v "$tool" >/dev/null || die "$tool is missing" "install Debian's dpkg, coreutils, gzip and tar"
done

suite=bookworm
cache=${KFDQ_CACHE:-/var/cache/kfdq}
base=$cache/image-base-$suite.tar

# security_mirror: the Debian security mirror this machine's apt uses, or nothing.
security_mirror() {
    cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null |
        awk '$1 == "URIs:" || $1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^https?:.*\/debian-security\/?$/) { sub(/\/$/, "", $i); print $i; exit } }' || true
}

# build_base: the base root as a tar, built with mmdebstrap as scripts/sid-root.sh builds the sid
# roots, from bookworm, bookworm-updates and (where this machine's apt has it) bookworm-security.
build_base() {
    if ! command -v mmdebstrap >/dev/null 2>&1; then
        step "installing mmdebstrap (Debian package) to build the image's base"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null 2>&1 || {
            apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
        } || die "could not install mmdebstrap" "install the Debian package mmdebstrap, then rerun"
    fi
    local url sec key log=$cache/image-base-$suite.log new=$cache/image-base-$suite.new.tar start=$SECONDS sources=()
    url=$(mirror)
    sec=$(security_mirror)
    key="[signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]"
    sources=("deb $key $url $suite main" "deb $key $url $suite-updates main")
    [[ -n $sec ]] && sources+=("deb $key $sec $suite-security main")
    step "building the image's base ($suite, essential packages) from $url${sec:+ and $sec} (about 3 minutes; log: $log)" >&2
    # mmdebstrap writes a tar because the name ends in .tar.
    rm -rf "$new"
    if ! mmdebstrap --variant=essential --mode=root \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        "$suite" "$new" "${sources[@]}" >"$log" 2>&1; then
        tail -n 20 "$log" >&2
        rm -rf "$new"
        die "mmdebstrap could not build the image's base (full log: $log)" \
            "check that $url is reachable and serves $suite"
    fi
    # The versions the base holds, from its dpkg status (what --rebuild-base moved shows in a diff).
    tar -xOf "$new" ./var/lib/dpkg/status |
        awk '/^Package:/ { p = $2 } /^Version:/ { print p, $2 }' | sort >"${base%.tar}.versions"
    mv "$new" "$base"
    step "image base ready in $((SECONDS - start)) s ($(du -h "$base" | cut -f1))" >&2
}

mkdir -p "$cache"
exec 9>"$cache/image-base-$suite.lock"
flock 9
if [[ -n $rebuild_base || ! -f $base || ! -f ${base%.tar}.versions ]]; then
    build_base
fi
flock -u 9
# A cached base keeps the packages of its day: say how old it is.
age=$((($(date +%s) - $(stat -c %Y "$base")) / 86400))
step "base: $base, built $age day(s) ago (--rebuild-base takes Debian's updates since)"

if [[ -z $deb ]]; then
    step "building the Debian package (scripts/package.sh)"
    scripts/package.sh >/dev/null || die "scripts/package.sh failed (errors above)"
    deb=$(ls -t "$(target_dir)"/debian/kfdq_*.deb | head -n 1)
fi
[[ -f $deb ]] || die "no package at $deb" "build one with scripts/package.sh, or leave --deb out"
deb=$(realpath "$deb")
version=$(dpkg-deb --field "$deb" Version)
version=${version%-*}
arch=$(dpkg-deb --field "$deb" Architecture)
case $arch in
amd64 | arm64) ;;
*) die "the package is for $arch; the image's config names amd64 or arm64 only" "build the package on an amd64 or arm64 machine" ;;
esac
name=localhost/kfdq/kfdq:$version
[[ -n $output ]] || output=$(target_dir)/image/kfdq-$version.oci.tar
mkdir -p "$(dirname "$output")"

work=$(mktemp -d /tmp/kfdq-image.XXXXXX)
trap 'rm -rf "$work"' EXIT
rootfs=$work/rootfs layout=$work/layout
mkdir -p "$rootfs" "$layout/blobs/sha256"

step "unpacking the base and installing $(basename "$deb") (dpkg --root)"
# The runtime mounts /dev, /proc and /sys: the base's device nodes stay out of the layer (a
# rootless runtime cannot create them).
tar -xpf "$base" --numeric-owner --exclude='./dev/?*' -C "$rootfs"
# mmdebstrap leaves this machine's hostname and resolver in the base: the runtime mounts its own
# over these, so the image holds them empty (the mount points) and tells nothing of the build host.
rm -f "$rootfs/etc/hostname" "$rootfs/etc/resolv.conf"
install -m 0644 /dev/null "$rootfs/etc/hostname"
install -m 0644 /dev/null "$rootfs/etc/resolv.conf"
cp "$deb" "$rootfs/tmp/kfdq.deb"
# dpkg runs the package's maintainer scripts chrooted into the root; its Depends are checked
# against the base's packages.
dpkg --root="$rootfs" --log=/dev/null -i "$rootfs/tmp/kfdq.deb" >"$work/dpkg.log" 2>&1 || {
    cat "$work/dpkg.log" >&2
    die "dpkg could not install $deb into the $suite base (above)" \
        "a Depends the base cannot meet (libc6 newer than $suite's) means the package was built on a newer Debian: build it on Debian 12"
}
rm -f "$rootfs/tmp/kfdq.deb"

# add_blob FILE MEDIATYPE: moves FILE into the layout as a blob; prints its descriptor's JSON.
add_blob() {
    local digest size
    digest=$(sha256sum "$1" | cut -d' ' -f1)
    size=$(stat -c %s "$1")
    mv "$1" "$layout/blobs/sha256/$digest"
    printf '{"mediaType":"%s","digest":"sha256:%s","size":%s}' "$2" "$digest" "$size"
}

step "writing the layer (one gzip tar of the root)"
tar -C "$rootfs" --sort=name --numeric-owner -cf "$work/layer.tar" .
diff_id=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
gzip -n -6 "$work/layer.tar"
layer=$(add_blob "$work/layer.tar.gz" application/vnd.oci.image.layer.v1.tar+gzip)

created=$(date -u +%Y-%m-%dT%H:%M:%SZ)
# The image's config (OCI image spec, config.md). The command is the DaemonSet's kfdqd's.
cat >"$work/config.json" <<CONFIG
{"created":"$created","architecture":"$arch","os":"linux",
"config":{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
"Entrypoint":["/usr/bin/kfdqd"],"Cmd":["--config","/etc/kfdq/kfdq.toml"],"WorkingDir":"/",
"Labels":{"org.opencontainers.image.title":"kfdq","org.opencontainers.image.version":"$version",
"org.opencontainers.image.description":"kfdqd, kfdq and kfdq-device-plugin on Debian $suite"}},
"rootfs":{"type":"layers","diff_ids":["sha256:$diff_id"]},
"history":[{"created":"$created","created_by":"scripts/image.sh: Debian $suite (mmdebstrap --variant=essential) + $(basename "$deb")"}]}
CONFIG
config=$(add_blob "$work/config.json" application/vnd.oci.image.config.v1+json)

printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":%s,"layers":[%s]}' \
    "$config" "$layer" >"$work/manifest.json"
manifest=$(add_blob "$work/manifest.json" application/vnd.oci.image.manifest.v1+json)

# The name: containerd's ctr import reads io.containerd.image.name, podman and skopeo the OCI
# ref.name; both carry the full name the DaemonSet uses.
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[%s]}\n' \
    "${manifest%\}},\"platform\":{\"architecture\":\"$arch\",\"os\":\"linux\"},\"annotations\":{\"io.containerd.image.name\":\"$name\",\"org.opencontainers.image.ref.name\":\"$name\"}}" \
    >"$layout/index.json"
printf '{"imageLayoutVersion":"1.0.0"}\n' >"$layout/oci-layout"

step "writing $output"
tar -C "$layout" --sort=name --numeric-owner --owner=0 --group=0 -cf "$output.new" oci-layout index.json blobs
mv "$output.new" "$output"
echo "image: $name ($(du -h "$output" | cut -f1), $(du -sh "$rootfs" | cut -f1) unpacked)"
echo "$output"
