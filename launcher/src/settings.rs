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

pub const HEARTBEAT_TIMEOUT: Setting = Setting {
    var: "FM_HEARTBEAT_TIMEOUT",
    scope: Scope::Environment,
    default: r#"`10s`"#,
    doc: r#"as fmrun's `--heartbeat-timeout` (which wins): how long fmrun's resource manager waits for a word from a rank or launcher before declaring it dead ("sent no heartbeat"), and how long a rank waits for a word from the resource manager before ending itself (a cut link, a vanished fmrun). Everyone says something every second. A duration: `10`, `10s`, `1500ms`, `1m`."#,
};

/// fmrun's settings.
pub const SETTINGS: &[Setting] = &[RSH, SRUN, HEARTBEAT_TIMEOUT];
