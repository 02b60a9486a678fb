//! Typed look-ups into parsed YAML that record a [`Problem`] instead of failing fast.

use yaml_serde::{Mapping, Value};

use std::fmt;

/// One rule violation: which file, which field (may be empty), what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub file: String,
    pub field: String,
    pub message: String,
}

impl Problem {
    pub(crate) fn new(file: impl Into<String>, field: impl Into<String>, message: impl Into<String>) -> Problem {
        Problem { file: file.into(), field: field.into(), message: message.into() }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(f, "{}: {}: {}", self.file, self.field, self.message)
        }
    }
}

/// Value at a dotted path (`meta.runner.version`); YAML `null` counts as absent, as it
/// leaves a Go struct field at its zero value.
pub(crate) fn at<'v>(v: &'v Value, path: &str) -> Option<&'v Value> {
    let mut cur = v;
    for key in path.split('.') {
        cur = cur.as_mapping()?.get(key)?;
    }
    (!cur.is_null()).then_some(cur)
}

/// How a value reads in an error message.
pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "an object",
        Value::Tagged(_) => "a tagged value",
    }
}

/// Problem collector for one file.
pub(crate) struct Checker<'p> {
    pub(crate) file: String,
    problems: &'p mut Vec<Problem>,
    warnings: &'p mut Vec<String>,
}

impl<'p> Checker<'p> {
    pub(crate) fn new(
        file: impl Into<String>,
        problems: &'p mut Vec<Problem>,
        warnings: &'p mut Vec<String>,
    ) -> Checker<'p> {
        Checker { file: file.into(), problems, warnings }
    }

    pub(crate) fn problem(&mut self, field: &str, message: impl Into<String>) {
        self.problems.push(Problem::new(&self.file, field, message));
    }

    pub(crate) fn warn(&mut self, field: &str, message: impl AsRef<str>) {
        let file = &self.file;
        let message = message.as_ref();
        self.warnings.push(if field.is_empty() {
            format!("{file}: {message}")
        } else {
            format!("{file}: {field}: {message}")
        });
    }

    /// Parses `text` as a YAML mapping; records why not.
    pub(crate) fn parse(&mut self, text: &[u8]) -> Option<Value> {
        match yaml_serde::from_slice::<Value>(text) {
            Ok(v @ Value::Mapping(_)) => Some(v),
            Ok(other) => {
                self.problem("", format!("must be a YAML mapping, found {}", kind(&other)));
                None
            }
            Err(e) => {
                self.problem("", format!("is not valid YAML: {e}"));
                None
            }
        }
    }

    /// A required, non-empty string.
    pub(crate) fn req_str<'v>(&mut self, v: Option<&'v Value>, field: &str) -> Option<&'v str> {
        match v {
            None => {
                self.problem(field, "is required");
                None
            }
            Some(Value::String(s)) if s.is_empty() => {
                self.problem(field, "must not be empty");
                None
            }
            Some(Value::String(s)) => Some(s),
            Some(other) => {
                self.problem(field, format!("must be a string, found {}", kind(other)));
                None
            }
        }
    }

    pub(crate) fn opt_str<'v>(&mut self, v: Option<&'v Value>, field: &str) -> Option<&'v str> {
        v.and_then(|_| self.req_str(v, field))
    }

    pub(crate) fn req_map<'v>(&mut self, v: Option<&'v Value>, field: &str) -> Option<&'v Mapping> {
        match v {
            None => {
                self.problem(field, "is required");
                None
            }
            Some(Value::Mapping(m)) => Some(m),
            Some(other) => {
                self.problem(field, format!("must be an object, found {}", kind(other)));
                None
            }
        }
    }

    pub(crate) fn opt_map<'v>(&mut self, v: Option<&'v Value>, field: &str) -> Option<&'v Mapping> {
        v.and_then(|_| self.req_map(v, field))
    }

    pub(crate) fn req_list<'v>(&mut self, v: Option<&'v Value>, field: &str) -> Option<&'v [Value]> {
        match v {
            None => {
                self.problem(field, "is required");
                None
            }
            Some(Value::Sequence(s)) => Some(s),
            Some(other) => {
                self.problem(field, format!("must be a list, found {}", kind(other)));
                None
            }
        }
    }

    pub(crate) fn opt_list<'v>(&mut self, v: Option<&'v Value>, field: &str) -> Option<&'v [Value]> {
        v.and_then(|_| self.req_list(v, field))
    }

    pub(crate) fn opt_bool(&mut self, v: Option<&Value>, field: &str) -> Option<bool> {
        match v {
            None => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(other) => {
                self.problem(field, format!("must be true or false, found {}", kind(other)));
                None
            }
        }
    }

    /// A list of strings (each item checked).
    pub(crate) fn str_list<'v>(&mut self, v: Option<&'v Value>, field: &str, required: bool) -> Vec<&'v str> {
        let list = if required { self.req_list(v, field) } else { self.opt_list(v, field) };
        let mut out = Vec::new();
        for (i, item) in list.unwrap_or_default().iter().enumerate() {
            if let Some(s) = self.req_str(Some(item), &format!("{field}[{i}]")) {
                out.push(s);
            }
        }
        out
    }

    /// An i18n object (spec §1.3): `en_US` 1–1023 characters; `zh_Hans`, `ja_JP`,
    /// `pt_BR` strings under 1024 characters when present.
    pub(crate) fn i18n(&mut self, v: Option<&Value>, field: &str, required: bool) {
        let Some(map) = (if required { self.req_map(v, field) } else { self.opt_map(v, field) }) else {
            return;
        };
        let map = Value::Mapping(map.clone());
        let en = format!("{field}.en_US");
        if let Some(text) = self.req_str(at(&map, "en_US"), &en) {
            if text.chars().count() > 1023 {
                self.problem(&en, "must be at most 1023 characters");
            }
        }
        for lang in ["zh_Hans", "ja_JP", "pt_BR"] {
            let f = format!("{field}.{lang}");
            if let Some(text) = self.opt_str(at(&map, lang), &f) {
                if text.chars().count() > 1023 {
                    self.problem(&f, "must be at most 1023 characters");
                }
            }
        }
    }

    /// A required string that must be one of `allowed`.
    pub(crate) fn one_of(&mut self, v: Option<&Value>, field: &str, allowed: &[&str]) -> Option<String> {
        let s = self.req_str(v, field)?;
        if allowed.contains(&s) {
            Some(s.to_string())
        } else {
            self.problem(field, format!("`{s}` is not one of: {}", allowed.join(", ")));
            None
        }
    }
}
