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
#   3. umoci writes an OCI image per architecture with two layers (those
#      tools; the kpng binary for that architecture), tagged VERSION-ARCH,
#      and an OCI image index of them tagged with package.json's version: a
#      node pulls the image of its own architecture.
#
# linux/amd64 and linux/arm64 by default. The arm64 root is Debian's arm64
# packages, unpacked (the extract variant runs nothing of theirs), and its
# checks run the arm64 programs under qemu-user-static.
#
#   deploy/image/build.sh [--kpng PATH] [--kpng-arm64 PATH] [--arches "amd64 arm64"] [--out DIR]
#     --kpng        the compiled amd64 kpng to package (default: `bun run build` now)
#     --kpng-arm64  the arm64 one (default: built now, `bun build.ts --target bun-linux-arm64`)
#     --arches      which architectures (default: amd64 arm64; also KPNG_IMAGE_ARCHES)
#     --out         the OCI layout to write (default dist/image); replaced whole
#
# Prints the image reference and its sizes. Needs root (files owned by root
# in the image), mmdebstrap, umoci, qemu-user-static for arm64, python3, and
# Debian's archive (or a warm cache): exit code 75 when the archive cannot be
# reached and nothing is cached.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$ROOT/deploy/image
OUT=$ROOT/dist/image
KPNG=
KPNG_ARM64=
ARCHES=${KPNG_IMAGE_ARCHES:-amd64 arm64}
while [ $# -gt 0 ]; do
  case $1 in
    --kpng) KPNG=$2; shift 2 ;;
    --kpng-arm64) KPNG_ARM64=$2; shift 2 ;;
    --arches) ARCHES=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "build.sh: unknown argument $1 (usage: build.sh [--kpng PATH] [--kpng-arm64 PATH] [--arches \"amd64 arm64\"] [--out DIR])" >&2; exit 2 ;;
  esac
done
for arch in $ARCHES; do
  case $arch in amd64 | arm64) ;; *) echo "build.sh: unknown architecture $arch (amd64, arm64)" >&2; exit 2 ;; esac
done
case " $ARCHES " in *" arm64 "*) command -v qemu-aarch64-static >/dev/null || { echo "build.sh: qemu-aarch64-static is missing (apt-get install qemu-user-static)" >&2; exit 2; } ;; esac
for tool in mmdebstrap umoci python3; do
  command -v "$tool" >/dev/null || { echo "build.sh: $tool is missing (apt-get install $tool)" >&2; exit 2; }
done

VERSION=$(sed -n 's/^  "version": "\([^"]*\)",$/\1/p' "$ROOT/package.json")
[ -n "$VERSION" ] || { echo "build.sh: no version in package.json" >&2; exit 2; }

SUITE=bookworm
PACKAGES=dash,iptables,nftables,ipset,ipvsadm,conntrack,iproute2,procps,mount,netbase
# The programs kpng runs (its backends, the leftovers sweep, bpffs for ebpf) and the
# wrapper's shell, as the packages install them.
PROGRAMS=(bin/dash usr/sbin/xtables-nft-multi usr/sbin/xtables-legacy-multi usr/sbin/nft usr/sbin/ipset
  sbin/ipvsadm usr/sbin/conntrack bin/ip sbin/sysctl bin/mount)
# Data the programs read: protocol and service names, iproute2's tables.
DATA=(etc/protocols etc/services etc/ethertypes etc/netconfig etc/iproute2)

CACHE=${KPNG_IMAGE_CACHE:-${XDG_CACHE_HOME:-${HOME:-/var/cache}/.cache}/kpng-image}
mkdir -p "$CACHE"

