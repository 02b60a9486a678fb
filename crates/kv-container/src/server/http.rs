//! Routes of the v1 protocol and the mapping of engine outcomes to status codes and headers.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRequest, Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{middleware, Extension, Json, Router};

use event_store::kv_wire;

use super::auth::{self, Auth};
use super::batch::{Precondition, WriteOp, WriteOutcome, Written};
use super::engine::EngineError;
use super::error::ApiError;
use super::ladder::Ladder;
use super::record::{system_now_ms, StoredValue};
use super::request::{self, MAX_VALUE_LEN};
use super::state::{health_problem, AppState, Shared};
use super::tokens::Scope;
use super::{backup, claims, image, listing, metrics, ui};

const KV_TIME_MS: HeaderName = HeaderName::from_static(kv_wire::TIME_MS);
const KV_MODIFIED_MS: HeaderName = HeaderName::from_static(kv_wire::MODIFIED_MS);
const KV_EXPIRES_MS: HeaderName = HeaderName::from_static(kv_wire::EXPIRES_MS);
const CAPABILITIES: [&str; 5] = ["conditional-put", "ttl", "server-time", "cas", "deadline"];

/// The whole HTTP surface. Layers run outside-in: request metrics, time stamp, then auth
/// (only when a token is configured), then the body limit, then the route — so a 401 is
/// sent before any body byte is read. `/metrics` sits outside auth with `--metrics-public`.
/// `POST /admin/reload` (re-read the tokens file) exists when auth is on, and needs `*`;
/// `/admin/check` (the integrity check) needs `*` too when auth is on.
pub(crate) fn router(state: Arc<AppState>, auth: Option<Arc<Auth>>) -> Router {
    let metrics = state.engine.metrics().clone();
    let public = state.metrics_public;
    let mut routes = Router::new()
        .route(kv_wire::HEALTHZ, get(healthz))
        .route(kv_wire::STATE, get(list_keys))
        .route("/state/{*key}", get(get_value).put(put_value).post(post_value).delete(delete_value))
        .route("/backup", get(backup_snapshot))
        .route("/admin/check", post(start_check).get(check_state))
        .merge(ui::api_routes());
    if !public {
        routes = routes.route("/metrics", get(metrics_text));
    }
    if let Some(auth) = &auth {
        routes = routes.route("/admin/reload", post(auth::reload).with_state(auth.clone()));
    }
    let routes = routes
        .fallback(unknown_route)
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .with_state(state.clone())
        .layer(DefaultBodyLimit::max(MAX_VALUE_LEN));
    let mut routes = match auth {
        Some(auth) => routes.layer(middleware::from_fn_with_state(auth, auth::require_token)),
        None => routes,
    };
    if public {
        routes = routes.merge(Router::new().route("/metrics", get(metrics_text)).with_state(state));
    }
    // The status page itself holds no data: a browser loads it without a token.
    routes
        .merge(ui::asset_routes())
        .layer(middleware::map_response(stamp_server_time))
        .layer(middleware::from_fn_with_state(metrics, metrics::track))
}

async fn list_keys(
    State(app): Shared,
    scope: Option<Extension<Scope>>,
    query: Result<axum::extract::Query<listing::ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let mut query = query.map_err(|e| ApiError::bad_request("bad_query", e.body_text()))?.0;
    // A namespace token sees only its own keys.
    if let Some(Extension(scope)) = scope {
        match auth::clamp_prefix(&scope, &query.prefix)? {
            Some(prefix) => query.prefix = prefix,
            None => return Ok(Json(listing::Page { keys: vec![], next: None }).into_response()),
        }
    }
    Ok(Json(listing::list(&app.engine, query).await?).into_response())
}

/// `GET /backup?format=jsonl|image` (`jsonl` when absent).
#[derive(serde::Deserialize)]
struct BackupQuery {
    format: Option<String>,
}

async fn backup_snapshot(
    State(app): Shared,
    query: Result<axum::extract::Query<BackupQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let query = query.map_err(|e| ApiError::bad_request("bad_query", e.body_text()))?.0;
    let (taken_ms, metrics) = (system_now_ms(), app.engine.metrics().clone());
    let (body, content_type) = match query.format.as_deref() {
        None | Some("jsonl") => {
            let db = app.engine.db()?;
            let ladder = Ladder::new(db.clone());
            let write = move |w: &mut dyn std::io::Write| {
                let summary = backup::write_snapshot(&db, &mut &mut *w, &|| ladder.keep_up())?;
                Ok((summary, ladder))
            };
            (backup::stream(taken_ms, metrics, write), "application/x-ndjson")
        }
        Some("image") => {
            let held = app.engine.hold().await?;
            let write = move |w: &mut dyn std::io::Write| {
                let summary = image::write_image(&held.pinned, &held.path, taken_ms, &|| held.still(), &mut &mut *w)?;
                Ok((summary, held.let_go()))
            };
            (backup::stream(taken_ms, metrics, write), "application/octet-stream")
        }
        Some(other) => {
            return Err(ApiError::bad_request("bad_query", format!("format {other:?}: use jsonl or image")));
        }
    };
    let mut resp = body.into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    Ok(resp)
}

