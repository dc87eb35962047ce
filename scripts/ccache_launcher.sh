#!/usr/bin/env bash
# The C++ compiler launcher of scripts/build.sh and scripts/cuda_torch_build.sh: ccache, with
# paths taken relative to the checkout, so that a clone at another path hits the same cache.
#
# Depend mode (CCACHE_DEPEND): on a miss ccache takes the list of headers from the dependency
# file that the compiler writes anyway (-MD, from CMake) instead of running the preprocessor
# first and hashing its output. With the torch headers that took ~1.2 s a file before the compile
# began, and it made an empty cache slower than no cache; with depend mode and the digests below
# it is not (docs/ci.md, "fifth sitting"). Hits are as before, at any path. The key is the
# headers' bytes rather than the preprocessor's output, so a header edited only in a comment is
# a miss here.
#
# Precompiled headers: ccache hashes a .gch (GCC) or .pch (clang) into the key of every file that
# uses it, and those are big (GCC's with torch: 270-360 MB, ~0.36 s to hash, each time). clang's
# also holds absolute paths: clang (the ASan build) writes the path of CMake's cmake_pch.hxx into
# the .pch, so a clone at another path made other bytes, and ccache missed in every file that used
# it. A .pch restored from another path's cache entry would not do either: clang refuses it once
# that path is gone ("could not find file ... referenced by AST file"). So the header is built
# where it is used, and beside it (GCC's as well as clang's) this launcher writes <pch>.sum: a
# digest of the compile command and of the header as preprocessed (-E -dD: with its macro
# definitions and line numbers), both with the checkout's path replaced by '@'. ccache hashes
# that file instead of the header (pch_external_checksum): small, the same for every clone, and
# new whenever the header's text, flags or compiler change (the compiler is in every key).
#
# Headers changed during a compile: ccache hashes the headers a compile read after it ends (depend
# mode), so a header edited mid-build (a merge, a checkout) would file an object made from its
# old text under its new one, and every later build, in any clone, would get that stale object
# (seen once: objects with two layouts of one struct, and a crash). ccache refuses to store a
# result when a header is newer than the compile's start, so the sloppiness here keeps that check
# (no include_file_mtime / include_file_ctime).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros}
export CCACHE_PCH_EXTSUM=true CCACHE_DEPEND=${CCACHE_DEPEND:-true}

header=0 out=
for ((i = 1; i <= $#; i++)); do
  case ${!i} in
    -emit-pch) header=1 ;;  # clang's .pch
    -o) j=$((i + 1)); out=${!j} ;;
  esac
done
case $out in *.gch) header=1 ;; esac  # GCC's
[ "$header" = 1 ] && [ -n "$out" ] || exec ccache "$@"

rm -f "$out.sum"
ccache "$@" || exit
# The same command, preprocessing only: without -o, -c, the dependency file and clang's -emit-pch.
cpp=() skip=0 prev=
for a in "$@"; do
  if [ "$skip" -gt 0 ]; then skip=$((skip - 1)); prev=$a; continue; fi
  case $a in
    -o|-MT|-MF|-MQ) skip=1 ;;
    -c|-MD|-MMD) ;;
    -emit-pch) [ "$prev" = -Xclang ] && unset 'cpp[${#cpp[@]}-1]' ;;
    *) cpp+=("$a") ;;
  esac
  prev=$a
done
esc=$(printf '%s' "$root" | sed 's/[][\.*^$|]/\\&/g')
{ printf '%s\n' "$@" | sed "s|$esc|@|g"
  "${cpp[@]}" -E -dD -o - | sed "s|$esc|@|g"
} | sha256sum > "$out.sum.tmp" && mv "$out.sum.tmp" "$out.sum" || rm -f "$out.sum.tmp"
