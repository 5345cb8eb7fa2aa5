# The CLI tests' checks (sourced by cli_errors.sh and cli_inputs.sh). The
# script sets $tmp (a scratch folder) and counts in $passes and $failures.

# expect_error NAME PATTERN CMD...: non-zero exit, one stderr line matching PATTERN, nothing on stdout.
expect_error() {
  local name="$1" pattern="$2"
  shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  local lines
  lines=$(wc -l <"$tmp/err")
  if [ "$rc" -eq 0 ] || [ "$lines" -ne 1 ] || ! grep -qE -- "$pattern" "$tmp/err" || [ -s "$tmp/out" ]; then
    echo "FAIL $name: rc=$rc, stderr ($lines lines): $(head -c 400 "$tmp/err"), stdout: $(head -c 200 "$tmp/out")"
    failures=$((failures + 1))
  else
    passes=$((passes + 1))
  fi
}

# expect_zero STREAM NAME PATTERN CMD...: exit 0 and STREAM (out or err) matching PATTERN.
expect_zero() {
  local stream="$1" name="$2" pattern="$3"
  shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" -ne 0 ] || ! grep -qE -- "$pattern" "$tmp/$stream"; then
    echo "FAIL $name: rc=$rc, stdout: $(head -c 300 "$tmp/out"), stderr: $(head -c 300 "$tmp/err")"
    failures=$((failures + 1))
  else
    passes=$((passes + 1))
  fi
}
# expect_ok NAME PATTERN CMD...: exit 0 and stdout matching PATTERN.
expect_ok() { expect_zero out "$@"; }
# expect_warned NAME PATTERN CMD...: exit 0 and a warning matching PATTERN on stderr.
expect_warned() { expect_zero err "$@"; }

# expect_full NAME CMD...: with stdout on a full device, exit 1 and say so.
expect_full() {
  local name="$1"
  shift
  "$@" >/dev/full 2>"$tmp/err"
  local rc=$?
  if [ "$rc" -ne 1 ] || [ "$(wc -l <"$tmp/err")" -ne 1 ] ||
      ! grep -q "cannot write the output to stdout: No space left on device" "$tmp/err"; then
    echo "FAIL $name: rc=$rc, stderr: $(head -c 400 "$tmp/err")"
    failures=$((failures + 1))
  else
    passes=$((passes + 1))
  fi
}
# expect_usage NAME HELP PATTERN CMD...: exit 2, one stderr line matching PATTERN and ending with
# "(see HELP --help)", nothing on stdout: a command line wrong by itself.
expect_usage() {
  local name="$1" help="$2" pattern="$3"
  shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" -ne 2 ] || [ "$(wc -l <"$tmp/err")" -ne 1 ] || ! grep -qE -- "$pattern" "$tmp/err" ||
      ! grep -qF -- "(see $help --help)" "$tmp/err" || [ -s "$tmp/out" ]; then
    echo "FAIL $name: rc=$rc, stderr: $(head -c 400 "$tmp/err"), stdout: $(head -c 200 "$tmp/out")"
    failures=$((failures + 1))
  else
    passes=$((passes + 1))
  fi
}
# check NAME CONDITION...: a plain assertion (CONDITION is a command).
check() {
  local name="$1"
  shift
  if "$@"; then passes=$((passes + 1)); else echo "FAIL $name"; failures=$((failures + 1)); fi
}
