#!/usr/bin/env bash
# Builds the real control plane the tests run against from the Go module proxy into
# $KAFKA_AUTOSCALER_CACHE/kube/bin (local_kube/control_plane.py looks there): etcd,
# kube-apiserver and kube-controller-manager, and KEDA's operator and metrics server
# (keda-operator, keda-adapter; their CRDs are copied beside them into kube/keda-crds), and
# Helm (the chart's lint, template and schema checks). And one node (local_kube/node.py):
# kube-scheduler and the kubelet from the same k8s.io/kubernetes, containerd with its runc shim
# and ctr, and the pause binary compiled from the same Kubernetes source (build/pause).
# Idempotent per module: binaries built from the same go.mod and go.sum are kept (bin/VERSIONS-*
# records them), so changing one pin rebuilds that module only.
#
# The versions and checksums are pinned in scripts/kube_control_plane/{kube,etcd,keda,helm}/go.{mod,sum}.
# k8s.io/kubernetes is not meant to be a dependency: its go.mod requires every k8s.io/*
# staging module at v0.0.0 and replaces it with ./staging/src/...; a module that requires it
# must pin each of those to the matching published v0.<minor>.<patch> itself. KEDA's go.mod has
# one replace of its own, which a module requiring KEDA must repeat (keda/go.mod does).
# `scripts/build_kube_control_plane.sh --update` rewrites the kube and etcd pins for
# KUBE_VERSION and ETCD_VERSION that way (go mod tidy), then builds.
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

mkdir -p "$OUT" "$WORK"

# build MODULE BINARY=PACKAGE...: builds each package of the pinned module into $OUT/BINARY,
# unless they were built from these very pins (and LDFLAGS, which set their version).
build() {
    local module="$1"; shift
    local stamp="$OUT/VERSIONS-$module" want start target
    want="$({ cat "$PINS/$module/go.mod" "$PINS/$module/go.sum"; echo "$* ${GOFLAGS:-} ${LDFLAGS:-}"; } | cksum | cut -d' ' -f1)"
    if [[ "$(cat "$stamp" 2>/dev/null)" == "$want" ]]; then
        return 0
    fi
    rm -f "$stamp"
    rm -rf "${WORK:?}/$module"
    cp -r "$PINS/$module" "$WORK/$module"
    start=$(date +%s)
    for target in "$@"; do
        (cd "$WORK/$module" && go build -trimpath -ldflags "-s -w ${LDFLAGS:-}" -o "$OUT/${target%%=*}" "${target#*=}")
    done
    echo "$want" > "$stamp"
    echo "build_kube_control_plane: ${*%%=*} built into $OUT in $(( $(date +%s) - start )) s"
}

# pinned MODULE PATH: the version of PATH the pins of MODULE require.
pinned() { sed -n "s|^require $2 ||p" "$PINS/$1/go.mod"; }

# Stamped with the version built, as Kubernetes' own build does (else v0.0.0-master).
kube_pin="$(pinned kube k8s.io/kubernetes)"
kube_minor="${kube_pin#v1.}"
version_pkg=k8s.io/component-base/version
LDFLAGS="-X $version_pkg.gitVersion=$kube_pin -X $version_pkg.gitMajor=1 \
    -X $version_pkg.gitMinor=${kube_minor%%.*} -X $version_pkg.gitTreeState=clean" \
build kube kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
    kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager \
    kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler kubelet=k8s.io/kubernetes/cmd/kubelet
# containerd 2 (the kubelet of Kubernetes >= 1.36 refuses containerd 1.x, Debian's); no btrfs
# snapshotter (it needs btrfs headers; the node uses overlayfs).
GOFLAGS=-tags=no_btrfs build containerd containerd=github.com/containerd/containerd/v2/cmd/containerd \
    containerd-shim-runc-v2=github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
    ctr=github.com/containerd/containerd/v2/cmd/ctr
# The pod sandbox's pause process, as Kubernetes builds its pause image (static, -Os).
kube_dir="$(cd "$WORK/kube" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)"
if [[ ! -x "$OUT/pause" || "$OUT/VERSIONS-kube" -nt "$OUT/pause" ]]; then
    gcc -Os -Wall -Werror -static -DVERSION="v$(sed -n 's/^TAG ?= //p' "$kube_dir/build/pause/Makefile")-kafka-autoscaler" \
        -o "$OUT/pause" "$kube_dir/build/pause/linux/pause.c"
fi
build etcd etcd=go.etcd.io/etcd/server/v3
LDFLAGS="-X github.com/kedacore/keda/v2/version.Version=$(pinned keda github.com/kedacore/keda/v2)" \
build keda keda-operator=github.com/kedacore/keda/v2/cmd/operator \
    keda-adapter=github.com/kedacore/keda/v2/cmd/adapter
build helm helm=helm.sh/helm/v4/cmd/helm

# The CRDs KEDA's operator serves, from the same module version as its binaries.
keda_dir="$(cd "$WORK/keda" && go list -m -f '{{.Dir}}' github.com/kedacore/keda/v2)"
rm -rf "$CACHE/kube/keda-crds"
mkdir -p "$CACHE/kube/keda-crds"
cp "$keda_dir"/config/crd/bases/*.yaml "$CACHE/kube/keda-crds/"
