//! A subscription's `properties` (its `subscription_schema` values) → what dispatch needs.

use std::time::Duration;

use serde_json::Value;

use super::signature::Scheme;
use crate::tools::settings::{parse_duration, DEFAULT_KV_URL, DEFAULT_LEASE, DEFAULT_RETENTION, MAX_LEASE_SECONDS};
use crate::tools::Settings;

pub(crate) const DEFAULT_ID_HEADER: &str = "X-GitHub-Delivery";
pub(crate) const DEFAULT_DUPLICATE_STATUS: u16 = 200;
/// Stripe's and Standard Webhooks' default tolerance for signature timestamps.
pub(crate) const DEFAULT_TOLERANCE_S: i64 = 300;

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
    /// The tool's settings for the claim (store, namespace, retention, lease).
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
    /// Reads the properties; the error names the property and what to write instead.
    pub(crate) fn from_properties(props: &Value) -> Result<Door, String> {
        let id = if prop(props, "id_body_sha256").as_deref() == Some("true") {
            IdSource::BodySha256
        } else if let Some(p) = pointer(props, "id_json_pointer")? {
            IdSource::JsonPointer(p)
        } else {
            IdSource::Header(prop(props, "id_header").unwrap_or_else(|| DEFAULT_ID_HEADER.to_owned()))
        };
        let event_type = match (prop(props, "event_type_header"), pointer(props, "event_type_json_pointer")?) {
            (Some(h), _) => TypeSource::Header(h),
            (None, Some(p)) => TypeSource::JsonPointer(p),
            (None, None) => TypeSource::None,
        };
        let scheme_name = prop(props, "signature_scheme").unwrap_or_else(|| "none".to_owned());
        let scheme = Scheme::new(
            &scheme_name,
            prop(props, "webhook_secret").as_deref(),
            prop(props, "signature_header").as_deref(),
        )?;
        let tolerance_s =
            number(props, "timestamp_tolerance_seconds", 1, 86_400)?.map_or(DEFAULT_TOLERANCE_S, |n| n as i64);
        let duplicate_status =
            number(props, "duplicate_status", 200, 499)?.map_or(DEFAULT_DUPLICATE_STATUS, |n| n as u16);
        let lease = number(props, "lease_seconds", 0, MAX_LEASE_SECONDS)?.map_or(DEFAULT_LEASE, Duration::from_secs);
        let retention = match prop(props, "retention") {
            None => DEFAULT_RETENTION,
            Some(r) => {
                parse_duration(&r).ok_or_else(|| format!("retention {r:?} is not a duration such as 7d or 12h"))?
            }
        };
        // The store settings are the tool's, read by the tool's own parser: one store contract.
        let mut creds = serde_json::Map::new();
        for name in ["kv_url", "kv_token", "namespace"] {
            if let Some(v) = prop(props, name) {
                creds.insert(name.to_owned(), Value::String(v));
            }
        }
        creds.entry("kv_url").or_insert_with(|| Value::String(DEFAULT_KV_URL.to_owned()));
        let mut settings = Settings::from_credentials(&Value::Object(creds)).map_err(|e| e.message)?;
        settings.default_lease = lease;
        settings.retention = retention;
        Ok(Door { id, event_type, scheme, tolerance_s, duplicate_status, settings })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_are_github_without_a_signature() {
        let d = Door::from_properties(&json!({})).unwrap();
        assert_eq!(d.id, IdSource::Header("X-GitHub-Delivery".into()));
        assert_eq!((d.event_type, d.scheme.name(), d.duplicate_status), (TypeSource::None, "none", 200));
        assert_eq!((d.settings.store.url.as_str(), d.settings.default_lease), (DEFAULT_KV_URL, DEFAULT_LEASE));
    }

    #[test]
    fn stripe_setup() {
        let d = Door::from_properties(&json!({
            "id_json_pointer": "/id", "event_type_json_pointer": "/type", "signature_scheme": "stripe",
            "webhook_secret": "whsec_x", "kv_url": "redis://127.0.0.1:6379/0", "lease_seconds": 60,
            "duplicate_status": "202", "namespace": "shop", "id_header": ""
        }))
        .unwrap();
        assert_eq!(d.id, IdSource::JsonPointer("/id".into()));
        assert_eq!(d.event_type, TypeSource::JsonPointer("/type".into()));
        assert_eq!((d.scheme.name(), d.duplicate_status), ("stripe", 202));
        assert_eq!(d.settings.default_lease, Duration::from_secs(60));
        assert_eq!(d.settings.namespace.as_deref(), Some("shop"));
        let sha = Door::from_properties(&json!({"id_body_sha256": true, "id_json_pointer": "/id"})).unwrap();
        assert_eq!(sha.id, IdSource::BodySha256, "the explicit choice wins");
    }

    #[test]
    fn mistakes_are_named() {
        for (props, says) in [
            (json!({"signature_scheme": "github"}), "needs the webhook_secret"),
            (json!({"id_json_pointer": "id"}), "must start with /"),
            (json!({"duplicate_status": 500}), "duplicate_status"),
            (json!({"lease_seconds": "-1"}), "lease_seconds"),
            (json!({"namespace": "a/b"}), "namespace"),
        ] {
            let e = Door::from_properties(&props).unwrap_err();
            assert!(e.contains(says), "{props}: {e}");
        }
    }
}
