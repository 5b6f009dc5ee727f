#!/usr/bin/env bash
# `make test`: the set-up, then the whole suite. The Go builds of `make kube-binaries` (about
# 25 minutes of both cores on a fresh machine) run niced in the background while the rest of
# the set-up and every test that needs none of their binaries run; the tests that do (marked
# kube_binaries) run once the build has ended. Where the binaries are built already, the build
# returns in seconds.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
cache=${KAFKA_AUTOSCALER_CACHE:-$PWD/.cache}
mkdir -p "$cache/kube"
log=$cache/kube/build.log

# Its own process group, so an early exit stops the whole build (go and its compilers).
setsid nice -n 19 make --no-print-directory kube-binaries >"$log" 2>&1 &
build=$!
trap 'kill -- -"$build" 2>/dev/null' EXIT

make --no-print-directory test-setup || exit
"$PY" -m pytest -m "not kube_binaries"
tests=$?

echo "run_suite: waiting for make kube-binaries (log: $log)"
wait "$build"
built=$?
trap - EXIT
if [ "$built" != 0 ]; then
    cat "$log"
    echo "run_suite: make kube-binaries failed (exit $built): the kube_binaries tests did not run"
    exit "$built"
fi
grep -v '^go: downloading' "$log"
"$PY" -m pytest -m kube_binaries
kube_tests=$?
[ "$tests" = 0 ] && exit "$kube_tests"
exit "$tests"
