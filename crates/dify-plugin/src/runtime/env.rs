//! Runtime settings: the process environment first, then a `.env` file in the working directory.

use std::collections::HashMap;
use std::path::Path;

/// Where the runtimes read their settings, read once at start-up. As with the Python SDK, a
/// developer keeps the debugging key in `.env`; an environment variable overrides the file.
/// A test builds one from pairs ([`EnvSettings::from_pairs`]) instead of changing the
/// process environment.
#[derive(Debug, Default, Clone)]
pub struct EnvSettings {
    vars: HashMap<String, String>,
    file: HashMap<String, String>,
}

impl EnvSettings {
    /// The process environment as it is now, and `./.env` when there is one (a missing file
    /// is the normal case).
    pub fn load() -> Self {
        Self::from_file(Path::new(".env"))
    }

    /// The process environment as it is now, and the `.env` file at `path`.
    pub fn from_file(path: &Path) -> Self {
        let file = match std::fs::read_to_string(path) {
            Ok(text) => parse(&text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => HashMap::new(),
            Err(e) => {
                tracing::warn!("ignoring {}: {e}", path.display());
                HashMap::new()
            }
        };
        // Variables that are not UTF-8 cannot be settings of ours; they are left out.
        let vars = std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
        EnvSettings { vars: vars.collect(), file }
    }

    /// Settings from `pairs` alone, as if they were the whole environment and there were no
    /// `.env` file.
    pub fn from_pairs<K: Into<String>, V: Into<String>>(pairs: impl IntoIterator<Item = (K, V)>) -> Self {
        EnvSettings { vars: pairs.into_iter().map(|(k, v)| (k.into(), v.into())).collect(), file: HashMap::new() }
    }

    /// The environment variable when set and not empty, else the `.env` value.
    /// (An empty variable counts as unset: `make` and shells pass empty ones around freely.)
    pub fn get(&self, name: &str) -> Option<String> {
        match self.vars.get(name) {
            Some(v) if !v.trim().is_empty() => Some(v.trim().to_owned()),
            _ => self.dotenv(name),
        }
    }

    /// Only the `.env` value.
    pub fn dotenv(&self, name: &str) -> Option<String> {
        self.file.get(name).filter(|v| !v.is_empty()).cloned()
    }
}

/// Parses `KEY=value` lines. Not `dotenvy`: it expands `$VAR` in values (a debugging key with
/// a `$` would change) and its parse errors carry the line, which may hold that key.
///
/// Blank lines and `#` comments skipped, an optional `export `
/// prefix, values optionally in single quotes (literal) or double quotes (`\n`, `\"`, `\\`
/// escapes); an unquoted value ends at ` #`. Bad lines are skipped with a warning that names
/// the line number only: the line may hold a secret.
pub(crate) fn parse(text: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for (n, raw) in text.trim_start_matches('\u{feff}').lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").map(str::trim_start).unwrap_or(line);
        let parsed = line.split_once('=').and_then(|(k, v)| {
            let key = k.trim();
            let valid = !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            valid.then_some(key).zip(value(v.trim()))
        });
        match parsed {
            Some((key, v)) => {
                out.insert(key.to_owned(), v);
            }
            None => tracing::warn!(".env line {} is not KEY=value; skipped", n + 1),
        }
    }
    out
}

fn value(v: &str) -> Option<String> {
    if let Some(rest) = v.strip_prefix('\'') {
        return rest.find('\'').map(|end| rest[..end].to_owned());
    }
    if let Some(rest) = v.strip_prefix('"') {
        let mut out = String::new();
        let mut chars = rest.chars();
        while let Some(c) = chars.next() {
            match c {
                '"' => return Some(out),
                '\\' => match chars.next()? {
                    'n' => out.push('\n'),
                    other => out.push(other),
                },
                c => out.push(c),
            }
        }
        return None;
    }
    let end = v.find(" #").or_else(|| v.find("\t#")).unwrap_or(v.len());
    Some(v[..end].trim_end().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_comments_quotes_and_export() {
        let text = concat!(
            "\u{feff}# remote debugging\n\nINSTALL_METHOD=remote\r\n",
            "export REMOTE_INSTALL_URL = \"debug.example:5003\"\n",
            "REMOTE_INSTALL_KEY='a#b \"c\"'  # the key\n",
            "PLAIN=value # trailing\nHASH=a#b\nEMPTY=\n",
            "ESC=\"x\\\"y\\\\z\\n\"\n",
        );
        let m = parse(text);
        assert_eq!(m["INSTALL_METHOD"], "remote");
        assert_eq!(m["REMOTE_INSTALL_URL"], "debug.example:5003");
        assert_eq!(m["REMOTE_INSTALL_KEY"], "a#b \"c\"");
        assert_eq!(m["PLAIN"], "value");
        assert_eq!(m["HASH"], "a#b");
        assert_eq!(m["EMPTY"], "");
        assert_eq!(m["ESC"], "x\"y\\z\n");
    }

    #[test]
    fn bad_lines_are_skipped_not_fatal() {
        let m = parse("no equals sign\n=value\nBAD KEY=1\nOPEN=\"never closed\nGOOD=1\n");
        assert_eq!(m.len(), 1);
        assert_eq!(m["GOOD"], "1");
    }

    #[test]
    fn missing_file_is_empty_and_empty_values_are_unset() {
        let s = EnvSettings::from_file(Path::new("/nonexistent/.env"));
        assert_eq!(s.dotenv("ANY"), None);
        let s = EnvSettings { vars: HashMap::new(), file: parse("DOTENV_ONLY=\n") };
        assert_eq!(s.get("DOTENV_ONLY"), None);
    }

    #[test]
    fn the_environment_wins_over_the_file_unless_it_is_blank() {
        let mut s = EnvSettings::from_pairs([("BOTH", " env "), ("BLANK", "  ")]);
        s.file = parse("BOTH=file\nBLANK=file\nFILE_ONLY=f\n");
        assert_eq!(s.get("BOTH").as_deref(), Some("env"), "trimmed");
        assert_eq!(s.get("BLANK").as_deref(), Some("file"), "a blank variable counts as unset");
        assert_eq!(s.get("FILE_ONLY").as_deref(), Some("f"));
        assert_eq!(s.get("NEITHER"), None);
    }
}