# Debian's packages for ARCH, unpacked into a tar (cached): prints its path.
fetch_debs() {
  local arch=$1 key debs
  key=$(printf '%s\n' "$arch" "$SUITE" "$PACKAGES" | sha256sum | cut -c1-16)
  debs=$CACHE/debian-$SUITE-$key.tar
  if [ ! -s "$debs" ] || [ -n "${KPNG_IMAGE_REFRESH:-}" ]; then
    echo "build.sh: fetching $PACKAGES ($arch) from Debian $SUITE (with its updates and security archives)" >&2
    # No mirror given: mmdebstrap's default Debian mirror, plus -updates and -security.
    if ! mmdebstrap --format=tar --variant=extract --architectures="$arch" --include="$PACKAGES" \
      "$SUITE" "$debs.part" </dev/null >"$CACHE/mmdebstrap-$arch.log" 2>&1; then
      cat "$CACHE/mmdebstrap-$arch.log" >&2
      rm -f "$debs.part"
      grep -qE "Could not resolve|Temporary failure resolving|Failed to fetch|Unable to connect|Could not connect|Network is unreachable" "$CACHE/mmdebstrap-$arch.log" || exit 1
      if [ ! -s "$debs" ]; then
        echo "build.sh: Debian's archive cannot be reached and no packages are cached in $CACHE" >&2
        exit 75
      fi
      echo "build.sh: Debian's archive cannot be reached: the cached packages are used ($debs)" >&2
    else
      mv "$debs.part" "$debs"
    fi
  else
    echo "build.sh: Debian packages ($arch) from the cache ($debs)" >&2
  fi
  echo "$debs"
}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/kpng-image-XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# The image's root for ARCH in $WORK/ARCH/rootfs: the tools, their libraries, checked.
build_root() {
  local arch=$1 kpng=$2 debs triplet loader_name loader_link run_in
  debs=$(fetch_debs "$arch") || exit $?
  case $arch in
    amd64) triplet=x86_64-linux-gnu loader_name=ld-linux-x86-64.so.2 loader_link=usr/lib64 ;;
    arm64) triplet=aarch64-linux-gnu loader_name=ld-linux-aarch64.so.1 loader_link=usr/lib ;;
  esac
  EX=$WORK/$arch/extracted
  RF=$WORK/$arch/rootfs
  mkdir -p "$EX" "$RF"
  tar -C "$EX" -xf "$debs"
  # Programs of the image's root run directly on amd64 (chroot), under qemu on arm64 (its -L prefix is the root).
  if [ "$arch" = amd64 ]; then run_in=(chroot "$RF"); else run_in=(qemu-aarch64-static -L "$RF"); fi
  local in_root=""
  [ "$arch" = amd64 ] || in_root=$RF

  # Merged /usr: every program in /usr/sbin (dash in /usr/bin), every library in /usr/lib/$triplet.
  local LIB=usr/lib/$triplet
  mkdir -p "$RF"/usr/{bin,sbin,local/bin,lib64} "$RF/$LIB/xtables" "$RF"/{etc,proc,sys,dev,run,root,var}
  chmod 1777 "$RF/run"
  mkdir -m 1777 "$RF/tmp"
  ln -s usr/bin "$RF/bin"
  ln -s usr/sbin "$RF/sbin"
  ln -s usr/lib "$RF/lib"
  ln -s usr/lib64 "$RF/lib64"
  ln -s ../run "$RF/var/run"

  local p dest
  for p in "${PROGRAMS[@]}"; do
    dest=$RF/usr/sbin
    [ "${p##*/}" = dash ] && dest=$RF/usr/bin
    cp -L "$EX/$p" "$dest/"
  done
  ln -s dash "$RF/usr/bin/sh"
  cp -L "$EX/$LIB"/xtables/*.so "$RF/$LIB/xtables/"
  local d
  for d in "${DATA[@]}"; do cp -a "$EX/$d" "$RF/$d"; done

  # iptables: the flavoured names as Debian links them, the plain names through the wrapper.
  local f suf
  for f in iptables ip6tables; do
    for suf in "" -save -restore; do
      ln -s xtables-legacy-multi "$RF/usr/sbin/$f-legacy$suf"
      ln -s xtables-nft-multi "$RF/usr/sbin/$f-nft$suf"
      ln -s iptables-wrapper "$RF/usr/sbin/$f$suf"
    done
  done
  install -m 0755 "$HERE/iptables-wrapper" "$RF/usr/sbin/iptables-wrapper"

  # Shared libraries: what the loader of the extracted glibc resolves for each
  # program and module, searched in the extracted tree only; anything found
  # elsewhere means a package is missing from the list. (On arm64 the arm64
  # loader itself runs under qemu, reading the host paths it is given.)
  local LOADER=$EX/lib/$triplet/$loader_name
  local LIBPATH=$EX/lib/$triplet:$EX/$LIB
  local -a loader=("$LOADER")
  [ "$arch" = amd64 ] || loader=(qemu-aarch64-static "$LOADER")
  local -a program_files=()
  for p in "${PROGRAMS[@]}"; do
    if [ "${p##*/}" = dash ]; then program_files+=("$RF/usr/bin/dash"); else program_files+=("$RF/usr/sbin/${p##*/}"); fi
  done
  local elf lib
  for elf in "${program_files[@]}" "$RF/$LIB"/xtables/*.so "$kpng"; do
    for lib in $("${loader[@]}" --library-path "$LIBPATH" --list "$elf" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'); do
      case $lib in
        "$EX"/*) [ -e "$RF/$LIB/${lib##*/}" ] || cp -L "$lib" "$RF/$LIB/" ;;
        *) echo "build.sh: $elf needs $lib, which no listed package provides" >&2; exit 1 ;;
      esac
    done
  done
  cp -L "$LOADER" "$RF/$LIB/"
  ln -s "../lib/$triplet/$loader_name" "$RF/$loader_link/$loader_name"
  # glibc loads libgcc_s when a thread is cancelled.
  cp -L "$EX/lib/$triplet/libgcc_s.so.1" "$RF/$LIB/"

  printf 'root:x:0:0:root:/root:/bin/sh\n' >"$RF/etc/passwd"
  printf 'root:x:0:\n' >"$RF/etc/group"
  printf 'hosts: files dns\n' >"$RF/etc/nsswitch.conf"

  # Checks before packaging: inside the new root, every program finds its
  # libraries, and the programs that need no kernel module start.
  for elf in "${program_files[@]}"; do
    if "${run_in[@]}" "$in_root/$loader_link/$loader_name" --list "${elf#"$RF"}" | grep -q 'not found'; then
      echo "build.sh: ${elf#"$RF"} misses a library in the image's root ($arch)" >&2
      exit 1
    fi
  done
  local -a starts=("iptables-legacy --version" "ip -V" "sysctl --version" "mount --version")
  # qemu-user has no netfilter netlink ("Protocol not supported"): nft, iptables-nft, ipset and
  # conntrack open one at start, so on arm64 only their libraries are checked (above).
  [ "$arch" = amd64 ] && starts+=("nft --version" "iptables-nft --version" "ipset --version" "conntrack --version")
  for p in "${starts[@]}"; do
    # shellcheck disable=SC2086 # the program and its flag
    "${run_in[@]}" $in_root/usr/sbin/$p >/dev/null 2>&1 || { echo "build.sh: '$p' does not run in the image's root ($arch)" >&2; exit 1; }
  done
}

