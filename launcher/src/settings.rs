//! fmrun's own settings (the ranks' are `fm::settings`).

use fm_platform::setting::{Scope, Setting};

pub const RSH: Setting = Setting {
    var: "FM_RSH",
    scope: Scope::Environment,
    default: r#"`ssh -o BatchMode=yes {host}`"#,
    doc: r#"how fmrun starts a rank on its host, as `--rsh` (which wins): a command template, `{host}` replaced by the host's address, or `local`."#,
};

pub const SRUN: Setting = Setting {
    var: "FM_SRUN",
    scope: Scope::Environment,
    default: r#"`srun`"#,
    doc: r#"the srun command fmrun runs inside a Slurm allocation (a path, for a wrapper)."#,
};

/// fmrun's settings.
pub const SETTINGS: &[Setting] = &[RSH, SRUN];
