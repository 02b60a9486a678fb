//! Reading tool parameters the way workflow nodes and LLM agents actually send them.

use std::borrow::Cow;

use dify_plugin::protocol::{raw_str, Fields};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::error::ToolError;

/// A call's `tool_parameters`: each member's JSON text, borrowed from the request.
pub type Params<'a> = Fields<'a>;

/// What a parameter holds, read from its text without building a tree.
enum Param<'a> {
    /// Absent or `null`.
    Absent,
    Bool,
    Str(Cow<'a, str>),
    /// A number, as it was written.
    Number(&'a str),
    /// An object or an array.
    Composite(&'a RawValue),
}

fn param<'a>(params: &Params<'a>, name: &str) -> Param<'a> {
    let Some(raw) = params.get(name) else { return Param::Absent };
    match raw.get().as_bytes().first() {
        Some(b'n') => Param::Absent,
        Some(b't' | b'f') => Param::Bool,
        Some(b'"') => raw_str(raw).map_or(Param::Absent, Param::Str),
        Some(b'{' | b'[') => Param::Composite(raw),
        _ => Param::Number(raw.get()),
    }
}

/// A required string. Numbers are accepted as their decimal text (agents often send ids as
/// numbers); anything else is a clear `param_invalid`. An empty string is reported as empty,
/// not as missing: a workflow that maps an empty variable needs to hear that.
pub fn required_str(params: &Params, name: &str) -> Result<String, ToolError> {
    if matches!(param(params, name), Param::Str(s) if s.is_empty()) {
        return Err(ToolError::param(match name {
            "event_id" => "event_id is empty: pass the unique id the source system gave this event".to_owned(),
            _ => format!("{name} is empty: pass a value"),
        }));
    }
    optional_str(params, name)?.ok_or_else(|| ToolError::param(format!("{name} is required")))
}

/// An optional string; null and "" mean absent. Objects and arrays are accepted as their
/// (compact) JSON text, so an agent passing a JSON payload object is understood.
pub fn optional_str(params: &Params, name: &str) -> Result<Option<String>, ToolError> {
    match param(params, name) {
        Param::Absent => Ok(None),
        Param::Str(s) if s.is_empty() => Ok(None),
        Param::Str(s) => Ok(Some(s.into_owned())),
        Param::Number(n) => Ok(Some(n.to_owned())),
        Param::Composite(raw) => match serde_json::from_str::<Value>(raw.get()) {
            Ok(v) => Ok(Some(v.to_string())),
            Err(e) => Err(ToolError::param(format!("{name} is not JSON this plugin can read: {e}"))),
        },
        Param::Bool => Err(ToolError::param(format!("{name} must be text, not true/false"))),
    }
}

/// An optional payload: text as given, except Dify's `str()` of an object or array (a
/// workflow variable wired straight to the field), which is read back as the JSON text it
/// came from, so it gets the same fingerprint and stored form as that JSON.
pub fn optional_payload(params: &Params, name: &str) -> Result<Option<String>, ToolError> {
    Ok(optional_str(params, name)?.map(|text| match super::pyrepr::json_from_python_repr(&text) {
        // Valid JSON stays as it is (e.g. `[1, 2]` reads the same in both languages).
        Some(json) if serde_json::from_str::<serde::de::IgnoredAny>(&text).is_err() => json,
        _ => text,
    }))
}

/// An optional whole number within `min..=max`; numeric strings are accepted.
pub fn optional_int(params: &Params, name: &str, min: i64, max: i64) -> Result<Option<i64>, ToolError> {
    let bad = || ToolError::param(format!("{name} must be a whole number from {min} to {max}"));
    let n = match param(params, name) {
        Param::Absent => return Ok(None),
        Param::Str(s) if s.trim().is_empty() => return Ok(None),
        Param::Str(s) => s.trim().parse::<f64>().map_err(|_| bad())?,
        Param::Number(n) => n.parse::<f64>().map_err(|_| bad())?,
        Param::Bool | Param::Composite(_) => return Err(bad()),
    };
    if n.fract() != 0.0 || n < min as f64 || n > max as f64 {
        return Err(bad());
    }
    Ok(Some(n as i64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::testing::params as p;
    use serde_json::json;

    #[test]
    fn strings() {
        let m = p(json!({"a": "x", "b": 12, "c": "", "d": null, "e": {"k": 1}, "f": true}));
        assert_eq!(required_str(&m, "a").unwrap(), "x");
        assert_eq!(required_str(&m, "b").unwrap(), "12");
        assert!(required_str(&m, "c").unwrap_err().message.contains("c is empty"));
        assert!(required_str(&m, "d").unwrap_err().message.contains("required"));
        assert_eq!(optional_str(&m, "e").unwrap().unwrap(), r#"{"k":1}"#);
        assert!(optional_str(&m, "f").is_err());
        assert_eq!(optional_str(&m, "zz").unwrap(), None);
    }

    #[test]
    fn text_of_every_shape() {
        let m = Fields::parse(
            r#"{"n": 1.50, "big": 12345678901234567890123, "o": {"b": 1, "a": [1, 2.0]}, "e": "a\"b\u00e9"}"#,
        )
        .unwrap();
        assert_eq!(optional_str(&m, "n").unwrap().as_deref(), Some("1.50"), "a number as it was written");
        assert_eq!(optional_str(&m, "big").unwrap().as_deref(), Some("12345678901234567890123"));
        assert_eq!(optional_str(&m, "o").unwrap().as_deref(), Some(r#"{"b":1,"a":[1,2.0]}"#), "compact, in order");
        assert_eq!(optional_str(&m, "e").unwrap().as_deref(), Some("a\"bé"));
        let deep = format!(r#"{{"d": {}{}}}"#, "[".repeat(200), "]".repeat(200));
        let m = Fields::parse(&deep).unwrap();
        assert_eq!(optional_str(&m, "d").unwrap_err().class, crate::error::ErrorClass::ParamInvalid);
    }

    #[test]
    fn ints() {
        let m = p(json!({"a": 3, "b": "4", "c": 1.5, "d": -1, "e": "x", "f": 3.0}));
        assert_eq!(optional_int(&m, "a", 0, 10).unwrap(), Some(3));
        assert_eq!(optional_int(&m, "b", 0, 10).unwrap(), Some(4));
        assert_eq!(optional_int(&m, "f", 0, 10).unwrap(), Some(3));
        assert!(optional_int(&m, "c", 0, 10).is_err());
        assert!(optional_int(&m, "d", 0, 10).is_err());
        assert!(optional_int(&m, "e", 0, 10).is_err());
        assert_eq!(optional_int(&m, "zz", 0, 10).unwrap(), None);
    }
}
