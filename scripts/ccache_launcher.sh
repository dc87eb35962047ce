#!/usr/bin/env bash
# The C++ compiler launcher of scripts/build.sh and scripts/cuda_torch_build.sh: ccache, with
# paths taken relative to the checkout, so that a clone at another path hits the same cache.
#
# A precompiled header is the one input that still depended on the path: clang (the ASan build)
# writes the absolute path of CMake's cmake_pch.hxx into the .pch, so a clone at another path
# made other bytes, and ccache, which hashes those bytes into every file that uses the header,
# missed in all of them. A .pch restored from another path's cache entry would not do either:
# clang refuses it once that path is gone ("could not find file ... referenced by AST file").
# So the header is built where it is used, and beside it this launcher writes <pch>.sum: a digest
# of the compile command and of the header as preprocessed (-E -dD: with its macro definitions
# and line numbers), both with the checkout's path replaced by '@'. ccache hashes that file
# instead of the .pch (pch_external_checksum): the same for every clone, and new whenever the
# header's text or flags change.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
export CCACHE_PCH_EXTSUM=true

header=0 out=
for ((i = 1; i <= $#; i++)); do
  case ${!i} in
    -emit-pch) header=1 ;;  # clang's; GCC's .gch keeps no path that ccache sees
    -o) j=$((i + 1)); out=${!j} ;;
  esac
done
[ "$header" = 1 ] && [ -n "$out" ] || exec ccache "$@"

rm -f "$out.sum"
ccache "$@" || exit
# The same command, preprocessing only: without -o, -c, the dependency file and -emit-pch.
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
