//! Client for our KV container's v1 HTTP protocol (`http://` / `https://` kv_url).
//!
//! An `https://` kv_url may name a private CA (`?tls_ca=/path/ca.pem`) and a client
//! certificate (`&tls_cert=/path/cert.pem&tls_key=/path/key.pem`) for a container that
//! requires one; see `kv_tls`.

use std::time::Duration;

use reqwest::header::{HeaderMap, AUTHORIZATION, ETAG, IF_MATCH, IF_NONE_MATCH};
use reqwest::{Method, StatusCode};

use super::kv_tls;
use super::kv_wire;
use super::record::Record;
use super::url::redact;
use super::{Clock, Created, Current, EventStore, Probe, StoreClock, StoreDeadline, StoreError, Swapped, Version};

/// Most requests (so connections) in flight to one store. Sessions beyond it wait for a
/// free connection instead of opening their own: sockets and memory do not grow with the
/// number of sessions in flight.
pub(crate) const MAX_CONNECTIONS: usize = 256;
/// Largest store answer read (records are at most 1 MiB); a larger one is an upstream error
/// and is not buffered.
pub(crate) const MAX_ANSWER_BYTES: usize = 4 << 20;

pub struct KvClientStore {
    client: reqwest::Client,
    slots: tokio::sync::Semaphore,
    base: String,
    /// `base` parsed once; a request's URL is this with its path set (see [`KvClientStore::url`]).
    base_url: reqwest::Url,
    /// `base_url`'s path without its trailing `/`, the prefix of every request's path.
    base_path: String,
    auth: Option<String>,
    clock: StoreClock,
    /// Bound of every call.
    timeout: Duration,
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: bytes::Bytes,
    store_now_ms: i64,
}

