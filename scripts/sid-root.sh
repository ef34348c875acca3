#!/usr/bin/env bash
# Builds (once) and prints the path of the Debian sid root filesystem that holds the real ROCm user
# space the sid tests run against: rocminfo, the HIP 6.4 runtime (libamdhip64-6), ROCr
# (libhsa-runtime64-1, the KFD thunk built in), hipcc with its gfx942 device libraries, and
# python3-dev for the CPython extension test. sid's libraries need glibc 2.38, newer than this
# Debian 12 host has, so they run in their own root (docs/real-rocm.md).
#
#   scripts/sid-root.sh            build the root when it is missing, print its path
#   scripts/sid-root.sh --rebuild  build it again (the cached one is replaced when the new one is ready)
#   scripts/sid-root.sh --versions print the packages the cached root holds, and what moved
#   scripts/sid-root.sh --libs [--rebuild | --versions]
#                                  the same for the second root, sid-libs-root: the base packages
#                                  plus the ROCm math libraries PyTorch reaches (rocBLAS, hipBLAS,
#                                  hipBLASLt, MIOpen) and their headers, for shim/tests/sid_libs.rs,
#                                  and third-party programs for shim/tests/sid_tools.rs: rocBLAS's
#                                  and hipBLASLt's benchmarks, rocm-smi and amd-smi (about 700 MB
#                                  to download and 5.6 GB installed: built only when a test or a
#                                  person asks for it)
#   scripts/sid-root.sh --rocm72 [--libs] [--rebuild | --versions]
#                                  the ROCm 7.2 roots, sid-rocm72-root (sid-rocm72-libs-root): sid
#                                  plus Debian experimental's ROCm 7.2.4 (HIP 7.2, libamdhip64.so.7,
#                                  ROCr 7.2.4, hipcc 7.2.4 with clang 22, rocm-smi 7.2.4), the
#                                  versions pinned below; with --libs also rocBLAS, hipBLAS,
#                                  hipBLASLt and MIOpen 7.2.4 with their headers, rocSOLVER
#                                  7.2.4 (hipBLAS needs it) and amd-smi, for shim/tests/sid7_*.rs
#
# A cached root that lacks packages this script now lists (it was built by an older version) gets
# them installed into it with apt, without a rebuild.
#
# The root lives in $KFDQ_CACHE (default /var/cache/kfdq)/sid-root (sid-libs-root) and is built with
# mmdebstrap from the Debian mirror this machine's apt already uses. Building needs root. Each build
# records the exact versions of the packages the tests depend on in sid-root.versions
# (sid-libs-root.versions); tests/sid/versions.txt (libs-versions.txt) holds the versions the suite
# was last checked with, and every difference is named.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

cache=${KFDQ_CACHE:-/var/cache/kfdq}
name=sid-root
expected=tests/sid/versions.txt
# What the tests use. The versions of these (and of the libraries they pull that the runtime
# loads) are recorded.
include=(rocminfo libamdhip64-6 libamdhip64-dev libhsa-runtime64-1 hipcc python3-dev gcc libc6-dev)
recorded=(rocminfo libamdhip64-6 libamdhip64-dev libhsa-runtime64-1 hipcc clang-21 lld-21
    rocm-device-libs-21 libamd-comgr3 libdrm-amdgpu1 libc6 libstdc++6 python3-dev gcc)
# The file whose presence says the root is complete.
ready=usr/bin/rocminfo
cost="about a minute and 1 GB"
flag=
# The sources: sid, and with --rocm72 also experimental (the pinned versions come from there).
suites=(sid)
if [[ ${1:-} == --rocm72 ]]; then
    shift
    flag=" --rocm72"
    name=sid-rocm72-root
    expected=tests/sid/rocm72-versions.txt
    suites+=(experimental)
    # Debian experimental's ROCm 7.2.4, pinned: apt prefers sid's older versions of the same
    # packages (experimental's priority is 1), and `pkg/experimental` would also take glibc from
    # there. Every experimental package the set needs is named with its version.
    hip=7.2.4-1~exp2 rocr=7.2.4+dfsg-1~exp1 smi=7.2.4-1~exp1
    include=(rocminfo "libamdhip64-7=$hip" "libamdhip64-dev=$hip" "libhiprtc7=$hip"
        "libhiprtc-builtins7=$hip" "libhsa-runtime64-1=$rocr" "libhsa-runtime-dev=$rocr"
        "libamd-comgr3=$rocr" "libamd-comgr-dev=$rocr" "hipcc=$rocr" "rocm-device-libs-22=$rocr"
        "rocm-smi=$smi" "librocm-smi64-7=$smi" python3-dev gcc libc6-dev)
    recorded=(rocminfo libamdhip64-7 libamdhip64-dev libhsa-runtime64-1 hipcc clang-22 lld-22
        rocm-device-libs-22 libamd-comgr3 libdrm-amdgpu1 libc6 libstdc++6 rocm-smi librocm-smi64-7
        python3-dev gcc)
    ready=usr/lib/x86_64-linux-gnu/libamdhip64.so.7
    cost="about 2 minutes and 1.3 GB"
