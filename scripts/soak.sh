#!/usr/bin/env bash
# The soak (not in the default test run; CI runs its 40-second form as the test `soak` of
# shim/tests/soak.rs): a real kfdqd on the emulator for N minutes with processes of every class
# starting, working, exiting, killed (-9), stopped and continued, the agent killed and restarted
# and stopped for longer than a lease, and kernel faults injected (kfd-emu/faults), checking
# continuously against the emulator's truth that no queue stays preempted longer than the lease
# and the retry backoff allow when no higher class works, that `kfdq status --json` agrees with
# the emulator, that every program's output is whole, and that the agent's fds stay bounded.
# Needs root (FUSE, ptrace).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

usage() {
    cat <<'USAGE'
Usage: scripts/soak.sh [--minutes N | --seconds N] [--seed S] [--json]

  --minutes N   how long to soak, in minutes, fractions allowed (default 10)
  --seconds N   the same in whole seconds (at least 10); --seconds 40 is the CI form
  --seed S      seed of the soak's choices (default 1): the same seed makes the same choices
                (timings still differ from run to run)
  --json        print the summary as JSON (processes, kills, faults, agent restarts, worst
                starvation, RSS and fd drift, violations) instead of the text line

A developer's tool, not an installed one: it runs from a source checkout of kfdq, needs the
Rust toolchain (cargo), and first builds the workspace (cargo build --workspace --bins) and the
soak test (shim/tests/soak.rs); on a node with only the .deb installed there is nothing to run.
It soaks kfd-emu, the emulator, not the node's GPUs. Needs root (FUSE, ptrace).
Progress goes to stderr once a minute. Exit status 0 when every invariant held.
Example: scripts/soak.sh --minutes 10 --json > soak.json
USAGE
}

seconds=600 seed=1 json=0
while (($#)); do
    case $1 in
    --minutes)
        [[ ${2:-} =~ ^([0-9]+)?(\.[0-9]+)?$ && -n ${2:-} && ${2:-} != . ]] ||
            die "--minutes needs a number of minutes (got '${2:-}')" "e.g. --minutes 10, or --minutes 0.5"
        seconds=$(awk -v m="$2" 'BEGIN { printf "%d", m * 60 + 0.5 }')
        ((seconds >= 10)) || die "--minutes $2 is under 10 seconds: too short for a soak" "e.g. --minutes 0.5, or --seconds 40"
        shift 2
        ;;
    --seconds)
        [[ ${2:-} =~ ^[0-9]+$ ]] && (($2 >= 10)) ||
            die "--seconds needs a whole number of seconds, 10 or more (got '${2:-}')" "e.g. --seconds 40 (the CI form)"
        seconds=$((10#$2))
        shift 2
        ;;
    --seed)
        [[ ${2:-} =~ ^[0-9]+$ ]] || die "--seed needs a whole number (got '${2:-}')" "e.g. --seed 7"
        seed=$2
        shift 2
        ;;
    --json) json=1 && shift ;;
    -h | --help) usage && exit 0 ;;
    *) usage >&2 && die "unknown argument '$1'" "see the usage above" ;;
    esac
done
[[ -f Cargo.toml && -f shim/tests/soak.rs ]] ||
    die "scripts/soak.sh runs from a source checkout of kfdq (no Cargo.toml or shim/tests/soak.rs beside it)" "clone the repository and run it there"
command -v cargo >/dev/null || die "cargo is not installed: the soak builds the workspace first" "install the Rust toolchain (scripts/setup.sh does)"
[[ $(id -u) -eq 0 ]] || die "the soak mounts FUSE and uses ptrace: run it as root" "sudo scripts/soak.sh --seconds $seconds"

step "building the soak (shim/tests/soak.rs) and the binaries it runs" >&2
cargo build --quiet --workspace --bins >&2 ||
    die "cargo build --workspace failed (errors above)" "run scripts/setup.sh as root if a Debian package is missing"
cargo test --quiet -p kfdq-shim --test soak --no-run >&2 ||
    die "building the soak test failed (errors above)"

summary=$(mktemp /tmp/kfdq-soak.XXXXXX.json)
log=$(mktemp /tmp/kfdq-soak.XXXXXX.log)
step "soaking for $seconds s, seed $seed (log: $log)" >&2
status=0
KFDQ_SOAK_SECONDS=$seconds KFDQ_SOAK_SEED=$seed KFDQ_SOAK_JSON=$summary \
    cargo test --quiet -p kfdq-shim --test soak -- --nocapture soak >"$log" 2>&1 || status=$?
grep -E '^soak(:| summary)' "$log" >&2 || true
if [[ -s $summary ]]; then
    if ((json)); then cat "$summary"; fi
else
    tail -n 40 "$log" >&2
    rm -f "$summary"
    die "the soak ended before its summary (log: $log)"
fi
rm -f "$summary"
((status == 0)) || die "an invariant failed (above; full log: $log)" "the log's events name what happened and when"
rm -f "$log"
echo "soak: ok" >&2
