#!/usr/bin/env bash
# Builds the OCI images kafka-autoscaler-sidecar and kafka-autoscaler-consumer
# (containers/Containerfile) with buildah, no Docker daemon and no registry:
#   1. the build context in $KAFKA_AUTOSCALER_CACHE/images/context: the project's wheel, a
#      wheelhouse per image from its hashed lock (requirements/*-image.txt, rebuilt only when
#      it changes), the locked lake jars and the commit checks built from them (`make jars`);
#   2. a Debian bookworm base made with mmdebstrap, imported once into the image store
#      (BASE=python:3.11-slim, or any image with python3 and venv, skips it);
#   3. both targets, layers cached, so a change of the project's code alone rebuilds only
#      the wheel's layers.
# `scripts/build_images.sh context` does step 1 alone (what a Docker user builds from),
# `scripts/build_images.sh base` step 2 alone.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PY:-$ROOT/.venv/bin/python}
export KAFKA_AUTOSCALER_CACHE=${KAFKA_AUTOSCALER_CACHE:-$ROOT/.cache}
CACHE=$KAFKA_AUTOSCALER_CACHE
IMAGES=$CACHE/images
CONTEXT=$IMAGES/context
BASE_IMAGE=localhost/kafka-autoscaler-base:bookworm
export CONTAINERS_CONF=${CONTAINERS_CONF:-$ROOT/containers/containers.conf}

pip_wheel() {  # the locked pip's wheel, once: the images run pip from it and keep none
    [ -f "$CONTEXT/pip.whl" ] && cmp -s "$CONTEXT/bootstrap.txt" requirements/bootstrap.txt && return
    rm -rf "$CONTEXT/pip" "$CONTEXT/pip.whl"
    "$PY" -m pip download --quiet --require-hashes --no-deps --only-binary :all: \
        --dest "$CONTEXT/pip" -r requirements/bootstrap.txt
    mv "$CONTEXT"/pip/pip-*.whl "$CONTEXT/pip.whl" && rm -rf "$CONTEXT/pip"
    cp requirements/bootstrap.txt "$CONTEXT/bootstrap.txt"
}

wheelhouse() {  # wheelhouse NAME: wheels of requirements/NAME-image.txt, once per lock
    local name=$1 dir=$CONTEXT/wheels-$1 lock=requirements/$1-image.txt
    if [ -f "$dir/requirements.txt" ] && cmp -s "$dir/lock.txt" "$lock"; then
        return
    fi
    rm -rf "$dir" && mkdir -p "$dir"
    # Every download checked against the lock's sha256; packages that ship only sources are
    # built with the .venv's locked setuptools, never one fetched for the build.
    "$PY" -m pip wheel --quiet --require-hashes --no-build-isolation --wheel-dir "$dir" -r "$lock"
    # What the image installs from these wheels: the lock's pins without their hashes (a wheel
    # built here from sources has a hash no index publishes).
    grep -E '^[A-Za-z0-9]' "$lock" | sed -e 's/ *\\$//' >"$dir/requirements.txt"
    cp "$lock" "$dir/lock.txt"
    echo "images: wheelhouse $name: $(ls "$dir" | wc -l) files, $(du -sh "$dir" | cut -f1)"
}

context() {
    mkdir -p "$CONTEXT"
    rm -rf "$CONTEXT/dist"
    "$PY" -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir "$CONTEXT/dist" . 2>&1 \
        | grep -v -e BuildBackendWarning -e 'config = read_configuration' >&2 || true
    rm -rf build  # setuptools' build folder in the checkout
    pip_wheel
    wheelhouse sidecar
    wheelhouse consumer
    # The lake jars as the lock lists them (checked, from the jar cache) and the commit
    # checks' jar built against them from the sources in the wheel, in the cache's layout.
    rm -rf "$CONTEXT/jars"
    "$PY" - "$CONTEXT/jars" <<'PYTHON'
import shutil
import sys
from pathlib import Path

from consumer_sdk.lake.commit_checks import ensure_commit_checks_jar
from consumer_sdk.lake.jar_lock import cache_dir, lake_jars

target = Path(sys.argv[1])
jars = lake_jars()
for jar in [*jars, ensure_commit_checks_jar(jars)]:
    copy = target / jar.relative_to(cache_dir())
    copy.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(jar, copy)
PYTHON
    # What the images' non-root user reads (the cache's own files may be private to root).
    chmod -R a+rX "$CONTEXT"
}

base() {
    if podman image exists "$BASE_IMAGE"; then
        return
    fi
    local tarball=$IMAGES/base-bookworm.tar
    mkdir -p "$IMAGES"
    if [ ! -f "$tarball" ]; then
        # merged /usr by the hook, not by Debian's usrmerge package (which would bring perl);
        # mmdebstrap picks the output's format by its name, so the partial file ends in .tar.
        mmdebstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
            --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
            --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
            bookworm "$IMAGES/base-bookworm.partial.tar" >"$IMAGES/mmdebstrap.log" 2>&1 \
            || { tail -20 "$IMAGES/mmdebstrap.log" >&2; exit 1; }
        mv "$IMAGES/base-bookworm.partial.tar" "$tarball"
        echo "images: Debian bookworm base made ($(du -h "$tarball" | cut -f1))"
    fi
    podman import --quiet "$tarball" "$BASE_IMAGE" >/dev/null
}

case "${1:-}" in
    context)
        context
        echo "images: build context ready in $CONTEXT"
        exit 0
        ;;
    base)
        base
        exit 0
        ;;
esac
context
if [ -z "${BASE:-}" ]; then
    base
    BASE=$BASE_IMAGE
fi
VERSION=$("$PY" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
for target in sidecar consumer; do
    buildah build --quiet --layers --network host --format docker \
        --file containers/Containerfile --build-arg "BASE=$BASE" --target "$target" \
        --tag "kafka-autoscaler-$target:latest" --tag "kafka-autoscaler-$target:$VERSION" \
        "$CONTEXT" >/dev/null
    echo "images: kafka-autoscaler-$target $(podman image inspect --format '{{.Size}}' "kafka-autoscaler-$target:latest" | awk '{printf "%.0f MB", $1 / 1e6}')"
done
