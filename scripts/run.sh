#!/usr/bin/env bash
# The main job, on the built-in emulator (no AMD GPU needed): mount kfd-emu with the mi308x
# preset, create queues at several priorities, deactivate and reactivate one, show
# `kfdq topology` and `kfdq ps`, run two HIP programs under the shim, clean up.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

step "setup: checking Debian packages, toolchain and FUSE"
scripts/setup.sh

step "building the workspace (kfdq, kfd-emu, kfdq-demo, the shim, fakehip)"
build_log=$(mktemp /tmp/kfdq-build.XXXXXX.log)
build_workspace "$build_log"
rm -f "$build_log"
bin=$BIN
mnt=$(mktemp -d /tmp/kfdq-emu.XXXXXX)
ready=$mnt.ready
emu_log=$mnt.log
emu_pid=""
cleanup() {
    [[ -n $emu_pid ]] && kill -TERM "$emu_pid" 2>/dev/null && wait "$emu_pid" 2>/dev/null || true
    "$bin/kfd-emu" unmount "$mnt" >/dev/null 2>&1 || true
    rmdir "$mnt" 2>/dev/null || true
    rm -f "$ready" "$emu_log"
}
trap cleanup EXIT

echo "== mounting kfd-emu (mi308x: 4 XCC x 20 CU, an assumed layout) at $mnt"
"$bin/kfd-emu" --mount "$mnt" --preset mi308x 2>"$emu_log" &
emu_pid=$!
for _ in $(seq 1 200); do
    [[ -e $mnt/dev/kfd ]] && break
    kill -0 "$emu_pid" 2>/dev/null || break
    sleep 0.05
done
if [[ ! -e $mnt/dev/kfd ]]; then
    cat "$emu_log" >&2
    if kill -0 "$emu_pid" 2>/dev/null; then why="did not come up at $mnt within 10 s"; else why="exited"; fi
    die "kfd-emu $why (its output is above)" \
        "it needs root, /dev/fuse and fusermount3 (Debian package fuse3): run scripts/setup.sh as root"
fi

echo
echo "== kfdq topology"
"$bin/kfdq" --root "$mnt" topology

echo
echo "== kfdq-demo queues: priorities 0/7/11/15, deactivate + reactivate the priority-0 queue"
"$bin/kfdq-demo" --root "$mnt" queues --hold-secs 3 --ready-file "$ready" &
demo_pid=$!
for _ in $(seq 1 600); do
    [[ -e $ready ]] && break
    kill -0 "$demo_pid" 2>/dev/null || break
    sleep 0.05
done
[[ -e $ready ]] || die "kfdq-demo did not create its queues (its output is above)"

echo
echo "== kfdq ps (while the demo holds its queues)"
"$bin/kfdq" --root "$mnt" ps
wait "$demo_pid"

echo
echo "== two HIP programs under the launch shim: class latency and class batch"
fakehip_dir=$FAKEHIP_DIR
workload=$bin/kfdq-workload
cc -O2 -Wall -o "$workload" shim/examples/workload.c -I tools/fakehip/include \
    -L "$fakehip_dir" -lamdhip64 -Wl,-rpath,"$fakehip_dir" ||
    die "could not compile shim/examples/workload.c against fakehip" "the C compiler comes from Debian's gcc: run scripts/setup.sh as root"
state=$(mktemp -d /tmp/kfdq-state.XXXXXX)
export KFDQ_STATE_DIR=$state
"$bin/kfdq" --root "$mnt" run --class latency -- "$workload" 3 &
lat_pid=$!
"$bin/kfdq" --root "$mnt" run --class batch -- "$workload" 3 &
batch_pid=$!
# Wait until both shims have mapped their three streams (null stream included) to queues.
for _ in $(seq 1 200); do
    n=$("$bin/kfdq" --root "$mnt" ps --json | grep -c '"stream_id"' || true)
    [[ $n -ge 6 ]] && break
    sleep 0.05
done
echo "== kfdq ps: which stream runs on which queue at what priority"
"$bin/kfdq" --root "$mnt" ps
wait "$lat_pid" "$batch_pid"
rm -rf "$state"
unset KFDQ_STATE_DIR

echo
echo "== emulator: device-wide preempts counted by the HWS model"
awk -F'[:,]' '/"gpu_id"/ {g = $2 + 0} /"preempts"/ {p = $2 + 0}
    /"runlist_updates"/ {printf "gpu %#x: %d device-wide preempts, %d runlist updates\n", g, p, $2 + 0}' \
    "$mnt/kfd-emu/stats.json"
echo
echo "run: ok"
