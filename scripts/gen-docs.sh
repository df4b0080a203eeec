#!/usr/bin/env bash
# gen-docs.sh — man pages and bash/zsh/fish completions of fmrun, fm-info,
# fm-grm and fm-bench, generated from their command-line definitions.
#
# Usage: scripts/gen-docs.sh [OUT_DIR]   (default target/docs)
#   OUT_DIR/man1/TOOL.1, OUT_DIR/completions/{TOOL.bash,_TOOL,TOOL.fish}
set -eu
cd "$(dirname "$0")/.."
OUT=${1:-target/docs}
cargo build --release -q -p fm-launcher -p fm-info -p fm-grm -p fm-bench
for tool in fmrun fm-info fm-grm fm-bench; do
    "target/release/$tool" --generate-docs "$OUT"
done
echo "man pages in $OUT/man1 (man -l $OUT/man1/fmrun.1), completions in $OUT/completions"
