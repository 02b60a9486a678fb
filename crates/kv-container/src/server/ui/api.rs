//! `/ui/api/…`: the JSON behind each view of the status page, for scripts too.
//!
//! `now` (health, counts, disk, uptime), `rates` (the 15-minute ring), `lists` (failed and
//! stuck records), `keys` (search by prefix, paged like `GET /state` and `kv ls`) and
//! `record/{key}` (one record whole, like `kv get`). Read-only; every answer is `no-store`.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{header, HeaderValue, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::server::census::{Brief, Snapshot};
use crate::server::error::ApiError;
use crate::server::listing::{self, ListQuery};
use crate::server::rates::{SLOTS, SLOT_MS};
use crate::server::record::system_now_ms;
use crate::server::request::validate_key;
use crate::server::state::{health_problem, AppState, Shared};

pub(crate) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/ui/api/now", get(now))
        .route("/ui/api/rates", get(rates))
        .route("/ui/api/lists", get(lists))
        .route("/ui/api/keys", get(keys))
        .route("/ui/api/record/{*key}", get(record))
}

fn answer(body: Value) -> Response {
    let mut resp = Json(body).into_response();
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    super::hardened(h);
    resp
}

/// The census, or why there is none (the page shows the reason instead of numbers).
async fn census(app: &AppState) -> Result<Arc<Snapshot>, String> {
    app.census.current(&app.engine).await
}

async fn now(State(app): Shared) -> Response {
    let ops = &app.engine.metrics().ops;
    let problem = health_problem(&app);
    let mut health =
        json!({"status": problem.as_ref().map_or("ok", |p| p.status), "integrity": app.engine.integrity()});
    if let Some(p) = &problem {
        health["reason"] = p.reason.clone().into();
    }
    let data_file_bytes = std::fs::metadata(&app.data_file).map_or(0, |m| m.len());
    let (free, total) = app.data_file.parent().and_then(disk_space).unzip();
    let now_ms = system_now_ms();
    let started_ms = u64::try_from(ops.started_s()).unwrap_or(0) * 1000;
    let last_backup_ms = u64::try_from(ops.last_backup_s()).ok().filter(|&s| s > 0).map(|s| s * 1000);
    let mut body = json!({
        "now_ms": now_ms,
        "version": env!("CARGO_PKG_VERSION"),
        "durability": app.durability.as_str(),
        "started_ms": started_ms,
        "uptime_s": now_ms.saturating_sub(started_ms) / 1000,
        "health": health,
        "disk": {"data_file_bytes": data_file_bytes, "free_bytes": free, "total_bytes": total},
        "connections": {"open": app.engine.metrics().open_connections(), "max": ops.max_connections()},
        "last_backup_ms": last_backup_ms,
    });
    match census(&app).await {
        Ok(c) => {
            body["census"] = json!({"as_of_ms": c.as_of_ms, "scan_ms": c.scan_ms, "keys": c.keys,
                "counts": c.counts, "stuck_after_s": c.stuck_after_s});
        }
        Err(why) => body["census_error"] = why.into(),
    }
    answer(body)
}

/// Free and total bytes of the file system holding the data.
fn disk_space(dir: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs only writes into the zeroed struct we own; the path is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let block = st.f_frsize as u64;
    Some((st.f_bavail as u64 * block, st.f_blocks as u64 * block))
}

async fn rates(State(app): Shared) -> Response {
    let now_ms = system_now_ms();
    let points = app.engine.metrics().ops.rates.window(now_ms);
    answer(
        json!({"now_ms": now_ms, "slot_s": SLOT_MS / 1000, "window_s": SLOTS as u64 * SLOT_MS / 1000, "slots": points}),
    )
}

async fn lists(State(app): Shared) -> Result<Response, ApiError> {
    let c = census(&app).await.map_err(storage)?;
    Ok(answer(json!({"now_ms": system_now_ms(), "as_of_ms": c.as_of_ms, "stuck_after_s": c.stuck_after_s,
        "failed": c.failed, "stuck": c.stuck})))
}

fn storage(why: String) -> ApiError {
    ApiError::new(axum::http::StatusCode::SERVICE_UNAVAILABLE, "unavailable", why)
}

/// One page of keys, exactly as `GET /state` pages them, each read and judged like a
/// census row (the stuck age applies; `kv ls` does the same two steps).
async fn keys(
    State(app): Shared,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(mut query) = query.map_err(|e| ApiError::bad_request("bad_query", e.body_text()))?;
    query.limit = Some(query.limit.unwrap_or(50));
    let page = listing::list(&app.engine, query).await?;
    let stuck_after_ms = app.census.stuck_after_ms();
    let mut rows: Vec<Brief> = Vec::with_capacity(page.keys.len());
    for entry in page.keys {
        // A key may expire between the listing and the read: it is left out.
        if let Some(rec) = app.engine.get(entry.key.clone()).await? {
            rows.push(Brief::of(&entry.key, &rec, system_now_ms(), stuck_after_ms));
        }
    }
    Ok(answer(json!({"now_ms": system_now_ms(), "keys": rows, "next": page.next})))
}

/// One record whole: its stored JSON, revision, times and TTL, judged like a list row.
async fn record(State(app): Shared, uri: Uri) -> Result<Response, ApiError> {
    let key = validate_key(uri.path().strip_prefix("/ui/api/record/").unwrap_or_default())?.to_owned();
    let Some(rec) = app.engine.get(key.clone()).await? else {
        return Err(ApiError::not_found("no live record under this key"));
    };
    let now_ms = system_now_ms();
    let brief = Brief::of(&key, &rec, now_ms, app.census.stuck_after_ms());
    let value: Value =
        serde_json::from_slice(&rec.value).unwrap_or_else(|_| String::from_utf8_lossy(&rec.value).into());
    let expires_ms = (rec.expires_ms != 0).then_some(rec.expires_ms);
    Ok(answer(json!({"now_ms": now_ms, "key": key, "rev": rec.rev, "modified_ms": rec.modified_ms,
        "expires_ms": expires_ms, "brief": brief, "value": value})))
}
