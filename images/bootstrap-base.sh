#!/usr/bin/env bash
# Build a minimal Debian base image with python3 from Debian packages, for
# machines where no base image is present and none can be pulled.
#
# usage: bootstrap-base.sh [--label KEY=VALUE]... IMAGE_TAG [SUITE [PACKAGE...]]
#
# PACKAGEs are Debian packages installed besides python3 (with their
# dependencies, without recommends): apt cannot run inside the offline image
# builds, so everything an image needs from Debian must be in its base.
#
# The Debian mirror is read from this machine's apt configuration, so the
# same script works against an internal mirror on an air-gapped network.
# Override it with WARDEN_DEBIAN_MIRROR.
set -euo pipefail

usage="usage: bootstrap-base.sh [--label KEY=VALUE]... IMAGE_TAG [SUITE [PACKAGE...]]"
changes=()
while [ $# -gt 0 ]; do
  case $1 in
    --label) [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }; changes+=(--change "LABEL $2"); shift 2 ;;
    --label=*) changes+=(--change "LABEL ${1#--label=}"); shift ;;
    -h|--help) echo "$usage"; exit 0 ;;
    -*) echo "$usage" >&2; exit 2 ;;
    *) break ;;
  esac
done
tag=${1:?$usage}
suite=${2:-bookworm}
shift $(( $# < 2 ? $# : 2 ))
include=python3
for pkg in "$@"; do
  case $pkg in
    *[!a-z0-9.+-]*|'') echo "bootstrap-base: not a Debian package name: $pkg" >&2; exit 2 ;;
  esac
  include="$include,$pkg"
done

die() { echo "bootstrap-base: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "debootstrap needs root; run as root or provide a base image (see 'warden doctor')"
command -v debootstrap >/dev/null || die "debootstrap is not installed; run: apt-get install -y debootstrap"
command -v docker >/dev/null || die "the docker client is not installed"

mirror=${WARDEN_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
  # deb822 sources first, then the one-line format.
  mirror=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v security | head -n1 || true)
fi
if [ -z "$mirror" ]; then
  mirror=$(grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | awk '{print $2}' | grep -v security | head -n1 || true)
fi
[ -n "$mirror" ] || die "no Debian mirror found in /etc/apt; set WARDEN_DEBIAN_MIRROR"

root=$(mktemp -d /tmp/warden-rootfs.XXXXXX)
trap 'rm -rf "$root"' EXIT

echo "bootstrap-base: debootstrap $suite (minbase + $include) from $mirror into $root" >&2
debootstrap --variant=minbase --include="$include" "$suite" "$root" "$mirror" >"$root.log" 2>&1 \
  || { tail -n 20 "$root.log" >&2; rm -f "$root.log"; die "debootstrap failed (log above)"; }
rm -f "$root.log"

# Keep the image small: apt lists and caches are not needed at run time.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*

tar -C "$root" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/bash"]' \
  "${changes[@]}" \
  - "$tag" >/dev/null
echo "bootstrap-base: imported $tag" >&2
