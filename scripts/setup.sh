#!/usr/bin/env bash
# Installs the system packages specdec needs (Debian). Idempotent: does nothing
# when everything is already installed.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config git
  ninja-build ccache                 # the build (scripts/build.sh) and its compiler cache
  libtorch-dev                       # LibTorch 1.13 (CPU)
  libopenblas0-openmp                # fast BLAS for libtorch (netlib is ~5x slower)
  libdnnl-dev                        # oneDNN sgemm for 2-8 row verification GEMMs
  libyaml-cpp-dev libboost-program-options-dev
  libboost-dev                       # Boost.Math distributions (harness stats, tests)
  libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev
  libpcre2-dev                       # Unicode-aware regex for BPE pre-tokenisation
  python3-matplotlib python3-numpy python3-yaml python3-pip  # plots; fetch script
  python3-jsonschema                 # the structured-output validity test (a real JSON Schema validator)
  python3-dev pybind11-dev python3-pytest  # the Python package (import specdec) and its tests
  clang libclang-rt-14-dev           # libFuzzer targets
  chromium                           # headless browser test of the trace page (specdec trace)
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all system packages present"
  exit 0
fi

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done"
