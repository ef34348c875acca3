#!/usr/bin/env bash
# The main job, on the built-in emulator (no AMD GPU needed): mount kfd-emu with the mi308x
# preset, create queues at several priorities, deactivate and reactivate one, show
# `kfdq topology` and `kfdq ps`, clean up.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

cargo build --quiet --bins
target=${CARGO_TARGET_DIR:-target}
bin=$target/debug
mnt=$(mktemp -d /tmp/kfdq-emu.XXXXXX)
ready=$mnt.ready
emu_pid=""
cleanup() {
    [[ -n $emu_pid ]] && kill -TERM "$emu_pid" 2>/dev/null && wait "$emu_pid" 2>/dev/null || true
    "$bin/kfd-emu" unmount "$mnt" >/dev/null 2>&1 || true
    rmdir "$mnt" 2>/dev/null || true
    rm -f "$ready"
}
trap cleanup EXIT

echo "== mounting kfd-emu (mi308x: 4 XCC x 20 CU, an assumed layout) at $mnt"
"$bin/kfd-emu" --mount "$mnt" --preset mi308x &
emu_pid=$!
for _ in $(seq 1 200); do [[ -e $mnt/dev/kfd ]] && break; sleep 0.05; done
[[ -e $mnt/dev/kfd ]] || { echo "kfd-emu did not come up" >&2; exit 1; }

echo
echo "== kfdq topology"
"$bin/kfdq" --root "$mnt" topology

echo
echo "== kfdq-demo queues: priorities 0/7/11/15, deactivate + reactivate the priority-0 queue"
"$bin/kfdq-demo" --root "$mnt" queues --hold-secs 3 --ready-file "$ready" &
demo_pid=$!
for _ in $(seq 1 600); do [[ -e $ready ]] && break; sleep 0.05; done

echo
echo "== kfdq ps (while the demo holds its queues)"
"$bin/kfdq" --root "$mnt" ps
wait "$demo_pid"

echo
echo "== two HIP programs under the launch shim: class latency and class batch"
fakehip_lib=$(ls -t "$target"/debug/build/fakehip-*/out/libamdhip64.so.6 | head -n 1)
fakehip_dir=$(dirname "$fakehip_lib")
workload=$bin/kfdq-workload
cc -O2 -Wall -o "$workload" shim/examples/workload.c -I tools/fakehip/include \
    -L "$fakehip_dir" -lamdhip64 -Wl,-rpath,"$fakehip_dir"
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
