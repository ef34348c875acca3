#!/usr/bin/env bash
# Validates the deployment files offline: the Kubernetes manifests against the API schemas
# (kubernetes-validate), the ConfigMap's and the example configurations with the binaries'
# own --check (no note allowed in the ConfigMap's kfdq.toml), and the systemd unit with
# systemd-analyze verify. Run by scripts/test.sh.
#
# Usage: scripts/check-deploy.sh [--offline] [MANIFEST_DIR]
#   MANIFEST_DIR  where the manifests are (default: deploy/kubernetes beside this script)
#   --offline     skip the schema check (it needs kubernetes-validate, from PyPI, for the
#                 Kubernetes API schemas): said as skipped, never as passed
# The binaries: $KFDQD and $KFDQ_DEVICE_PLUGIN if set, else this checkout's target/debug
# ones when built, else the installed /usr/bin ones (the .deb's). The ConfigMap is read with
# Debian's python3-yaml; nothing else is fetched.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
. scripts/lib.sh

offline=0 manifests=deploy/kubernetes
while (($#)); do
    case $1 in
    --offline) offline=1 && shift ;;
    -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' && exit 0 ;;
    -*) die "unknown option '$1'" "scripts/check-deploy.sh [--offline] [MANIFEST_DIR]" ;;
    *) manifests=$1 && shift ;;
    esac
done
daemonset=$manifests/kfdqd-daemonset.yaml
[[ -f $daemonset ]] || die "no $daemonset" "name the directory that holds the manifests"

# bin NAME ENVVAR: the binary to check with.
bin() {
    local v=${!2:-}
    if [[ -n $v ]]; then
        [[ -x $v ]] || die "$2=$v is not an executable"
        echo "$v"
    elif [[ -f Cargo.toml ]] && command -v cargo >/dev/null && [[ -x $(target_dir)/debug/$1 ]]; then
        echo "$(target_dir)/debug/$1"
    elif command -v "$1" >/dev/null; then
        command -v "$1"
    else
        die "$1 is neither built here nor installed" "run 'cargo build --workspace', install the kfdq package, or set $2"
    fi
}
kfdqd=$(bin kfdqd KFDQD)
plugin=$(bin kfdq-device-plugin KFDQ_DEVICE_PLUGIN)

if ((offline)); then
    step "Kubernetes manifests: schema check SKIPPED (--offline)"
else
    if command -v kubernetes-validate >/dev/null; then
        validate=$(command -v kubernetes-validate)
    else
        cache=${KFDQ_CACHE:-/var/cache/kfdq}
        venv=$cache/venv-kubernetes-validate
        validate=$venv/bin/kubernetes-validate
        if [[ ! -x $validate ]]; then
            step "installing kubernetes-validate into $venv (once; it carries the API schemas)"
            mkdir -p "$cache"
            /usr/bin/python3 -m venv "$venv" 2>/dev/null ||
                die "could not create a Python virtualenv in $venv" "install Debian's python3-venv (scripts/setup.sh does) and retry"
            "$venv/bin/pip" install --quiet kubernetes-validate ||
                die "pip could not install kubernetes-validate" "check that PyPI is reachable, or run with --offline to skip the schema check"
        fi
    fi
    step "Kubernetes manifests: kubernetes-validate --strict $manifests/*.yaml"
    "$validate" --strict --quiet "$manifests"/*.yaml ||
        die "a Kubernetes manifest does not validate (above)"
fi

# configmap_key KEY FILE: the ConfigMap's KEY (a file's text) written to FILE.
configmap_key() {
    /usr/bin/python3 - "$daemonset" "$1" >"$2" <<'PY' ||
import sys
try:
    import yaml
except ImportError:
    sys.exit("python3-yaml is missing: install Debian's python3-yaml (scripts/setup.sh does)")
for doc in yaml.safe_load_all(open(sys.argv[1])):
    if doc and doc.get("kind") == "ConfigMap" and sys.argv[2] in doc.get("data", {}):
        print(doc["data"][sys.argv[2]])
        break
else:
    sys.exit("no ConfigMap with " + sys.argv[2])
PY
        die "could not read $1 from the ConfigMap in $daemonset"
}
step "the ConfigMap's kfdq.toml: kfdqd --check"
conf=$(mktemp /tmp/kfdq-configmap.XXXXXX.toml)
configmap_key kfdq.toml "$conf"
out=$("$kfdqd" --check --config "$conf") || die "kfdqd refused the ConfigMap's kfdq.toml (above)"
rm -f "$conf"
if grep -i '^ *note:' <<<"$out" >&2; then
    die "kfdqd --check has notes on the ConfigMap's kfdq.toml (above)" "the shipped configuration follows its own advice: change it"
fi

step "the ConfigMap's device-plugin.toml: kfdq-device-plugin --check"
conf=$(mktemp /tmp/kfdq-configmap.XXXXXX.toml)
configmap_key device-plugin.toml "$conf"
"$plugin" --check --file-only --config "$conf" >/dev/null ||
    die "kfdq-device-plugin refused the ConfigMap's device-plugin.toml (above)"
rm -f "$conf"
step "the example plugin configuration: kfdq-device-plugin --check deploy/device-plugin.toml"
"$plugin" --check --file-only --agent-config deploy/kfdq.toml --config deploy/device-plugin.toml >/dev/null ||
    die "kfdq-device-plugin refused deploy/device-plugin.toml (above)"

step "the example configuration: kfdqd --check deploy/kfdq.toml"
"$kfdqd" --check --config deploy/kfdq.toml >/dev/null || die "kfdqd refused deploy/kfdq.toml (above)"

step "systemd unit: systemd-analyze verify deploy/systemd/kfdqd.service"
command -v systemd-analyze >/dev/null || die "systemd-analyze is missing" "install Debian's systemd (scripts/setup.sh does)"
# verify checks that ExecStart's binary exists: point it at the one just built.
unit_dir=$(mktemp -d)
trap 'rm -rf "$unit_dir"' EXIT
sed "s|^ExecStart=/usr/bin/kfdqd|ExecStart=$kfdqd|" deploy/systemd/kfdqd.service >"$unit_dir/kfdqd.service"
out=$(SYSTEMD_LOG_LEVEL=notice systemd-analyze verify --man=no "$unit_dir/kfdqd.service" 2>&1) || {
    printf '%s\n' "$out" >&2
    die "systemd-analyze verify rejected deploy/systemd/kfdqd.service"
}
# verify also complains about unrelated units of the host; only ours counts.
if grep -F "kfdqd.service" <<<"$out" >&2; then
    die "systemd-analyze verify reported problems in deploy/systemd/kfdqd.service (above)"
fi
echo "deploy: ok"
