#!/usr/bin/env bash
# Builds etcd, kube-apiserver and kube-controller-manager from the Go module proxy into
# $KAFKA_AUTOSCALER_CACHE/kube/bin (tests/kube_control_plane.py looks there), for the tests
# that run the sidecar's Kubernetes path against a real control plane. Idempotent: binaries
# built from the same go.sum are kept (bin/VERSIONS records it).
#
# The versions and checksums are pinned in scripts/kube_control_plane/{kube,etcd}/go.{mod,sum}.
# k8s.io/kubernetes is not meant to be a dependency: its go.mod requires every k8s.io/*
# staging module at v0.0.0 and replaces it with ./staging/src/...; a module that requires it
# must pin each of those to the matching published v0.<minor>.<patch> itself.
# `scripts/build_kube_control_plane.sh --update` rewrites the pins for KUBE_VERSION and
# ETCD_VERSION that way (go mod tidy), then builds.
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-v3.7.3}"
HERE="$(cd "$(dirname "$0")" && pwd)"
PINS="$HERE/kube_control_plane"
CACHE="${KAFKA_AUTOSCALER_CACHE:-$HERE/../.cache}"
OUT="$CACHE/kube/bin"
WORK="$CACHE/kube/build"

command -v go >/dev/null || { echo "build_kube_control_plane: go is not installed" >&2; exit 1; }

if [[ "${1:-}" == "--update" ]]; then
    proxy="$(go env GOPROXY)"
    proxy="${proxy%%,*}"
    staging_version="v0.${KUBE_VERSION#v1.}"
    {
        printf 'module kafkaautoscaler.local/kubebuild\n\ngo 1.26.0\n\n'
        printf 'require k8s.io/kubernetes %s\n\nreplace (\n' "$KUBE_VERSION"
        curl -fsS "$proxy/k8s.io/kubernetes/@v/$KUBE_VERSION.mod" \
            | awk '/=> \.\/staging\/src\// {print "\t" $1 " => " $1 " '"$staging_version"'"}'
        printf ')\n'
    } > "$PINS/kube/go.mod"
    printf 'module kafkaautoscaler.local/etcdbuild\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' \
        "$ETCD_VERSION" > "$PINS/etcd/go.mod"
    (cd "$PINS/kube" && go mod tidy)
    (cd "$PINS/etcd" && go mod tidy)
fi

want="$(cat "$PINS"/*/go.mod "$PINS"/*/go.sum | cksum | cut -d' ' -f1)"
if [[ "$(cat "$OUT/VERSIONS" 2>/dev/null)" == "$want" ]]; then
    exit 0
fi
mkdir -p "$OUT" "$WORK"
rm -f "$OUT/VERSIONS"
start=$(date +%s)
for module in kube etcd; do
    rm -rf "${WORK:?}/$module"
    cp -r "$PINS/$module" "$WORK/$module"
done
cd "$WORK/kube"
go build -trimpath -ldflags "-s -w" -o "$OUT/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
go build -trimpath -ldflags "-s -w" -o "$OUT/kube-controller-manager" \
    k8s.io/kubernetes/cmd/kube-controller-manager
cd "$WORK/etcd"
go build -trimpath -ldflags "-s -w" -o "$OUT/etcd" go.etcd.io/etcd/server/v3
echo "$want" > "$OUT/VERSIONS"
echo "build_kube_control_plane: kube-apiserver, kube-controller-manager and etcd built into $OUT in $(( $(date +%s) - start )) s"
