//! Client for our KV container's v1 HTTP protocol (`http://` / `https://` kv_url).
//!
//! An `https://` kv_url may name a private CA (`?tls_ca=/path/ca.pem`) and a client
//! certificate (`&tls_cert=/path/cert.pem&tls_key=/path/key.pem`) for a container that
//! requires one; see `kv_tls`.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION, CONTENT_TYPE, ETAG, IF_MATCH, IF_NONE_MATCH};
use hyper::{Method, Request, StatusCode};
use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};

use super::kv_http::{Failure, Transport};
use super::kv_tls;
use super::kv_wire;
use super::record::Record;
use super::url::redact;
use crate::clock::{HostClock, StoreClock, StoreDeadline};
use crate::contract::{Created, Current, EventStore, Probe, Rollback, Swapped, Version, Write};
use crate::error::StoreError;

/// Most requests (so connections) in flight to one store. Sessions beyond it wait for a
/// free connection instead of opening their own: sockets and memory do not grow with the
/// number of sessions in flight.
pub(crate) const MAX_CONNECTIONS: usize = 256;
/// Largest store answer read (records are at most 1 MiB); a larger one is an upstream error
/// and is not buffered.
pub(crate) const MAX_ANSWER_BYTES: usize = 4 << 20;

/// What a URL path percent-encodes (the WHATWG URL standard's path set, as `url::Url` applies
/// it): a request's path is what parsing the kv_url joined with it would give.
const PATH: &AsciiSet =
    &CONTROLS.add(b' ').add(b'"').add(b'#').add(b'<').add(b'>').add(b'?').add(b'`').add(b'{').add(b'}');

pub(crate) struct KvClientStore {
    transport: Transport,
    slots: tokio::sync::Semaphore,
    base: String,
    /// The kv_url's path without its trailing `/`, the prefix of every request's path.
    base_path: String,
    auth: Option<HeaderValue>,
    clock: StoreClock,
    /// Bound of every call.
    timeout: Duration,
}

/// The parts of an answer the calls read.
struct StampedReply {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
    store_now_ms: i64,
}

