#!/usr/bin/env bash
# Sets up what is missing and runs every test (as root: the emulator mounts FUSE and tests
# ptrace), then format and lint checks.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

step "setup: checking Debian packages, toolchain and FUSE"
scripts/setup.sh --tests

step "the Debian sid root with the real ROCm 6.4 user space (built once, cached: scripts/sid-root.sh)"
scripts/sid-root.sh >/dev/null
scripts/sid-root.sh --versions
step "the second sid root with rocBLAS, hipBLAS, hipBLASLt and MIOpen (built once, cached: scripts/sid-root.sh --libs)"
scripts/sid-root.sh --libs >/dev/null
scripts/sid-root.sh --libs --versions
step "the ROCm 7.2 root with Debian experimental's ROCm 7.2.4 (built once, cached: scripts/sid-root.sh --rocm72)"
scripts/sid-root.sh --rocm72 >/dev/null
scripts/sid-root.sh --rocm72 --versions
step "the ROCm 7.2 libraries' root: rocBLAS, hipBLAS, hipBLASLt, MIOpen 7.2.4 and amd-smi (built once, cached: scripts/sid-root.sh --rocm72 --libs)"
scripts/sid-root.sh --rocm72 --libs >/dev/null
scripts/sid-root.sh --rocm72 --libs --versions
step "kfdq bench's spin code objects match kernels/spin.hip (built by the sid root's hipcc)"
scripts/kernels.sh --check

step "building every package and test target"
cargo build --quiet --workspace --all-targets ||
    die "cargo build --workspace --all-targets failed (errors above)" \
        "a missing Debian package shows up as a bindgen/libclang or cc error: run scripts/setup.sh as root"

step "cargo test --workspace (privileged tests need root; KFDQ_SKIP_PRIVILEGED=1 skips them)"
# The real-ROCm tests (named sid_*) run next, on their own: each runs the real runtime, the shim
# and the agent, and their load would disturb the timing of the emulator tests beside them.
# --no-fail-fast: every test binary runs, so one run names every failure (the step still fails).
cargo test --workspace --no-fail-fast -- --test-threads="${KFDQ_TEST_THREADS:-4}" --skip sid_ --skip sid7_

step "the real ROCm 6.4 user space on the emulator (tests named sid_*, docs/real-rocm.md)"
cargo test --workspace --no-fail-fast -- --test-threads=2 sid_

step "ROCm 7.2 on the emulator and HIP 7.2's launch paths under the shim (tests named sid7_*, docs/real-rocm.md)"
cargo test --workspace --no-fail-fast -- --test-threads=2 sid7_

step "the Python package (python/): pip install ./python into a fresh venv, then its own tests"
# A fresh venv each run (python3-venv, scripts/setup.sh); the package's build backend is in the
# tree, so the install downloads nothing. The tests run from outside the tree: they import the
# installed package, and the shim's cases preload this build's libkfdq_shim.so.
pyvenv=$(mktemp -d)
trap 'rm -rf "$pyvenv"' EXIT
python3 -m venv "$pyvenv" || die "python3 -m venv failed" "install python3-venv (scripts/setup.sh does)"
"$pyvenv/bin/pip" install --quiet --disable-pip-version-check --no-index ./python ||
    die "pip install ./python failed (errors above)" "python/pyproject.toml and python/_build/ build the package"
(cd "$pyvenv" && bin/python -c "import kfdq") || die "import kfdq failed after pip install ./python"
(cd "$pyvenv" && KFDQ_SHIM="$OLDPWD/target/debug/libkfdq_shim.so" bin/python -m unittest discover -s "$OLDPWD/python/tests" -v) ||
    die "the Python package's tests failed (above)" "run them: python3 -m unittest discover -s python/tests"

step "kfd-sys against Debian's real KFD headers (bookworm-backports 1.17, sid)"
scripts/check-kfd-headers.sh

step "deployment files: Kubernetes manifests and the systemd unit"
scripts/check-deploy.sh

step "the Debian package: build it, then check it unpacked in a scratch root"
scripts/package.sh >/dev/null
scripts/check-package.sh
step "the container image: built from the package (cached base), its layout checked, its entry points run chrooted"
scripts/check-image.sh

step "cargo fmt --check"
cargo fmt --all -- --check || die "code is not formatted" "run 'cargo fmt --all' and commit the result"

step "cargo clippy -D warnings"
cargo clippy --quiet --workspace --all-targets -- -D warnings ||
    die "clippy found warnings (above)" "fix them; the project builds with -D warnings"
echo "test: ok"
