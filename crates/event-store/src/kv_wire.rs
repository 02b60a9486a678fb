//! The KV container's HTTP protocol v1 names, one spelling for the container and its clients
//! (this crate's store client, the `kv` admin commands, the bench).

/// The key listing (`GET`); a key's value lives at [`STATE_PREFIX`]`{key}`.
pub const STATE: &str = "/state";
/// `PUT`, `GET`, `POST` (compare-and-swap) and `DELETE` of one key: `/state/{key}`.
pub const STATE_PREFIX: &str = "/state/";
/// Liveness, version and capabilities.
pub const HEALTHZ: &str = "/healthz";

/// Answer header: the container's clock (unix ms) when it answered.
pub const TIME_MS: &str = "kv-time-ms";
/// Answer header: when the value was last written (unix ms).
pub const MODIFIED_MS: &str = "kv-modified-ms";
/// Answer header: when the value expires (unix ms); absent = never.
pub const EXPIRES_MS: &str = "kv-expires-ms";
/// Request header: the value's time to live, in milliseconds.
pub const TTL_MS: &str = "kv-ttl-ms";
/// Request header: the value's time to live, in seconds.
pub const TTL_SECONDS: &str = "kv-ttl-seconds";
/// Request header: a write's deadline in the container's clock (unix ms); a write that would
/// be applied later is refused.
pub const DEADLINE_MS: &str = "kv-deadline-ms";
