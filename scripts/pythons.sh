# shellcheck shell=bash
# Sourced by test.sh and wheels.sh: sets the array `pythons` to the
# interpreters to build and test for: $MAMBAGO_PYTHONS ("python3.12 ..."),
# else pyenv's newest 3.10, 3.11, 3.12 and 3.13 where it has them, else python3.
pythons=()
if [[ -n "${MAMBAGO_PYTHONS:-}" ]]; then
  read -r -a pythons <<<"$MAMBAGO_PYTHONS"
elif command -v pyenv >/dev/null; then
  for v in 3.10 3.11 3.12 3.13; do
    p=$(pyenv prefix "$(pyenv versions --bare | grep -E "^${v//./\\.}(\.[0-9]+)?$" | tail -1)" 2>/dev/null || true)
    [[ -n "$p" && -x "$p/bin/python3" ]] && pythons+=("$p/bin/python3")
  done
fi
[[ ${#pythons[@]} -gt 0 ]] || pythons=(python3)
