//! The `stateful_trigger` provider: claims each webhook delivery at the door (inside the
//! sender's request, before Dify starts any workflow) through the tools' own claim path.
//!
//! `dispatch_trigger_event` answers the sender and names the events to start; it never ends
//! in a session error (Dify would hand the sender a 400 with our error text). Its claim is a
//! reservation for the subscription's start window.
//! `invoke_trigger_event` (once per subscribed workflow, just before its run) turns that
//! reservation into the run's claim and dispatch's payload into the workflow's variables.

mod builder;
mod config;
mod door;
mod raw;
pub(crate) mod reply;
pub(crate) mod signature;
mod start;
mod verdict;

use serde_json::{json, Value};

use crate::error::{SessionError, ToolError};
use event_store::{StoreCache, StoreError};
use verdict::Verdict;

/// The one event this provider declares.
pub(crate) const EVENT: &str = "webhook_received";

/// Data key of the stand-in request [`oversize_dispatch`] makes of a dispatch line too long
/// to hold, with the line's length in bytes: answered with 413 instead of an error.
pub(crate) const OVERSIZE_KEY: &str = "oversize_line_bytes";

/// The stand-in for a `dispatch_trigger_event` line too long to hold (`prefix` is its start,
/// `len` its length): its `data` is only `type`, `action` and [`OVERSIZE_KEY`], so the sender
/// gets a clean 413 instead of our error text. `None` for any other line.
pub(crate) fn oversize_dispatch(prefix: &[u8], len: usize) -> Option<dify_plugin::RequestData> {
    memchr::memmem::find(prefix, br#""data":{"action":"dispatch_trigger_event""#)?;
    let data = json!({"type": "trigger", "action": "dispatch_trigger_event", (OVERSIZE_KEY): len});
    dify_plugin::RequestData::from_value(&data)
}

/// Answers one trigger action with its stream chunks.
pub(crate) async fn handle(stores: &StoreCache, action: &str, data: &Value) -> Result<Vec<Value>, SessionError> {
    match action {
        "dispatch_trigger_event" => Ok(vec![reply::dispatch_chunk(&dispatch(stores, data).await)]),
        "invoke_trigger_event" => Ok(vec![start::invoke(stores, data).await]),
        // A manual subscription has no credentials: there is nothing to check.
        "validate_trigger_credentials" => Ok(vec![json!({ "result": true })]),
        "subscribe_trigger" | "unsubscribe_trigger" | "refresh_trigger" => Err(ToolError::param(format!(
            "{action}: stateful_trigger supports only manual subscriptions (paste the endpoint URL into the \
             sender's webhook settings); there is nothing to {}",
            action.trim_end_matches("_trigger")
        ))
        .into()),
        other => Err(ToolError::param(format!(
            "unsupported trigger action {other:?}: this provider handles dispatch_trigger_event and invoke_trigger_event"
        ))
        .into()),
    }
}

/// The whole door: builder pings pass, everything else is checked and claimed.
async fn dispatch(stores: &StoreCache, data: &Value) -> Verdict {
    if let Some(len) = data.get(OVERSIZE_KEY).and_then(Value::as_u64) {
        return Verdict::refuse(
            413,
            "too_large",
            format!("the request reached the plugin as a {len}-byte line, too long to read"),
        );
    }
    let subscription = data.get("subscription").unwrap_or(&Value::Null);
    let raw = data.get("raw_http_request").and_then(Value::as_str).unwrap_or("");
    if door::is_builder(subscription) {
        // Subscription creation: Dify starts nothing, and a test ping must not eat an id; its
        // answer (in the builder's log) names what a real delivery would run into.
        return builder::diagnose(stores, subscription, raw).await;
    }
    let mut checked = match door::check(subscription, raw, chrono::Utc::now().timestamp()) {
        Ok(checked) => checked,
        Err(verdict) => return *verdict,
    };
    let timeout = stores.door_timeout();
    bound_by_the_door(&mut checked.door.settings, timeout);
    let store = match stores.get_within(&checked.door.settings.store, timeout).await {
        Ok(store) => store,
        Err(StoreError::BadUrl(e)) => {
            tracing::warn!("the trigger subscription's store URL is unusable: {e}");
            return Verdict::refuse(500, "misconfigured", door::MISCONFIGURED);
        }
        Err(e) => return unavailable(&e.to_string()),
    };
    door::claim(&*store, checked).await
}

/// The door's claim is bounded by `STATEFUL_TOOL_TRIGGER_TIMEOUT_MS` (the sender waits), and
/// a call that runs out of it says so.
fn bound_by_the_door(settings: &mut crate::tools::Settings, timeout: std::time::Duration) {
    settings.call_timeout = timeout;
    settings.call_timeout_setting = crate::tools::settings::TRIGGER_TIMEOUT_SETTING;
}

fn unavailable(why: &str) -> Verdict {
    tracing::warn!("the store is unavailable, the sender is asked to retry: {why}");
    let mut v = Verdict::refuse(503, "store_unavailable", "the dedup store is unavailable; retry later");
    v.retry_after = Some(door::RETRY_AFTER_S);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_door_claim_that_runs_out_of_time_names_the_trigger_timeout() {
        let mut settings = crate::tools::testing::settings();
        bound_by_the_door(&mut settings, std::time::Duration::from_millis(1500));
        let clock = event_store::HostClock::system();
        let deadline = crate::tools::Deadline::start(&clock, settings.call_timeout, settings.call_timeout_setting);
        let message = deadline.error(StoreError::Timeout(1500)).message;
        assert!(message.contains("STATEFUL_TOOL_TRIGGER_TIMEOUT_MS (1500 ms)"), "{message}");
        assert!(!message.contains("STATEFUL_TOOL_STORE_TIMEOUT_MS"), "{message}");
    }
}