impl KvClientStore {
    pub(crate) fn new(url: &str, token: Option<&str>, host: Clock, timeout: Duration) -> Result<Self, StoreError> {
        let (base, tls) = kv_tls::TlsParams::split(url)?;
        let client = tls
            .apply(reqwest::Client::builder())?
            .connect_timeout(Duration::from_secs(2).min(timeout))
            .timeout(timeout)
            .pool_max_idle_per_host(MAX_CONNECTIONS)
            .tcp_nodelay(true)
            .build()
            .map_err(|e| StoreError::Config(format!("cannot build an HTTP client: {e}")))?;
        let base_url = reqwest::Url::parse(&base)
            .map_err(|e| StoreError::Config(format!("kv_url {:?} is not a URL: {e}", redact(&base))))?;
        let base_path = base_url.path().trim_end_matches('/').to_owned();
        Ok(KvClientStore {
            client,
            slots: tokio::sync::Semaphore::new(MAX_CONNECTIONS),
            base,
            base_url,
            base_path,
            auth: token.filter(|t| !t.is_empty()).map(|t| format!("Bearer {t}")),
            clock: StoreClock::new(host),
            timeout,
        })
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, String)],
        body: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<Answer, StoreError> {
        // Nothing has been sent while waiting for a connection: not ambiguous.
        let _slot = match tokio::time::timeout(timeout, self.slots.acquire()).await {
            Ok(Ok(permit)) => permit,
            _ => {
                return Err(StoreError::Unreachable(
                    redact(&self.base),
                    format!(
                        "all {MAX_CONNECTIONS} connections were busy for {} ms; the request was not sent",
                        timeout.as_millis()
                    ),
                ))
            }
        };
        // Boxed: the HTTP exchange's state is large, and a session waiting for a connection
        // should not carry it; thousands of them may be waiting.
        Box::pin(self.exchange(method, path, headers, body, timeout)).await
    }

    async fn exchange(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, String)],
        body: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<Answer, StoreError> {
        let mut req = self.client.request(method, self.url(path)).timeout(timeout);
        if let Some(auth) = &self.auth {
            req = req.header(AUTHORIZATION, auth);
        }
        for (name, value) in headers {
            req = req.header(*name, value);
        }
        if let Some(body) = body {
            req = req.header("content-type", "application/json").body(body.to_vec());
        }
        let mut resp = req.send().await.map_err(|e| self.classify(e, timeout))?;
        let status = resp.status();
        let headers = std::mem::take(resp.headers_mut());
        let body = self.read_capped(resp, timeout).await?;
        let store_now_ms =
            match headers.get(kv_wire::TIME_MS).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok()) {
                Some(t) => {
                    self.clock.observe(t);
                    t
                }
                None => self.clock.now_ms(),
            };
        if status == StatusCode::UNAUTHORIZED {
            return Err(StoreError::Unauthorized(format!("{} (check kv_token)", error_text(status, &body))));
        }
        if status == StatusCode::FORBIDDEN {
            return Err(kv_tls::forbidden(path));
        }
        Ok(Answer { status, headers, body, store_now_ms })
    }

    /// The answer's body, refused (without buffering it) past [`MAX_ANSWER_BYTES`].
    async fn read_capped(&self, mut resp: reqwest::Response, timeout: Duration) -> Result<bytes::Bytes, StoreError> {
        let too_big = || {
            StoreError::Bad(format!(
                "an answer larger than {} MiB (records are at most 1 MiB); it was not read",
                MAX_ANSWER_BYTES >> 20
            ))
        };
        if resp.content_length().is_some_and(|n| n > MAX_ANSWER_BYTES as u64) {
            return Err(too_big());
        }
        // A record's answer is one chunk, kept as it came; only a longer one is joined.
        let mut first = None;
        let mut joined = bytes::BytesMut::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| self.classify(e, timeout))? {
            let held = first.as_ref().map_or(0, bytes::Bytes::len) + joined.len();
            if held + chunk.len() > MAX_ANSWER_BYTES {
                return Err(too_big());
            }
            match first.take() {
                None if joined.is_empty() => first = Some(chunk),
                earlier => {
                    if let Some(earlier) = earlier {
                        joined.extend_from_slice(&earlier);
                    }
                    joined.extend_from_slice(&chunk);
                }
            }
        }
        Ok(first.unwrap_or_else(|| joined.freeze()))
    }

    fn classify(&self, e: reqwest::Error, timeout: Duration) -> StoreError {
        if let Some(why) = kv_tls::refusal(&e) {
            // The handshake failed: nothing was sent, and the fix is in kv_url or a certificate.
            StoreError::Unreachable(redact(&self.base), why)
        } else if e.is_timeout() {
            StoreError::Timeout(timeout.as_millis() as u64)
        } else if e.is_connect() {
            StoreError::Unreachable(redact(&self.base), root_cause(&e))
        } else {
            StoreError::Interrupted(root_cause(&e))
        }
    }

    /// The URL of `path` (`/state/…`, `/healthz`): what parsing `{base}{path}` gives, with only
    /// the path parsed. Parsing the whole URL per request (the host through IDNA processing)
    /// was about a tenth of a KV call's instructions.
    fn url(&self, path: &str) -> reqwest::Url {
        let mut url = self.base_url.clone();
        let mut full = String::with_capacity(self.base_path.len() + path.len());
        full.push_str(&self.base_path);
        full.push_str(path);
        url.set_path(&full);
        url
    }

    fn path(key: &str) -> String {
        format!("{}{key}", kv_wire::STATE_PREFIX)
    }

    fn current(a: Answer) -> Result<Current, StoreError> {
        let etag = a
            .headers
            .get(ETAG)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| StoreError::Bad("a value without an ETag".into()))?;
        Ok(Current { value: a.body.to_vec(), version: Version::Etag(etag.to_owned()), store_now_ms: a.store_now_ms })
    }
}

fn ttl_header(ttl: Duration) -> (&'static str, String) {
    (kv_wire::TTL_MS, ttl.as_millis().to_string())
}

