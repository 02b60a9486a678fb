//! What a Redis error means for a caller: which `StoreError` class, and a message that says
//! what to fix (the password, the certificate, the cluster's slots).

use std::time::Duration;

use redis::{ErrorKind, RedisError};

use crate::error::StoreError;

/// Words every refusal of a host carries, so the refusal is recognised however the client
/// library wraps it.
pub(crate) const NOT_ALLOWED: &str = "is not in the store hosts this plugin may use";

pub(crate) fn classify(addr: &str, timeout: Duration, e: RedisError) -> StoreError {
    let text = e.to_string();
    if text.contains(NOT_ALLOWED) {
        // The client library wraps the resolver's refusal in its own words: keep ours.
        StoreError::config(text.find("the Redis node ").map_or(text.clone(), |at| text[at..].to_owned())).caused_by(e)
    } else if let Some(why) = tls_refusal(&e) {
        StoreError::unreachable(addr, why).caused_by(e)
    } else if e.is_timeout() {
        StoreError::Timeout(timeout.as_millis() as u64)
    } else if e.is_connection_refusal() {
        StoreError::unreachable(addr, e.to_string()).caused_by(e)
    } else if e.code() == Some("NOAUTH") {
        StoreError::unauthorized(format!(
            "the Redis server at {addr} requires a password (NOAUTH); put it in kv_url: redis://:password@host:port/db \
             (redis+cluster://:password@host:port,… or redis+sentinel://:password@host:26379,…/master)"
        ))
        .caused_by(e)
    } else if is_auth_error(&e) {
        StoreError::unauthorized(format!("the Redis server at {addr} refused the password in kv_url: {e}")).caused_by(e)
    } else if e.code() == Some("CLUSTERDOWN") {
        StoreError::unexpected(format!(
            "the Redis Cluster is down ({e}): some hash slots have no reachable master (uncovered slots, or a \
             failover in progress)"
        ))
        .caused_by(e)
    } else if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
        StoreError::interrupted(e.to_string()).caused_by(e)
    } else {
        StoreError::unexpected(format!("a Redis error: {e}")).caused_by(e)
    }
}

/// A TLS handshake that refused the server's certificate: nothing was sent, and the fix is
/// in kv_url (`tls_ca`) or in the server's certificate.
fn tls_refusal(e: &RedisError) -> Option<String> {
    let text = e.to_string();
    let detail = text.split_once("invalid peer certificate: ")?.1;
    Some(format!(
        "its TLS certificate was refused ({detail}): it must chain to the CA named by tls_ca in kv_url (without \
         tls_ca, to the public roots), be valid now, and name the address the plugin dials"
    ))
}

pub(crate) fn is_auth_error(e: &RedisError) -> bool {
    e.kind() == ErrorKind::AuthenticationFailed || e.code() == Some("WRONGPASS")
}
