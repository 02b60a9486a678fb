//! A subscription's `properties` (its `subscription_schema` values) → what dispatch needs.

use std::time::Duration;

use serde_json::Value;

use super::signature::Scheme;
use crate::tools::settings::{parse_duration, DEFAULT_LEASE, DEFAULT_RETENTION, MAX_LEASE_SECONDS};
use crate::tools::Settings;

pub(crate) const DEFAULT_ID_HEADER: &str = "X-GitHub-Delivery";
pub(crate) const DEFAULT_DUPLICATE_STATUS: u16 = 200;
/// Stripe's and Standard Webhooks' default tolerance for signature timestamps.
pub(crate) const DEFAULT_TOLERANCE_S: i64 = 300;
/// How long a delivery claimed at the door waits for a workflow run to take it: Dify starts
/// runs in Celery seconds after the answer, so a minute covers a busy queue.
pub(crate) const DEFAULT_START_WINDOW: Duration = Duration::from_secs(60);
/// The longest start window (a day, like the longest lease).
const MAX_START_WINDOW_S: u64 = 86_400;

/// Where the delivery id comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum IdSource {
    Header(String),
    /// An RFC 6901 pointer into the JSON body (`/id`).
    JsonPointer(String),
    /// SHA-256 of the raw body: two separate events with equal bodies become one.
    BodySha256,
}

/// Where the event type comes from (optional).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TypeSource {
    None,
    Header(String),
    JsonPointer(String),
}

#[derive(Debug, Clone)]
pub(crate) struct Door {
    pub(crate) id: IdSource,
    pub(crate) event_type: TypeSource,
    pub(crate) scheme: Scheme,
    pub(crate) tolerance_s: i64,
    pub(crate) duplicate_status: u16,
    /// How long a claim made here waits for a workflow run to take it (its lease until then).
    pub(crate) start_window: Duration,
    /// The tool's settings for the claim (store, namespace, retention, and the lease a run
    /// gets once it has taken the claim, `default_lease`).
    pub(crate) settings: Settings,
}

