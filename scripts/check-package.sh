#!/usr/bin/env bash
# Checks the Debian package scripts/package.sh built: its metadata and file list, then unpacks
# it into a scratch root (dpkg -x) and runs what it installed from there: kfdq --version,
# kfdqd --version and --check on the shipped configuration, kfdq doctor finding the shipped
# shim, man -l on the shipped pages, and the shipped bash completion. Run by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

deb=$(ls -t "$(target_dir)"/debian/kfdq_*.deb 2>/dev/null | head -n 1 || true)
[[ -n $deb ]] || die "no package under $(target_dir)/debian" "build it with scripts/package.sh"
version=$(dpkg-deb --field "$deb" Version)

step "dpkg-deb --info / --contents $deb"
for field in Package Version Architecture Depends Description; do
    [[ -n $(dpkg-deb --field "$deb" "$field") ]] || die "the package has no $field field"
done
contents=$(dpkg-deb --contents "$deb")
for f in ./usr/bin/kfdq ./usr/bin/kfdqd ./usr/bin/kfdq-bench-hip ./usr/bin/kfdq-hipwork ./usr/bin/kfdq-device-plugin ./etc/kfdq/device-plugin.toml ./usr/lib/kfdq/libkfdq_shim.so ./lib/systemd/system/kfdqd.service \
    ./etc/kfdq/kfdq.toml ./usr/share/man/man1/kfdq.1.gz ./usr/share/man/man1/kfdq-suspend.1.gz \
    ./usr/share/man/man8/kfdqd.8.gz ./usr/share/bash-completion/completions/kfdq \
    ./usr/share/zsh/vendor-completions/_kfdq ./usr/share/fish/vendor_completions.d/kfdq.fish \
    ./usr/share/doc/kfdq/copyright ./usr/share/doc/kfdq/agent.md; do
    grep -qF " $f" <<<"$contents" || die "the package lacks $f"
done
root_owned=$(awk '{print $2}' <<<"$contents" | sort -u)
[[ $root_owned == root/root ]] || die "package files are not all owned by root/root: $root_owned"
[[ $(dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles) == $'/etc/kfdq/kfdq.toml\n/etc/kfdq/device-plugin.toml' ]] ||
    die "/etc/kfdq/kfdq.toml and /etc/kfdq/device-plugin.toml are not both conffiles (an upgrade would overwrite the operator's edits)"

scratch=$(mktemp -d /tmp/kfdq-package.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
step "dpkg -x into $scratch"
dpkg -x "$deb" "$scratch"

step "running the unpacked binaries"
out=$("$scratch/usr/bin/kfdq" --version)
[[ $out == "kfdq ${version%-*}" ]] || die "kfdq --version printed '$out', expected 'kfdq ${version%-*}'"
out=$("$scratch/usr/bin/kfdqd" --version)
[[ $out == "kfdqd ${version%-*}" ]] || die "kfdqd --version printed '$out'"
"$scratch/usr/bin/kfdqd" --check --config "$scratch/etc/kfdq/kfdq.toml" >/dev/null ||
    die "the packaged kfdqd refused the packaged /etc/kfdq/kfdq.toml"
"$scratch/usr/bin/kfdq-device-plugin" --check --file-only --agent-config "$scratch/etc/kfdq/kfdq.toml" \
    --config "$scratch/etc/kfdq/device-plugin.toml" >/dev/null ||
    die "the packaged kfdq-device-plugin refused the packaged /etc/kfdq/device-plugin.toml"
# doctor finds the shim the package installed (../lib/kfdq from the binary) and checks it.
doctor=$("$scratch/usr/bin/kfdq" --json --root "$scratch" doctor 2>/dev/null || true)
grep -qF "$scratch/usr/lib/kfdq/libkfdq_shim.so" <<<"$doctor" ||
    die "kfdq doctor from the package did not find the packaged shim" "$doctor"

step "man -l on the packaged pages; the packaged bash completion"
for page in kfdq.1 kfdq-suspend.1; do
    MANPAGER=cat man -l "$scratch/usr/share/man/man1/$page.gz" | grep -q "kfdq" ||
        die "man -l could not render $page from the package"
done
MANPAGER=cat man -l "$scratch/usr/share/man/man8/kfdqd.8.gz" | grep -q "SIGHUP" ||
    die "man -l could not render kfdqd.8 from the package"
got=$(bash --norc --noprofile -c "source '$scratch/usr/share/bash-completion/completions/kfdq'
COMP_WORDS=(kfdq su); COMP_CWORD=1; COMP_LINE='kfdq su'; COMP_POINT=7
_kfdq kfdq su kfdq; echo \"\${COMPREPLY[*]}\"")
[[ $got == suspend ]] || die "the packaged bash completion completes 'kfdq su' to '$got', not 'suspend'"
echo "package: ok ($deb)"