/// The headers of a conditional write: its precondition, its TTL and, when it has one, its
/// deadline in the store's clock (`KV-Deadline-Ms`; the container refuses the write later).
fn write_headers(
    pre: (&'static str, String),
    ttl: Option<Duration>,
    until: Option<StoreDeadline>,
) -> Vec<(&'static str, String)> {
    let mut h = vec![pre];
    h.extend(ttl.map(ttl_header));
    h.extend(until.map(|d| (kv_wire::DEADLINE_MS, d.0.to_string())));
    h
}

/// The refusal of a write that reached the container after its `KV-Deadline-Ms`: 409 with
/// this error code (never 412, which means the precondition failed).
fn too_late(a: &Answer, until: Option<StoreDeadline>) -> Option<StoreError> {
    let refused = a.status == StatusCode::CONFLICT
        && serde_json::from_slice::<serde_json::Value>(&a.body)
            .is_ok_and(|v| v["error"].as_str() == Some("deadline_passed"));
    refused.then(|| StoreError::TooLate { deadline_ms: until.map_or(0, |d| d.0), store_now_ms: a.store_now_ms })
}

fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

/// A short description of an unexpected answer, using the JSON error body when there is one.
fn error_text(status: StatusCode, body: &[u8]) -> String {
    let detail = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned());
    format!("HTTP {status}: {detail}")
}

impl EventStore for KvClientStore {
    async fn create(
        &self,
        key: &str,
        value: &[u8],
        ttl: Duration,
        timeout: Duration,
        until: Option<StoreDeadline>,
    ) -> Result<Created, StoreError> {
        let headers = write_headers((IF_NONE_MATCH.as_str(), "*".to_owned()), Some(ttl), until);
        let a = self.send(Method::PUT, &Self::path(key), &headers, Some(value), timeout).await?;
        if let Some(e) = too_late(&a, until) {
            return Err(e);
        }
        match a.status {
            StatusCode::CREATED => Ok(Created::Created),
            StatusCode::PRECONDITION_FAILED => Ok(Created::Exists(Self::current(a)?)),
            // 200 would mean the store replaced an existing value: it ignored If-None-Match.
            s => Err(StoreError::Bad(format!("{} to a create-only write", error_text(s, &a.body)))),
        }
    }

    /// `KV-Time-Ms` of a GET is a time by which every write the container applied is
    /// visible in the answer (it never reports a time past a batch still being committed).
    async fn read_at(&self, key: &str, timeout: Duration) -> Result<(Option<Current>, i64), StoreError> {
        let a = self.send(Method::GET, &Self::path(key), &[], None, timeout).await?;
        let at = a.store_now_ms;
        match a.status {
            StatusCode::OK => Ok((Some(Self::current(a)?), at)),
            StatusCode::NOT_FOUND => Ok((None, at)),
            s => Err(StoreError::Bad(error_text(s, &a.body))),
        }
    }

    async fn swap(
        &self,
        key: &str,
        expected: &Version,
        value: &[u8],
        ttl: Duration,
        timeout: Duration,
        until: Option<StoreDeadline>,
    ) -> Result<Swapped, StoreError> {
        let Version::Etag(etag) = expected else {
            return Err(StoreError::Bad("a version from another backend".into()));
        };
        let headers = write_headers((IF_MATCH.as_str(), etag.clone()), Some(ttl), until);
        let a = self.send(Method::PUT, &Self::path(key), &headers, Some(value), timeout).await?;
        if let Some(e) = too_late(&a, until) {
            return Err(e);
        }
        match a.status {
            StatusCode::OK | StatusCode::CREATED => Ok(Swapped::Swapped),
            StatusCode::PRECONDITION_FAILED if a.headers.contains_key(ETAG) => {
                Ok(Swapped::Changed(Some(Self::current(a)?)))
            }
            StatusCode::PRECONDITION_FAILED => Ok(Swapped::Changed(None)),
            s => Err(StoreError::Bad(error_text(s, &a.body))),
        }
    }

