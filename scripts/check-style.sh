#!/usr/bin/env bash
# Style gate (STYLE.md 4 and 10): fails when a tracked C++ file differs from what clang-format
# makes of it (.clang-format: Google style, 100 columns) or when ShellCheck has a finding in a
# tracked shell script, or when docs/design.md's code map and the source folders disagree
# (scripts/check-layout.sh). Registered as the ctest test `style`, so scripts/test.sh and CI
# fail on any of them. Fix formatting with: clang-format -i FILE. Changes nothing itself.
# usage: scripts/check-style.sh        (exit 0 clean, 1 findings, 2 a tool is missing)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CLANG_FORMAT="${CLANG_FORMAT:-clang-format}"
SHELLCHECK="${SHELLCHECK:-shellcheck}"

cd "${ROOT}"
for tool in "${CLANG_FORMAT}" "${SHELLCHECK}" git; do
  if ! command -v "${tool}" >/dev/null 2>&1; then
    echo "check-style: '${tool}' not found (scripts/install-deps.sh installs it)" >&2
    exit 2
  fi
done
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "check-style: ${ROOT} is not a git checkout: the tracked files are unknown" >&2
  exit 2
fi

# Tracked files that exist in the work tree (a deletion not yet committed is not a finding).
existing() {
  while IFS= read -r -d '' f; do
    if [ -f "${f}" ]; then printf '%s\0' "${f}"; fi
  done
}

failed=0
mapfile -d '' cxx < <(git ls-files -z -- '*.cc' '*.h' '*.cpp' '*.hpp' | existing)
echo "check-style: clang-format over ${#cxx[@]} C++ files"
# Both tools run one process per batch of files on every core (the suite's serial tier waits
# for this test; shellcheck alone is ~16 s of CPU).
jobs="$(nproc 2>/dev/null || echo 1)"
if [ "${#cxx[@]}" -gt 0 ] &&
  ! printf '%s\0' "${cxx[@]}" |
  xargs -0 -P "${jobs}" -n $(((${#cxx[@]} + jobs - 1) / jobs)) "${CLANG_FORMAT}" --dry-run --Werror; then
  echo "check-style: clang-format differences above; run: ${CLANG_FORMAT} -i FILE" >&2
  failed=1
fi

# Shell scripts: *.sh, and tracked files whose first line is a bash/sh shebang (.ci/run).
mapfile -d '' shells < <(git ls-files -z | existing | while IFS= read -r -d '' f; do
  case "${f}" in
    *.sh) printf '%s\0' "${f}" ;;
    *) if head -n 1 -- "${f}" 2>/dev/null | grep -qE '^#!.*[/ ](ba)?sh( |$)'; then
         printf '%s\0' "${f}"
       fi ;;
  esac
done)
echo "check-style: shellcheck over ${#shells[@]} shell scripts"
if [ "${#shells[@]}" -gt 0 ] &&
  ! printf '%s\0' "${shells[@]}" |
  xargs -0 -P "${jobs}" -n $(((${#shells[@]} + jobs - 1) / jobs)) "${SHELLCHECK}" -x; then
  echo "check-style: shellcheck findings above" >&2
  failed=1
fi

# The code map: every source folder named in docs/design.md, and every folder it names there.
if ! bash "${ROOT}/scripts/check-layout.sh"; then
  echo "check-style: docs/design.md's code map and the source folders disagree (above)" >&2
  failed=1
fi

if [ "${failed}" -eq 0 ]; then echo "check-style: clean"; fi
exit "${failed}"