/// A property as trimmed text; absent, null and empty all mean "not set".
fn prop(props: &Value, name: &str) -> Option<String> {
    match props.get(name)? {
        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn number(props: &Value, name: &str, min: u64, max: u64) -> Result<Option<u64>, String> {
    match prop(props, name) {
        None => Ok(None),
        Some(text) => text
            .parse::<u64>()
            .ok()
            .filter(|n| (min..=max).contains(n))
            .map(Some)
            .ok_or_else(|| format!("{name} {text:?} is not a whole number from {min} to {max}")),
    }
}

fn pointer(props: &Value, name: &str) -> Result<Option<String>, String> {
    match prop(props, name) {
        Some(p) if !p.starts_with('/') => Err(format!("{name} {p:?} must start with / (e.g. /id)")),
        other => Ok(other),
    }
}

impl Door {
    /// Reads the properties; the error names the property and what to write instead (every
    /// problem, joined).
    pub(crate) fn from_properties(props: &Value) -> Result<Door, String> {
        Door::read(props).map_err(|problems| problems.join("; "))
    }

    /// Reads the properties, or says every problem with them, one message each.
    pub(crate) fn read(props: &Value) -> Result<Door, Vec<String>> {
        let mut problems = Vec::new();
        let id = if prop(props, "id_body_sha256").as_deref() == Some("true") {
            Some(IdSource::BodySha256)
        } else {
            match pointer(props, "id_json_pointer") {
                Ok(Some(p)) => Some(IdSource::JsonPointer(p)),
                Ok(None) => {
                    Some(IdSource::Header(prop(props, "id_header").unwrap_or_else(|| DEFAULT_ID_HEADER.to_owned())))
                }
                Err(e) => note(Err(e), &mut problems),
            }
        };
        let event_type = note(pointer(props, "event_type_json_pointer"), &mut problems).map(|p| {
            match (prop(props, "event_type_header"), p) {
                (Some(h), _) => TypeSource::Header(h),
                (None, Some(p)) => TypeSource::JsonPointer(p),
                (None, None) => TypeSource::None,
            }
        });
        let scheme = match prop(props, "signature_scheme") {
            None => note(
                Err("signature_scheme is not set: choose the sender's scheme (none accepts anyone's deliveries)".into()),
                &mut problems,
            ),
            Some(name) => note(
                Scheme::new(
                    &name,
                    prop(props, "webhook_secret").as_deref(),
                    prop(props, "signature_header").as_deref(),
                ),
                &mut problems,
            ),
        };
        let tolerance_s = note(number(props, "timestamp_tolerance_seconds", 1, 86_400), &mut problems)
            .map(|n| n.map_or(DEFAULT_TOLERANCE_S, |n| n as i64));
        let duplicate_status = note(number(props, "duplicate_status", 200, 499), &mut problems)
            .map(|n| n.map_or(DEFAULT_DUPLICATE_STATUS, |n| n as u16));
        let lease = note(number(props, "lease_seconds", 0, MAX_LEASE_SECONDS), &mut problems)
            .map(|n| n.map_or(DEFAULT_LEASE, Duration::from_secs));
        let start_window = note(number(props, "start_within_seconds", 1, MAX_START_WINDOW_S), &mut problems)
            .map(|n| n.map_or(DEFAULT_START_WINDOW, Duration::from_secs));
        let retention = match prop(props, "retention") {
            None => Some(DEFAULT_RETENTION),
            Some(r) => note(
                parse_duration(&r).ok_or_else(|| format!("retention {r:?} is not a duration such as 7d or 12h")),
                &mut problems,
            ),
        };
        // The store settings are the tool's, read by the tool's own parser: one store contract.
        let settings = match store_credentials(props) {
            None => note(
                Err("kv_url is not set: give the Store URL of your KV container, Redis or PostgreSQL".into()),
                &mut problems,
            ),
            Some(creds) => note(Settings::from_credentials(&creds).map_err(|e| e.message), &mut problems),
        };
        match (id, event_type, scheme, tolerance_s, duplicate_status, lease, start_window, retention, settings) {
            (
                Some(id),
                Some(event_type),
                Some(scheme),
                Some(tolerance_s),
                Some(duplicate_status),
                Some(lease),
                Some(start_window),
                Some(retention),
                Some(mut settings),
            ) if problems.is_empty() => {
                settings.default_lease = lease;
                settings.retention = retention;
                Ok(Door { id, event_type, scheme, tolerance_s, duplicate_status, start_window, settings })
            }
            _ => Err(problems),
        }
    }
}

/// The store's properties as the tools' credentials; None without a `kv_url`.
pub(crate) fn store_credentials(props: &Value) -> Option<Value> {
    let mut creds = serde_json::Map::new();
    for name in ["kv_url", "kv_token", "namespace"] {
        if let Some(v) = prop(props, name) {
            creds.insert(name.to_owned(), Value::String(v));
        }
    }
    creds.contains_key("kv_url").then_some(Value::Object(creds))
}

/// `r`'s value, or None with its problem noted.
fn note<T>(r: Result<T, String>, problems: &mut Vec<String>) -> Option<T> {
    r.map_err(|e| problems.push(e)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const STORE: &str = "http://127.0.0.1:8123";

    #[test]
    fn defaults_are_github_ids_and_a_minute_to_start() {
        let d = Door::from_properties(&json!({"kv_url": STORE, "signature_scheme": "none"})).unwrap();
        assert_eq!(d.id, IdSource::Header("X-GitHub-Delivery".into()));
        assert_eq!((d.event_type, d.scheme.name(), d.duplicate_status), (TypeSource::None, "none", 200));
        assert_eq!((d.settings.store.url.as_str(), d.settings.default_lease), (STORE, DEFAULT_LEASE));
        assert_eq!(d.start_window, DEFAULT_START_WINDOW);
    }

    /// The form Dify shows is the one the door reads: every property it reads is declared,
    /// the store and the scheme have no default (a default pointing nowhere, or an unsigned
    /// door, would fail silently), and the declared defaults are the door's own.
    #[test]
    fn the_declared_properties_are_the_ones_the_door_reads() {
        let schema = crate::declarations::trigger::provider()["subscription_schema"].as_array().unwrap();
        let declared = |name: &str| schema.iter().find(|p| p["name"] == name);
        let read = [
            "id_header",
            "id_json_pointer",
            "id_body_sha256",
            "event_type_header",
            "event_type_json_pointer",
            "signature_scheme",
            "webhook_secret",
            "signature_header",
            "timestamp_tolerance_seconds",
            "duplicate_status",
            "lease_seconds",
            "start_within_seconds",
            "retention",
            "kv_url",
            "kv_token",
            "namespace",
        ];
        for p in schema {
            let name = p["name"].as_str().unwrap();
            assert!(read.contains(&name), "{name} is declared but the door never reads it");
        }
        for name in ["kv_url", "signature_scheme"] {
            let p = declared(name).unwrap_or_else(|| panic!("{name} is not declared"));
            assert_eq!(
                (p["required"].as_bool(), p.get("default").filter(|d| !d.is_null())),
                (Some(true), None),
                "{name}"
            );
        }
        let default = |name: &str| declared(name).and_then(|p| p["default"].as_str()).map(str::to_owned);
        assert_eq!(default("start_within_seconds"), Some(DEFAULT_START_WINDOW.as_secs().to_string()));
        assert_eq!(default("lease_seconds"), Some(DEFAULT_LEASE.as_secs().to_string()));
        assert_eq!(default("id_header").as_deref(), Some(DEFAULT_ID_HEADER));
        assert_eq!(default("duplicate_status"), Some(DEFAULT_DUPLICATE_STATUS.to_string()));
        assert_eq!(default("timestamp_tolerance_seconds"), Some(DEFAULT_TOLERANCE_S.to_string()));
    }

    #[test]
    fn every_problem_is_named_at_once() {
        let problems = Door::read(&json!({"lease_seconds": "x", "id_json_pointer": "id"})).unwrap_err();
        assert_eq!(problems.len(), 4, "{problems:?}");
        for says in ["id_json_pointer", "signature_scheme is not set", "lease_seconds", "kv_url is not set"] {
            assert!(problems.iter().any(|p| p.contains(says)), "{says}: {problems:?}");
        }
    }

    #[test]
    fn neither_the_store_nor_the_scheme_has_a_default() {
        let e = Door::from_properties(&json!({"signature_scheme": "none"})).unwrap_err();
        assert!(e.contains("kv_url is not set"), "{e}");
        let e = Door::from_properties(&json!({"kv_url": STORE})).unwrap_err();
        assert!(e.contains("signature_scheme is not set"), "{e}");
    }

    #[test]
    fn stripe_setup() {
        let d = Door::from_properties(&json!({
            "id_json_pointer": "/id", "event_type_json_pointer": "/type", "signature_scheme": "stripe",
            "webhook_secret": "whsec_x", "kv_url": "redis://127.0.0.1:6379/0", "lease_seconds": 60,
            "duplicate_status": "202", "namespace": "shop", "id_header": "", "start_within_seconds": "120"
        }))
        .unwrap();
        assert_eq!(d.id, IdSource::JsonPointer("/id".into()));
        assert_eq!(d.event_type, TypeSource::JsonPointer("/type".into()));
        assert_eq!((d.scheme.name(), d.duplicate_status), ("stripe", 202));
        assert_eq!(d.settings.default_lease, Duration::from_secs(60));
        assert_eq!(d.settings.namespace.as_deref(), Some("shop"));
        assert_eq!(d.start_window, Duration::from_secs(120));
        // A boolean (as older subscriptions stored it) or the form's select value, text.
        for chosen in [json!(true), json!("true")] {
            let sha = Door::from_properties(
                &json!({"id_body_sha256": chosen, "id_json_pointer": "/id", "kv_url": STORE, "signature_scheme": "none"}),
            )
            .unwrap();
            assert_eq!(sha.id, IdSource::BodySha256, "the explicit choice wins");
        }
        let header =
            Door::from_properties(&json!({"id_body_sha256": "false", "kv_url": STORE, "signature_scheme": "none"}));
        assert_eq!(header.unwrap().id, IdSource::Header(DEFAULT_ID_HEADER.into()));
    }

    #[test]
    fn mistakes_are_named() {
        for (props, says) in [
            (json!({"signature_scheme": "github"}), "needs the webhook_secret"),
            (json!({"id_json_pointer": "id"}), "must start with /"),
            (json!({"duplicate_status": 500}), "duplicate_status"),
            (json!({"lease_seconds": "-1"}), "lease_seconds"),
            (json!({"start_within_seconds": "0"}), "start_within_seconds"),
            (json!({"namespace": "a/b"}), "namespace"),
        ] {
            let mut props = props;
            for (name, value) in [("kv_url", STORE), ("signature_scheme", "none")] {
                props.as_object_mut().unwrap().entry(name).or_insert(json!(value));
            }
            let e = Door::from_properties(&props).unwrap_err();
            assert!(e.contains(says), "{props}: {e}");
        }
    }
}
