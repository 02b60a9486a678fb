//! `/ui`: a read-only status page served by the container itself, and its JSON API.
//!
//! The page (`assets/`: one HTML, one JS, one CSS file, embedded at build time; no build
//! step, nothing fetched from elsewhere) is public, because a browser cannot send a bearer
//! token with a page load; it holds no data. Everything it shows comes from `/ui/api/…`,
//! which sits behind the token like every data route: the page asks for the token in a
//! form and keeps it in `sessionStorage` for that tab, never in a URL or a cookie.
//!
//! Counts by status and the stuck/failed lists come from `super::census` (a cached, rate-limited
//! scan); claims and write latency from the ring in `rates`; the rest is read live.

mod api;
pub(super) mod settings;

use std::sync::Arc;

use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

pub(crate) use settings::UiArgs;

use super::state::AppState;

const INDEX: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/app.js");
const STYLE: &str = include_str!("assets/app.css");

/// The page may load only its own script and style and talk only to its own origin; no
/// other site may frame it.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; \
                   base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The token-protected JSON API (merged inside the auth layer).
pub(crate) fn api_routes() -> Router<Arc<AppState>> {
    api::routes()
}

/// The static page (merged outside the auth layer). `/ui` redirects to `/ui/` so the page's
/// relative links (`app.js`, `api/now`) also resolve behind a proxy that adds a path prefix.
pub(crate) fn asset_routes() -> Router {
    Router::new()
        .route("/ui", get(|| async { (StatusCode::PERMANENT_REDIRECT, [(header::LOCATION, "ui/")]) }))
        .route("/ui/", get(|| async { asset(INDEX, "text/html; charset=utf-8") }))
        .route("/ui/app.js", get(|| async { asset(SCRIPT, "text/javascript; charset=utf-8") }))
        .route("/ui/app.css", get(|| async { asset(STYLE, "text/css; charset=utf-8") }))
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut resp = body.into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Small, and must change with the binary: revalidate rather than cache stale code.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    hardened(h);
    resp
}

/// Headers every `/ui` answer carries.
fn hardened(h: &mut axum::http::HeaderMap) {
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(HeaderName::from_static("cross-origin-resource-policy"), HeaderValue::from_static("same-origin"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundle_is_small_and_self_contained() {
        let total = INDEX.len() + SCRIPT.len() + STYLE.len();
        assert!(total <= 50 * 1024, "the page is {total} bytes; the budget is 50 KiB");
        for text in [INDEX, SCRIPT, STYLE] {
            // Nothing loaded from another origin (works offline, behind any proxy); the SVG
            // namespace is a name, never fetched.
            let text = text.replace("http://www.w3.org/2000/svg", "");
            assert!(!text.contains("http://") && !text.contains("https://"), "an absolute URL in the bundle");
            assert!(!text.contains("localStorage") && !text.contains("document.cookie"));
        }
        assert!(SCRIPT.contains("sessionStorage"));
        assert!(!SCRIPT.contains("innerHTML"), "text from the store is set as text, never parsed as HTML");
    }
}
