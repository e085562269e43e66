#!/usr/bin/env bash
# Installs the CUDA tools kir checks its output with, without a GPU and without root:
# ptxas (from the PyPI wheel nvidia-cuda-nvcc) and NVRTC (nvidia-cuda-nvrtc), pinned to the
# toolkit of the H200 machine (CUDA 13.0.88), under the ignored folder .tools/cuda.
# The two wheels are installed with --no-deps: ptxas and libnvrtc are self-contained, and the
# unpinned dependencies nvidia-cuda-nvcc declares (nvvm, crt, runtime) would float to newer releases.
# Idempotent: a stamp file records what is installed. Writes .tools/env.sh exporting
# KIR_PTXAS and KIR_NVRTC. Fails loudly when anything is missing.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tools="$root/.tools"
dest="$tools/cuda"
version=13.0.88
pkgs=("nvidia-cuda-nvcc==$version" "nvidia-cuda-nvrtc==$version")
stamp="$dest/.kir-installed"
want="${pkgs[*]}"

die() { echo "install-tools.sh: error: $*" >&2; exit 1; }

mkdir -p "$tools"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "install-tools.sh: $want already installed in $dest"
else
  command -v python3 >/dev/null || die "python3 is not installed"
  python3 -m pip --version >/dev/null 2>&1 || die "python3 has no pip (install python3-pip)"
  echo "install-tools.sh: installing $want into $dest"
  rm -rf "$dest"
  python3 -m pip install --disable-pip-version-check --no-input --only-binary=:all: --no-deps \
    --target "$dest" "${pkgs[@]}" || die "pip install of $want failed"
  printf '%s' "$want" > "$stamp"
fi

# Locate the tools (the wheel layout differs between CUDA releases, so search for them).
ptxas=$(find "$dest" -type f -name ptxas -path '*/bin/*' | sort | head -n 1)
[ -n "$ptxas" ] || die "no ptxas under $dest (the nvidia-cuda-nvcc wheel layout changed?)"
[ -x "$ptxas" ] || chmod +x "$ptxas"
nvrtc=$(find "$dest" \( -type f -o -type l \) -name 'libnvrtc.so*' | sort | head -n 1)
[ -n "$nvrtc" ] || die "no libnvrtc.so* under $dest (the nvidia-cuda-nvrtc wheel layout changed?)"

ptxas_version=$("$ptxas" --version 2>&1) || die "'$ptxas --version' failed: $ptxas_version"
echo "$ptxas_version" | grep -q "V$version" \
  || die "ptxas reports an unexpected version (want $version):
$ptxas_version"

cat > "$tools/env.sh" <<ENV
# Written by scripts/install-tools.sh; source it to point kir at the pinned CUDA tools.
export KIR_PTXAS='$ptxas'
export KIR_NVRTC='$nvrtc'
ENV

echo "install-tools.sh: ptxas: $ptxas"
echo "install-tools.sh: $(echo "$ptxas_version" | grep -m1 release)"
echo "install-tools.sh: nvrtc: $nvrtc"
echo "install-tools.sh: wrote $tools/env.sh"
