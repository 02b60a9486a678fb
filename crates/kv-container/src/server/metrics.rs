//! `GET /metrics`: the container's counters and histograms in the Prometheus text format.
//!
//! Everything is recorded where it happens (the request middleware, the writer thread, the
//! purge loop, the listener) into one [`Metrics`] shared through the engine; the gauges that
//! describe the store (keys, file size) are read when a scrape asks for them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use event_store::kv_wire;
use prometheus_client::encoding::{prometheus_text, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

use super::integrity::IntegrityMetrics;
use super::ops_metrics::OpsMetrics;
use super::traffic::Traffic;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    route: &'static str,
    method: &'static str,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// Every metric of one server. Metric handles are cheap clones of shared atomics.
pub(crate) struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Family<RouteLabels, Histogram, fn() -> Histogram>,
    batch_size: Histogram,
    commit_seconds: Histogram,
    purged: Counter,
    writer_errors: Counter,
    open_connections: Gauge,
    /// Quiet connections closed to make room at the connection cap.
    evicted_connections: Counter,
    keys: Gauge,
    data_bytes: Gauge,
    /// Requests and TLS handshakes refused, by reason (a fixed set; never the token).
    auth_failures: Family<ReasonLabels, Counter>,
    /// Claims, write latency, health and census gauges (and the status page's ring).
    pub(crate) ops: OpsMetrics,
    /// The background integrity check.
    pub(crate) integrity: IntegrityMetrics,
    /// Requests that read or write the store, for the check's pace (not exported).
    pub(crate) traffic: Arc<Traffic>,
}

fn latency_histogram() -> Histogram {
    // 50 µs … ~1.6 s: a cached read is tens of µs, a commit on a slow disk hundreds of ms.
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("kv");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register("requests", "HTTP requests answered, by route, method and status", requests.clone());
        let latency = Family::<RouteLabels, Histogram, fn() -> Histogram>::new_with_constructor(latency_histogram);
        registry.register_with_unit(
            "request_duration",
            "Time from request to response headers, by route",
            Unit::Seconds,
            latency.clone(),
        );
        let batch_size = Histogram::new(exponential_buckets(1.0, 2.0, 11));
        registry.register("write_batch_size", "Writes applied per committed transaction", batch_size.clone());
        let commit_seconds = Histogram::new(exponential_buckets(0.000_05, 2.0, 16));
        registry.register_with_unit(
            "commit_duration",
            "Time to apply and commit one batch (the fsync included with --durability immediate)",
            Unit::Seconds,
            commit_seconds.clone(),
        );
        let purged = Counter::default();
        registry.register("keys_purged", "Expired keys deleted by the background purge", purged.clone());
        let writer_errors = Counter::default();
        registry.register(
            "writer_errors",
            "Write batches that failed (none of their writes acknowledged)",
            writer_errors.clone(),
        );
        let open_connections = Gauge::default();
        registry.register("open_connections", "Client connections currently open", open_connections.clone());
        let evicted_connections = Counter::default();
        registry.register(
            "evicted_connections",
            "Quiet client connections closed to make room at the connection cap",
            evicted_connections.clone(),
        );
        let keys = Gauge::default();
        registry.register("keys", "Keys stored (expired keys count until they are purged)", keys.clone());
        let data_bytes = Gauge::default();
        registry.register_with_unit("data_file_size", "Size of the data file", Unit::Bytes, data_bytes.clone());
        let auth_failures = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "auth_failures",
            "Requests refused by authentication (401, 403) and failed TLS handshakes, by reason",
            auth_failures.clone(),
        );
        let ops = OpsMetrics::register(&mut registry);
        let integrity = IntegrityMetrics::register(&mut registry);
        Metrics {
            integrity,
            traffic: Arc::default(),
            auth_failures,
            registry,
            requests,
            latency,
            batch_size,
            commit_seconds,
            purged,
            writer_errors,
            open_connections,
            evicted_connections,
            keys,
            data_bytes,
            ops,
        }
    }
}

impl Metrics {
    /// One committed batch of `writes` writes that took `took` to apply and commit.
    pub(crate) fn committed(&self, writes: usize, took: Duration) {
        self.batch_size.observe(writes as f64);
        self.commit_seconds.observe(took.as_secs_f64());
    }

    pub(crate) fn writer_failed(&self) {
        self.writer_errors.inc();
    }

