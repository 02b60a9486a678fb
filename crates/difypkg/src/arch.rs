//! Target architectures, `--bin ARCH=PATH` parsing and the minimal `meta.arch` rewrite.

use std::fmt;

use yaml_serde::Value;

use thiserror::Error;

/// Why the manifest's `meta.arch` list cannot be rewritten by a text edit.
#[derive(Debug, Error)]
pub(crate) enum RewriteError {
    #[error("the manifest is not UTF-8")]
    NotUtf8,
    #[error("no top-level `meta:` block in block style")]
    NoMetaBlock,
    #[error("no `arch:` key directly under `meta:`")]
    NoArchKey,
    #[error("manifest is not valid YAML")]
    Yaml(#[source] yaml_serde::Error),
    #[error("the rewritten manifest is not valid YAML")]
    RewrittenYaml(#[source] yaml_serde::Error),
    #[error("manifest has no `meta` object")]
    NoMetaObject,
    #[error("the text rewrite would change more than `meta.arch`")]
    Changed,
}

/// The two architectures the daemon knows (`constants/arch.go`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Arch {
    Amd64,
    Arm64,
}

impl Arch {
    /// The name the daemon and `meta.arch` use.
    pub fn as_str(self) -> &'static str {
        match self {
            Arch::Amd64 => "amd64",
            Arch::Arm64 => "arm64",
        }
    }

    /// The architecture `meta.arch` names `s`, if any.
    pub fn parse(s: &str) -> Option<Arch> {
        match s {
            "amd64" => Some(Arch::Amd64),
            "arm64" => Some(Arch::Arm64),
            _ => None,
        }
    }

    /// Architecture of the running binary, used when no `--bin` is given.
    pub fn host() -> Option<Arch> {
        if cfg!(target_arch = "x86_64") {
            Some(Arch::Amd64)
        } else if cfg!(target_arch = "aarch64") {
            Some(Arch::Arm64)
        } else {
            None
        }
    }

    /// Entry name of this architecture's binary; the `main.py` shim execs exactly this.
    pub fn binary_entry(self) -> String {
        format!("bin/stateful-tool-{}", self.as_str())
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

/// Line content without indentation, trailing comment and line break.
fn content_of(line: &str) -> &str {
    let s = line.trim();
    if s.starts_with('#') {
        return "";
    }
    match s.find(" #") {
        Some(i) => s[..i].trim_end(),
        None => s,
    }
}

/// Rewrites only the `meta.arch` list of a manifest so that it names exactly `arches`,
/// leaving every other byte alone. The result is re-parsed and must equal the original
/// document with just `meta.arch` replaced; otherwise the rewrite is refused.
pub(crate) fn rewrite_arch(text: &str, arches: &[Arch]) -> Result<String, RewriteError> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let meta =
        lines.iter().position(|l| indent_of(l) == 0 && content_of(l) == "meta:").ok_or(RewriteError::NoMetaBlock)?;
    let mut child_indent = None;
    let mut key = None;
    for (i, line) in lines.iter().enumerate().skip(meta + 1) {
        let content = content_of(line);
        if content.is_empty() {
            continue;
        }
        let indent = indent_of(line);
        if indent == 0 {
            break;
        }
        let child = *child_indent.get_or_insert(indent);
        if indent == child && (content == "arch:" || content.starts_with("arch: ")) {
            key = Some(i);
            break;
        }
    }
    let (Some(key), Some(child)) = (key, child_indent) else {
        return Err(RewriteError::NoArchKey);
    };
    // The list items that follow the key: deeper lines, or `- ` lines at the key's level.
    let mut last = key;
    let mut item_indent = None;
    if content_of(lines[key]) == "arch:" {
        for (i, line) in lines.iter().enumerate().skip(key + 1) {
            let content = content_of(line);
            if content.is_empty() {
                continue;
            }
            let indent = indent_of(line);
            let is_item = content == "-" || content.starts_with("- ");
            if indent > child || (indent == child && is_item) {
                if is_item && item_indent.is_none() {
                    item_indent = Some(indent);
                }
                last = i;
            } else {
                break;
            }
        }
    }
    let eol = if lines[key].ends_with("\r\n") { "\r\n" } else { "\n" };
    let pad = |n: usize| " ".repeat(n);
    let items = item_indent.unwrap_or(child + 2);
    let mut out = String::with_capacity(text.len());
    lines[..key].iter().for_each(|l| out.push_str(l));
    out.push_str(&format!("{}arch:{eol}", pad(child)));
    for arch in arches {
        out.push_str(&format!("{}- {arch}{eol}", pad(items)));
    }
    lines[last + 1..].iter().for_each(|l| out.push_str(l));
    confirm_rewrite(text, &out, arches)?;
    Ok(out)
}

fn confirm_rewrite(before: &str, after: &str, arches: &[Arch]) -> Result<(), RewriteError> {
    let mut want: Value = yaml_serde::from_str(before).map_err(RewriteError::Yaml)?;
    let got: Value = yaml_serde::from_str(after).map_err(RewriteError::RewrittenYaml)?;
    let list = arches.iter().map(|a| Value::from(a.as_str())).collect();
    match want.get_mut("meta").and_then(Value::as_mapping_mut) {
        Some(meta) => meta.insert("arch".into(), Value::Sequence(list)),
        None => return Err(RewriteError::NoMetaObject),
    };
    if want == got {
        Ok(())
    } else {
        Err(RewriteError::Changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BLOCK: &str = "name: x\nmeta:\n  version: 0.0.1\n  arch:\n    - amd64\n    - arm64\n  runner:\n    language: python\ncreated_at: now\n";

    #[test]
    fn block_list_is_rewritten_in_place() {
        let out = rewrite_arch(BLOCK, &[Arch::Amd64]).unwrap();
        assert_eq!(out, BLOCK.replace("    - arm64\n", ""));
    }

    #[test]
    fn same_level_items_and_flow_lists() {
        let same = "meta:\n  arch:\n  - amd64\n  - arm64 # both\n  runner: {}\n";
        assert_eq!(rewrite_arch(same, &[Arch::Arm64]).unwrap(), "meta:\n  arch:\n  - arm64\n  runner: {}\n");
        let flow = "meta:\n  arch: [amd64, arm64]\n  version: 0.0.1\n";
        assert_eq!(rewrite_arch(flow, &[Arch::Amd64]).unwrap(), "meta:\n  arch:\n    - amd64\n  version: 0.0.1\n");
    }

    #[test]
    fn missing_key_is_an_error() {
        assert!(rewrite_arch("meta:\n  version: 1\n", &[Arch::Amd64]).is_err());
        assert!(rewrite_arch("meta: {arch: [amd64]}\n", &[Arch::Amd64]).is_err());
    }
}
