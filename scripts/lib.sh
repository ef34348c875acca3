# Shell helpers shared by kfdq's scripts (sourced, not run).

# step MESSAGE: one line that says what the script does next.
step() {
    printf '== %s\n' "$*"
}

# die MESSAGE...: what failed, what is missing and how to get it; exits 1.
die() {
    printf '%s: error: %s\n' "${0##*/}" "$1" >&2
    shift
    local line
    for line in "$@"; do printf '  %s\n' "$line" >&2; done
    exit 1
}

# target_dir: the directory cargo builds into (honours CARGO_TARGET_DIR and cargo config).
target_dir() {
    local meta dir
    meta=$(cargo metadata --format-version 1 --no-deps 2>/dev/null) ||
        die "cargo metadata failed" "run 'cargo metadata --no-deps' in $(pwd) to see why"
    dir=$(printf '%s' "$meta" | grep -o '"target_directory":"[^"]*"' | head -n 1 | cut -d'"' -f4)
    [[ -n $dir ]] || die "cargo metadata named no target directory"
    printf '%s\n' "$dir"
}

# build_workspace LOGFILE: builds every package of the workspace (binaries, libraries, the shim
# and fakehip's C library) and sets FAKEHIP_DIR to the directory holding libamdhip64.so.6 and
# BIN to the directory holding the binaries.
build_workspace() {
    local log=$1 json
    json=$(mktemp /tmp/kfdq-build.XXXXXX.json)
    if ! cargo build --workspace --message-format=json-render-diagnostics >"$json" 2>"$log"; then
        tail -n 30 "$log" >&2
        rm -f "$json"
        die "cargo build --workspace failed (full log: $log)" \
            "a missing Debian package shows up here as a bindgen/libclang or cc error: run scripts/setup.sh as root"
    fi
    # fakehip's build script compiles the C library into its OUT_DIR; cargo reports it.
    FAKEHIP_DIR=$(grep '"reason":"build-script-executed"' "$json" | grep -F '/tools/fakehip#' |
        grep -o '"out_dir":"[^"]*"' | tail -n 1 | cut -d'"' -f4)
    rm -f "$json"
    [[ -n $FAKEHIP_DIR && -e $FAKEHIP_DIR/libamdhip64.so.6 ]] ||
        die "the build did not produce fakehip's libamdhip64.so.6" \
            "fakehip's build script needs a C compiler (Debian package gcc): run scripts/setup.sh as root"
    BIN=$(target_dir)/debug
    local exe
    for exe in kfdq kfdqd kfd-emu kfdq-selftest kfdq-hipwork libkfdq_shim.so; do
        [[ -e $BIN/$exe ]] || die "the build did not produce $BIN/$exe" "run 'cargo build --workspace' to see why"
    done
}

# build_workloads: compiles the demo's HIP workloads (latency client, batch flood) and the
# example workload against fakehip into $BIN as kfdq-latency, kfdq-flood and kfdq-workload.
build_workloads() {
    local name src
    for name in latency flood; do
        src=shim/tests/programs/$name.c
        cc -O2 -Wall -o "$BIN/kfdq-$name" "$src" -I tools/fakehip/include -I shim/tests/programs \
            -L "$FAKEHIP_DIR" -lamdhip64 -Wl,-rpath,"$FAKEHIP_DIR" ||
            die "could not compile $src against fakehip" "the C compiler comes from Debian's gcc: run scripts/setup.sh as root"
    done
    cc -O2 -Wall -o "$BIN/kfdq-workload" shim/examples/workload.c -I tools/fakehip/include \
        -L "$FAKEHIP_DIR" -lamdhip64 -Wl,-rpath,"$FAKEHIP_DIR" ||
        die "could not compile shim/examples/workload.c against fakehip" "the C compiler comes from Debian's gcc: run scripts/setup.sh as root"
}

# mirror: the Debian mirror this machine's apt uses (from its sources), without a trailing slash.
mirror() {
    local uri=""
    if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
        uri=$(awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i ~ /\/debian\/?$/) { print $i; exit } }' \
            /etc/apt/sources.list.d/debian.sources)
    fi
    if [[ -z $uri && -f /etc/apt/sources.list ]]; then
        uri=$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^https?:.*\/debian\/?$/) { print $i; exit } }' \
            /etc/apt/sources.list)
    fi
    [[ -n $uri ]] || die "no Debian mirror in this machine's apt sources" \
        "kfdq fetches Debian packages (linux-libc-dev, the sid root) from the mirror apt uses (/etc/apt/sources.list.d/debian.sources)"
    printf '%s\n' "${uri%/}"
}
