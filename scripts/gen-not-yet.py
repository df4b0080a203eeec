#!/usr/bin/env python3
"""Write mpi/src/bindings/not_yet.rs: every function Debian's MPICH exports
(libmpich.so.12) that fm's MPI does not implement yet, exported so that a
program or a language binding that names it loads, and failing cleanly when
called (MPI_ERR_UNSUPPORTED_OPERATION through MPI_COMM_WORLD's error handler).

    scripts/gen-not-yet.py [MPICH_LIB] [FM_LIB]

FM_LIB is a build of fm's libmpich.so made with an empty not_yet.rs list
(run it twice after adding a real implementation: the second run drops
the name). mpi/tests/symbols.rs fails while any symbol is missing.
"""
import subprocess, sys, re

mpich = sys.argv[1] if len(sys.argv) > 1 else "/usr/lib/x86_64-linux-gnu/libmpich.so.12"
fm = sys.argv[2] if len(sys.argv) > 2 else "target/debug/libmpich.so"

def functions(lib, types="TW"):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, check=True).stdout
    return {l.split()[2].split("@")[0] for l in out.splitlines() if len(l.split()) == 3 and l.split()[1] in types}

ours_now = set()
path = "mpi/src/bindings/not_yet.rs"
try:
    ours_now = set(re.findall(r"^\s+(P?MPIX?_\w+|QMPI_\w+|MPII_\w+|MPIR_\w+)$", open(path).read(), re.M))
except FileNotFoundError:
    pass
implemented = functions(fm) - ours_now
# What another file of the crate defines counts as implemented even if
# this list held it before: a `fn MPI_x(` or `fn PMPI_x(` (the #[mpi]
# functions, which export both), a bare name in a macro's list of
# names, or an `MPI_x / PMPI_x` pair of one.
import glob, os
sources = "\n".join(open(f).read() for f in glob.glob("mpi/src/**/*.rs", recursive=True)
                     if os.path.basename(f) != "not_yet.rs")
listed = set()
for line in sources.splitlines():
    words = line.replace(";", " ").replace(":", " ").split()
    if words and all(re.fullmatch(r"[A-Za-z_]\w*", w) for w in words):
        listed.update(words)
    # `MPI_x / PMPI_x` pairs of a macro's list (tool.rs, errhan.rs).
    pair = re.match(r"\s*(\w+) / (\w+)", line)
    if pair:
        listed.update(pair.groups())
def defined_here(name):
    base = name[1:] if name.startswith("PMPI") else name
    if re.search(r"fn\s+P?" + re.escape(base) + r"\s*\(", sources) or name in listed:
        return True
    # `#[mpi]` exports `x_c` beside `x` where x's signature names
    # IntOrCount (the large-count functions), also through collective!.
    if base.endswith("_c"):
        plain = re.escape(base[:-2])
        return bool(re.search(r"fn\s+P?" + plain + r"\s*\([^{]*(?:Int|Aint)OrCount", sources)
                    or re.search(r"\bP" + plain + r"\b[^;]*(?:Int|Aint)OrCount", sources))
    return False
missing = sorted(n for n in functions(mpich) - implemented if not defined_here(n))

body = "\n".join(f"    {n}" for n in missing)
open(path, "w").write(f'''//! Functions of MPICH's ABI that fm's MPI does not implement yet
//! (docs/MPI.md says which areas): exported, so that a program or a
//! language binding that names one loads (a Python extension module
//! resolves every symbol at once), and failing cleanly when called.
//!
//! Written by `scripts/gen-not-yet.py` from the gap between Debian's
//! `libmpich.so.12` and this library; `mpi/tests/symbols.rs` fails while
//! any of MPICH's symbols is missing.

use crate::*;

/// Each name as a C function of no arguments (the caller's are left
/// where the C calling convention puts them, which the callee may ignore)
/// that reports MPI_ERR_UNSUPPORTED_OPERATION.
macro_rules! not_yet {{
    ($($name:ident)*) => {{$(
        #[no_mangle]
        pub extern "C" fn $name() -> c_int {{
            not_supported(stringify!($name))
        }}
    )*}};
}}

/// Through `MPI_COMM_WORLD`'s error handler (fatal unless the program
/// chose `MPI_ERRORS_RETURN`); before `MPI_Init` or after
/// `MPI_Finalize`, fatal.
fn not_supported(name: &str) -> c_int {{
    let name = name.strip_prefix('P').unwrap_or(name);
    let why = "is not supported by fm's MPI yet (docs/MPI.md lists what is)";
    if !matches!(&*phase(), Phase::Running(_)) {{
        fatal(None, name, why);
    }}
    call(name, MPI_COMM_WORLD, |_| err(MPI_ERR_UNSUPPORTED_OPERATION, why))
}}

not_yet! {{
{body}
}}
''')
print(f"{len(missing)} functions not implemented yet")
