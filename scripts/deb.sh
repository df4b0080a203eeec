#!/usr/bin/env bash
# deb.sh — fm's Debian packages (cargo-deb), as scripts/install.sh lays the
# files out under /usr: fm (the tools, libfm_c.so, man pages, completions),
# fm-mpi (the MPI library with MPICH's ABI) and fm-dev (fm.h, libfm_c.a,
# fm.pc, mpi.h, fm-mpi.pc, fm-mpicc); launcher/Cargo.toml lists each one's
# files. Each carries both licences' text in its copyright file.
#
# Usage: scripts/deb.sh [OUT_DIR]        (default target/debian)
#   Needs cargo-deb: cargo install cargo-deb
#   PROFILE, NO_BUILD, LIB_DIR: as for scripts/install.sh
#   Then: dpkg -i OUT_DIR/fm_*.deb OUT_DIR/fm-mpi_*.deb [OUT_DIR/fm-dev_*.deb]
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
# The packages' copyright file (DEP-5): the MIT licence in full, and the
# Apache License 2.0 by Debian's copy of it (/usr/share/common-licenses).
{
    echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
    echo "Upstream-Name: fm"
    echo
    echo "Files: *"
    echo "Copyright: 2026, the fm developers"
    echo "License: MIT or Apache-2.0"
    echo
    echo "License: MIT"
    sed -e 's/^$/./' -e 's/^/ /' LICENSE-MIT
    echo
    echo "License: Apache-2.0"
    echo " On Debian systems the full text of the Apache License 2.0 is in"
    echo " /usr/share/common-licenses/Apache-2.0."
} >"$stage/copyright"
# -q: cargo-deb warns of each asset outside target/release, as all are here.
for variant in "" mpi dev; do
    cargo deb -q -p fm-launcher --no-build --no-strip ${variant:+--variant "$variant"} -o "$OUT"
done
ls "$OUT"/fm_*.deb "$OUT"/fm-mpi_*.deb "$OUT"/fm-dev_*.deb
