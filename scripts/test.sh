#!/usr/bin/env bash
# The one test command (CI runs exactly this): installs the pinned CUDA tools (ptxas, NVRTC)
# under .tools/, points kir at them, and runs every test of the workspace in release mode (so
# interpreter tests at real sizes are fast), with the `kirc` of the CLI tests built with the
# CUDA runtime (`--features kirc/cuda`; no CUDA installation needed). No test skips for lack of
# a tool. Then it builds the Python package in a fresh venv and runs its tests (python/tests/).
# Then it checks that the crates can be published: `cargo package` of every published
# crate, and that the workspace builds with the oldest Rust that Cargo.toml's `rust-version`
# promises (installed with rustup, minimal profile, when absent).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
start=$SECONDS

./scripts/install-tools.sh
# shellcheck source=/dev/null
source .tools/env.sh
echo "test.sh: tools ready after $((SECONDS - start))s (KIR_PTXAS=$KIR_PTXAS, KIR_NVRTC=$KIR_NVRTC)"

# Snapshots are never written by this command: a changed output fails (docs/testing.md).
export INSTA_UPDATE=no
# The on-disk cache (docs/cache.md) is off for every kirc the tests start, so the user's cache
# is never read or written; the cache's own tests give each test a directory of its own.
export KIR_CACHE_DIR=off
t=$SECONDS
cargo test --workspace --release --locked --features kirc/cuda
echo "test.sh: cargo test --workspace --release --locked --features kirc/cuda took $((SECONDS - t))s"

# The Python package (python/, docs/python.md), as a user installs it: a fresh venv, the pinned
# maturin and NumPy, `pip install ./python` (one abi3 wheel built by maturin; its own workspace,
# built in the workspace's target/, which reuses the third-party crates compiled above whose
# features agree but not the kir crates: docs/python.md, "Tests"), then its tests: NumPy
# oracles, and the kirc built above for the comparisons.
t=$SECONDS
venv="$root/.venv-test"
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check maturin==1.16.0 numpy==2.4.6
echo "test.sh: the venv with maturin and NumPy took $((SECONDS - t))s"
t=$SECONDS
PATH="$venv/bin:$PATH" CARGO_TARGET_DIR="$root/target" \
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-build-isolation ./python
echo "test.sh: pip install ./python (the wheel) took $((SECONDS - t))s"
t=$SECONDS
(cd python/tests && KIRC="$root/target/release/kirc" "$venv/bin/python" -m unittest discover -v)
echo "test.sh: the Python tests took $((SECONDS - t))s"

# Every crate but kir-tests (publish = false) packages: versions on its path dependencies, its
# files and the license files inside it. (Without verification: building each package again
# would take minutes; the workspace build above compiles the same sources.)
t=$SECONDS
cargo package --workspace --exclude kir-tests --no-verify --allow-dirty --locked
echo "test.sh: cargo package took $((SECONDS - t))s"

# The minimum supported Rust version: `rust-version` of [workspace.package], which every crate
# inherits, must build the whole workspace (every target) with the locked dependencies. Its own
# target directory, so the release build above is left alone.
msrv=$(sed -n 's/^rust-version = "\([0-9.]*\)"$/\1/p' Cargo.toml)
[ -n "$msrv" ] || { echo "test.sh: no rust-version in Cargo.toml" >&2; exit 1; }
case "$msrv" in *.*.*) toolchain=$msrv ;; *) toolchain=$msrv.0 ;; esac
t=$SECONDS
if [ "$(rustc --version | awk '{print $2}')" = "$toolchain" ]; then
  # The build above ran on exactly that toolchain with the locked dependencies: it is the check.
  echo "test.sh: Rust $toolchain (rust-version $msrv) is the toolchain that built and tested the workspace above"
else
  if ! rustup toolchain list | grep -q "^$toolchain-"; then
    rustup toolchain install "$toolchain" --profile minimal --no-self-update
  fi
  cargo "+$toolchain" check --workspace --all-targets --locked --target-dir target/msrv
  echo "test.sh: Rust $toolchain (rust-version $msrv) builds the workspace: checked in $((SECONDS - t))s"
fi
echo "test.sh: all tests passed in $((SECONDS - start))s"
