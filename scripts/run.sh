#!/usr/bin/env bash
# The main job: `kfdq demo` — a latency client next to a batch job, alone, uncontrolled, with
# priorities only and under preemption levels 1-3, each phase with real processes under the
# shim and a real kfdqd. No AMD GPU here, so the demo mounts the built-in emulator (kfd-emu,
# mi308x preset) and the workloads run on fakehip. Extra arguments go to `kfdq demo`
# (e.g. `scripts/run.sh --json`, `--requests 200`).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

step "setup: checking Debian packages, toolchain and FUSE"
scripts/setup.sh

step "building the workspace (kfdq, kfdqd, kfd-emu, the shim, fakehip) and the demo's workloads"
build_log=$(mktemp /tmp/kfdq-build.XXXXXX.log)
build_workspace "$build_log"
rm -f "$build_log"
build_workloads

step "kfdq demo (about two minutes: 9 phases)"
"$BIN/kfdq" demo "$@"
echo
echo "run: ok"
