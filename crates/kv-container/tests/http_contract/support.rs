//! A container opened in a temporary directory on a manual clock, and one request at a time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use kv_container::{Container, ServerClock};
use tower::ServiceExt;

/// Where the store's clock starts (unix ms).
pub(crate) const T0: u64 = 1_700_000_000_000;

pub(crate) struct Kv {
    container: Option<Container>,
    clock: Arc<AtomicU64>,
    _dir: tempfile::TempDir,
}

/// What came back: status, headers and the whole body.
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Vec<u8>,
}

impl Kv {
    pub(crate) fn open(token: Option<&str>) -> Kv {
        let dir = tempfile::tempdir().unwrap();
        let (clock, handle) = ServerClock::manual(T0);
        let container = Container::open(dir.path(), clock, token).expect("the container opens");
        Kv { container: Some(container), clock: handle, _dir: dir }
    }

    /// Moves the store's clock to `T0 + ms`.
    pub(crate) fn set_clock(&self, ms: u64) {
        self.clock.store(T0 + ms, Ordering::SeqCst);
    }

    pub(crate) async fn send(&self, method: Method, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
        let mut req = Request::builder().method(method).uri(path);
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let req = req.body(Body::from(body.to_owned())).unwrap();
        let router = self.container.as_ref().expect("open").router();
        let resp = router.oneshot(req).await.expect("the router answers");
        let (parts, body) = resp.into_parts();
        let body = axum::body::to_bytes(body, usize::MAX).await.expect("the body").to_vec();
        let reply = Reply { status: parts.status, headers: parts.headers, body };
        assert!(reply.header_u64("kv-time-ms").is_some(), "every response carries KV-Time-Ms");
        reply
    }

    pub(crate) async fn get(&self, key: &str) -> Reply {
        self.send(Method::GET, &format!("/state/{key}"), &[], "").await
    }

    pub(crate) async fn put(&self, key: &str, headers: &[(&str, &str)], body: &str) -> Reply {
        self.send(Method::PUT, &format!("/state/{key}"), headers, body).await
    }
}

impl Drop for Kv {
    fn drop(&mut self) {
        // The writer commits what is queued and closes the store before the directory goes.
        if let Some(container) = self.container.take() {
            container.close();
        }
    }
}

impl Reply {
    pub(crate) fn header_u64(&self, name: &str) -> Option<u64> {
        self.headers.get(name)?.to_str().ok()?.parse().ok()
    }

    /// The revision of the `ETag` (`"<rev>"`).
    pub(crate) fn etag(&self) -> Option<u64> {
        self.headers.get("etag")?.to_str().ok()?.trim_matches('"').parse().ok()
    }

    /// The `error` code of a JSON error body, which must carry a `message` too.
    pub(crate) fn error_code(&self) -> String {
        let v: serde_json::Value = serde_json::from_slice(&self.body).expect("a JSON error body");
        assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "the error says why: {v}");
        assert_eq!(self.headers["content-type"], "application/json");
        v["error"].as_str().expect("an error code").to_owned()
    }
}
