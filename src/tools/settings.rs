//! Provider credentials → per-call settings (store, namespace, event types, retention).

use std::time::Duration;

use serde_json::Value;

use crate::error::ToolError;
use crate::store::key::validate_namespace;
use crate::store::StoreConfig;

pub const DEFAULT_KV_URL: &str = "http://127.0.0.1:8123";
pub const DEFAULT_EVENT_TYPES: &str = "created,updated,closed";
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// More replicas than any sane deployment has: a typo, not a setting.
const MAX_MIN_REPLICAS: u32 = 16;
const MAX_RETENTION: Duration = Duration::from_secs(3650 * 24 * 3600);

#[derive(Debug, Clone)]
pub struct Settings {
    pub store: StoreConfig,
    pub namespace: Option<String>,
    pub event_types: Vec<String>,
    /// Store-side TTL of every record; an expired id is a new event.
    pub retention: Duration,
}

/// A credential as a trimmed string; absent, null and empty all mean "not set".
fn credential(creds: &Value, name: &str) -> Option<String> {
    match creds.get(name)? {
        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

impl Settings {
    pub fn from_credentials(creds: &Value) -> Result<Settings, ToolError> {
        let url = credential(creds, "kv_url").unwrap_or_else(|| DEFAULT_KV_URL.to_owned());
        let token = credential(creds, "kv_token");
        let namespace = credential(creds, "namespace");
        if let Some(ns) = &namespace {
            validate_namespace(ns)?;
        }
        let types = credential(creds, "event_types").unwrap_or_else(|| DEFAULT_EVENT_TYPES.to_owned());
        let event_types: Vec<String> =
            types.split(',').map(|t| t.trim().to_owned()).filter(|t| !t.is_empty()).collect();
        if event_types.is_empty() {
            return Err(ToolError::param("the event_types credential lists no event type"));
        }
        if let Some(bad) = event_types.iter().find(|t| t.len() > 64 || t.chars().any(char::is_control)) {
            return Err(ToolError::param(format!(
                "event type {bad:?} in the event_types credential is too long or has control characters"
            )));
        }
        let retention = match credential(creds, "retention") {
            None => DEFAULT_RETENTION,
            Some(r) => parse_duration(&r).ok_or_else(|| {
                ToolError::param(format!(
                    "retention {r:?} is not a duration between 1s and 3650d: write e.g. 7d, 12h, 30m or 90s"
                ))
            })?,
        };
        let min_replicas = match credential(creds, "min_replicas") {
            None => 0,
            Some(n) => n.parse::<u32>().ok().filter(|&n| n <= MAX_MIN_REPLICAS).ok_or_else(|| {
                ToolError::param(format!("min_replicas {n:?} is not a number of replicas from 0 to {MAX_MIN_REPLICAS}"))
            })?,
        };
        Ok(Settings { store: StoreConfig { url, token, min_replicas }, namespace, event_types, retention })
    }
}

/// `7d`, `12h`, `30m`, `90s`, or a bare number of seconds; 1 s to 3650 days.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (num, unit) = text.split_at(split);
    let n: u64 = num.parse().ok()?;
    let secs = match unit.trim() {
        "" | "s" => n,
        "m" => n.checked_mul(60)?,
        "h" => n.checked_mul(3600)?,
        "d" => n.checked_mul(86400)?,
        _ => return None,
    };
    let d = Duration::from_secs(secs);
    (secs >= 1 && d <= MAX_RETENTION).then_some(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_apply_when_credentials_are_empty() {
        let s = Settings::from_credentials(&json!({"kv_url": "", "kv_token": null})).unwrap();
        assert_eq!(s.store.url, DEFAULT_KV_URL);
        assert_eq!(s.store.token, None);
        assert_eq!(s.event_types, ["created", "updated", "closed"]);
        assert_eq!(s.retention, DEFAULT_RETENTION);
        assert_eq!(s.namespace, None);
    }

    #[test]
    fn credentials_are_parsed() {
        let s = Settings::from_credentials(&json!({
            "kv_url": "redis://h:1", "kv_token": "t", "namespace": "acme", "event_types": " a, b ,,c", "retention": "12h"
        }))
        .unwrap();
        assert_eq!(s.event_types, ["a", "b", "c"]);
        assert_eq!(s.retention, Duration::from_secs(43200));
        assert_eq!(s.namespace.as_deref(), Some("acme"));
        assert_eq!(s.store.min_replicas, 0);
        let s = Settings::from_credentials(&json!({"min_replicas": "1"})).unwrap();
        assert_eq!(s.store.min_replicas, 1);
    }

    #[test]
    fn bad_credentials_are_param_invalid() {
        for creds in [
            json!({"namespace": "a/b"}),
            json!({"retention": "soon"}),
            json!({"retention": "0s"}),
            json!({"event_types": ","}),
            json!({"min_replicas": "-1"}),
            json!({"min_replicas": "many"}),
        ] {
            let e = Settings::from_credentials(&creds).unwrap_err();
            assert_eq!(e.class, crate::error::ErrorClass::ParamInvalid, "{creds}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("7d"), Some(DEFAULT_RETENTION));
        assert_eq!(parse_duration("3651d"), None);
        assert_eq!(parse_duration("-1s"), None);
        assert_eq!(parse_duration("99999999999999999999d"), None);
    }
}
