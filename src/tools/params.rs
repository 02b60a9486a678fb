//! Reading tool parameters the way workflow nodes and LLM agents actually send them.

use serde_json::{Map, Value};

use crate::error::ToolError;

/// A required string. Numbers are accepted as their decimal text (agents often send ids as
/// numbers); anything else is a clear `param_invalid`. An empty string is reported as empty,
/// not as missing: a workflow that maps an empty variable needs to hear that.
pub fn required_str(params: &Map<String, Value>, name: &str) -> Result<String, ToolError> {
    if matches!(params.get(name), Some(Value::String(s)) if s.is_empty()) {
        return Err(ToolError::param(match name {
            "event_id" => "event_id is empty: pass the unique id the source system gave this event".to_owned(),
            _ => format!("{name} is empty: pass a value"),
        }));
    }
    optional_str(params, name)?.ok_or_else(|| ToolError::param(format!("{name} is required")))
}

/// An optional string; null and "" mean absent. Objects and arrays are accepted as their
/// JSON text, so an agent passing a JSON payload object is understood.
pub fn optional_str(params: &Map<String, Value>, name: &str) -> Result<Option<String>, ToolError> {
    match params.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Number(n)) => Ok(Some(n.to_string())),
        Some(v @ (Value::Object(_) | Value::Array(_))) => Ok(Some(v.to_string())),
        Some(Value::Bool(_)) => Err(ToolError::param(format!("{name} must be text, not true/false"))),
    }
}

/// An optional payload: text as given, except Dify's `str()` of an object or array (a
/// workflow variable wired straight to the field), which is read back as the JSON text it
/// came from, so it gets the same fingerprint and stored form as that JSON.
pub fn optional_payload(params: &Map<String, Value>, name: &str) -> Result<Option<String>, ToolError> {
    Ok(optional_str(params, name)?.map(|text| match super::pyrepr::json_from_python_repr(&text) {
        // Valid JSON stays as it is (e.g. `[1, 2]` reads the same in both languages).
        Some(json) if serde_json::from_str::<serde::de::IgnoredAny>(&text).is_err() => json,
        _ => text,
    }))
}

/// An optional whole number within `min..=max`; numeric strings are accepted.
pub fn optional_int(params: &Map<String, Value>, name: &str, min: i64, max: i64) -> Result<Option<i64>, ToolError> {
    let bad = || ToolError::param(format!("{name} must be a whole number from {min} to {max}"));
    let n = match params.get(name) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => return Ok(None),
        Some(Value::String(s)) => s.trim().parse::<f64>().map_err(|_| bad())?,
        Some(Value::Number(n)) => n.as_f64().ok_or_else(bad)?,
        Some(_) => return Err(bad()),
    };
    if n.fract() != 0.0 || n < min as f64 || n > max as f64 {
        return Err(bad());
    }
    Ok(Some(n as i64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

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