if [ -z "$KPNG" ] && [[ " $ARCHES " == *" amd64 "* ]]; then
  (cd "$ROOT" && node_modules/.bin/bun run build >&2)
  KPNG=$ROOT/dist/kpng
fi
if [ -z "$KPNG_ARM64" ] && [[ " $ARCHES " == *" arm64 "* ]]; then
  (cd "$ROOT" && node_modules/.bin/bun build.ts --target bun-linux-arm64 --outfile dist/kpng-linux-arm64 >&2)
  KPNG_ARM64=$ROOT/dist/kpng-linux-arm64
fi

# The OCI layout: per architecture the tools' layer, then kpng's (a new kpng
# changes only that one), tagged VERSION-ARCH; then the index, tagged VERSION.
rm -rf "$OUT"
mkdir -p "$(dirname "$OUT")"
umoci init --layout "$OUT"
mb() { awk -v b="$1" 'BEGIN { printf "%.1f MB", b / 1e6 }'; }
REPORT=()
for arch in $ARCHES; do
  if [ "$arch" = amd64 ]; then bin=$KPNG; else bin=$KPNG_ARM64; fi
  [ -x "$bin" ] || { echo "build.sh: $bin is not an executable" >&2; exit 2; }
  build_root "$arch" "$bin"
  IMG=$OUT:$VERSION-$arch
  umoci new --image "$IMG"
  umoci insert --image "$IMG" --history.created_by "deploy/image/build.sh: $PACKAGES ($SUITE, $arch)" "$RF" /
  mkdir -p "$WORK/$arch/kpng/usr/local/bin"
  cp "$bin" "$WORK/$arch/kpng/usr/local/bin/kpng"
  umoci insert --image "$IMG" --history.created_by "deploy/image/build.sh: kpng $VERSION" "$WORK/$arch/kpng" /
  umoci config --image "$IMG" \
    --os linux --architecture "$arch" \
    --config.entrypoint /usr/local/bin/kpng \
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.exposedports 10256/tcp --config.exposedports 10249/tcp \
    --config.label org.opencontainers.image.title=kpng \
    --config.label "org.opencontainers.image.version=$VERSION" \
    --history.created_by "deploy/image/build.sh: entrypoint kpng"
  tools=$(du -sb "$RF" | cut -f1)
  kpng=$(stat -c %s "$bin")
  REPORT+=("$arch: unpacked $(mb $((tools + kpng))) = kpng $(mb "$kpng") + tools $(mb "$tools")")
done
umoci gc --layout "$OUT"

# The image index over the architectures' manifests, tagged VERSION (what a DaemonSet names).
python3 - "$OUT" "$VERSION" $ARCHES <<'PY'
import hashlib, json, os, sys
out, version, arches = sys.argv[1], sys.argv[2], sys.argv[3:]
REF = "org.opencontainers.image.ref.name"
path = os.path.join(out, "index.json")
index = json.load(open(path))
by_tag = {m["annotations"][REF]: m for m in index["manifests"]}
entries = []
for arch in arches:
    m = by_tag[f"{version}-{arch}"]
    entries.append({"mediaType": m["mediaType"], "digest": m["digest"], "size": m["size"], "platform": {"architecture": arch, "os": "linux"}})
blob = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": entries}, separators=(",", ":")).encode()
digest = hashlib.sha256(blob).hexdigest()
open(os.path.join(out, "blobs", "sha256", digest), "wb").write(blob)
index["manifests"].append({"mediaType": "application/vnd.oci.image.index.v1+json", "digest": f"sha256:{digest}", "size": len(blob), "annotations": {REF: version}})
json.dump(index, open(path, "w"))
PY

layers=$(du -cb "$OUT"/blobs/sha256/* | tail -1 | cut -f1)
echo "image $OUT:$VERSION ($(echo $ARCHES | tr ' ' ','))"
echo "size: $(mb "$layers") compressed (every architecture's layers); ${REPORT[*]}"
