#!/usr/bin/env bash
# Checks kfdq's OCI image archive (scripts/image.sh) without a container runtime: the layout
# (oci-layout, index.json, manifest, config, layer) with every blob's sha256 digest and size, the
# layer's diff_id, the name the DaemonSet runs (every image: line of
# deploy/kubernetes/kfdqd-daemonset.yaml), then unpacks the layer into a scratch root (whose
# /etc/hostname and /etc/resolv.conf must be empty: nothing of the build host) and runs,
# chrooted into it, the image's entry point with --check (kfdqd on the image's /etc/kfdq/kfdq.toml),
# the DaemonSet's init container command (the shim's copy) and the device plugin's command with
# --check --file-only as the pods run them, kfdqd --version, kfdq --help and dpkg-query for the
# installed package; every program and package file the DaemonSet's commands name (kfdqd's
# container runs a shell script) must be in the image. Needs root (chroot). Run by scripts/test.sh.
#
#   scripts/check-image.sh          build the image from the newest package under target/debian
#                                   (scripts/package.sh builds it) into a scratch file, check it
#   scripts/check-image.sh FILE     check the archive FILE
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

case ${1:-} in
-h | --help)
    sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//p}' "$0"
    exit 0
    ;;
-*) die "unknown option $1" "scripts/check-image.sh takes an archive's path or nothing (--help says more)" ;;
esac
[[ $(id -u) -eq 0 ]] || die "checking the image needs root (it chroots into the unpacked image)" "run scripts/check-image.sh as root"

