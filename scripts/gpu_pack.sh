#!/usr/bin/env bash
# Prepares .gpu_pack/ (git-ignored), the folder carried to a lent GPU machine next to the working
# tree for scripts/gpu_check.sh. Runs here (Debian bookworm, with network to Debian's mirrors):
#   .gpu_pack/debs/          Debian bookworm .debs of the build dependencies the GPU machine lacks
#                            (yaml-cpp, Boost program_options + the Boost headers specdec includes,
#                            GoogleTest/GMock, Google Benchmark, nlohmann-json, PCRE2, pkgconf);
#                            gpu_check.sh unpacks them with dpkg-deb -x into a private prefix.
#   .gpu_pack/smollm2-135m-instruct.gguf
#                            models/smollm2-135m-instruct.gguf shrunk by scripts/shrink_gguf.py:
#                            all metadata, all 272 tensor names/shapes/types, 30 layer slots, of
#                            which the first 2 real layers (at slots 0 and 10) compute and the others
#                            are exact no-ops sharing data.
#   .gpu_pack/xgrammar/      xgrammar's sdist (~2.7 MB; structured output), which gpu_check.sh
#                            builds there with scripts/fetch_xgrammar.sh (no network needed).
#   .gpu_pack/MANIFEST.txt   what is in it, sizes and sha256s.
# Idempotent: what is there already is kept (FORCE=1 rebuilds everything). Downloads are cached
# in ~/.cache/specdec/gpu_pack. Prints the pack's size at the end, and checks that the tree and
# the pack fit the 64 MiB that travel (the pack is ~40 MB, the tracked tree ~28 MB).
#   bash scripts/gpu_pack.sh            then, on the GPU machine:  bash scripts/gpu_check.sh
# Knobs: FORCE=1, VERIFY=1 (re-run the generate check even if the model is unchanged),
#        ASIDE=1 | restore (section 4: when tree + pack pass the 64 MiB that travel),
#        SLOTS=0,10 (shrink_gguf.py --slots), SPECDEC_BIN (default build/specdec).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PACK=$ROOT/.gpu_pack
CACHE=${GPU_PACK_CACHE:-$HOME/.cache/specdec/gpu_pack}
SRC_MODEL=$ROOT/models/smollm2-135m-instruct.gguf
MODEL=$PACK/smollm2-135m-instruct.gguf
SLOTS=${SLOTS:-0,10}
SPECDEC_BIN=${SPECDEC_BIN:-$ROOT/build/specdec}
T0=$SECONDS
say() { echo "[gpu_pack $((SECONDS - T0))s] $*"; }

if [ "${ASIDE:-0}" = restore ]; then  # put back what ASIDE=1 set aside (section 4)
  [ -d "$ROOT/.gpu_aside" ] || { say "nothing set aside"; exit 0; }
  (cd "$ROOT/.gpu_aside" && find . -type f | while read -r f; do mv "$f" "$ROOT/${f#./}"; say "restored ${f#./}"; done)
  rm -rf "$ROOT/.gpu_aside"
  exit 0
fi

# Debian bookworm packages. libboost1.74-dev (9.5 MB, 162 MB of headers) is replaced in the pack
# by a subset .deb holding only the headers that <boost/program_options.hpp> and
# <boost/math/distributions*.hpp> pull in, plus its CMake configs (~0.7 MB).
DEBS=(libyaml-cpp-dev libyaml-cpp0.7
      libboost-program-options1.74-dev libboost-program-options1.74.0
      libgtest-dev libgmock-dev libbenchmark-dev libbenchmark1debian
      nlohmann-json3-dev libpcre2-8-0
      pkgconf pkgconf-bin libpkgconf3)
BOOST_DEV=libboost1.74-dev
SUBSET_DEB=libboost1.74-dev-specdec-subset_1.74.0_amd64.deb
# libpcre2-dev (0.75 MB: the 16- and 32-bit libraries, static libraries, man pages) likewise: only
# what pkg-config's libpcre2-8 and a link with -lpcre2-8 need.
PCRE_DEV=libpcre2-dev
PCRE_SUBSET_DEB=libpcre2-dev-specdec-subset_10.42_amd64.deb

if [ "${FORCE:-0}" = 1 ]; then rm -rf "$PACK"; fi
mkdir -p "$PACK/debs" "$CACHE/debs"
grep -qxF '/.gpu_pack/' .gitignore 2>/dev/null || say "warning: /.gpu_pack/ is not in .gitignore"

