//! Bearer tokens, each bound to namespaces or to all (`*`), checked on every route except
//! `/healthz`; the table is re-read from the tokens file on SIGHUP or `POST /admin/reload`.
//!
//! A namespace token reaches only keys `evt_<ns>~…` of its namespaces (403 otherwise) and a
//! listing clamped to them; the operator routes (backup, metrics, reload) need `*`. Refusals
//! are counted by reason and logged at most once a minute per peer address, never with the token.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use event_store::kv_wire;

use super::error::ApiError;
use super::metrics::Metrics;
use super::tokens::{namespace_prefix, Scope, Table};

/// The peer of a connection, put into every request's extensions by the accept loop.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer(pub(crate) SocketAddr);

/// One log line per peer address per this long; the metrics count every refusal.
const LOG_EVERY: Duration = Duration::from_secs(60);
/// Addresses remembered for the log limit; past it, the old ones are forgotten.
const MAX_PEERS: usize = 4096;

/// Refusals: counted by reason, logged at most once per [`LOG_EVERY`] per peer address.
pub(crate) struct Refusals {
    metrics: Arc<Metrics>,
    logged: Mutex<HashMap<IpAddr, Instant>>,
}

impl Refusals {
    pub(crate) fn new(metrics: Arc<Metrics>) -> Refusals {
        Refusals { metrics, logged: Mutex::new(HashMap::new()) }
    }

    /// Counts a refusal of `peer` for `reason` (a fixed name) and logs it unless this peer
    /// was logged within the last minute.
    pub(crate) fn refused(&self, peer: Option<SocketAddr>, reason: &'static str, detail: &str) {
        self.metrics.auth_failed(reason);
        let Some(peer) = peer else { return };
        if self.should_log(peer.ip(), Instant::now()) {
            tracing::warn!(
                "kv: refused {peer}: {reason} ({detail}); more refusals of {} within a minute are only counted \
                 in kv_auth_failures_total",
                peer.ip()
            );
        }
    }

    fn should_log(&self, ip: IpAddr, now: Instant) -> bool {
        let mut logged = self.logged.lock().unwrap_or_else(|p| p.into_inner());
        if logged.get(&ip).is_some_and(|at| now.saturating_duration_since(*at) < LOG_EVERY) {
            return false;
        }
        if logged.len() >= MAX_PEERS {
            logged.retain(|_, at| now.saturating_duration_since(*at) < LOG_EVERY);
            if logged.len() >= MAX_PEERS {
                logged.clear();
            }
        }
        logged.insert(ip, now);
        true
    }
}

/// The valid tokens and where they came from.
pub(crate) struct Auth {
    table: RwLock<Arc<Table>>,
    /// `--tokens-file`; `None` for the single `*` token of `--token` / `KV_TOKEN`.
    file: Option<PathBuf>,
    refusals: Arc<Refusals>,
}

impl Auth {
    pub(crate) fn new(table: Table, file: Option<PathBuf>, refusals: Arc<Refusals>) -> Auth {
        Auth { table: RwLock::new(Arc::new(table)), file, refusals }
    }

    /// Reads and parses a tokens file; the error names the file and the line.
    pub(crate) fn read_file(path: &std::path::Path) -> anyhow::Result<Table> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read --tokens-file {}: {e}", path.display()))?;
        Table::parse(&text).map_err(|why| anyhow::anyhow!("--tokens-file {}: {why}", path.display()))
    }

    fn current(&self) -> Arc<Table> {
        self.table.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Re-reads the tokens file. A file that cannot be read or parsed changes nothing: the
    /// tokens in use stay valid, and the error says why (line number included).
    pub(crate) fn reload(&self) -> Result<usize, String> {
        let Some(path) = &self.file else {
            return Err("nothing to reload: the token comes from --token, --token-file or KV_TOKEN; \
                        use --tokens-file to rotate tokens without a restart"
                .into());
        };
        match Self::read_file(path) {
            Ok(table) => {
                let n = table.len();
                *self.table.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(table);
                tracing::info!("kv: tokens file {} re-read: {n} tokens in force", path.display());
                Ok(n)
            }
            Err(e) => {
                let kept = self.current().len();
                tracing::error!("kv: reload refused, the {kept} tokens in force stay: {e}");
                Err(format!("{e}; the {kept} tokens in force stay"))
            }
        }
    }

    /// The scope the request's bearer token opens, or the refusal (reason, answer).
    fn scope(&self, headers: &HeaderMap) -> Result<Scope, (&'static str, ApiError)> {
        let Some(given) = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(bearer) else {
            return Err(("missing_token", ApiError::unauthorized()));
        };
        self.current().scope_of(given).ok_or(("unknown_token", ApiError::unauthorized()))
    }
}

/// The credential of a `Bearer` authorization (scheme name is case-insensitive).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, rest) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim_start())
}

