#!/usr/bin/env bash
# Build both images from Dockerfile.operator and Dockerfile.workload on a machine with no Docker
# engine and no container registry: Debian's buildah (chroot isolation, as root) on a Python base
# made locally with debootstrap. tests/test_images.py (pytest --images) runs what this builds.
#
#   scripts/build-images.sh            # base (cached), then both images
#   scripts/build-images.sh --base     # the base only
#
# The Dockerfiles are the published ones: only their ARGs change here. PYTHON_IMAGE names the local
# base, and TORCH_FROM points pip at a folder of wheels (the pinned +cpu torch lies on this
# machine's disk; PyTorch's index is not reachable). The host's CA bundle is mounted over the
# image's for the RUN steps only, for a network whose TLS is re-signed by a local CA. Mounts go on
# paths the base already has (buildah runs every RUN with them, the final stage's too, and a new
# mount point would be left in the image as an empty file or folder).
#
# Environment: IMAGE_TAG (default "test"), DEBIAN_MIRROR (default: the first mirror of apt's own
# sources, else deb.debian.org), TORCH_WHEELS (a folder holding the torch wheel constraints.txt
# pins; default /opt/wheels, where this machine keeps it), CA_BUNDLE (default
# /etc/ssl/certs/ca-certificates.crt).
set -euo pipefail
cd "$(dirname "$0")/.."

SUITE=bookworm # python:3.11-slim-bookworm's Debian; its python3 is 3.11
# minbase + Python with venv (the slim image's python and pip); passwd brings useradd. No
# compiler: the published slim base has none either.
PACKAGES=python3,python3-venv,python-is-python3,ca-certificates,passwd
# The base's tag names its recipe, so a changed recipe makes a new base instead of reusing the old.
RECIPE=$SUITE-$(echo "minbase $PACKAGES" | sha256sum | cut -c1-8)
TAG=${IMAGE_TAG:-test}
BASE=localhost/ckptbench-python-base:$RECIPE
OPERATOR=localhost/ckptbench-operator:$TAG
WORKLOAD=localhost/ckptbench-workload:$TAG
CACHE=.images # gitignored: the base's root filesystem as a tarball
BUILDAH=(buildah)

say() { echo "build-images: $*" >&2; }
die() { say "$*"; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (buildah's chroot isolation and debootstrap)"
missing=()
command -v buildah >/dev/null || missing+=(buildah)
command -v debootstrap >/dev/null || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ]; then
  command -v apt-get >/dev/null || die "install ${missing[*]}"
  say "installing ${missing[*]} (Debian's packages)"
  apt-get update -qq
  # With recommends: buildah needs the network plugins and runtime it recommends.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
mkdir -p "$CACHE"

default_mirror() {
  # apt already reaches a mirror on this machine: use the same one.
  local uri
  uri=$(grep -hsE '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/* \
        | grep -oE 'https?://[^ ]+/debian/?' | grep -v security | head -1 || true)
  echo "${uri:-http://deb.debian.org/debian}"
}

make_base() {
  if [ -n "$("${BUILDAH[@]}" images -q "$BASE" 2>/dev/null)" ]; then
    say "base $BASE: already in buildah's storage"
    return
  fi
  local tarball=$CACHE/base-$RECIPE.tar
  if [ ! -s "$tarball" ]; then
    local mirror=${DEBIAN_MIRROR:-$(default_mirror)} rootfs=$CACHE/rootfs-$RECIPE
    say "base: debootstrap $SUITE from $mirror"
    rm -rf "$rootfs"
    debootstrap --variant=minbase --include="$PACKAGES" \
      "$SUITE" "$rootfs" "$mirror" >"$CACHE/debootstrap.log" 2>&1 \
      || die "debootstrap failed: see $CACHE/debootstrap.log"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
      "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/*
    tar --numeric-owner -C "$rootfs" -cf "$tarball.partial" .
    mv "$tarball.partial" "$tarball"
    rm -rf "$rootfs"
  fi
  say "base: importing $tarball as $BASE"
  local ctr
  ctr=$("${BUILDAH[@]}" from scratch)
  "${BUILDAH[@]}" add "$ctr" "$tarball" / >/dev/null
  "${BUILDAH[@]}" config --env LANG=C.UTF-8 --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --cmd '["python3"]' "$ctr"
  "${BUILDAH[@]}" commit --quiet --rm "$ctr" "$BASE" >/dev/null
}

build() { # dockerfile image [extra buildah bud options...]
  local dockerfile=$1 image=$2
  shift 2
  say "building $image from $dockerfile"
  local start=$SECONDS old
  old=$("${BUILDAH[@]}" images -q "$image" 2>/dev/null || true)
  # No --layers: the sources change between builds, and cached layers of old builds would pile
  # up in buildah's storage (a gigabyte each for the workload).
  "${BUILDAH[@]}" bud --isolation chroot --no-cache --force-rm --quiet \
    --build-arg "PYTHON_IMAGE=$BASE" \
    -v "$(realpath "$CA_BUNDLE"):/etc/ssl/certs/ca-certificates.crt:ro" \
    "$@" -f "$dockerfile" -t "$image" . >/dev/null
  say "built $image in $((SECONDS - start)) s"
  if [ -n "$old" ] && [ "$old" != "$("${BUILDAH[@]}" images -q "$image")" ]; then
    "${BUILDAH[@]}" rmi "$old" >/dev/null 2>&1 || true # the previous build, now untagged
  fi
}

start=$SECONDS
make_base
say "base ready in $((SECONDS - start)) s"
[ "${1:-}" = --base ] && exit 0

CA_BUNDLE=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
[ -s "$CA_BUNDLE" ] || die "no CA bundle at $CA_BUNDLE (set CA_BUNDLE)"

torch=$(grep -m1 -E '^torch==' constraints.txt | cut -d= -f3 | sed 's/+cpu$//')
wheels=${TORCH_WHEELS:-/opt/wheels}
compgen -G "$wheels/torch-$torch+cpu-*.whl" >/dev/null \
  || die "no torch-$torch+cpu wheel in $wheels (set TORCH_WHEELS to a folder holding it)"

build Dockerfile.operator "$OPERATOR"
build Dockerfile.workload "$WORKLOAD" \
  -v "$(realpath "$wheels"):/mnt:ro" --build-arg "TORCH_FROM=--find-links /mnt"
say "done in $((SECONDS - start)) s"
for image in "$BASE" "$OPERATOR" "$WORKLOAD"; do
  "${BUILDAH[@]}" images --noheading --format '{{.Name}}:{{.Tag}} {{.Size}}' "$image"
done
