//! Provider credentials → per-call settings (store, namespace, event types, retention).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::error::ToolError;
use event_store::key::{storage_key, validate_namespace};
use event_store::record::new_claim_id;
use event_store::{EventStore, Probe, StoreConfig, StoreError};

/// Where the KV container listens when the credentials name no `kv_url` (its own default).
pub const DEFAULT_KV_URL: &str = "http://127.0.0.1:8123";
/// The setting that bounds a tool call's store round trips.
pub(crate) const STORE_TIMEOUT_SETTING: &str = "STATEFUL_TOOL_STORE_TIMEOUT_MS";
/// The setting that bounds a trigger's claim at the door.
pub(crate) const TRIGGER_TIMEOUT_SETTING: &str = "STATEFUL_TOOL_TRIGGER_TIMEOUT_MS";
pub(crate) const DEFAULT_EVENT_TYPES: &str = "created,updated,closed";
pub(crate) const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// More replicas than any sane deployment has: a typo, not a setting.
const MAX_MIN_REPLICAS: u32 = 16;
const MAX_RETENTION: Duration = Duration::from_secs(3650 * 24 * 3600);
/// Dify's default workflow execution limit: a live run never loses its lease by default.
pub(crate) const DEFAULT_LEASE: Duration = Duration::from_secs(1200);
pub(crate) const MAX_LEASE_SECONDS: u64 = 86_400;
/// How much longer than its lease a `processing` record is kept at least: covers the
/// difference between the plugin's estimate of the store clock and the store's own, and the
/// time between stamping a lease and the write landing.
pub(crate) const LEASE_MARGIN: Duration = Duration::from_secs(60);
/// The deadline of one call's store round trips when the runtime passes none.
pub(crate) const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a call's claim ids come from: fresh random ones (the plugin), or a sequence passed in
/// with [`Settings::with_claim_ids`] (the simulation, so that one seed replays one run exactly).
#[derive(Clone, Default)]
pub(crate) struct ClaimIds(Option<Arc<dyn Fn() -> String + Send + Sync>>);

impl ClaimIds {
    fn from_fn(next: impl Fn() -> String + Send + Sync + 'static) -> Self {
        ClaimIds(Some(Arc::new(next)))
    }

    pub(crate) fn next(&self) -> String {
        match &self.0 {
            Some(next) => next(),
            None => new_claim_id(),
        }
    }
}

