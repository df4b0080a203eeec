//! The TOML file of settings: every `FM_X` setting a rank reads (those
//! listed in [`FILE_KEYS`]) may be written as the key `x` in the file, e.g.
//! `shm_payload = 8192` or `pacer = "off"`. The environment wins over the
//! file. Where: `FM_CONFIG`, else `$XDG_CONFIG_HOME/fm/fm.toml`, else
//! `~/.config/fm/fm.toml`; no file is no settings. A broken file, an unknown
//! key or a value of the wrong kind is an error naming the file and line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The variables the file may set (without `FM_`, lower case, as keys).
/// What fmrun sets for each rank (FM_GRM, FM_JOB_TOKEN, FM_RANK, …) is not
/// among them.
pub const FILE_KEYS: &[&str] = &[
    "FM_HOST",
    "FM_NET",
    "FM_PACER",
    "FM_SHM_DIR",
    "FM_SHM_QUEUES",
    "FM_SHM_FRAMES",
    "FM_SHM_PAYLOAD",
    "FM_SHM_CMA",
    "FM_SHM_CMA_THRESHOLD",
    "FM_SHM_CMA_ADAPT",
    "FM_CREDITS",
    "FM_STASH_BYTES",
    "FM_WAIT_TIMEOUT",
    "FM_ATTACH_TIMEOUT",
    "FM_CPUS",
    "FM_ETH_ADDR",
    "FM_ETH_IFACES",
    "FM_ETH_RANGE",
    "FM_ETH_MTU",
    "FM_ETH_WINDOW",
    "FM_ETH_RTO_US",
    "FM_ETH_DEAD_AFTER",
    "FM_ETH_CHECKSUM",
    "FM_ETH_POOL",
    "FM_NIC_IFACES",
    "FM_NIC_ETHERTYPE",
    "FM_NIC_MTU",
    "FM_NIC_FRAMES",
    "FM_NIC_NETWORK",
    "FM_FAULTS",
];

/// The file's key for a variable: `FM_SHM_PAYLOAD` → `shm_payload`.
pub fn key_of(var: &str) -> String {
    var.trim_start_matches("FM_").to_ascii_lowercase()
}

#[derive(Clone, Debug, Default)]
pub struct ConfigFile {
    pub path: PathBuf,
    /// By variable name: the value as the variable would hold it, and its line.
    values: BTreeMap<&'static str, (String, usize)>,
}

/// The line (from 1) of byte `offset` in `text`.
pub fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

impl ConfigFile {
    /// Where the file is looked for, and whether it must exist (`FM_CONFIG`).
    pub fn location() -> Option<(PathBuf, bool)> {
        if let Some(p) = std::env::var_os("FM_CONFIG").filter(|p| !p.is_empty()) {
            return Some((PathBuf::from(p), true));
        }
        let base = std::env::var_os("XDG_CONFIG_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".config")))?;
        Some((base.join("fm").join("fm.toml"), false))
    }

    /// The file at [`ConfigFile::location`], if any.
    pub fn load() -> Result<Option<ConfigFile>, String> {
        let Some((path, required)) = ConfigFile::location() else {
            return Ok(None);
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => ConfigFile::parse(&path, &text).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => Ok(None),
            Err(e) => Err(format!("{}: cannot read (FM_CONFIG): {e}", path.display())),
        }
    }

    pub fn parse(path: &Path, text: &str) -> Result<ConfigFile, String> {
        let at = |line: usize, what: String| format!("{}:{line}: {what}", path.display());
        let table: BTreeMap<String, toml::Spanned<toml::Value>> =
            toml::from_str(text).map_err(|e| {
                let line = e.span().map_or(1, |s| line_of(text, s.start));
                at(line, e.message().to_string())
            })?;
        let mut values = BTreeMap::new();
        for (key, v) in table {
            let line = line_of(text, v.span().start);
            let Some(&var) = FILE_KEYS.iter().find(|v| key_of(v) == key) else {
                let known: Vec<String> = FILE_KEYS.iter().map(|v| key_of(v)).collect();
                return Err(at(
                    line,
                    format!("unknown key {key:?} (known: {})", known.join(", ")),
                ));
            };
            let value = match v.into_inner() {
                toml::Value::String(s) => s,
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                toml::Value::Array(items) => items
                    .iter()
                    .map(|i| match i {
                        toml::Value::String(s) => Ok(s.clone()),
                        toml::Value::Integer(n) => Ok(n.to_string()),
                        _ => Err(at(line, format!("{key}: a list of strings or numbers"))),
                    })
                    .collect::<Result<Vec<_>, _>>()?
                    .join(","),
                other => {
                    return Err(at(
                        line,
                        format!(
                            "{key}: a string, number, boolean or list, not {}",
                            other.type_str()
                        ),
                    ))
                }
            };
            values.insert(var, (value, line));
        }
        Ok(ConfigFile {
            path: path.to_path_buf(),
            values,
        })
    }

    /// The value the file gives `var`, and its line.
    pub fn get(&self, var: &str) -> Option<(&str, usize)> {
        self.values.get(var).map(|(v, l)| (v.as_str(), *l))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ConfigFile, String> {
        ConfigFile::parse(Path::new("fm.toml"), text)
    }

    #[test]
    fn keys_values_and_lines() {
        let f = parse(
            "# settings\npacer = \"off\"\nshm_payload = 8192\nnic_ifaces = [\"fm0\", \"fm1\"]\n",
        )
        .unwrap();
        assert_eq!(f.get("FM_PACER"), Some(("off", 2)));
        assert_eq!(f.get("FM_SHM_PAYLOAD"), Some(("8192", 3)));
        assert_eq!(f.get("FM_NIC_IFACES"), Some(("fm0,fm1", 4)));
        assert_eq!(f.get("FM_NET"), None);
    }

    #[test]
    fn bad_files_name_the_file_and_line() {
        for (text, want) in [
            (
                "pacer = \"off\"\nshm_payloda = 1\n",
                "fm.toml:2: unknown key \"shm_payloda\"",
            ),
            ("\n\npacer = \n", "fm.toml:3:"),
            ("[shm]\npayload = 1\n", "fm.toml:1: unknown key \"shm\""),
            (
                "pacer = 1\n[net]\nx = 1\n",
                "fm.toml:2: net: a string, number, boolean or list, not table",
            ),
            ("grm = \"1.2.3.4:5\"\n", "fm.toml:1: unknown key \"grm\""),
            (
                "net = [{a = 1}]\n",
                "fm.toml:1: net: a list of strings or numbers",
            ),
        ] {
            let e = parse(text)
                .err()
                .unwrap_or_else(|| panic!("{text:?} parsed"));
            assert!(e.starts_with(want), "{text:?}: {e}");
        }
    }
}
