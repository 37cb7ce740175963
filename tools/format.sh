#!/usr/bin/env bash
# format.sh: clang-format (Debian's package; the style is .clang-format) over every C++ and CUDA
# source the repository tracks. `tools/format.sh` rewrites the files; `tools/format.sh --check`
# changes nothing and fails, naming the files, when any would change (CI runs this).
set -euo pipefail
cd "$(dirname "$0")/.."
cf=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$cf" ]; then  # Debian's package, installed only when missing (as root, or sudo)
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "format: clang-format not found; run as root or install it" >&2; exit 2; }
    SUDO="sudo"
  fi
  echo "format: installing clang-format"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq clang-format >/dev/null
  cf=$(command -v clang-format-14 || command -v clang-format)
fi
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
if [ "${1:-}" = "--check" ]; then
  bad=()
  for f in "${files[@]}"; do
    "$cf" --style=file --dry-run --Werror "$f" > /dev/null 2>&1 || bad+=("$f")
  done
  if [ ${#bad[@]} -gt 0 ]; then
    printf 'format: %s needs clang-format\n' "${bad[@]}"
    echo "format: ${#bad[@]} of ${#files[@]} files differ from .clang-format ($("$cf" --version | head -1)); run tools/format.sh"
    exit 1
  fi
  echo "format: ${#files[@]} files follow .clang-format ($("$cf" --version | head -1))"
else
  "$cf" --style=file -i "${files[@]}"
  echo "format: ${#files[@]} files formatted"
fi
