#!/usr/bin/env bash
# Builds kpng's OCI image with Debian's own tools, no container registry:
#
#   1. mmdebstrap --variant=extract unpacks Debian's packages of the tools
#      kpng's backends run (nft, iptables in both flavours, ipset, ipvsadm,
#      conntrack, ip, sysctl) with their dependencies; no maintainer script
#      runs. The result is cached (KPNG_IMAGE_CACHE, default
#      ~/.cache/kpng-image), keyed by the suite and the package list; set
#      KPNG_IMAGE_REFRESH=1 to fetch again (security updates).
#   2. Out of it, only what those programs load is kept: the programs, the
#      shared libraries the loader lists for them, iptables' extension
#      modules, a few data files under /etc, dash for the iptables wrapper
#      (iptables-wrapper beside this script). Merged /usr, no package
#      database, no docs.
#   3. umoci writes an OCI image layout with two layers (those tools; the
#      kpng binary from `bun run build`), tagged with package.json's version.
#
#   deploy/image/build.sh [--kpng PATH] [--out DIR]
#     --kpng  the compiled kpng to package (default: `bun run build` now)
#     --out   the OCI layout to write (default dist/image); replaced whole
#
# Prints the image reference and its sizes. Needs root (files owned by root
# in the image), mmdebstrap, umoci, and Debian's archive (or a warm cache):
# exit code 75 when the archive cannot be reached and nothing is cached.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$ROOT/deploy/image
OUT=$ROOT/dist/image
KPNG=
while [ $# -gt 0 ]; do
  case $1 in
    --kpng) KPNG=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "build.sh: unknown argument $1 (usage: build.sh [--kpng PATH] [--out DIR])" >&2; exit 2 ;;
  esac
done
for tool in mmdebstrap umoci; do
  command -v "$tool" >/dev/null || { echo "build.sh: $tool is missing (apt-get install $tool)" >&2; exit 2; }
done

VERSION=$(sed -n 's/^  "version": "\([^"]*\)",$/\1/p' "$ROOT/package.json")
[ -n "$VERSION" ] || { echo "build.sh: no version in package.json" >&2; exit 2; }

SUITE=bookworm
ARCH=amd64
TRIPLET=x86_64-linux-gnu
PACKAGES=dash,iptables,nftables,ipset,ipvsadm,conntrack,iproute2,procps,mount,netbase
# The programs kpng runs (its backends, the leftovers sweep, bpffs for ebpf) and the
# wrapper's shell, as the packages install them.
PROGRAMS=(bin/dash usr/sbin/xtables-nft-multi usr/sbin/xtables-legacy-multi usr/sbin/nft usr/sbin/ipset
  sbin/ipvsadm usr/sbin/conntrack bin/ip sbin/sysctl bin/mount)
# Data the programs read: protocol and service names, iproute2's tables.
DATA=(etc/protocols etc/services etc/ethertypes etc/netconfig etc/iproute2)

CACHE=${KPNG_IMAGE_CACHE:-${XDG_CACHE_HOME:-${HOME:-/var/cache}/.cache}/kpng-image}
KEY=$(printf '%s\n' "$ARCH" "$SUITE" "$PACKAGES" | sha256sum | cut -c1-16)
DEBS=$CACHE/debian-$SUITE-$KEY.tar
mkdir -p "$CACHE"
if [ ! -s "$DEBS" ] || [ -n "${KPNG_IMAGE_REFRESH:-}" ]; then
  echo "build.sh: fetching $PACKAGES from Debian $SUITE (with its updates and security archives)" >&2
  # No mirror given: mmdebstrap's default Debian mirror, plus -updates and -security.
  if ! mmdebstrap --format=tar --variant=extract --architectures="$ARCH" --include="$PACKAGES" \
    "$SUITE" "$DEBS.part" </dev/null >"$CACHE/mmdebstrap.log" 2>&1; then
    cat "$CACHE/mmdebstrap.log" >&2
    rm -f "$DEBS.part"
    grep -qE "Could not resolve|Temporary failure resolving|Failed to fetch|Unable to connect|Could not connect|Network is unreachable" "$CACHE/mmdebstrap.log" || exit 1
    if [ ! -s "$DEBS" ]; then
      echo "build.sh: Debian's archive cannot be reached and no packages are cached in $CACHE" >&2
      exit 75
    fi
    echo "build.sh: Debian's archive cannot be reached: the cached packages are used ($DEBS)" >&2
  else
    mv "$DEBS.part" "$DEBS"
    # one package list at a time: an older list's download is dead weight
    find "$CACHE" -maxdepth 1 -name 'debian-*.tar' ! -path "$DEBS" -delete
  fi
else
  echo "build.sh: Debian packages from the cache ($DEBS)" >&2
fi

if [ -z "$KPNG" ]; then
  (cd "$ROOT" && node_modules/.bin/bun run build >&2)
  KPNG=$ROOT/dist/kpng
