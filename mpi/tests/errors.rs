//! The program's own error handlers and error classes
//! (`tests/c/errors.c`, built with MPICH's `mpicc`): under fmrun, under
//! `mpiexec.mpich`, and failing when told to expect a wrong value.

mod common;

use common::*;
use fm_tests::TempDir;

#[test]
fn error_handlers_and_added_error_classes() {
    let dir = TempDir::for_segments("mpi-errors");
    let Some(exe) = mpich_built(&dir, "errors") else {
        return;
    };
    let o = run(&dir, &["-n", "2"], &exe, &[], &[]);
    let t = text(&o);
    assert!(
        o.status.success() && t.contains("all error handler checks passed on 2 ranks"),
        "{t}"
    );
    let o = run(&dir, &["-n", "2"], &exe, &["sabotage"], &[]);
    assert!(
        !o.status.success() && text(&o).contains("FAILED"),
        "{}",
        text(&o)
    );
    for (args, ok) in [(&[][..], true), (&["sabotage"][..], false)] {
        let Some(o) = under_mpich(&exe, 2, args) else {
            return;
        };
        assert_eq!(
            o.status.success(),
            ok,
            "mpiexec.mpich {args:?}:\n{}",
            text(&o)
        );
    }
}
