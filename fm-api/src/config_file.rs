//! The TOML file of settings: every `FM_X` setting a rank reads (those of
//! [`Scope::Setting`] in fm's table, `crate::settings`) may be written as
//! the key `x` in the file, e.g.
//! `shm_payload = 8192` or `pacer = "off"`. The environment wins over the
//! file. Where: `FM_CONFIG`, else `$XDG_CONFIG_HOME/fm/fm.toml`, else
//! `~/.config/fm/fm.toml`; no file is no settings. A broken file, an unknown
//! key or a value of the wrong kind is an error naming the file and line.

use crate::settings;
use fm_platform::setting::Scope;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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

/// Where a TOML error is in `text` (its line) and why, never empty: for
/// some errors (a control character in a comment) the parser gives no
/// message, so the offending character is named instead.
pub fn toml_error(text: &str, e: &toml::de::Error) -> (usize, String) {
    let at = e.span().map_or(0, |s| s.start);
    let why = e.message().trim();
    let why = if why.is_empty() {
        match text.get(at..).and_then(|t| t.chars().next()) {
            Some(c) => format!("character {c:?} is not allowed here"),
            None => "the file ends too early".into(),
        }
    } else {
        why.to_string()
    };
    (line_of(text, at), why)
}

/// A settings file is a regular file of at most this many bytes.
pub const MAX_SETTINGS_FILE: u64 = 1 << 20;

/// The text of the settings file at `path`: a device, a pipe or a file
/// over [`MAX_SETTINGS_FILE`] is an error, not a read that never ends.
fn read_settings_file(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let f = std::fs::File::open(path)?;
    let m = f.metadata()?;
    let bad = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidData, why);
    if !m.is_file() {
        return Err(bad("not a regular file".into()));
    }
    if m.len() > MAX_SETTINGS_FILE {
        return Err(bad(format!(
            "{} bytes, over the limit of {MAX_SETTINGS_FILE}",
            m.len()
        )));
    }
    let mut text = String::new();
    f.take(MAX_SETTINGS_FILE).read_to_string(&mut text)?;
    Ok(text)
}

/// The fuzz target `settings_file` (fm-api/fuzz) and its corpus's replay:
/// any bytes as a settings file give its settings or an error, never a
/// panic, and an error always says where and why.
#[doc(hidden)]
pub fn fuzz_settings_file(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Err(e) = ConfigFile::parse(Path::new("fm.toml"), &text) {
        let (place, why) = e.split_once(": ").unwrap_or((&e, ""));
        assert!(
            place.starts_with("fm.toml:") && !why.trim().is_empty(),
            "{e}"
        );
    }
}

impl ConfigFile {
    /// Where the file is looked for, and whether it must exist (`FM_CONFIG`).
    pub fn location() -> Option<(PathBuf, bool)> {
        if let Some(p) = std::env::var_os(settings::CONFIG.var).filter(|p| !p.is_empty()) {
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
        match read_settings_file(&path) {
            Ok(text) => ConfigFile::parse(&path, &text).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => Ok(None),
            Err(e) => Err(format!("{}: cannot read (FM_CONFIG): {e}", path.display())),
        }
    }

    pub fn parse(path: &Path, text: &str) -> Result<ConfigFile, String> {
        let at = |line: usize, what: String| format!("{}:{line}: {what}", path.display());
        let table: BTreeMap<String, toml::Spanned<toml::Value>> =
            toml::from_str(text).map_err(|e| {
                let (line, why) = toml_error(text, &e);
                at(line, why)
            })?;
        let mut values = BTreeMap::new();
        for (key, v) in table {
            let line = line_of(text, v.span().start);
            let mut in_file = settings::all().filter(|s| s.scope == Scope::Setting);
            let Some(var) = in_file.clone().find(|s| s.file_key() == key).map(|s| s.var) else {
                let known: Vec<String> = in_file.by_ref().map(|s| s.file_key()).collect();
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
