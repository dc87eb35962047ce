#!/usr/bin/env bash
# Fetches xgrammar's source distribution from PyPI and builds its C++ core as a static library
# (the grammar engine of structured output, issue 57), cached under ~/.cache/specdec:
#   ~/.cache/specdec/xgrammar-sdist/xgrammar-VER.tar.gz        the sdist (pip download)
#   ~/.cache/specdec/xgrammar-VER-HASH/{include,lib}            headers + libxgrammar.a
# HASH is a short hash of the version and the build flags below, so that a change of flags
# builds afresh beside the old copy. A no-op (one line) when that folder is complete.
#   bash scripts/fetch_xgrammar.sh               # fetch + build (called by scripts/build.sh)
#   bash scripts/fetch_xgrammar.sh --print-prefix   # only print the install folder (CMake asks)
# The build uses xgrammar's own CMake: Python bindings off (a config.cmake in the build folder,
# which xgrammar reads before the sdist's own), C++ tests off, Release with -O2,
# and, appended after xgrammar's own flags so that they win, -fno-lto (its -flto=auto doubles
# the cold build on 2 cores and would need LTO-aware archiving) and -Wno-error (its -Werror
# breaks on warnings of newer compilers). Nothing in the unpacked sdist is edited.
# Knobs (environment): XGRAMMAR_VERSION (0.2.8), SPECDEC_CACHE (~/.cache/specdec),
# SPECDEC_JOBS (nproc).
set -euo pipefail

VER=${XGRAMMAR_VERSION:-0.2.8}
CACHE=${SPECDEC_CACHE:-$HOME/.cache/specdec}
FLAGS="-O2 -DNDEBUG -fno-lto -Wno-error"
HASH=$(printf '%s|%s|release-static-nopython' "$VER" "$FLAGS" | sha256sum | cut -c1-10)
PREFIX=$CACHE/xgrammar-$VER-$HASH

if [ "${1:-}" = "--print-prefix" ]; then echo "$PREFIX"; exit 0; fi

if [ -f "$PREFIX/lib/libxgrammar.a" ] && [ -f "$PREFIX/include/xgrammar/xgrammar.h" ] &&
   [ -f "$PREFIX/.complete" ]; then
  echo "fetch_xgrammar: xgrammar $VER already built in $PREFIX"
  exit 0
fi

T0=$SECONDS
SDIST_DIR=$CACHE/xgrammar-sdist
TARBALL=$SDIST_DIR/xgrammar-$VER.tar.gz
mkdir -p "$SDIST_DIR"
if [ ! -s "$TARBALL" ]; then
  echo "fetch_xgrammar: pip download --no-binary xgrammar --no-deps xgrammar==$VER"
  python3 -m pip download --no-binary xgrammar --no-deps -q -d "$SDIST_DIR" "xgrammar==$VER"
fi
[ -s "$TARBALL" ] || { echo "fetch_xgrammar: no $TARBALL after pip download" >&2; exit 1; }

WORK=$CACHE/xgrammar-$VER-$HASH.build
rm -rf "$WORK"; mkdir -p "$WORK"
tar -xzf "$TARBALL" -C "$WORK"
SRC=$WORK/xgrammar-$VER
JOBS=${SPECDEC_JOBS:-$(nproc)}
GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
# Through ccache when present (a rebuild after the prefix was removed then costs seconds).
command -v ccache >/dev/null && [ "${SPECDEC_CCACHE:-1}" = 1 ] && GEN+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
echo "fetch_xgrammar: building xgrammar $VER (static, $FLAGS) with $JOBS jobs"
# The sdist's cmake/config.cmake turns the Python bindings on (they would need tvm_ffi); a
# config.cmake in the build folder is read instead of it.
mkdir -p "$WORK/build"
cat > "$WORK/build/config.cmake" <<'CFG'
set(XGRAMMAR_BUILD_PYTHON_BINDINGS OFF)
set(XGRAMMAR_BUILD_CXX_TESTS OFF)
set(XGRAMMAR_ENABLE_CPPTRACE OFF)
set(XGRAMMAR_ENABLE_COVERAGE OFF)
set(XGRAMMAR_ENABLE_INTERNAL_CHECK OFF)
CFG
cmake -S "$SRC" -B "$WORK/build" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS="-fno-lto -Wno-error" -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" \
  -DXGRAMMAR_BUILD_PYTHON_BINDINGS=OFF -DXGRAMMAR_BUILD_CXX_TESTS=OFF \
  -DXGRAMMAR_ENABLE_CPPTRACE=OFF -DCMAKE_INSTALL_PREFIX="$PREFIX" -DCMAKE_INSTALL_LIBDIR=lib \
  -DCMAKE_POSITION_INDEPENDENT_CODE=ON >"$WORK/configure.log" ||
  { cat "$WORK/configure.log" >&2; exit 1; }
cmake --build "$WORK/build" -j "$JOBS" --target xgrammar
rm -rf "$PREFIX"
cmake --install "$WORK/build" >/dev/null
# picojson (header only) is included by no installed header; the 3rdparty licences go along.
cp "$SRC/LICENSE" "$SRC/NOTICE" "$PREFIX/" 2>/dev/null || true
touch "$PREFIX/.complete"
rm -rf "$WORK"
echo "fetch_xgrammar: xgrammar $VER built and installed in $PREFIX in $(( SECONDS - T0 )) s"
