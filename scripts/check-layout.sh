#!/usr/bin/env bash
# Layout gate (docs/design.md is the code map): fails when a source folder (a directory under
# src/ or daemon/ holding a tracked or new file) is not named in docs/design.md as `src/...`
# in backticks, or when docs/design.md names such a folder that does not exist. Run by
# scripts/check-style.sh (ctest `style`). Changes nothing.
# usage: scripts/check-layout.sh        (exit 0 clean, 1 findings, 2 not a git checkout)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DESIGN="docs/design.md"

cd "${ROOT}"
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "check-layout: ${ROOT} is not a git checkout: the tracked files are unknown" >&2
  exit 2
fi

# Every folder that holds a file (tracked, or new and not ignored) and still exists.
mapfile -t actual < <(git ls-files --cached --others --exclude-standard -- src daemon |
  while IFS= read -r f; do
    if [ -e "${f}" ]; then dirname "${f}"; fi
  done | sort -u)
# Every folder the code map names: a backticked src/... or daemon path without a file name.
# shellcheck disable=SC2016  # the backticks are the pattern, not a command substitution
mapfile -t named < <(grep -o '`\(src\|daemon\)[A-Za-z0-9_/-]*`' "${DESIGN}" | tr -d '`' |
  sed 's:/*$::' | sort -u)

declare -A is_named=()
for d in "${named[@]}"; do is_named["${d}"]=1; done

failed=0
for d in "${actual[@]}"; do
  if [ -z "${is_named[${d}]:-}" ]; then
    echo "check-layout: ${d}/ holds code but ${DESIGN} does not name it: add it to the code map" >&2
    failed=1
  fi
done
for d in "${named[@]}"; do
  if [ ! -d "${d}" ]; then
    echo "check-layout: ${DESIGN} names ${d}/, which does not exist: fix the code map" >&2
    failed=1
  fi
done
if [ "${failed}" -eq 0 ]; then
  echo "check-layout: ${#actual[@]} source folders, each named in ${DESIGN}"
fi
exit "${failed}"