/// Served even when the store cannot be read (damage, writer stopped): then `kv_healthy`
/// is 0 and the figures that need a read keep their last values.
async fn metrics_text(State(app): Shared) -> Response {
    let keys = listing::key_count(&app.engine).await.ok();
    let bytes = std::fs::metadata(&app.data_file).map_or(0, |m| m.len());
    let ops = &app.engine.metrics().ops;
    ops.set_healthy(health_problem(&app).is_none());
    if let Ok(census) = app.census.current(&app.engine).await {
        ops.set_census(&census.counts);
    }
    metrics::response(app.engine.metrics().render(keys, bytes))
}

/// Every response, errors included, tells the client the store's clock: the plugin judges
/// leases by it, never by its own. A read sets its own (the time its snapshot is final at).
async fn stamp_server_time(mut resp: Response) -> Response {
    if !resp.headers().contains_key(KV_TIME_MS) {
        resp.headers_mut().insert(KV_TIME_MS, HeaderValue::from(system_now_ms()));
    }
    resp
}

async fn healthz(State(app): Shared) -> Response {
    let problem = health_problem(&app);
    let mut body = serde_json::json!({
        "status": problem.as_ref().map_or("ok", |p| p.status),
        "capabilities": CAPABILITIES,
        "version": env!("CARGO_PKG_VERSION"),
        "durability": app.durability.as_str(),
        "integrity": app.engine.integrity(),
    });
    if let Some(p) = &problem {
        body["reason"] = p.reason.clone().into();
    }
    let status = if problem.is_none() { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, Json(body)).into_response()
}

/// `POST /admin/check`: starts the check of every page and record in the background (202),
/// or says one is running (409); `/healthz` and `GET /admin/check` report how it ends.
async fn start_check(State(app): Shared) -> Response {
    // Taking the check's snapshot waits for the commit in progress (an fsync): off the
    // async workers.
    let engine = app.engine.clone();
    let started = tokio::task::spawn_blocking(move || engine.check_in_background()).await.unwrap_or(false);
    let status = if started { StatusCode::ACCEPTED } else { StatusCode::CONFLICT };
    (status, Json(serde_json::json!({ "started": started, "integrity": app.engine.integrity() }))).into_response()
}

/// `GET /admin/check`: what the last (or the running) check found.
async fn check_state(State(app): Shared) -> Response {
    Json(serde_json::json!({ "integrity": app.engine.integrity() })).into_response()
}

async fn unknown_route(uri: Uri) -> ApiError {
    // `/state` and `/state/` reach here because the key is empty; that is a bad key, not
    // an unknown route.
    let path = uri.path();
    if path == kv_wire::STATE || path.starts_with(kv_wire::STATE_PREFIX) {
        ApiError::bad_key("key is empty")
    } else {
        ApiError::not_found("no such route")
    }
}

/// The key from the raw path (axum's `Path` would percent-decode it; we must not). A query
/// string is refused, not ignored: a client that put an unescaped `?` into a key would
/// otherwise read or write the shorter key in front of it.
fn key_of(uri: &Uri) -> Result<String, ApiError> {
    if uri.query().is_some() {
        return Err(ApiError::bad_key("a key is the whole path: '?' (a query string) is not allowed"));
    }
    let raw = uri.path().strip_prefix(kv_wire::STATE_PREFIX).unwrap_or_default();
    request::validate_key(raw).map(str::to_owned)
}

async fn get_value(State(app): Shared, uri: Uri) -> Result<Response, ApiError> {
    let key = key_of(&uri)?;
    let (found, at) = app.engine.get_at(key).await?;
    let mut resp = match found {
        Some(record) => value_response(StatusCode::OK, &record),
        None => ApiError::not_found("key not found").into_response(),
    };
    resp.headers_mut().insert(KV_TIME_MS, HeaderValue::from(at));
    Ok(resp)
}

async fn put_value(State(app): Shared, req: Request) -> Result<Response, ApiError> {
    let pre = request::precondition(req.headers(), true)?;
    write_value(&app, req, pre).await
}

/// Legacy unconditional write. A precondition here would be silently ignored, turning a
/// client's compare-and-swap into an overwrite, so it is refused instead.
async fn post_value(State(app): Shared, req: Request) -> Result<Response, ApiError> {
    if request::precondition(req.headers(), true)? != Precondition::None {
        return Err(ApiError::bad_request(
            "bad_precondition",
            "POST is unconditional; use PUT with If-Match / If-None-Match",
        ));
    }
    write_value(&app, req, Precondition::None).await
}

