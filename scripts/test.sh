#!/usr/bin/env bash
# The one test command (CI runs exactly this): installs the pinned CUDA tools (ptxas, NVRTC)
# under .tools/, points kir at them, and runs every test of the workspace in release mode (so
# interpreter tests at real sizes are fast). No test skips for lack of a tool.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
start=$SECONDS

./scripts/install-tools.sh
# shellcheck source=/dev/null
source .tools/env.sh
echo "test.sh: tools ready after $((SECONDS - start))s (KIR_PTXAS=$KIR_PTXAS, KIR_NVRTC=$KIR_NVRTC)"

# The tensor-map rules of the Python launchers (scripts/kir_launch.py; standard library only).
python3 scripts/kir_launch.py --selftest

# Snapshots are never written by this command: a changed output fails (docs/testing.md).
export INSTA_UPDATE=no
# The on-disk cache (docs/cache.md) is off for every kirc the tests start, so the user's cache
# is never read or written; the cache's own tests give each test a directory of its own.
export KIR_CACHE_DIR=off
t=$SECONDS
cargo test --workspace --release
echo "test.sh: cargo test --workspace --release took $((SECONDS - t))s"
echo "test.sh: all tests passed in $((SECONDS - start))s"
