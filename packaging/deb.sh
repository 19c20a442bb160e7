#!/bin/sh
# packaging/deb.sh BUILD [DEB_BUILD] - make deb: ratelimitd_<version>_<arch>.deb and
# ratelimitd-dev_<version>_all.deb in BUILD/deb/, built with debhelper (dpkg-buildpackage)
# from a copy of packaging/debian/ in BUILD/deb/ratelimitd-<version>/, so that nothing of the
# package build is written into the tree. The version is RL_VERSION in include/ratelimit.h,
# written into the copy's debian/changelog; the unit is config/systemd/ratelimitd.service. The
# programs are built by the tree's Makefile in DEB_BUILD (build-deb) with Debian's flags.
set -eu
build=${1:-build}
debbuild=${2:-build-deb}
top=$(pwd)
case $debbuild in /*) ;; *) debbuild=$top/$debbuild ;; esac

version=$(sed -n 's/^#define RL_VERSION "\(.*\)"$/\1/p' include/ratelimit.h)
[ -n "$version" ] || { echo "deb: no RL_VERSION in include/ratelimit.h" >&2; exit 1; }
out=$top/$build/deb
src=$out/ratelimitd-$version
rm -rf "$out"
mkdir -p "$src"
cp -R packaging/debian "$src/debian"
cp config/systemd/ratelimitd.service "$src/debian/ratelimitd.service"

maintainer=$(sed -n 's/^Maintainer: //p' packaging/debian/control)
date=$(git log -1 --format=%aD 2>/dev/null || true)
[ -n "$date" ] || date=$(date -R)
cat > "$src/debian/changelog" <<CHANGELOG
ratelimitd ($version) unstable; urgency=medium

  * ratelimitd $version, built from its source tree.

 -- $maintainer  $date
CHANGELOG

# The outer make's flags (SANITIZE=..., BUILD=...) must not reach the package's build.
unset MAKEFLAGS MFLAGS MAKELEVEL MAKEOVERRIDES
start=$(date +%s)
echo "deb: building ratelimitd $version with dpkg-buildpackage (log: $build/deb/build.log)"
if ! (cd "$src" && RLD_TOP=$top RLD_BUILD=$debbuild \
        DEB_BUILD_OPTIONS="${DEB_BUILD_OPTIONS:+$DEB_BUILD_OPTIONS }noautodbgsym" \
        dpkg-buildpackage -b -us -uc >"$out/build.log" 2>&1); then
    tail -40 "$out/build.log"
    echo "deb: dpkg-buildpackage failed (the whole log: $build/deb/build.log)" >&2
    exit 1
fi
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
for f in "ratelimitd_${version}_$arch.deb" "ratelimitd-dev_${version}_all.deb"; do
    [ -f "$out/$f" ] || { echo "deb: $f was not made" >&2; exit 1; }
    echo "deb: $build/deb/$f"
done
echo "deb: built in $(($(date +%s) - start)) s"