fi
if [[ ${1:-} == --libs && -n $flag ]]; then
    shift
    flag+=" --libs"
    name=sid-rocm72-libs-root
    expected=tests/sid/rocm72-libs-versions.txt
    # The libraries and their headers (shim/tests/sid7_libs.rs compiles against them); hipBLAS
    # needs rocSOLVER, MIOpen its test data package and rocTX, all from experimental; amd-smi
    # (sid's: experimental has none) beside rocm-smi 7.2.4.
    lib=7.2.4-1~exp1 libd=7.2.4+dfsg-1~exp1 miopen=7.2.4+dfsg-1
    include+=("librocblas5=$lib" "librocblas-dev=$lib" "libhipblas3=$lib" "libhipblas-dev=$lib"
        "libhipblaslt1=$libd" "libhipblaslt-dev=$libd" "libmiopen1=$miopen" "libmiopen-dev=$miopen"
        "librocsolver0=7.2.4-1~exp1+b1" "libroctx64-4=$lib" "libmiopen-tests-data=$miopen" amd-smi)
    recorded+=(librocblas5 librocblas-dev libhipblas3 libhipblas-dev libhipblaslt1 libhipblaslt-dev
        libmiopen1 libmiopen-dev librocsolver0 libroctx64-4 amd-smi libamd-smi27)
    ready=usr/lib/x86_64-linux-gnu/libMIOpen.so.1
    cost="about 2 minutes, 1.6 GB to download and 4.6 GB"
elif [[ ${1:-} == --libs ]]; then
    shift
    flag=" --libs"
    name=sid-libs-root
    expected=tests/sid/libs-versions.txt
    # The -dev packages pull the libraries (librocblas4, libhipblas2, libhipblaslt1, libmiopen1).
    # The third-party programs: rocblas-bench, hipblaslt-bench, rocm-smi, amd-smi.
    include+=(librocblas-dev libhipblas-dev libhipblaslt-dev libmiopen-dev
        librocblas4-bench libhipblaslt1-bench rocm-smi amd-smi)
    recorded+=(librocblas4 librocblas-dev libhipblas2 libhipblas-dev libhipblaslt1 libhipblaslt-dev
        libmiopen1 libmiopen-dev libhiprtc6 libhiprtc-builtins6
        librocblas4-bench libhipblaslt1-bench rocm-smi librocm-smi64-1 amd-smi libamd-smi27)
    ready=usr/include/miopen/miopen.h
    cost="several minutes, 700 MB to download and 5.6 GB"
fi
root=$cache/$name
versions=$cache/$name.versions

# moved: names every recorded package whose version differs from the ones the suite was checked with.
moved() {
    [[ -f $expected && -f $versions ]] || return 0
    awk -v file="$expected" 'NR == FNR { want[$1] = $2; next }
         ($1 in want) && want[$1] != $2 { printf "sid moved: %s %s -> %s (%s has %s)\n", $1, want[$1], $2, file, want[$1] }
         { seen[$1] = 1 }
         END { for (p in want) if (!(p in seen)) printf "sid moved: %s %s is no longer installed\n", p, want[p] }' \
        "$expected" "$versions"
}

