//! Deliveries while a subscription is being built: nothing is claimed and nothing starts, and
//! the answer names every problem a real delivery would meet (Dify shows the request and this
//! answer in the subscription builder's log, so a test ping checks the setup before Save).

use serde_json::{json, Value};

use super::config::{store_credentials, Door};
use super::door::identify;
use super::raw::RawRequest;
use super::verdict::Verdict;
use crate::tools::Settings;
use event_store::{StoreCache, StoreError};

/// The builder's answer: 200 (a test ping must not look like a failed delivery), `problems`
/// listing each one found, in words a Dify admin acts on.
pub(crate) async fn diagnose(stores: &StoreCache, subscription: &Value, raw_hex: &str) -> Verdict {
    let props = subscription.get("properties").unwrap_or(&Value::Null);
    let mut problems = Vec::new();
    let mut delivery_id = None;
    let settings = match Door::read(props) {
        Ok(door) => {
            match RawRequest::from_hex(raw_hex) {
                Ok(request) => {
                    let now_s = chrono::Utc::now().timestamp();
                    if let Err(why) = door.scheme.verify(&request, now_s, door.tolerance_s) {
                        problems.push(format!("signature ({}): {why}", door.scheme.name()));
                    }
                    let body_json: Option<Value> = serde_json::from_slice(&request.body).ok();
                    match identify(&door, &request, body_json.as_ref()) {
                        Ok(id) => delivery_id = Some(id),
                        Err(why) => problems.push(format!("delivery id: {why}")),
                    }
                }
                Err(why) => problems.push(format!("request: {why}")),
            }
            Some(door.settings)
        }
        Err(found) => {
            problems.extend(found.into_iter().map(|why| format!("configuration: {why}")));
            // The store can still be checked when its own properties are readable.
            store_credentials(props).and_then(|creds| Settings::from_credentials(&creds).ok())
        }
    };
    if let Some(settings) = settings {
        if let Err(why) = check_store(stores, &settings).await {
            problems.push(format!("store: {}", scrub(&why, &settings.store.url)));
        }
    }
    let message = match problems.len() {
        0 => "subscription not built yet: the delivery was not claimed; the setup checks passed".to_owned(),
        n => format!(
            "subscription not built yet: the delivery was not claimed; {n} problem{} to fix before real deliveries \
             arrive (see problems)",
            if n == 1 { "" } else { "s" }
        ),
    };
    if !problems.is_empty() {
        tracing::warn!("subscription builder: test delivery found problems: {}", problems.join("; "));
    }
    let mut v = Verdict::refuse(200, "builder", message).with("problems", json!(problems));
    if let Some(id) = delivery_id {
        v = v.with("delivery_id", json!(id));
    }
    v
}

/// Connects to the store and asks it what the tools' `validate` asks (reachable, credentials
/// accepted, atomic creates supported), within the door's deadline.
async fn check_store(stores: &StoreCache, settings: &Settings) -> Result<(), String> {
    let within = stores.door_timeout();
    let late = || format!("no answer within {} ms (STATEFUL_TOOL_TRIGGER_TIMEOUT_MS)", within.as_millis());
    let checked = match stores.get_within(&settings.store, within).await {
        Ok(store) => settings.check_store(&*store, within).await.map(|_| ()),
        Err(e) => Err(e),
    };
    checked.map_err(|e| match e {
        StoreError::Timeout(_) => late(),
        e => e.to_string(),
    })
}

/// `text` without the store's URL or any of its hosts: the answer goes back to whoever sent
/// the request, and a store's address is nobody's business outside.
pub(crate) fn scrub(text: &str, url: &str) -> String {
    let mut out = text.replace(url, "the store");
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let hosts = authority.rsplit_once('@').map_or(authority, |(_, hosts)| hosts);
    let mut names: Vec<&str> = Vec::new();
    for host in hosts.split(',').filter(|h| !h.is_empty()) {
        names.push(host);
        let bare = match host.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or(v6),
            None => host.rsplit_once(':').map_or(host, |(name, _)| name),
        };
        names.push(bare);
    }
    // Longest first, so a host:port goes whole before its host alone.
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    for name in names.into_iter().filter(|n| n.len() > 1) {
        out = out.replace(name, "<store host>");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_host_of_the_store_is_left_in_a_message() {
        for (url, text) in [
            ("redis://:pw@10.0.0.5:6379/0", "redis://***@10.0.0.5:6379/0: connection refused (10.0.0.5)"),
            ("http://kv.internal:8123", "http://kv.internal:8123/ is unreachable: kv.internal:8123 refused"),
            ("postgres://u:p@db1:5432,db2:5433/events", "no primary among db1:5432, db2:5433 (db1 down)"),
            ("https://[fd00::1]:8123", "connect to [fd00::1]:8123 failed, fd00::1 unreachable"),
        ] {
            let s = scrub(text, url);
            for leak in ["10.0.0.5", "kv.internal", "db1", "db2", "fd00::1", url] {
                assert!(!s.contains(leak), "{url}: {s}");
            }
            assert!(s.contains("<store host>"), "{s}");
        }
    }
}