async fn write_value(app: &AppState, req: Request, pre: Precondition) -> Result<Response, ApiError> {
    // Cheap checks first, so a bad request never costs reading a body.
    let key = key_of(req.uri())?;
    let ttl_ms = request::ttl(req.headers())?;
    let until_ms = request::deadline(req.headers())?;
    let value = read_body(req).await?;
    request::validate_json(&value)?;
    let op = WriteOp::Put { key, value: value.clone().into(), pre, ttl_ms, until_ms };
    let outcome = app.engine.write(op).await?;
    if let Some(claim) = claims::classify(pre, &value, &outcome, system_now_ms()) {
        app.engine.metrics().ops.claim(claim);
    }
    match outcome {
        WriteOutcome::Created(w) => Ok(written_response(StatusCode::CREATED, w)),
        WriteOutcome::Replaced(w) => Ok(written_response(StatusCode::OK, w)),
        WriteOutcome::PreconditionFailed(current) => Ok(precondition_failed(current)),
        WriteOutcome::TooLate(at) => Err(deadline_passed(at)),
        other => Err(unexpected(other)),
    }
}

async fn delete_value(State(app): Shared, req: Request) -> Result<Response, ApiError> {
    let key = key_of(req.uri())?;
    let pre = request::precondition(req.headers(), false)?;
    let until_ms = request::deadline(req.headers())?;
    match app.engine.write(WriteOp::Delete { key, pre, until_ms }).await? {
        WriteOutcome::Deleted => Ok(StatusCode::NO_CONTENT.into_response()),
        WriteOutcome::NotFound => Err(ApiError::not_found("key not found")),
        WriteOutcome::PreconditionFailed(current) => Ok(precondition_failed(current)),
        WriteOutcome::TooLate(at) => Err(deadline_passed(at)),
        other => Err(unexpected(other)),
    }
}

/// Reads at most 1 MiB. A declared oversize body is refused before reading any of it; an
/// undeclared (chunked) one is cut off by the limit as soon as it passes 1 MiB.
async fn read_body(req: Request) -> Result<Bytes, ApiError> {
    let declared =
        req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|s| s.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_VALUE_LEN as u64) {
        return Err(ApiError::too_large());
    }
    match Bytes::from_request(req, &()).await {
        Ok(body) => Ok(body),
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => Err(ApiError::too_large()),
        Err(rejection) => Err(ApiError::bad_request(
            "bad_body",
            format!("could not read the request body: {}", rejection.body_text()),
        )),
    }
}

fn set_meta(headers: &mut HeaderMap, rev: u64, modified_ms: u64, expires_ms: u64) {
    if let Ok(etag) = HeaderValue::try_from(format!("\"{rev}\"")) {
        headers.insert(header::ETAG, etag);
    }
    headers.insert(KV_MODIFIED_MS, HeaderValue::from(modified_ms));
    if expires_ms != 0 {
        headers.insert(KV_EXPIRES_MS, HeaderValue::from(expires_ms));
    }
}

fn value_response(status: StatusCode, record: &StoredValue) -> Response {
    let mut resp = (status, record.value.clone()).into_response();
    let headers = resp.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    set_meta(headers, record.rev, record.modified_ms, record.expires_ms);
    resp
}

fn written_response(status: StatusCode, w: Written) -> Response {
    let mut resp = status.into_response();
    set_meta(resp.headers_mut(), w.rev, w.modified_ms, w.expires_ms);
    resp
}

/// 412 carries the current value and its ETag, so a duplicate create costs one round trip;
/// with no live value the body is empty and there is no ETag.
fn precondition_failed(current: Option<StoredValue>) -> Response {
    match current {
        Some(record) => value_response(StatusCode::PRECONDITION_FAILED, &record),
        None => StatusCode::PRECONDITION_FAILED.into_response(),
    }
}

/// A write applied after its `KV-Deadline-Ms` is refused with 409 `deadline_passed` (never
/// 412: its precondition was not even looked at). Nothing was written, and nothing will be.
fn deadline_passed(at: u64) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "deadline_passed",
        format!("the write reached the store at {at}, after its KV-Deadline-Ms; nothing was written"),
    )
}

/// The engine answered with an outcome of another kind of operation: a bug, reported as a
/// storage failure rather than guessed into a success.
/// Only the variant is logged: the outcome may carry a stored value, which is never logged.
fn unexpected(outcome: WriteOutcome) -> ApiError {
    let kind = match outcome {
        WriteOutcome::Created(_) | WriteOutcome::Replaced(_) => "write",
        WriteOutcome::Deleted | WriteOutcome::NotFound => "delete",
        WriteOutcome::PreconditionFailed(_) => "precondition",
        WriteOutcome::Purged(_) => "purge",
        WriteOutcome::TooLate(_) => "deadline",
    };
    ApiError::from(EngineError::Storage(format!("unexpected {kind} outcome from the engine")))
}
