#!/usr/bin/env bash
# The main job, on the built-in emulator (no AMD GPU needed): mount kfd-emu with the mi308x
# preset, create queues at several priorities, deactivate and reactivate one, show
# `kfdq topology` and `kfdq ps`, clean up.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

cargo build --quiet --bins
bin=target/debug
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
echo "== emulator: device-wide preempts counted by the HWS model"
python3 -c 'import json,sys
for p in json.load(open(sys.argv[1]))["partitions"]:
    print("gpu %#06x: %d device-wide preempts, %d runlist updates" % (p["gpu_id"], p["preempts"], p["runlist_updates"]))' "$mnt/kfd-emu/stats.json"
echo
echo "run: ok"