scratch=$(mktemp -d /tmp/kfdq-image-check.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
archive=${1:-}
if [[ -z $archive ]]; then
    deb=$(ls -t "$(target_dir)"/debian/kfdq_*.deb 2>/dev/null | head -n 1 || true)
    [[ -n $deb ]] || die "no package under $(target_dir)/debian" "build it with scripts/package.sh"
    step "scripts/image.sh --deb $deb"
    scripts/image.sh --deb "$deb" --output "$scratch/image.oci.tar" >"$scratch/image.log" 2>&1 || {
        cat "$scratch/image.log" >&2
        die "scripts/image.sh failed (above)"
    }
    tail -n 2 "$scratch/image.log" | head -n 1
    archive=$scratch/image.oci.tar
fi
[[ -f $archive ]] || die "no image archive at $archive" "build one with scripts/image.sh"

daemonset=deploy/kubernetes/kfdqd-daemonset.yaml
mapfile -t images < <(sed -n 's/^ *image: *//p' "$daemonset" | sort -u)
((${#images[@]} == 1)) || die "$daemonset names ${#images[@]} images (${images[*]}), not one" \
    "every container of the DaemonSets runs the one image scripts/image.sh builds"

step "the OCI layout of $archive: digests, sizes, media types, config"
# Prints the layer's blob path inside the archive, then the entry point and command as JSON.
python3 - "$archive" "${images[0]}" "$scratch/layer.tar.gz" >"$scratch/layout" <<'PYTHON' ||
import gzip, hashlib, json, sys, tarfile

archive, want_name, layer_out = sys.argv[1:4]
def fail(msg):
    sys.exit(f"check-image.sh: error: {msg}")
with tarfile.open(archive) as tar:
    names = set(tar.getnames())
    def read(name):
        if name not in names:
            fail(f"the archive has no {name}")
        return tar.extractfile(name).read()
    def blob(desc, media_type):
        if desc.get("mediaType") != media_type:
            fail(f"descriptor {desc} is not of media type {media_type}")
        algo, _, digest = desc["digest"].partition(":")
        if algo != "sha256":
            fail(f"digest {desc['digest']} is not sha256")
        data = read(f"blobs/sha256/{digest}")
        if hashlib.sha256(data).hexdigest() != digest:
            fail(f"blob {digest} does not match its digest")
        if len(data) != desc["size"]:
            fail(f"blob {digest} is {len(data)} bytes, its descriptor says {desc['size']}")
        return data
    if json.loads(read("oci-layout")) != {"imageLayoutVersion": "1.0.0"}:
        fail("oci-layout is not imageLayoutVersion 1.0.0")
    index = json.loads(read("index.json"))
    if index.get("schemaVersion") != 2 or len(index.get("manifests", [])) != 1:
        fail("index.json is not an OCI index (schemaVersion 2) of one manifest")
    desc = index["manifests"][0]
    ann = desc.get("annotations", {})
    for key in ("io.containerd.image.name", "org.opencontainers.image.ref.name"):
        if ann.get(key) != want_name:
            fail(f"index.json names the image {ann.get(key)!r} ({key}); the DaemonSet runs {want_name!r}")
    manifest = json.loads(blob(desc, "application/vnd.oci.image.manifest.v1+json"))
    if manifest.get("schemaVersion") != 2 or len(manifest.get("layers", [])) != 1:
        fail("the manifest is not schemaVersion 2 with one layer")
    config = json.loads(blob(manifest["config"], "application/vnd.oci.image.config.v1+json"))
    layer = blob(manifest["layers"][0], "application/vnd.oci.image.layer.v1.tar+gzip")
    diff_id = "sha256:" + hashlib.sha256(gzip.decompress(layer)).hexdigest()
    if config["rootfs"] != {"type": "layers", "diff_ids": [diff_id]}:
        fail(f"the config's rootfs {config['rootfs']} does not name the layer's diff_id {diff_id}")
    if config.get("os") != "linux" or config.get("architecture") != desc.get("platform", {}).get("architecture"):
        fail("the config's os/architecture do not match the index's platform")
    with open(layer_out, "wb") as out:
        out.write(layer)
    print(json.dumps(config["config"]["Entrypoint"] + config["config"].get("Cmd", [])))
PYTHON
    die "the archive is not a well-formed OCI image of ${images[0]} (above)" "rebuild it with scripts/image.sh"

root=$scratch/root
mkdir -p "$root"
step "unpacking the layer into $root"
tar -xzpf "$scratch/layer.tar.gz" --numeric-owner -C "$root"
rm "$scratch/layer.tar.gz"
mkdir -p "$root/host-lib"
for f in etc/hostname etc/resolv.conf; do
    [[ -f $root/$f && ! -s $root/$f ]] || die "the image's /$f is not an empty file" \
        "the runtime mounts its own there; the build host's must not ship (scripts/image.sh empties it)"
done

# in_image ARG...: runs ARG... chrooted into the unpacked image, with the image's PATH, in a
# private mount namespace that gives it a /proc (as a container has) and drops it afterwards.
in_image() {
    # shellcheck disable=SC2016 # expanded by the inner shell
    unshare --mount --propagation private sh -c 'mount -t proc proc "$0/proc" && exec chroot "$0" "$@"' \
        "$root" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
}

step "running the image's entry points chrooted into it"
# shellcheck disable=SC2016 # dpkg-query's format, not the shell's
version=$(in_image dpkg-query -W -f '${Version}' kfdq) || die "dpkg-query in the image does not know the package kfdq"
version=${version%-*}
[[ ${images[0]} == *:"$version" ]] || die "the DaemonSet runs ${images[0]}, the image holds kfdq $version" \
    "set the image: lines of $daemonset to the version scripts/image.sh builds"
out=$(in_image /usr/bin/kfdqd --version)
[[ $out == "kfdqd $version" ]] || die "kfdqd --version in the image printed '$out', expected 'kfdqd $version'"
in_image /usr/bin/kfdq --help | grep -q '^Usage: kfdq' || die "kfdq --help in the image printed no usage"
# json_argv JSON: the strings of a JSON array, one a line.
json_argv() {
    python3 -c 'import json, sys; print("\n".join(json.loads(sys.argv[1])))' "$1"
}
# The image's own entry point (config's Entrypoint + Cmd) with --check: its configuration.
mapfile -t entry < <(json_argv "$(cat "$scratch/layout")")
in_image "${entry[@]}" --check >/dev/null || die "the image's entry point ${entry[*]} --check refused its configuration (above)"
# one_line_command PATTERN: the first one-line command (a flow sequence, which is JSON) of the
# DaemonSet at or after the line matching PATTERN, one argument a line.
one_line_command() {
    local line
    line=$(awk -v pat="$1" '$0 ~ pat { found = 1 } found && /^ *command: *\[.*\] *$/ { sub(/^ *command: */, ""); print; exit }' "$daemonset")
    [[ -n $line ]] || die "$daemonset has no one-line command: [...] at or after '$1'" \
        "write that container's command as command: [\"...\", ...] on one line; this check runs it in the image"
    json_argv "$line"
}
# The init container's command as it runs in its pod (it copies the shim to /host-lib).
mapfile -t argv < <(one_line_command 'name: install-shim')
in_image "${argv[@]}" || die "the init container's command failed in the image: ${argv[*]}"
# The device plugin's command as its pod runs it, with --check --file-only.
mapfile -t argv < <(one_line_command 'command: *\["/usr/bin/kfdq-device-plugin"')
in_image "${argv[@]}" --check --file-only >/dev/null || die "${argv[*]} --check --file-only failed in the image (above)"
# kfdqd's container runs a shell script (the node's configuration if it has one): every program
# and every file of the package that the DaemonSet names outside comments is in the image.
mapfile -t named < <(sed 's/^ *#.*//' "$daemonset" | grep -o '/\(usr/\)\{0,1\}s\{0,1\}bin/[A-Za-z0-9_.+-]*\|/usr/lib/kfdq/[A-Za-z0-9_.+-]*' | sort -u)
[[ " ${named[*]} " == *" /usr/bin/kfdqd "* ]] || die "$daemonset names no /usr/bin/kfdqd outside comments"
for path in "${named[@]}"; do
    case $path in
    */bin/*) [[ -x $root$path && -f $root$path ]] || die "$daemonset runs $path, which the image does not hold as a program" ;;
    *) [[ -f $root$path ]] || die "$daemonset names $path, which the image does not hold" ;;
    esac
done
[[ -f $root/host-lib/libkfdq_shim.so ]] || die "the init container's command did not copy the shim to /host-lib"
echo "image: ok (${images[0]}, $(du -h "$archive" | cut -f1))"