# ---- 1. the .debs -------------------------------------------------------------------------
have_deb() { compgen -G "$1/$2_*.deb" >/dev/null; }
missing=()
for p in "${DEBS[@]}" "$BOOST_DEV" "$PCRE_DEV"; do have_deb "$CACHE/debs" "$p" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  say "apt-get download ${missing[*]}"
  (cd "$CACHE/debs" && apt-get download "${missing[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed')
fi
for p in "${DEBS[@]}"; do
  have_deb "$PACK/debs" "$p" || cp "$CACHE/debs/${p}"_*.deb "$PACK/debs/"
done

if [ ! -f "$PACK/debs/$SUBSET_DEB" ]; then
  say "building $SUBSET_DEB (the Boost headers specdec needs)"
  W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
  dpkg-deb -x "$CACHE/debs/${BOOST_DEV}"_*.deb "$W/full"
  # Every header the project's Boost includes reach, for GCC and Clang, C++17 and C++20 (the
  # configuration headers pick files by compiler and standard library). All distributions are
  # included, not only the three used today, so that a new one needs no new pack.
  {
    echo '#include <boost/program_options.hpp>'
    echo '#include <boost/math/distributions.hpp>'
    for f in "$W"/full/usr/include/boost/math/distributions/*.hpp; do
      echo "#include <boost/math/distributions/$(basename "$f")>"
    done
    echo 'int main() { return 0; }'
  } > "$W/probe.cpp"
  : > "$W/list"
  for cc in "g++ -std=c++17" "g++ -std=c++20 -DNDEBUG -fopenmp" "clang++ -std=c++17" "clang++ -std=c++20 -DNDEBUG"; do
    command -v "${cc%% *}" >/dev/null || continue
    # shellcheck disable=SC2086
    $cc -I "$W/full/usr/include" -M "$W/probe.cpp" | tr ' \\' '\n\n' |
      sed -n "s|^$W/full/\(usr/include/boost/.*\)|\1|p" >> "$W/list"
  done
  sort -u "$W/list" -o "$W/list"
  [ -s "$W/list" ] || { echo "gpu_pack: no compiler could list the Boost headers" >&2; exit 1; }
  mkdir -p "$W/pkg/DEBIAN"
  (cd "$W/full" && xargs cp --parents -a -t "$W/pkg/" usr/lib < "$W/list")   # usr/lib: the CMake configs
  mkdir -p "$W/pkg/usr/share/doc/$BOOST_DEV"
  cp -a "$W/full/usr/share/doc/$BOOST_DEV/copyright" "$W/pkg/usr/share/doc/$BOOST_DEV/" 2>/dev/null || true
  cat > "$W/pkg/DEBIAN/control" <<EOF
Package: libboost1.74-dev-specdec-subset
Version: 1.74.0
Architecture: amd64
Maintainer: specdec <specdec@localhost>
Description: subset of $(basename "$CACHE"/debs/${BOOST_DEV}_*.deb) for specdec's GPU pack
 Only the $(wc -l < "$W/list") headers that boost/program_options.hpp and
 boost/math/distributions*.hpp include, and Boost's CMake configuration files.
EOF
  dpkg-deb --root-owner-group -Zxz --build "$W/pkg" "$PACK/debs/$SUBSET_DEB" >/dev/null
  rm -rf "$W"; trap - EXIT
fi

if [ ! -f "$PACK/debs/$PCRE_SUBSET_DEB" ]; then
  say "building $PCRE_SUBSET_DEB (pcre2.h, libpcre2-8.so, libpcre2-8.pc)"
  W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
  dpkg-deb -x "$CACHE/debs/${PCRE_DEV}"_*.deb "$W/full"
  mkdir -p "$W/pkg/DEBIAN"
  (cd "$W/full" && cp --parents -a usr/include/pcre2.h usr/lib/x86_64-linux-gnu/libpcre2-8.so \
     usr/lib/x86_64-linux-gnu/pkgconfig/libpcre2-8.pc usr/share/doc/$PCRE_DEV/copyright "$W/pkg/")
  cat > "$W/pkg/DEBIAN/control" <<EOF
Package: libpcre2-dev-specdec-subset
Version: 10.42
Architecture: amd64
Maintainer: specdec <specdec@localhost>
Description: subset of $(basename "$CACHE"/debs/${PCRE_DEV}_*.deb) for specdec's GPU pack
 pcre2.h, libpcre2-8.so and libpcre2-8.pc only (with libpcre2-8-0).
EOF
  dpkg-deb --root-owner-group -Zxz --build "$W/pkg" "$PACK/debs/$PCRE_SUBSET_DEB" >/dev/null
  rm -rf "$W"; trap - EXIT
fi

# Check the pack's debs: unpacked alone, they hold every CMake config the build asks for, and the
# Boost headers of every include in src/ tests/ experiments/ bench/ resolve inside the prefix.
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
for d in "$PACK"/debs/*.deb; do dpkg-deb -x "$d" "$W"; done
DL=$W/usr/lib/x86_64-linux-gnu
for f in "$DL"/cmake/yaml-cpp/yaml-cpp-config.cmake "$DL"/cmake/GTest/GTestConfig.cmake \
         "$DL"/cmake/benchmark/benchmarkConfig.cmake "$DL"/cmake/Boost-1.74.0/BoostConfig.cmake \
         "$DL"/cmake/boost_program_options-1.74.0/boost_program_options-config.cmake \
         "$W"/usr/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake "$DL"/pkgconfig/libpcre2-8.pc \
         "$W"/usr/include/pcre2.h "$DL"/libpcre2-8.so "$DL"/libpcre2-8.so.0 "$DL"/libboost_program_options.so "$DL"/libyaml-cpp.so "$DL"/libbenchmark.so \
         "$DL"/libgtest.a "$DL"/libgmock.a "$W"/usr/bin/pkgconf; do
  [ -e "$f" ] || { echo "gpu_pack: missing in the pack's debs: ${f#$W/}" >&2; exit 1; }
done
grep -rhoE '#include <boost/[^>]+>' src tests kernels experiments bench 2>/dev/null | sort -u > "$W/probe.cpp" || true
echo 'int main() { return 0; }' >> "$W/probe.cpp"
if g++ -std=c++17 -I "$W/usr/include" -M "$W/probe.cpp" > "$W/deps.txt" 2> "$W/err.txt"; then
  outside=$(tr ' \\' '\n\n' < "$W/deps.txt" | grep '/boost/' | grep -v "^$W/" || true)
  if [ -n "$outside" ]; then
    echo "gpu_pack: Boost headers not in the subset deb (FORCE=1 to rebuild it):" >&2; echo "$outside" | head >&2; exit 1
  fi
else
  echo "gpu_pack: the Boost includes do not resolve in the pack:" >&2; head "$W/err.txt" >&2; exit 1
fi
# the bundled pkgconf runs and finds libpcre2-8
LD_LIBRARY_PATH=$DL PKG_CONFIG_LIBDIR=$DL/pkgconfig PKG_CONFIG_SYSROOT_DIR=$W \
  "$W/usr/bin/pkgconf" --cflags --libs libpcre2-8 >/dev/null ||
  { echo "gpu_pack: the bundled pkgconf does not find libpcre2-8" >&2; exit 1; }
rm -rf "$W"; trap - EXIT
say "debs: $(ls "$PACK/debs" | wc -l) files, $(du -sh "$PACK/debs" | cut -f1); checked"

# ---- 2. the shrunk model ------------------------------------------------------------------
made=0
if [ ! -s "$MODEL" ] || [ scripts/shrink_gguf.py -nt "$MODEL" ] || [ "$SRC_MODEL" -nt "$MODEL" ] ||
   [ "$(cat "$PACK/.slots" 2>/dev/null)" != "$SLOTS" ]; then
  if [ ! -s "$SRC_MODEL" ]; then
    say "$SRC_MODEL missing: scripts/fetch_models.sh smollm2-135m"
    bash scripts/fetch_models.sh smollm2-135m
  fi
  python3 scripts/shrink_gguf.py "$SRC_MODEL" "$MODEL" --slots "$SLOTS"
  echo "$SLOTS" > "$PACK/.slots"
  made=1
fi
if [ $made = 1 ] || [ "${VERIFY:-0}" = 1 ] || [ ! -f "$PACK/.verified" ]; then
  if [ -x "$SPECDEC_BIN" ]; then
    say "checking: specdec generate with the shrunk model (greedy, and layer_skip speculative = greedy)"
    g1=$("$SPECDEC_BIN" generate --model "$MODEL" --prompt 'def f(x):' --max-new-tokens 16 --json 2>"$CACHE/generate.err" |
         grep -o '"tokens":\[[0-9,]*\]')
    g2=$("$SPECDEC_BIN" generate --model "$MODEL" --prompt 'def f(x):' --max-new-tokens 16 --json \
         --strategy speculative --set temperature=0 --set drafter=layer_skip --set skip_layers=10 2>>"$CACHE/generate.err" |
         grep -o '"tokens":\[[0-9,]*\]')
    echo "  greedy:               $g1"; echo "  layer_skip (T=0):     $g2"
    if [ -z "$g1" ] || [ "$g1" != "$g2" ]; then
      echo "gpu_pack: the shrunk model does not generate consistently; stderr:" >&2; tail -20 "$CACHE/generate.err" >&2; exit 1
    fi
    touch "$PACK/.verified"
  else
    say "warning: $SPECDEC_BIN not built: the shrunk model was not tried (build/ with scripts/build.sh)"
  fi
fi

# ---- 2b. xgrammar's sdist (the GPU machine has no network: gpu_check.sh builds it there) -------
XG_SDIST=$(dirname "$(bash scripts/fetch_xgrammar.sh --print-prefix)")/xgrammar-sdist
[ -n "$(ls "$XG_SDIST"/xgrammar-*.tar.gz 2>/dev/null)" ] || bash scripts/fetch_xgrammar.sh
mkdir -p "$PACK/xgrammar"
cp -u "$XG_SDIST"/xgrammar-*.tar.gz "$PACK/xgrammar/"
say "xgrammar sdist: $(ls "$PACK/xgrammar")"

# ---- 3. manifest and size -----------------------------------------------------------------
{
  echo "specdec GPU pack, made $(date -u +%FT%TZ) from $(git rev-parse --short HEAD 2>/dev/null || echo '?') by scripts/gpu_pack.sh"
  echo "use: carry .gpu_pack, run bash scripts/gpu_check.sh on the GPU machine"
  (cd "$PACK" && find . -type f ! -name MANIFEST.txt ! -name '.*' | sort | while read -r f; do
     printf '%10s  %s  %s\n' "$(stat -c %s "$f")" "$(sha256sum "$f" | cut -c1-16)" "${f#./}"; done)
} > "$PACK/MANIFEST.txt"
bytes=$(du -sb "$PACK" | cut -f1)
say "pack ready: $PACK = $bytes bytes ($(du -sh "$PACK" | cut -f1)): debs $(du -sh "$PACK/debs" | cut -f1), model $(du -sh "$MODEL" | cut -f1)"

# ---- 4. does it travel? --------------------------------------------------------------------
# The device tool copies the tracked and the untracked-not-ignored files, plus what `carry`
# names, 64 MiB in all. When the tree has grown past what is left beside the pack, ASIDE=1 moves
# the largest result files (never read on the GPU machine) to the ignored .gpu_aside/ until it
# fits; ASIDE=restore puts them back. Leave one MiB for what the run writes into the tree.
largest_results() { git ls-files -z results | xargs -0 stat -c '%s %n' | sort -rn; }  # "bytes path" lines
limit=$(((64 - 1) * 1024 * 1024))
tree=$(git ls-files -co --exclude-standard -z | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
say "tree $tree + pack $bytes = $((tree + bytes)) bytes of the $limit that may travel"
if [ $((tree + bytes)) -gt $limit ]; then
  if [ "${ASIDE:-0}" != 1 ]; then
    echo "gpu_pack: the tree and the pack are over 63 MiB together; the largest result files:" >&2
    largest_results | head -8 >&2
    echo "gpu_pack: ASIDE=1 bash scripts/gpu_pack.sh moves enough of them to .gpu_aside/ (ASIDE=restore puts them back)" >&2
    exit 1
  fi
  while read -r size f; do
    [ $((tree + bytes)) -le $limit ] && break
    mkdir -p "$ROOT/.gpu_aside/$(dirname "$f")"
    mv "$f" "$ROOT/.gpu_aside/$f"
    tree=$((tree - size))
    say "set aside: $f ($size bytes)"
  done < <(largest_results)
  say "now tree $tree + pack $bytes; after the GPU run: ASIDE=restore bash scripts/gpu_pack.sh"
fi
