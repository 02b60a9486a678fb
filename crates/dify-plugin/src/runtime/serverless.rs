//! The serverless and aws_lambda runtimes: the daemon reaches the plugin over HTTP.

use std::convert::Infallible;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use super::invoke::{self, HttpState};
pub use super::About;
use crate::error::Error;
use crate::handler::Handler;

/// The HTTP port unless `<PREFIX>_PORT` says another.
pub const DEFAULT_PORT: u16 = 8080;

/// Where the HTTP runtime listens, and which one it is.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// `serverless` or `aws_lambda`, shown by `GET /`.
    pub method: &'static str,
    /// The address to bind (`0.0.0.0` by default).
    pub host: String,
    /// The port to bind (0 picks a free one).
    pub port: u16,
}

impl HttpConfig {
    /// Host and port from `<PREFIX>_HOST` / `<PREFIX>_PORT` (defaults 0.0.0.0:8080; port 0 picks a free one).
    pub fn from_settings(
        method: &'static str,
        prefix: &str,
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, Error> {
        let host = get(&format!("{prefix}_HOST")).unwrap_or_else(|| "0.0.0.0".to_owned());
        let port = match get(&format!("{prefix}_PORT")) {
            Some(p) => p.parse().map_err(|_| Error::Setting(format!("{prefix}_PORT={p:?} is not a port number")))?,
            None => DEFAULT_PORT,
        };
        Ok(HttpConfig { method, host: host.trim_start_matches('[').trim_end_matches(']').to_owned(), port })
    }
}

/// `GET /`, `GET /health` and `POST /invoke` over `state`.
pub(crate) fn router<H: Handler>(state: HttpState<H>) -> Router {
    Router::new()
        .route("/", get(index::<H>))
        .route("/health", get(health))
        .route("/invoke", post(invoke::invoke::<H>))
        .fallback(not_found)
        .with_state(state)
}

/// Binds, prints the start-up lines, and serves until the process is stopped; it ends only
/// with an error.
pub async fn run_http<H: Handler>(app: Arc<H>, cfg: HttpConfig, about: About) -> Result<Infallible, Error> {
    let listening = format!("cannot listen on {}:{}", cfg.host, cfg.port);
    let listener =
        tokio::net::TcpListener::bind((cfg.host.as_str(), cfg.port)).await.map_err(|e| Error::io(&listening, e))?;
    let addr = listener.local_addr().map_err(|e| Error::io(listening, e))?;
    if let Err(e) = announce(&mut std::io::stdout().lock(), about.name, addr) {
        tracing::warn!("could not print the start-up lines on stdout: {e}");
    }
    tracing::info!("INSTALL_METHOD={}: serving POST /invoke on http://{addr}", cfg.method);
    let state = HttpState { app, method: cfg.method, about: Arc::new(about) };
    axum::serve(listener, router(state)).await.map_err(|e| Error::io(format!("serving HTTP on {addr}"), e))?;
    // axum's accept loop retries every accept error; it returns only if its listener is gone.
    Err(Error::io(format!("serving HTTP on {addr}"), std::io::ErrorKind::UnexpectedEof.into()))
}

/// The marketplace pre-check starts the plugin, waits (20 s) for `Serving Flask app` on stdout,
/// then probes `GET http://127.0.0.1:8080/`. In the HTTP modes stdout carries no protocol, so
/// these lines are safe there. The second line gives the real port (useful with port 0).
pub(crate) fn announce(out: &mut impl Write, name: &str, addr: SocketAddr) -> std::io::Result<()> {
    writeln!(out, " * Serving Flask app '{name}' (native runtime on http://{addr})")?;
    writeln!(out, " * Running on http://{addr}")?;
    out.flush()
}

async fn health() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], "OK")
}

async fn index<H: Handler>(axum::extract::State(state): axum::extract::State<HttpState<H>>) -> impl IntoResponse {
    let mut page = serde_json::Map::new();
    page.insert("plugin".into(), state.about.name.into());
    page.extend(state.about.fields.clone());
    page.insert("install_method".into(), state.method.into());
    page.insert("endpoints".into(), json!(["GET /health", "POST /invoke?action=<action>"]));
    Json(serde_json::Value::Object(page))
}

async fn not_found() -> Response {
    (StatusCode::NOT_FOUND, Json(json!({"error": "not found: use GET /health or POST /invoke?action=<action>"})))
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announce_prints_the_flask_marker_and_the_real_port() {
        let mut out = Vec::new();
        announce(&mut out, "echo", "127.0.0.1:40123".parse().unwrap()).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.lines().next().unwrap().contains("Serving Flask app 'echo'"), "{text}");
        assert!(text.contains(" * Running on http://127.0.0.1:40123\n"), "{text}");
    }

    #[test]
    fn settings() {
        let c = HttpConfig::from_settings("aws_lambda", "AWS_LAMBDA", |_| None).unwrap();
        assert_eq!((c.host.as_str(), c.port), ("0.0.0.0", 8080));
        let c = HttpConfig::from_settings("serverless", "SERVERLESS", |k| {
            (k == "SERVERLESS_PORT").then(|| "0".to_owned()).or((k == "SERVERLESS_HOST").then(|| "[::]".to_owned()))
        })
        .unwrap();
        assert_eq!((c.host.as_str(), c.port), ("::", 0));
        assert!(HttpConfig::from_settings("serverless", "SERVERLESS", |_| Some("x".into())).is_err());
    }
}
