//! fm's table of settings is the one place each `FM_*` variable is named:
//! docs/CONFIG.md has exactly the table's rows, and no source file outside
//! the tables (and tests) spells a variable's name as a string.

use fm_platform::setting::Scope;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("fm-api sits in the workspace")
        .to_path_buf()
}

#[test]
fn docs_config_md_has_exactly_the_tables_rows() {
    let doc = std::fs::read_to_string(workspace().join("docs/CONFIG.md")).unwrap();
    let rows: Vec<&str> = doc.lines().filter(|l| l.starts_with("| `FM_")).collect();
    let mut seen = BTreeMap::new();
    for s in fm::settings::all() {
        assert!(
            seen.insert(s.var, ()).is_none(),
            "{} is in the table twice",
            s.var
        );
        let row = s.markdown_row();
        assert!(
            rows.contains(&row.as_str()),
            "docs/CONFIG.md lacks (or differs from) the table's row:\n{row}"
        );
    }
    for r in rows {
        let var = r.split('`').nth(1).unwrap_or_default();
        assert!(
            seen.contains_key(var),
            "docs/CONFIG.md documents {var}, which no table declares"
        );
    }
}

#[test]
fn the_settings_file_takes_the_tuning_settings_only() {
    let text = "net = \"null\"\nshm_inline = 0\n";
    let f = fm::config_file::ConfigFile::parse(Path::new("fm.toml"), text).unwrap();
    assert_eq!(f.get("FM_NET"), Some(("null", 1)));
    for s in fm::settings::all().filter(|s| s.scope != Scope::Setting) {
        let line = format!("{} = \"x\"\n", s.file_key());
        let e = fm::config_file::ConfigFile::parse(Path::new("fm.toml"), &line);
        assert!(e.is_err(), "{} may not come from the file", s.var);
    }
}

/// Each `"FM_…"` string literal in `text` (up to its tests module), with
/// whether it is a table's `var:` line.
fn literals(text: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            break;
        }
        let mut rest = line;
        while let Some(i) = rest.find("\"FM_") {
            let tail = &rest[i + 1..];
            let end = tail
                .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
                .unwrap_or(tail.len());
            // A name ending in `_` (`"FM_"`, `"FM_TEST_"`) is a prefix,
            // not a variable.
            if tail[end..].starts_with('"') && !tail[..end].ends_with('_') {
                out.push((
                    tail[..end].to_string(),
                    line.trim_start().starts_with("var: "),
                ));
            }
            rest = &tail[end..];
        }
    }
    out
}

/// Names spelled outside a table, and names declared more than once.
fn misplaced(files: &[(String, String)]) -> Vec<String> {
    let mut declared: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut wrong = Vec::new();
    for (path, text) in files {
        for (var, is_decl) in literals(text) {
            if is_decl {
                declared.entry(var).or_default().push(path.clone());
            } else {
                wrong.push(format!("{path}: \"{var}\" outside a table of settings"));
            }
        }
    }
    for (var, at) in declared.into_iter().filter(|(_, at)| at.len() > 1) {
        wrong.push(format!("{var} declared {} times: {at:?}", at.len()));
    }
    wrong
}

fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let text = std::fs::read_to_string(&p).unwrap();
            out.push((p.display().to_string(), text));
        }
    }
}

#[test]
fn each_variable_is_named_in_one_place() {
    let root = workspace();
    let mut files = Vec::new();
    for krate in std::fs::read_dir(&root).unwrap().flatten() {
        let src = krate.path().join("src");
        // The tests crate is test programs: they set variables by name.
        if src.is_dir() && krate.file_name() != "tests" {
            sources(&src, &mut files);
        }
    }
    assert!(files.len() > 40, "found only {} source files", files.len());
    let wrong = misplaced(&files);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_one_place_check_catches_a_stray_name_and_a_second_declaration() {
    let table = "pub const X: Setting = Setting {\n    var: \"FM_X\",\n};\n";
    let stray = "let v = std::env::var(\"FM_X\");\n#[cfg(test)]\nmod t { \"FM_Y\" }\n";
    let files = [
        ("a.rs".to_string(), table.to_string()),
        ("b.rs".to_string(), stray.to_string()),
        ("c.rs".to_string(), table.to_string()),
    ];
    let wrong = misplaced(&files);
    assert_eq!(wrong.len(), 2, "{wrong:?}");
    assert!(wrong[0].contains("b.rs") && wrong[1].contains("declared 2 times"));
    assert!(misplaced(&files[..1]).is_empty());
}

/// docs/CONFIG.md's example settings file parses, each key standing for the
/// variable its comment names; and the variables the text says cannot be in
/// the file are exactly the table's environment-only ones.
#[test]
fn the_settings_file_example_in_the_docs_is_right() {
    let doc = std::fs::read_to_string(workspace().join("docs/CONFIG.md")).unwrap();
    let start = doc
        .find("    # ~/.config/fm/fm.toml\n")
        .expect("the example");
    let example: Vec<&str> = doc[start..]
        .lines()
        .take_while(|l| l.starts_with("    "))
        .map(|l| &l[4..])
        .collect();
    let text = example.join("\n");
    let file = fm::config_file::ConfigFile::parse(Path::new("fm.toml"), &text)
        .unwrap_or_else(|e| panic!("the example does not parse: {e}"));
    let mut keys = 0;
    for line in &example[1..] {
        let var = line
            .split("# ")
            .nth(1)
            .and_then(|c| c.split(':').next())
            .expect("a comment");
        assert!(file.get(var.trim()).is_some(), "{line}: not {var}");
        keys += 1;
    }
    assert!(keys >= 3);
    let before = &doc[..start];
    let said = before[before.rfind("Every tuning variable").expect("the text")..].to_string();
    for s in fm::settings::all() {
        let named = said.contains(&format!("`{}`", s.var));
        assert_eq!(
            named,
            s.scope != Scope::Setting,
            "{}: the text and the table disagree",
            s.var
        );
    }
}

/// Every TOML error says why: the parser gives no message for a control
/// character in a comment, so the character is named (it used to print
/// `fm.toml:2: ` and nothing more).
#[test]
fn a_toml_error_always_has_a_reason() {
    let e = fm::config_file::ConfigFile::parse(Path::new("fm.toml"), "net = \"null\"\n# a\x7fb\n")
        .expect_err("refused");
    assert_eq!(e, "fm.toml:2: character '\\u{7f}' is not allowed here");
    let e =
        fm::config_file::ConfigFile::parse(Path::new("fm.toml"), "net = [").expect_err("refused");
    let reason = e.strip_prefix("fm.toml:1: ").expect("located");
    assert!(!reason.trim().is_empty(), "{e}");
}
