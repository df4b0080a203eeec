#!/usr/bin/env bash
# install.sh — build and install fm's tools, the C library and header, its
# pkg-config file, man pages and shell completions under PREFIX.
#
# Usage: scripts/install.sh [PREFIX]      (default /usr/local)
#   PROFILE=release (default) or debug: which build to install
#   NO_BUILD=1: install what target/PROFILE holds (the tests use this)
#   LIB_DIR=DIR: take libfm_c.{so,a} from DIR instead of target/PROFILE
#   DESTDIR=DIR: stage the files under DIR/PREFIX, for a package
#     (scripts/deb.sh); fm.pc still names PREFIX
#   PREFIX/bin/{fmrun,fm-info,fm-grm,fm-bench}, PREFIX/lib/libfm_c.{so,a},
#   PREFIX/include/fm.h, PREFIX/lib/pkgconfig/fm.pc,
#   PREFIX/lib/fm/mpi/libmpich.so.12 (and libmpi.so.12: MPI with MPICH's
#   ABI, which fmrun puts first on the ranks' library path; docs/MPI.md),
#   PREFIX/include/fm/mpi.h, PREFIX/bin/fm-mpicc, PREFIX/lib/pkgconfig/fm-mpi.pc,
#   PREFIX/share/man/man1/*.1 (a page per tool, per fm-info subcommand, fm-mpicc's), PREFIX/share/bash-completion/completions/*,
#   PREFIX/share/zsh/site-functions/_*, PREFIX/share/fish/vendor_completions.d/*
set -eu
cd "$(dirname "$0")/.."
PREFIX=${1:-/usr/local}
PROFILE=${PROFILE:-release}
flag=$([ "$PROFILE" = release ] && echo --release || true)
[ -n "${NO_BUILD:-}" ] || cargo build $flag -q -p fm-launcher -p fm-info -p fm-grm -p fm-bench -p fm-capi -p fm-mpi
T=target/$PROFILE
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
D=${DESTDIR:-}$PREFIX
install -d "$D/bin" "$D/lib/pkgconfig" "$D/include" "$D/share/man/man1" \
    "$D/share/bash-completion/completions" "$D/share/zsh/site-functions" \
    "$D/share/fish/vendor_completions.d"
for tool in fmrun fm-info fm-grm fm-bench; do
    install -m 755 "$T/$tool" "$D/bin/"
done
L=${LIB_DIR:-$T}
install -m 755 "$L/libfm_c.so" "$D/lib/"
install -m 644 "$L/libfm_c.a" "$D/lib/"
install -m 644 capi/include/fm.h "$D/include/"
# Cargo leaves the MPI library as deps/libmpich.so (soname libmpich.so.12).
if [ -e "$T/deps/libmpich.so" ]; then
    install -d "$D/lib/fm/mpi"
    install -m 755 "$T/deps/libmpich.so" "$D/lib/fm/mpi/libmpich.so.12"
    ln -sf libmpich.so.12 "$D/lib/fm/mpi/libmpi.so.12"
    install -d "$D/include/fm"
    install -m 644 mpi/include/mpi.h "$D/include/fm/"
    sed -e "s|@PREFIX@|$PREFIX|" mpi/fm-mpicc.in > "$D/bin/fm-mpicc"
    chmod 755 "$D/bin/fm-mpicc"
    install -m 644 mpi/fm-mpicc.1 "$D/share/man/man1/"
    sed -e "s|@PREFIX@|$PREFIX|" -e "s|@VERSION@|$version|" mpi/fm-mpi.pc.in > "$D/lib/pkgconfig/fm-mpi.pc"
else
    echo "install.sh: $T/deps/libmpich.so is not built: fm's MPI library left out" >&2
fi
sed -e "s|@PREFIX@|$PREFIX|" -e "s|@VERSION@|$version|" capi/fm.pc.in > "$D/lib/pkgconfig/fm.pc"
docs=$(mktemp -d)
trap 'rm -rf "$docs"' EXIT
for tool in fmrun fm-info fm-grm fm-bench; do
    "$T/$tool" --generate-docs "$docs"
done
install -m 644 "$docs"/man1/*.1 "$D/share/man/man1/"
for tool in fmrun fm-info fm-grm fm-bench; do
    install -m 644 "$docs/completions/$tool.bash" "$D/share/bash-completion/completions/$tool"
    install -m 644 "$docs/completions/_$tool" "$D/share/zsh/site-functions/"
    install -m 644 "$docs/completions/$tool.fish" "$D/share/fish/vendor_completions.d/"
done
# Installed into the system (not staged for a package): refresh the
# dynamic linker's cache, so programs find libfm_c.so without a path.
if [ -z "${DESTDIR:-}" ] && [ "$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then
    ldconfig
fi
echo "installed fm $version ($PROFILE) under $D"
