# sanitizer_common.sh: sourced by tools/sanitize.sh (the CPU tests) and tools/sanitize_gpu.sh (the
# GPU tests), so that both configure their folders and run their programs alike.

# sanitizer_fresh_dir DIR WHO: a build folder configured from another checkout (or left without
# build.ninja) cannot be reused (as in tools/setup.sh): it is removed, and WHO says so.
sanitizer_fresh_dir() {
  [ -f "$1/CMakeCache.txt" ] || return 0
  local home
  home=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$1/CMakeCache.txt")
  if [ "$home" != "$PWD" ] || [ ! -f "$1/build.ninja" ]; then
    echo "$2: $1 was configured for $home; configuring it afresh"
    rm -rf "$1"
  fi
}

# sanitizer_cmake_launcher: ccache for both compilers where it is installed (array SANITIZER_LAUNCHER).
sanitizer_cmake_launcher() {
  SANITIZER_LAUNCHER=()
  if command -v ccache >/dev/null; then
    SANITIZER_LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  fi
}

# sanitizer_export LEAKS (1 or 0): the runtime options. Every report aborts its process: in a test
# program it ends the run; in a child (a `stepgraph` run, a forked bad-input case) it kills the
# child with SIGABRT, which those tests reject (they require a normal exit). LEAKS: LeakSanitizer at
# exit. protect_shadow_gap=0: the CUDA driver maps memory at fixed addresses inside ASan's shadow
# gap, so on a machine with a GPU the first CUDA call fails without it; it hides no report.
sanitizer_export() {
  export ASAN_OPTIONS="abort_on_error=1:detect_leaks=$1:protect_shadow_gap=0:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:abort_on_error=1"
}
