//! Field rules shared by the manifest, runtime and tool checks: versions and icon names.

use yaml_serde::Value;

use super::patterns;
use super::yamlcheck::Checker;

/// Checks an icon file name (relative to `_assets/`) and returns its entry name.
pub(crate) fn icon_entry(c: &mut Checker, icon: &str, field: &str) -> Option<String> {
    if let Some(inner) = icon.strip_prefix("_assets/") {
        c.problem(field, format!("`{icon}` must be relative to _assets/ (write `{inner}`)"));
        return None;
    }
    if icon.chars().count() > 128 {
        c.problem(field, "must be at most 128 characters");
    }
    let entry = format!("_assets/{icon}");
    match super::archive::check_entry_name(&entry) {
        Ok(()) => Some(entry),
        Err(e) => {
            c.problem(field, format!("`{icon}` is not a usable file name: {e}"));
            None
        }
    }
}

/// Checks a version string the way the daemon, the SDK and the Dify API all accept it.
pub(crate) fn check_version(c: &mut Checker, v: Option<&Value>, field: &str) -> Option<String> {
    if let Some(Value::Number(n)) = v {
        c.problem(field, format!("must be a string; `{n}` reads as a number, quote it"));
        return None;
    }
    let s = c.req_str(v, field)?;
    if !patterns::is_daemon_version(s) {
        c.problem(field, format!("`{s}` does not match ^\\d{{1,4}}(\\.\\d{{1,4}}){{2}}(-\\w{{1,16}})?$"));
        return None;
    }
    if !patterns::is_pep440(s) {
        c.problem(field, format!("`{s}` is not a PEP 440 version, which the Python SDK and Dify API require (e.g. 1.0.0-rc1 is fine, 1.0.0-foo is not)"));
        return None;
    }
    Some(s.to_string())
}
