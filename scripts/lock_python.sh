#!/usr/bin/env bash
# The hashed locks of the Python dependencies (requirements/*.txt): what `make demo`,
# `make test` and `make images` install, every file checked against its sha256 (pip's
# --require-hashes). `make lock` after a change of pyproject.toml's dependencies: versions
# already locked stay (uv prefers the existing file's), UPGRADE=1 takes the newest allowed.
#   bootstrap.txt       pip, setuptools, wheel: the installer and the build backend
#   dev.txt             every extra: the .venv of `make demo` and `make test`
#   sidecar-image.txt   the sidecar image (sidecar, kubernetes, keda, kip848)
#   consumer-image.txt  the consumer image (consumer, spark, share)
# Universal (every platform, Python 3.11 and later), so a Mac's `make demo` installs from the
# same lock; the image locks are held to dev.txt's versions, which `make test` ran.
set -euo pipefail
cd "$(dirname "$0")/.."
UV=${UV:-.venv/bin/uv}
upgrade=()
if [ "${UPGRADE:-0}" = 1 ]; then
    upgrade=(--upgrade)
fi

compile() {  # compile OUTPUT ARGS...
    local output=$1
    shift
    "$UV" pip compile --quiet --generate-hashes --universal --python-version 3.11 \
        --custom-compile-command "make lock" "${upgrade[@]}" --output-file "$output" "$@"
}

compile requirements/bootstrap.txt requirements/bootstrap.in
compile requirements/dev.txt pyproject.toml --all-extras
compile requirements/sidecar-image.txt pyproject.toml --constraint requirements/dev.txt \
    --extra sidecar --extra kubernetes --extra keda --extra kip848
compile requirements/consumer-image.txt pyproject.toml --constraint requirements/dev.txt \
    --extra consumer --extra spark --extra share
echo "lock: $(grep -c '^[A-Za-z0-9]' requirements/dev.txt) packages in requirements/dev.txt"
