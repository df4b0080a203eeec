#!/usr/bin/env bash
# deb.sh — a Debian package of fm (cargo-deb): the tools, libfm_c.{so,a},
# fm.h, fm.pc, the MPI library, man pages and shell completions, as
# scripts/install.sh lays them out under /usr.
#
# Usage: scripts/deb.sh [OUT_DIR]        (default target/debian)
#   Needs cargo-deb: cargo install cargo-deb
#   PROFILE, NO_BUILD, LIB_DIR: as for scripts/install.sh
#   Then: dpkg -i OUT_DIR/fm_*.deb
set -eu
cd "$(dirname "$0")/.."
OUT=${1:-target/debian}
if ! cargo deb --version >/dev/null 2>&1; then
    echo "deb.sh: cargo-deb is not installed (cargo install cargo-deb)" >&2
    exit 2
fi
# The package's assets (launcher/Cargo.toml, [package.metadata.deb]) are
# this staged tree.
stage=target/deb-stage
rm -rf "$stage"
DESTDIR="$stage" scripts/install.sh /usr
# A package ships without debug information (the release profile keeps
# line tables for backtraces; the .a carries every crate's).
strip --strip-unneeded "$stage"/usr/bin/{fmrun,fm-info,fm-grm,fm-bench} "$stage"/usr/lib/libfm_c.so \
    "$stage"/usr/lib/fm/mpi/libmpich.so.12
strip --strip-debug "$stage"/usr/lib/libfm_c.a
# -q: cargo-deb warns of each asset outside target/release, as all are here.
cargo deb -q -p fm-launcher --no-build --no-strip -o "$OUT"
ls "$OUT"/fm_*.deb
