#!/usr/bin/env bash
# The main job: `kfdq demo` — a latency client next to a batch job, alone, uncontrolled, with
# priorities only and under preemption levels 1-3, each phase with real processes under the
# shim and a real kfdqd. No AMD GPU here, so the demo mounts the built-in emulator (kfd-emu,
# mi308x preset), and the workloads (kfdq-hipwork) run on the real ROCm 6.4 HIP runtime of a
# Debian sid root (scripts/sid-root.sh, built once and cached) through `kfd-emu run`.
# `scripts/run.sh --rocm72 ...` uses the ROCm 7.2 root instead. Other arguments go to
# `kfdq demo` (e.g. `scripts/run.sh --json`, `--requests 300`, `--runtime fakehip` for kfdq's
# stand-in).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

root_args=()
if [[ ${1:-} == --rocm72 ]]; then
    shift
    root_args=(--rocm72)
fi
# given: whether the user passed the demo flag $1 (then ours is left out: clap takes one).
given() {
    local a
    for a in "${user_args[@]}"; do [[ $a == "$1" || $a == "$1="* ]] && return 0; done
    return 1
}
user_args=("$@")
runtime=hip
for ((i = 0; i < ${#user_args[@]}; i++)); do
    case ${user_args[i]} in
    --runtime=fakehip) runtime=fakehip ;;
    --runtime) if [[ ${user_args[i + 1]:-} == fakehip ]]; then runtime=fakehip; fi ;;
    esac
done

step "setup: checking Debian packages, toolchain and FUSE"
scripts/setup.sh

step "building the workspace (kfdq, kfdqd, kfd-emu, the shim, kfdq-hipwork, fakehip) and the fakehip workloads"
build_log=$(mktemp /tmp/kfdq-build.XXXXXX.log)
build_workspace "$build_log"
rm -f "$build_log"
build_workloads

demo_args=()
if [[ $runtime == hip ]]; then
    step "the Debian sid root with the real ROCm runtime (scripts/sid-root.sh ${root_args[*]:-}; built once, cached)"
    scripts/sid-root.sh "${root_args[@]}"
    cache=${KFDQ_CACHE:-/var/cache/kfdq}
    given --runtime || demo_args+=(--runtime hip)
    if ! given --hip-root; then
        if [[ ${root_args[*]:-} == --rocm72 ]]; then
            demo_args+=(--hip-root "$cache/sid-rocm72-root")
        else
            demo_args+=(--hip-root "$cache/sid-root")
        fi
    fi
fi
# 200 requests per phase, so that P99 is not the slowest request (the demo's default is 60).
given --requests || demo_args+=(--requests 200)
# The real-shaped request (a ResNet-18 inference's 145 kernels, issue 51/53); --request-shape synthetic
# gives the few long dispatches of earlier tables.
given --request-shape || demo_args+=(--request-shape resnet18)

step "kfdq demo (about three minutes: 11 phases of 200 requests)"
"$BIN/kfdq" demo "${demo_args[@]}" "$@"
echo
echo "run: ok"