build() {
    [[ $(id -u) -eq 0 ]] || die "building the sid root needs root (mmdebstrap installs packages into it)" \
        "run scripts/sid-root.sh as root once; the tests then reuse $root"
    if ! command -v mmdebstrap >/dev/null 2>&1; then
        step "installing mmdebstrap (Debian package) to build the sid root"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null 2>&1 || {
            apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
        } || die "could not install mmdebstrap" "install the Debian package mmdebstrap, then rerun"
    fi
    local url new log suite sources=() start=$SECONDS
    url=$(mirror)
    for suite in "${suites[@]}"; do
        sources+=("deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $url $suite main")
    done
    new=$root.new
    log=$cache/$name.log
    rm -rf "$new"
    mkdir -p "$cache"
    step "building the sid root in $root from $url ($cost; log: $log)" >&2
    # sid's Release file can be past its Valid-Until date on a mirror: accept it (the packages are
    # still checked against the Release file's signed hashes).
    if ! mmdebstrap --variant=apt --mode=root \
        --aptopt='Acquire::Check-Valid-Until "false"' \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --include="$(
            IFS=,
            echo "${include[*]}"
        )" \
        sid "$new" "${sources[@]}" >"$log" 2>&1; then
        tail -n 20 "$log" >&2
        rm -rf "$new"
        die "mmdebstrap could not build the sid root (full log: $log)" \
            "check that $url is reachable and serves sid; a package that sid dropped shows up above"
    fi
    record "$new"
    rm -rf "$root"
    mv "$new" "$root"
    mv "$versions.new" "$versions"
    step "sid root ready in $((SECONDS - start)) s ($(du -sh "$root" | cut -f1))" >&2
}

# record ROOT: writes the versions of the recorded packages installed in ROOT to $versions.new.
record() {
    chroot "$1" dpkg-query -W -f='${Package} ${Version}\n' "${recorded[@]}" 2>/dev/null | sort >"$versions.new" || true
}

# missing: the packages of $include that the cached root does not have installed (dpkg-query
# fails when it knows one of them not at all).
missing() {
    local installed p
    installed=$(chroot "$root" dpkg-query -W -f='${db:Status-Abbrev} ${Package}=${Version}\n' "${include[@]%%=*}" 2>/dev/null |
        awk '$1 ~ /^ii/ { print $2 }' || true)
    # A package named with its version (pkg=version) is missing unless that version is installed.
    for p in "${include[@]}"; do
        if [[ $p == *=* ]]; then
            grep -qxF -- "$p" <<<"$installed" || printf '%s\n' "$p"
        else
            grep -q -- "^$p=" <<<"$installed" || printf '%s\n' "$p"
        fi
    done
}

# add PACKAGE...: installs packages into the cached root with the root's own apt (it keeps the
# mirror in its sources.list and mmdebstrap's path excludes in dpkg.cfg.d), in a private mount
# namespace that gives the maintainer scripts a /proc; then clears apt's lists and cache as
# mmdebstrap does, and records the versions again.
add() {
    [[ $(id -u) -eq 0 ]] || die "adding packages to the sid root needs root" \
        "run scripts/sid-root.sh$flag as root once; the tests then reuse $root"
    local log=$cache/$name.add.log start=$SECONDS
    step "adding $* to the cached sid root $root (log: $log)" >&2
    # shellcheck disable=SC2016 # expanded by the inner shell
    if ! unshare --mount --propagation private sh -c '
        root=$1
        shift
        mount -t proc proc "$root/proc" || exit 1
        chroot "$root" apt-get -o Acquire::Check-Valid-Until=false update -qq &&
            DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get install -y -q --no-install-recommends "$@"
        status=$?
        chroot "$root" apt-get clean
        rm -rf "$root"/var/lib/apt/lists/*
        exit $status' add "$root" "$@" >"$log" 2>&1; then
        tail -n 20 "$log" >&2
        die "apt could not add $* to the sid root (full log: $log)" \
            "check that the mirror in $root/etc/apt/sources.list is reachable, then rerun; scripts/sid-root.sh$flag --rebuild builds the root anew"
    fi
    record "$root"
    mv "$versions.new" "$versions"
    step "added in $((SECONDS - start)) s" >&2
}

mkdir -p "$cache"
exec 9>"$cache/$name.lock"
flock 9
case ${1:-} in
--rebuild) build ;;
--versions)
    [[ -f $versions ]] || die "no sid root in $root yet" "run scripts/sid-root.sh$flag as root to build it"
    cat "$versions"
    moved
    exit 0
    ;;
"") ;;
*) die "unknown option $1" "use no option, --rebuild or --versions (after --libs for the libraries' root, after --rocm72 [--libs] for the ROCm 7.2 roots)" ;;
esac

if [[ ! -e $root/$ready || ! -f $versions ]]; then
    build
else
    mapfile -t absent < <(missing)
    if ((${#absent[@]})); then
        add "${absent[@]}"
    fi
fi
moved >&2
printf '%s\n' "$root"
