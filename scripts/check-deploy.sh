#!/usr/bin/env bash
# Validates the deployment files offline: the Kubernetes manifests against the API schemas
# (kubernetes-validate from PyPI, in a cached virtualenv) and the systemd unit with
# systemd-analyze verify. Run by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

cache=${KFDQ_CACHE:-/var/cache/kfdq}
venv=$cache/venv-kubernetes-validate
if [[ ! -x $venv/bin/kubernetes-validate ]]; then
    step "installing kubernetes-validate into $venv (once)"
    mkdir -p "$cache"
    /usr/bin/python3 -m venv "$venv" 2>/dev/null ||
        die "could not create a Python virtualenv in $venv" "install Debian's python3-venv (scripts/setup.sh does) and retry"
    "$venv/bin/pip" install --quiet kubernetes-validate ||
        die "pip could not install kubernetes-validate" "check that PyPI is reachable"
fi
step "Kubernetes manifests: kubernetes-validate --strict deploy/kubernetes/*.yaml"
"$venv/bin/kubernetes-validate" --strict --quiet deploy/kubernetes/*.yaml ||
    die "a Kubernetes manifest does not validate (above)"

kfdqd=$(target_dir)/debug/kfdqd
[[ -x $kfdqd ]] || die "$kfdqd is not built" "scripts/test.sh builds the workspace first; or run 'cargo build --workspace'"
# configmap_key KEY FILE: the ConfigMap's KEY (a file's text) written to FILE.
configmap_key() {
    "$venv/bin/python" - deploy/kubernetes/kfdqd-daemonset.yaml "$1" >"$2" <<'PY' ||
import sys, yaml
for doc in yaml.safe_load_all(open(sys.argv[1])):
    if doc and doc.get("kind") == "ConfigMap" and sys.argv[2] in doc.get("data", {}):
        print(doc["data"][sys.argv[2]])
        break
else:
    sys.exit("no ConfigMap with " + sys.argv[2])
PY
        die "could not read $1 from the ConfigMap in deploy/kubernetes/kfdqd-daemonset.yaml"
}
step "the ConfigMap's kfdq.toml: kfdqd --check"
conf=$(mktemp /tmp/kfdq-configmap.XXXXXX.toml)
configmap_key kfdq.toml "$conf"
"$kfdqd" --check --config "$conf" || die "kfdqd refused the ConfigMap's kfdq.toml (above)"
rm -f "$conf"

plugin=$(target_dir)/debug/kfdq-device-plugin
[[ -x $plugin ]] || die "$plugin is not built" "scripts/test.sh builds the workspace first; or run 'cargo build --workspace'"
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
