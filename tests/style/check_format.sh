#!/usr/bin/env bash
# check_format: every C and C++ source of the project is as clang-format
# (Google style, 100 columns: .clang-format) writes it. Run by CTest (test
# `style.format`); lists the files that differ and exits 1. To fix them:
#
#   bash tests/style/check_format.sh --fix
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
clang_format=${CLANG_FORMAT:-clang-format}
if ! command -v "$clang_format" >/dev/null; then
  echo "check_format: $clang_format is not installed (scripts/install-deps.sh installs it)" >&2
  exit 1
fi

mapfile -t files < <(find shim tools tests examples bench \
  \( -name build -o -name 'corpus-*' \) -prune -o \
  -type f \( -name '*.h' -o -name '*.c' -o -name '*.cc' -o -name '*.mm' \) -print | sort)

if [[ "${1:-}" == "--fix" ]]; then
  "$clang_format" -i "${files[@]}"
  exit 0
fi

# One clang-format process for every file (one per file took a minute);
# only when it finds something are the files named one by one.
status=0
if ! "$clang_format" --dry-run --Werror "${files[@]}" >/dev/null 2>&1; then
  for file in "${files[@]}"; do
    if ! "$clang_format" --dry-run --Werror "$file" >/dev/null 2>&1; then
      echo "not formatted: $file"
      status=1
    fi
  done
fi
if [[ $status -ne 0 ]]; then
  echo "check_format: run 'bash tests/style/check_format.sh --fix'" >&2
fi
exit $status