impl std::fmt::Debug for ClaimIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "ClaimIds(injected)" } else { "ClaimIds(random)" })
    }
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub(crate) store: StoreConfig,
    pub(crate) namespace: Option<String>,
    pub event_types: Vec<String>,
    /// Store-side TTL of every record; an expired id is a new event.
    pub(crate) retention: Duration,
    /// The lease of a claim whose call gives no `lease_seconds`; zero = never expires.
    pub(crate) default_lease: Duration,
    /// One deadline for all store round trips of one tool call (set by the runtime).
    pub(crate) call_timeout: Duration,
    /// The setting `call_timeout` comes from, named when a call runs out of it.
    pub(crate) call_timeout_setting: &'static str,
    /// The claim ids this call's writes carry.
    pub(crate) claim_ids: ClaimIds,
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
        let default_lease = match credential(creds, "default_lease_seconds") {
            None => DEFAULT_LEASE,
            Some(l) => {
                l.parse::<u64>().ok().filter(|&s| s <= MAX_LEASE_SECONDS).map(Duration::from_secs).ok_or_else(|| {
                    ToolError::param(format!(
                        "default_lease_seconds {l:?} is not a whole number of seconds from 0 (never expires) to \
                         {MAX_LEASE_SECONDS}"
                    ))
                })?
            }
        };
        Ok(Settings {
            store: StoreConfig { url, token, min_replicas },
            namespace,
            event_types,
            retention,
            default_lease,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            call_timeout_setting: STORE_TIMEOUT_SETTING,
            claim_ids: ClaimIds::default(),
        })
    }

    /// These settings with `timeout` as the deadline of all of one tool call's store round
    /// trips together, measured on the host clock of the store the call uses (the runtime
    /// passes its `STATEFUL_TOOL_STORE_TIMEOUT_MS`; without it, 5 s).
    pub fn with_call_timeout(mut self, timeout: Duration) -> Settings {
        self.call_timeout = timeout;
        self
    }

    /// These settings with the claim ids the calls' writes carry taken from `next` instead of
    /// fresh random ones. A deterministic simulation passes a sequence drawn from its seed, so
    /// that one seed replays one run exactly. `next` must never repeat an id: a call takes a
    /// record carrying one of its claim ids for its own write.
    pub fn with_claim_ids(mut self, next: impl Fn() -> String + Send + Sync + 'static) -> Settings {
        self.claim_ids = ClaimIds::from_fn(next);
        self
    }

    /// The credential check: the store answers, speaks a protocol with atomic creates, and
    /// the token opens this namespace (a KV container binds tokens to namespaces: a key of the
    /// namespace that never exists is read).
    pub(crate) async fn check_store<S: EventStore>(&self, store: &S, timeout: Duration) -> Result<Probe, StoreError> {
        let probe = tokio::time::timeout(timeout, store.probe())
            .await
            .map_err(|_| StoreError::Timeout(timeout.as_millis() as u64))??;
        let key = storage_key(self.namespace.as_deref(), "stateful-tool-credential-probe");
        store.read(&key, timeout).await?;
        Ok(probe)
    }

    /// The store-side TTL of a record with this lease: the retention, extended when needed
    /// so that a record never expires before its lease (plus [`LEASE_MARGIN`]). A record that
    /// vanished under a live lease would let the next delivery claim attempt 1 again while
    /// the first run is still working.
    pub(crate) fn ttl_for(&self, lease_ms: Option<i64>) -> Duration {
        match lease_ms {
            Some(ms) if ms > 0 => self.retention.max(Duration::from_millis(ms as u64) + LEASE_MARGIN),
            _ => self.retention,
        }
    }

    /// Age after which a `processing` record without a lease is reported `stuck`: the
    /// default lease, or [`DEFAULT_LEASE`] when the default is "never".
    pub(crate) fn stuck_after(&self) -> Duration {
        if self.default_lease.is_zero() {
            DEFAULT_LEASE
        } else {
            self.default_lease
        }
    }
}

/// `7d`, `12h`, `30m`, `90s`, or a bare number of seconds; 1 s to 3650 days.
pub(crate) fn parse_duration(text: &str) -> Option<Duration> {
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
        assert_eq!(s.default_lease, DEFAULT_LEASE);
        let declared = crate::declarations::credential_default("default_lease_seconds");
        assert_eq!(declared, Some(DEFAULT_LEASE.as_secs().to_string()), "the YAML default is the code's");
    }

    #[test]
    fn ttl_covers_the_lease_and_default_lease_is_parsed() {
        let s = Settings::from_credentials(&json!({"retention": "2s", "default_lease_seconds": "0"})).unwrap();
        assert_eq!(s.default_lease, Duration::ZERO);
        assert_eq!(s.ttl_for(None), Duration::from_secs(2));
        assert_eq!(s.ttl_for(Some(3_600_000)), Duration::from_secs(3660));
        assert_eq!(s.stuck_after(), DEFAULT_LEASE);
        let long = Settings::from_credentials(&json!({"default_lease_seconds": 30})).unwrap();
        assert_eq!(long.ttl_for(Some(30_000)), DEFAULT_RETENTION);
        assert_eq!(long.stuck_after(), Duration::from_secs(30));
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
            json!({"default_lease_seconds": "-1"}),
            json!({"default_lease_seconds": "20m"}),
            json!({"default_lease_seconds": "86401"}),
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