/// Middleware: answers 401 (no or unknown token) or 403 (a key or route outside the token's
/// namespaces) before the handler and before any body is read. `/healthz` stays open.
pub(crate) async fn require_token(State(auth): State<Arc<Auth>>, mut req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if path == kv_wire::HEALTHZ {
        return next.run(req).await;
    }
    let peer = req.extensions().get::<Peer>().map(|p| p.0);
    let scope = match auth.scope(req.headers()) {
        Ok(scope) => scope,
        Err((reason, answer)) => {
            auth.refusals.refused(peer, reason, "missing or unknown bearer token");
            return answer.into_response();
        }
    };
    let refused = match (&scope, path.strip_prefix(kv_wire::STATE_PREFIX)) {
        (Scope::All, _) => None,
        (_, Some(key)) if scope.covers_key(key) => None,
        (_, Some(_)) => Some(("other_namespace", "this token does not cover the namespace of this key")),
        (_, None) if path == kv_wire::STATE => None,
        (_, None) => Some(("operator_only", "this route needs a token for every namespace (`*`)")),
    };
    if let Some((reason, message)) = refused {
        auth.refusals.refused(peer, reason, message);
        return ApiError::new(StatusCode::FORBIDDEN, "forbidden", message).into_response();
    }
    req.extensions_mut().insert(scope);
    next.run(req).await
}

/// The listing prefix a scope may see: unchanged within its namespaces, narrowed to the one
/// namespace a shorter prefix would reach into, `None` (an empty page) when it reaches none.
pub(crate) fn clamp_prefix(scope: &Scope, prefix: &str) -> Result<Option<String>, ApiError> {
    let Scope::Namespaces(list) = scope else { return Ok(Some(prefix.to_owned())) };
    let prefixes: Vec<String> = list.iter().map(|ns| namespace_prefix(ns)).collect();
    if prefixes.iter().any(|p| prefix.starts_with(p.as_str())) {
        return Ok(Some(prefix.to_owned()));
    }
    let mut reached = prefixes.into_iter().filter(|p| p.starts_with(prefix));
    match (reached.next(), reached.next()) {
        (None, _) => Ok(None),
        (Some(only), None) => Ok(Some(only)),
        (Some(_), Some(_)) => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "this token covers several namespaces: list one at a time (prefix=evt_<namespace>~)",
        )),
    }
}

/// `POST /admin/reload`: re-reads the tokens file (the route itself needs `*`).
pub(crate) async fn reload(State(auth): State<Arc<Auth>>) -> Response {
    match auth.reload() {
        Ok(n) => axum::Json(serde_json::json!({ "reloaded": true, "tokens": n })).into_response(),
        Err(why) => ApiError::new(StatusCode::CONFLICT, "not_reloaded", why).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with_auth(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
        h
    }

    fn auth(text: &str) -> Auth {
        Auth::new(Table::parse(text).unwrap(), None, Arc::new(Refusals::new(Arc::default())))
    }

    #[test]
    fn accepts_only_the_exact_token() {
        let t = Auth::new(Table::single("s3cret").unwrap(), None, Arc::new(Refusals::new(Arc::default())));
        assert_eq!(t.scope(&with_auth("Bearer s3cret")).unwrap(), Scope::All);
        assert_eq!(t.scope(&with_auth("bearer s3cret")).unwrap(), Scope::All);
        for (bad, reason) in [
            ("Bearer s3cre", "unknown_token"),
            ("Bearer s3cret2", "unknown_token"),
            ("Basic s3cret", "missing_token"),
            ("s3cret", "missing_token"),
        ] {
            assert_eq!(t.scope(&with_auth(bad)).unwrap_err().0, reason, "{bad}");
        }
        assert_eq!(t.scope(&HeaderMap::new()).unwrap_err().0, "missing_token");
    }

    #[test]
    fn empty_token_is_refused() {
        assert!(Table::single("").is_err());
    }

    #[test]
    fn listing_is_clamped_to_the_namespaces_of_the_token() {
        let one = Scope::Namespaces(vec!["acme".into()]);
        assert_eq!(clamp_prefix(&one, "").unwrap().as_deref(), Some("evt_acme~"));
        assert_eq!(clamp_prefix(&one, "evt_ac").unwrap().as_deref(), Some("evt_acme~"));
        assert_eq!(clamp_prefix(&one, "evt_acme~E").unwrap().as_deref(), Some("evt_acme~E"));
        assert_eq!(clamp_prefix(&one, "evt_beta~").unwrap(), None);
        assert_eq!(clamp_prefix(&one, "evt_acme2").unwrap(), None);
        let two = Scope::Namespaces(vec!["acme".into(), "beta".into()]);
        assert!(clamp_prefix(&two, "evt_").is_err());
        assert_eq!(clamp_prefix(&two, "evt_b").unwrap().as_deref(), Some("evt_beta~"));
        assert_eq!(clamp_prefix(&Scope::All, "x").unwrap().as_deref(), Some("x"));
    }

    #[test]
    fn refusals_are_logged_once_a_minute_per_peer() {
        let r = Refusals::new(Arc::default());
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let t0 = Instant::now();
        assert!(r.should_log(a, t0));
        assert!(!r.should_log(a, t0 + Duration::from_secs(59)));
        assert!(r.should_log(b, t0 + Duration::from_secs(1)));
        assert!(r.should_log(a, t0 + Duration::from_secs(61)));
        for i in 0..(MAX_PEERS as u32 + 10) {
            r.should_log(IpAddr::from(i.to_be_bytes()), t0);
        }
        assert!(r.logged.lock().unwrap().len() <= MAX_PEERS);
    }

    #[test]
    fn namespace_tokens_open_their_namespaces_only() {
        let a = auth("* root\nacme a1\nacme a2\n");
        assert_eq!(a.scope(&with_auth("Bearer a2")).unwrap(), Scope::Namespaces(vec!["acme".into()]));
        assert_eq!(a.scope(&with_auth("Bearer root")).unwrap(), Scope::All);
        assert_eq!(a.scope(&with_auth("Bearer nope")).unwrap_err().0, "unknown_token");
    }
}