fi
[ -x "$KPNG" ] || { echo "build.sh: $KPNG is not an executable" >&2; exit 2; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/kpng-image-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
EX=$WORK/extracted
RF=$WORK/rootfs
mkdir -p "$EX" "$RF"
tar -C "$EX" -xf "$DEBS"

# Merged /usr: every program in /usr/sbin (dash in /usr/bin), every library in /usr/lib/$TRIPLET.
LIB=usr/lib/$TRIPLET
mkdir -p "$RF"/usr/{bin,sbin,local/bin,lib64} "$RF/$LIB/xtables" "$RF"/{etc,proc,sys,dev,run,root,var}
chmod 1777 "$RF/run"
mkdir -m 1777 "$RF/tmp"
ln -s usr/bin "$RF/bin"
ln -s usr/sbin "$RF/sbin"
ln -s usr/lib "$RF/lib"
ln -s usr/lib64 "$RF/lib64"
ln -s ../run "$RF/var/run"

for p in "${PROGRAMS[@]}"; do
  dest=$RF/usr/sbin
  [ "${p##*/}" = dash ] && dest=$RF/usr/bin
  cp -L "$EX/$p" "$dest/"
done
ln -s dash "$RF/usr/bin/sh"
cp -L "$EX/$LIB"/xtables/*.so "$RF/$LIB/xtables/"
for d in "${DATA[@]}"; do cp -a "$EX/$d" "$RF/$d"; done

# iptables: the flavoured names as Debian links them, the plain names through the wrapper.
for f in iptables ip6tables; do
  for s in "" -save -restore; do
    ln -s xtables-legacy-multi "$RF/usr/sbin/$f-legacy$s"
    ln -s xtables-nft-multi "$RF/usr/sbin/$f-nft$s"
    ln -s iptables-wrapper "$RF/usr/sbin/$f$s"
  done
done
install -m 0755 "$HERE/iptables-wrapper" "$RF/usr/sbin/iptables-wrapper"

# Shared libraries: what the loader of the extracted glibc resolves for each
# program and module, searched in the extracted tree only; anything found
# elsewhere means a package is missing from the list.
LOADER=$EX/lib/$TRIPLET/ld-linux-x86-64.so.2
LIBPATH=$EX/lib/$TRIPLET:$EX/$LIB
needed() {
  "$LOADER" --library-path "$LIBPATH" --list "$1" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'
}
PROGRAM_FILES=()
for p in "${PROGRAMS[@]}"; do
  if [ "${p##*/}" = dash ]; then PROGRAM_FILES+=("$RF/usr/bin/dash"); else PROGRAM_FILES+=("$RF/usr/sbin/${p##*/}"); fi
done
for elf in "${PROGRAM_FILES[@]}" "$RF/$LIB"/xtables/*.so "$KPNG"; do
  for lib in $(needed "$elf"); do
    case $lib in
      "$EX"/*) [ -e "$RF/$LIB/${lib##*/}" ] || cp -L "$lib" "$RF/$LIB/" ;;
      *) echo "build.sh: $elf needs $lib, which no listed package provides" >&2; exit 1 ;;
    esac
  done
done
cp -L "$LOADER" "$RF/$LIB/"
ln -s "../lib/$TRIPLET/ld-linux-x86-64.so.2" "$RF/usr/lib64/ld-linux-x86-64.so.2"
# glibc loads libgcc_s when a thread is cancelled.
cp -L "$EX/lib/$TRIPLET/libgcc_s.so.1" "$RF/$LIB/"

printf 'root:x:0:0:root:/root:/bin/sh\n' >"$RF/etc/passwd"
printf 'root:x:0:\n' >"$RF/etc/group"
printf 'hosts: files dns\n' >"$RF/etc/nsswitch.conf"

# Checks before packaging: inside the new root, every program finds its
# libraries, and the programs that need no kernel module start.
for elf in "${PROGRAM_FILES[@]}"; do
  if chroot "$RF" /usr/lib64/ld-linux-x86-64.so.2 --list "${elf#"$RF"}" | grep -q 'not found'; then
    echo "build.sh: ${elf#"$RF"} misses a library in the image's root" >&2
    exit 1
  fi
done
for p in "nft --version" "iptables-nft --version" "iptables-legacy --version" "ipset --version" "conntrack --version" "ip -V" "sysctl --version" "mount --version"; do
  chroot "$RF" /usr/sbin/$p >/dev/null 2>&1 || { echo "build.sh: '$p' does not run in the image's root" >&2; exit 1; }
done

# The OCI layout: the tools' layer, then kpng's (a new kpng changes only that one).
rm -rf "$OUT"
mkdir -p "$(dirname "$OUT")"
IMG=$OUT:$VERSION
umoci init --layout "$OUT"
umoci new --image "$IMG"
umoci insert --image "$IMG" --history.created_by "deploy/image/build.sh: $PACKAGES ($SUITE)" "$RF" /
mkdir -p "$WORK/kpng/usr/local/bin"
cp "$KPNG" "$WORK/kpng/usr/local/bin/kpng"
umoci insert --image "$IMG" --history.created_by "deploy/image/build.sh: kpng $VERSION" "$WORK/kpng" /
umoci config --image "$IMG" \
  --config.entrypoint /usr/local/bin/kpng \
  --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --config.exposedports 10256/tcp --config.exposedports 10249/tcp \
  --config.label org.opencontainers.image.title=kpng \
  --config.label "org.opencontainers.image.version=$VERSION" \
  --history.created_by "deploy/image/build.sh: entrypoint kpng"
umoci gc --layout "$OUT"

layers=$(du -cb "$OUT"/blobs/sha256/* | tail -1 | cut -f1)
tools=$(du -sb "$RF" | cut -f1)
kpng=$(stat -c %s "$KPNG")
mb() { awk -v b="$1" 'BEGIN { printf "%.1f MB", b / 1e6 }'; }
echo "image $IMG"
echo "size: $(mb "$layers") compressed (what a node pulls); unpacked $(mb $((tools + kpng))) = kpng $(mb "$kpng") + tools $(mb "$tools")"