    pub(crate) fn purged(&self, keys: usize) {
        self.purged.inc_by(keys as u64);
    }

    /// A quiet connection was closed to make room at the connection cap.
    pub(crate) fn connection_evicted(&self) {
        self.evicted_connections.inc();
    }

    /// A request or TLS handshake was refused; `reason` is one of a fixed set of names.
    pub(crate) fn auth_failed(&self, reason: &'static str) {
        self.auth_failures.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// A client connection was accepted.
    pub(crate) fn connection_opened(&self) {
        self.open_connections.inc();
    }

    /// A client connection closed.
    pub(crate) fn connection_closed(&self) {
        self.open_connections.dec();
    }

    /// Client connections open now.
    pub(crate) fn open_connections(&self) -> i64 {
        self.open_connections.get()
    }

    /// The text exposition, with the store gauges set to the given values first (`keys`
    /// unknown, e.g. on a damaged store: the last value stays).
    pub(crate) fn render(&self, keys: Option<u64>, data_bytes: u64) -> String {
        if let Some(keys) = keys {
            self.keys.set(i64::try_from(keys).unwrap_or(i64::MAX));
        }
        self.data_bytes.set(i64::try_from(data_bytes).unwrap_or(i64::MAX));
        let mut out = String::with_capacity(8 * 1024);
        prometheus_text::encode(&mut out, &self.registry).expect("writing into a String cannot fail");
        out
    }

    fn observe(&self, route: &'static str, method: &Method, status: u16, took: Duration) {
        let method = match *method {
            Method::GET => "GET",
            Method::PUT => "PUT",
            Method::POST => "POST",
            Method::DELETE => "DELETE",
            Method::HEAD => "HEAD",
            _ => "other",
        };
        self.requests.get_or_create(&RequestLabels { route, method, status }).inc();
        self.latency.get_or_create(&RouteLabels { route }).observe(took.as_secs_f64());
        if route == "/state/{key}" && matches!(method, "PUT" | "POST" | "DELETE") {
            self.ops.write_done(took);
        }
    }
}

/// The route label: a fixed set, so no client can grow the label space.
fn route_of(path: &str) -> &'static str {
    match path {
        "/healthz" => "/healthz",
        "/metrics" => "/metrics",
        "/backup" => "/backup",
        "/state" => "/state",
        p if p.starts_with(kv_wire::STATE_PREFIX) => "/state/{key}",
        p if p.starts_with("/ui/api/") => "/ui/api",
        p if p == "/ui" || p.starts_with("/ui/") => "/ui",
        _ => "other",
    }
}

/// Whether a request on `route` reads or writes the store (see `traffic`): health probes,
/// scrapes and the status page's polls answer from memory and do not hold the check back.
fn uses_the_store(route: &str) -> bool {
    !matches!(route, "/healthz" | "/metrics" | "/ui" | "/ui/api")
}

/// Middleware (outermost): counts and times every request, 401s and 404s included.
pub(crate) async fn track(State(metrics): State<Arc<Metrics>>, req: Request, next: Next) -> Response {
    let (route, method, start) = (route_of(req.uri().path()), req.method().clone(), Instant::now());
    let store = uses_the_store(route);
    if store {
        metrics.traffic.saw();
    }
    let resp = next.run(req).await;
    if store {
        metrics.traffic.saw();
    }
    metrics.observe(route, &method, resp.status().as_u16(), start.elapsed());
    resp
}

/// The `/metrics` answer.
pub(crate) fn response(text: String) -> Response {
    let mut resp = text.into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(prometheus_text::CONTENT_TYPE));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_a_closed_set() {
        assert_eq!(route_of("/state/evt_a"), "/state/{key}");
        assert_eq!(route_of("/state"), "/state");
        assert_eq!(route_of("/x/../y"), "other");
        assert_eq!((route_of("/ui"), route_of("/ui/app.js"), route_of("/ui/api/now")), ("/ui", "/ui", "/ui/api"));
        assert_eq!(route_of("/uix"), "other");
        let store: Vec<_> = ["/healthz", "/metrics", "/ui", "/ui/api/now", "/state/evt_a", "/state", "/backup", "/x"]
            .into_iter()
            .filter(|p| uses_the_store(route_of(p)))
            .collect();
        assert_eq!(store, ["/state/evt_a", "/state", "/backup", "/x"]);
    }
}
