//! The type of fm's table of settings. Each crate declares its settings next
//! to the code they steer, as UCX's config tables do: the shmem device its
//! `FM_SHM_*`, the reliable layer its `FM_ETH_*` window and timers, the
//! pacer `FM_PACER`, the API the job's variables. `fm::config::KNOBS`
//! gathers them; the environment, the settings file, `fm-info config` and
//! docs/CONFIG.md (checked against the table by a test) all come from it,
//! and code reads a variable only through its [`Setting`].

/// The logging filter of every fm library and binary.
pub const LOG: Setting = Setting {
    var: "FM_LOG",
    scope: Scope::Environment,
    default: r#"`warn` (binaries)"#,
    doc: r#"`tracing` filter, e.g. `fm=debug`. Libraries never print; dropped packets and refused segments are logged at `warn` and counted in `Fm::stats()` and the device stats."#,
};

/// The platform's settings.
pub const SETTINGS: &[Setting] = &[LOG];

/// Who sets a knob, and so where it may come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// A tuning setting: the environment, else the settings file.
    Setting,
    /// Set for each rank by its launcher (fmrun): the environment only.
    Job,
    /// Read from the environment only, before any file (`FM_CONFIG`,
    /// `FM_LOG`) or by one tool.
    Environment,
}

/// One setting: its variable, where it comes from, its default and what it
/// means (the row of docs/CONFIG.md).
#[derive(Clone, Copy, Debug)]
pub struct Setting {
    /// The environment variable, `FM_…`.
    pub var: &'static str,
    pub scope: Scope,
    /// The default, as the documentation says it.
    pub default: &'static str,
    /// What it means, its values and their bounds.
    pub doc: &'static str,
}

impl Setting {
    /// The settings file's key: `FM_SHM_PAYLOAD` → `shm_payload`.
    pub fn file_key(&self) -> String {
        file_key(self.var)
    }

    /// The value in this process's environment, if set and UTF-8.
    pub fn env(&self) -> Option<String> {
        std::env::var(self.var).ok()
    }

    /// Whether the variable is set in this process's environment.
    pub fn is_set(&self) -> bool {
        std::env::var_os(self.var).is_some()
    }

    /// docs/CONFIG.md's row for this knob.
    pub fn markdown_row(&self) -> String {
        format!("| `{}` | {} | {} |", self.var, self.default, self.doc)
    }
}

/// The settings file's key for variable `var`: `FM_SHM_PAYLOAD` → `shm_payload`.
pub fn file_key(var: &str) -> String {
    var.trim_start_matches("FM_").to_ascii_lowercase()
}