impl KvClientStore {
    pub(crate) fn new(url: &str, token: Option<&str>, host: HostClock, timeout: Duration) -> Result<Self, StoreError> {
        let (base, tls) = kv_tls::TlsParams::split(url)?;
        let parsed = url::Url::parse(&base)
            .map_err(|e| StoreError::config(format!("kv_url {:?} is not a URL: {e}", redact(&base))).caused_by(e))?;
        let not_http = || StoreError::BadUrl(format!("kv_url {:?} is not an http:// or https:// URL", redact(&base)));
        let (Some(name), Some(port)) = (parsed.host(), parsed.port_or_known_default()) else { return Err(not_http()) };
        let connect_host = match &name {
            url::Host::Ipv6(ip) => ip.to_string(),
            other => other.to_string(),
        };
        let tls = match parsed.scheme() {
            "https" => Some(tls.connector(&connect_host)?),
            "http" => None,
            _ => return Err(not_http()),
        };
        let authority = match parsed.port() {
            Some(p) => format!("{name}:{p}"),
            None => name.to_string(),
        };
        let authority = HeaderValue::from_str(&authority).map_err(|_| not_http())?;
        let transport = Transport::new(connect_host, port, authority, tls, Duration::from_secs(2).min(timeout));
        let auth = match token.filter(|t| !t.is_empty()) {
            None => None,
            Some(t) => {
                let mut v = HeaderValue::from_str(&format!("Bearer {t}"))
                    .map_err(|_| StoreError::config("kv_token holds characters a header cannot carry"))?;
                v.set_sensitive(true);
                Some(v)
            }
        };
        Ok(KvClientStore {
            transport,
            slots: tokio::sync::Semaphore::new(MAX_CONNECTIONS),
            base_path: parsed.path().trim_end_matches('/').to_owned(),
            base,
            auth,
            clock: StoreClock::new(host),
            timeout,
        })
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        headers: Headers,
        body: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<StampedReply, StoreError> {
        // Nothing has been sent while waiting for a connection: not ambiguous.
        let _slot = match tokio::time::timeout(timeout, self.slots.acquire()).await {
            Ok(Ok(permit)) => permit,
            _ => {
                return Err(StoreError::unreachable(
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
        headers: Headers,
        body: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<StampedReply, StoreError> {
        let req = self.request(method, path, headers, body)?;
        let reply = match tokio::time::timeout(timeout, self.transport.exchange(req, MAX_ANSWER_BYTES)).await {
            Err(_) => return Err(StoreError::Timeout(timeout.as_millis() as u64)),
            Ok(reply) => reply.map_err(|e| self.classify(e))?,
        };
        let store_now_ms =
            match reply.headers.get(kv_wire::TIME_MS).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok()) {
                Some(t) => {
                    self.clock.observe(t);
                    t
                }
                None => self.clock.now_ms(),
            };
        let (status, body) = (reply.status, reply.body);
        if status == StatusCode::UNAUTHORIZED {
            return Err(StoreError::unauthorized(format!("{} (check kv_token)", error_text(status, &body))));
        }
        if status == StatusCode::FORBIDDEN {
            return Err(kv_tls::forbidden(path));
        }
        Ok(StampedReply { status, headers: reply.headers, body, store_now_ms })
    }

    /// The request for `path` (`/state/…`, `/healthz`), in origin form.
    fn request(
        &self,
        method: Method,
        path: &str,
        headers: Headers,
        body: Option<&[u8]>,
    ) -> Result<Request<Full<Bytes>>, StoreError> {
        let bad = |what: &str| StoreError::unexpected(format!("cannot build the request for {path:?}: {what}"));
        let mut req = Request::new(Full::new(body.map_or_else(Bytes::new, Bytes::copy_from_slice)));
        *req.method_mut() = method;
        *req.uri_mut() = self.target(path).parse().map_err(|_| bad("not a URL path"))?;
        let h = req.headers_mut();
        if let Some(auth) = &self.auth {
            h.insert(AUTHORIZATION, auth.clone());
        }
        for (name, value) in headers.into_iter().flatten() {
            h.insert(name, value);
        }
        if body.is_some() {
            h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        Ok(req)
    }

    fn classify(&self, failure: Failure) -> StoreError {
        let unreachable = |why: String| StoreError::unreachable(redact(&self.base), why);
        match failure {
            // The handshake failed (or, in TLS 1.3, the container refused our certificate
            // right after it): nothing was taken, and the fix is in kv_url or a certificate.
            Failure::Connect(e) => unreachable(kv_tls::refusal(&*e).unwrap_or_else(|| root_cause(&*e))).caused_by(e),
            Failure::ConnectTimeout(t) => unreachable(format!("no connection within {} ms", t.as_millis())),
            Failure::Exchange(e) => match kv_tls::refusal(&*e) {
                Some(why) => unreachable(why).caused_by(e),
                None => StoreError::interrupted(root_cause(&*e)).caused_by(e),
            },
            Failure::TooBig => StoreError::unexpected(format!(
                "an answer larger than {} MiB (records are at most 1 MiB); it was not read",
                MAX_ANSWER_BYTES >> 20
            )),
        }
    }

    /// The request target of `path`: what parsing `{base}{path}` would give as its path,
    /// percent-encoded as a URL path is (a key never holds `/` or forms a dot segment).
    fn target(&self, path: &str) -> String {
        let mut full = String::with_capacity(self.base_path.len() + path.len() + 8);
        full.push_str(&self.base_path);
        full.extend(utf8_percent_encode(path, PATH));
        full
    }

    fn path(key: &str) -> String {
        format!("{}{key}", kv_wire::STATE_PREFIX)
    }

    fn current(a: StampedReply) -> Result<Current, StoreError> {
        let etag = a
            .headers
            .get(ETAG)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| StoreError::unexpected("a value without an ETag"))?;
        Ok(Current { value: a.body.to_vec(), version: Version::Etag(etag.to_owned()), store_now_ms: a.store_now_ms })
    }
}

/// A request's own headers: a write's precondition, TTL and deadline (a read has none).
/// Each value is made once and moved into the request.
type Headers = [Option<(HeaderName, HeaderValue)>; 3];

const NO_HEADERS: Headers = [None, None, None];

/// The headers of a conditional write: its precondition, its TTL and, when it has one, its
/// deadline in the store's clock (`KV-Deadline-Ms`; the container refuses the write later).
fn write_headers(pre: (HeaderName, HeaderValue), ttl: Option<Duration>, until: Option<StoreDeadline>) -> Headers {
    [
        Some(pre),
        ttl.map(|t| (HeaderName::from_static(kv_wire::TTL_MS), HeaderValue::from(t.as_millis() as u64))),
        until.map(|d| (HeaderName::from_static(kv_wire::DEADLINE_MS), HeaderValue::from(d.0))),
    ]
}

/// `If-Match` on a revision the container gave us.
fn if_match(etag: &str) -> Result<(HeaderName, HeaderValue), StoreError> {
    let value =
        HeaderValue::from_str(etag).map_err(|_| StoreError::unexpected(format!("an unusable ETag {etag:?}")))?;
    Ok((IF_MATCH, value))
}

/// The refusal of a write that reached the container after its `KV-Deadline-Ms`: 409 with
/// this error code (never 412, which means the precondition failed).
fn too_late(a: &StampedReply, until: Option<StoreDeadline>) -> Option<StoreError> {
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
    async fn create(&self, key: &str, write: Write<'_>, timeout: Duration) -> Result<Created, StoreError> {
        let Write { value, ttl, until } = write;
        let headers = write_headers((IF_NONE_MATCH, HeaderValue::from_static("*")), Some(ttl), until);
        let a = self.send(Method::PUT, &Self::path(key), headers, Some(value), timeout).await?;
        if let Some(e) = too_late(&a, until) {
            return Err(e);
        }
        match a.status {
            StatusCode::CREATED => Ok(Created::Created),
            StatusCode::PRECONDITION_FAILED => Ok(Created::Exists(Self::current(a)?)),
            // 200 would mean the store replaced an existing value: it ignored If-None-Match.
            s => Err(StoreError::unexpected(format!("{} to a create-only write", error_text(s, &a.body)))),
        }
    }

    /// `KV-Time-Ms` of a GET is a time by which every write the container applied is
    /// visible in the answer (it never reports a time past a batch still being committed).
    async fn read_at(&self, key: &str, timeout: Duration) -> Result<(Option<Current>, i64), StoreError> {
        let a = self.send(Method::GET, &Self::path(key), NO_HEADERS, None, timeout).await?;
        let at = a.store_now_ms;
        match a.status {
            StatusCode::OK => Ok((Some(Self::current(a)?), at)),
            StatusCode::NOT_FOUND => Ok((None, at)),
            s => Err(StoreError::unexpected(error_text(s, &a.body))),
        }
    }

    async fn swap(
        &self,
        key: &str,
        expected: &Version,
        write: Write<'_>,
        timeout: Duration,
    ) -> Result<Swapped, StoreError> {
        let Version::Etag(etag) = expected else {
            return Err(StoreError::unexpected("a version from another backend"));
        };
        let Write { value, ttl, until } = write;
        let headers = write_headers(if_match(etag)?, Some(ttl), until);
        let a = self.send(Method::PUT, &Self::path(key), headers, Some(value), timeout).await?;
        if let Some(e) = too_late(&a, until) {
            return Err(e);
        }
        match a.status {
            StatusCode::OK | StatusCode::CREATED => Ok(Swapped::Swapped),
            StatusCode::PRECONDITION_FAILED if a.headers.contains_key(ETAG) => {
                Ok(Swapped::Changed(Some(Self::current(a)?)))
            }
            StatusCode::PRECONDITION_FAILED => Ok(Swapped::Changed(None)),
            s => Err(StoreError::unexpected(error_text(s, &a.body))),
        }
    }

    /// Read, then `DELETE` (or `PUT`) with `If-Match` on the revision that carried the claim:
    /// the ETag makes the second step a compare-and-delete of exactly that record.
    async fn release(&self, key: &str, rollback: Rollback<'_>, timeout: Duration) -> Result<bool, StoreError> {
        let Rollback { claim_id, restore, ttl, until } = rollback;
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
                let headers = write_headers(if_match(&etag)?, None, until);
                self.send(Method::DELETE, &Self::path(key), headers, None, left).await?
            }
            Some(value) => {
                let headers = write_headers(if_match(&etag)?, Some(ttl), until);
                self.send(Method::PUT, &Self::path(key), headers, Some(value), left).await?
            }
        };
        if let Some(e) = too_late(&a, until) {
            return Err(e);
        }
        match a.status {
            StatusCode::NO_CONTENT | StatusCode::OK | StatusCode::CREATED => Ok(true),
            // Changed or gone since the read: it is no longer this claim.
            StatusCode::PRECONDITION_FAILED | StatusCode::NOT_FOUND => Ok(false),
            s => Err(StoreError::unexpected(error_text(s, &a.body))),
        }
    }

    async fn probe(&self) -> Result<Probe, StoreError> {
        let a = self.send(Method::GET, kv_wire::HEALTHZ, NO_HEADERS, None, self.timeout).await?;
        let not_v1 = |why: String| {
            StoreError::config(format!(
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
    fn a_request_path_is_what_parsing_the_joined_text_gives() {
        let bases =
            ["http://127.0.0.1:8080", "http://kv.example:9/", "https://kv.example/pre/fix/", "http://[::1]:7/a"];
        let paths =
            ["/healthz", "/state/evt_abc-DEF_1", "/state/evt~~a b%2Fc", "/state/evt_é🎉", "/state/e\"v<t>`{x}\u{7f}"];
        for base in bases {
            let store = KvClientStore::new(base, None, HostClock::system(), Duration::from_secs(1)).unwrap();
            for path in paths {
                let joined = format!("{}{path}", store.base);
                assert_eq!(store.target(path), url::Url::parse(&joined).unwrap().path(), "{joined}");
            }
            // Where joining text would start a query or a fragment, a path stays a path.
            assert!(store.target("/state/a?b#c").ends_with("/state/a%3Fb%23c"));
        }
    }

    #[test]
    fn the_host_header_is_the_urls_authority() {
        for (url, host, authority) in [
            ("http://127.0.0.1:8080", "127.0.0.1", "127.0.0.1:8080"),
            ("http://KV.example/x", "kv.example", "kv.example"),
            ("http://[::1]:7/a", "::1", "[::1]:7"),
            ("https://kv.example:443/", "kv.example", "kv.example"),
        ] {
            let store = KvClientStore::new(url, None, HostClock::system(), Duration::from_secs(1)).unwrap();
            assert_eq!(store.transport.endpoint(), (host, authority), "{url}");
        }
        for url in ["ftp://kv.example/", "http://kv.example:99999/"] {
            assert!(KvClientStore::new(url, None, HostClock::system(), Duration::from_secs(1)).is_err(), "{url}");
        }
    }
}