    /// Read, then `DELETE` (or `PUT`) with `If-Match` on the revision that carried the claim:
    /// the ETag makes the second step a compare-and-delete of exactly that record.
    async fn release(
        &self,
        key: &str,
        claim_id: &str,
        restore: Option<&[u8]>,
        ttl: Duration,
        timeout: Duration,
        until: Option<StoreDeadline>,
    ) -> Result<bool, StoreError> {
        let started = std::time::Instant::now();
        let Some(cur) = self.read(key, timeout).await? else { return Ok(false) };
        let ours = Record::from_bytes(&cur.value).is_ok_and(|r| r.claim_id == claim_id);
        let Version::Etag(etag) = cur.version else { return Ok(false) };
        if !ours {
            return Ok(false);
        }
        let left = timeout.saturating_sub(started.elapsed()).max(Duration::from_millis(1));
        let a = match restore {
            None => {
                let headers = write_headers((IF_MATCH.as_str(), etag), None, until);
                self.send(Method::DELETE, &Self::path(key), &headers, None, left).await?
            }
            Some(value) => {
                let headers = write_headers((IF_MATCH.as_str(), etag), Some(ttl), until);
                self.send(Method::PUT, &Self::path(key), &headers, Some(value), left).await?
            }
        };
        if let Some(e) = too_late(&a, until) {
            return Err(e);
        }
        match a.status {
            StatusCode::NO_CONTENT | StatusCode::OK | StatusCode::CREATED => Ok(true),
            // Changed or gone since the read: it is no longer this claim.
            StatusCode::PRECONDITION_FAILED | StatusCode::NOT_FOUND => Ok(false),
            s => Err(StoreError::Bad(error_text(s, &a.body))),
        }
    }

    async fn probe(&self) -> Result<Probe, StoreError> {
        let a = self.send(Method::GET, kv_wire::HEALTHZ, &[], None, self.timeout).await?;
        let not_v1 = |why: String| {
            StoreError::Config(format!(
                "{} does not speak our KV protocol v1 ({why}). A plain key-value server cannot create a key atomically, \
                 so two copies of one event could both be accepted; point kv_url at `stateful-tool kv serve` or at Redis ≥ 7",
                redact(&self.base)
            ))
        };
        if a.status != StatusCode::OK {
            return Err(not_v1(format!("GET /healthz answered {}", a.status)));
        }
        let health: serde_json::Value =
            serde_json::from_slice(&a.body).map_err(|_| not_v1("GET /healthz is not JSON".into()))?;
        let caps: Vec<&str> = health["capabilities"]
            .as_array()
            .map(|c| c.iter().filter_map(|v| v.as_str()).collect())
            .unwrap_or_default();
        for needed in ["conditional-put", "ttl"] {
            if !caps.contains(&needed) {
                return Err(not_v1(format!("its capabilities {caps:?} lack {needed:?}")));
            }
        }
        // The token is checked by the credential check's read of a key in its namespace.
        let mut warnings = vec![];
        if !caps.contains(&"deadline") {
            warnings.push(
                "this KV container predates write deadlines (KV-Deadline-Ms): a write held in the network past a call's \
                 deadline can still land, and only its lease frees the event; upgrade the container"
                    .to_owned(),
            );
        }
        if health["durability"].as_str() == Some("none") {
            warnings.push(
                "the KV container runs with --durability none: acknowledged events can be lost on a crash".to_owned(),
            );
        }
        let server = format!("stateful-tool KV {}", health["version"].as_str().unwrap_or("?"));
        Ok(Probe { backend: "kv-http", server, warnings })
    }

    fn clock(&self) -> &StoreClock {
        &self.clock
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_url_is_what_parsing_the_joined_text_gives() {
        let bases =
            ["http://127.0.0.1:8080", "http://kv.example:9/", "https://kv.example/pre/fix/", "http://[::1]:7/a"];
        let paths = ["/healthz", "/state/evt_abc-DEF_1", "/state/evt~~a b%2Fc", "/state/evt_é🎉", "/state/../x"];
        for base in bases {
            let store = KvClientStore::new(base, None, Clock::system(), Duration::from_secs(1)).unwrap();
            for path in paths {
                let joined = format!("{}{path}", store.base);
                assert_eq!(store.url(path), reqwest::Url::parse(&joined).unwrap(), "{joined}");
            }
            // Where joining text would start a query or a fragment, a path stays a path.
            let url = store.url("/state/a?b#c");
            assert!(url.path().ends_with("/state/a%3Fb%23c") && url.query().is_none() && url.fragment().is_none());
        }
    }
}
