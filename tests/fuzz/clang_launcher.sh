#!/bin/sh
# Compiler/linker launcher of the fuzz targets (tests/fuzz/CMakeLists.txt): CMake hands us the
# g++ command line of an ordinary target; we run it with clang++ instead, plus libFuzzer and
# the sanitizers. So a fuzzer is a normal CMake target that links the project's (g++-built)
# libraries with all their dependencies, while the sources it fuzzes are compiled instrumented.
#   clang_launcher.sh CLANGXX compile|link WRAPPER <original compiler> <args...>
# WRAPPER runs the compile (ccache, when the build uses it: scripts/build.sh) or is '-' (none).
clang=$1 mode=$2 wrapper=$3
shift 4
[ "$wrapper" = - ] && wrapper=
# -fopenmp: clang would want its own libomp (the link line names GCC's libgomp already).
# -O3: libFuzzer's usual -O1 keeps the sanitizer reports readable and the build quick.
for arg do
  shift
  case $arg in
    -fopenmp|-O2|-O3) ;;
    *) set -- "$@" "$arg" ;;
  esac
done
if [ "$mode" = compile ]; then
  exec $wrapper "$clang" "$@" -O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
fi
exec "$clang" "$@" -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
