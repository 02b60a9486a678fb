//! Read-only views over one MVCC snapshot: `GET /state?prefix=…` and the key count.

use redb::ReadableTableMetadata;
use serde::{Deserialize, Serialize};

use super::engine::{Engine, EngineError};
use super::error::ApiError;
use super::record::{system_now_ms, StoredValue};
use super::request::validate_key;
use super::tables::DATA;

/// Most keys one list request returns.
pub(crate) const MAX_LIMIT: usize = 1000;

/// `GET /state?prefix=&after=&limit=`: live keys in byte order.
#[derive(Debug, Deserialize)]
pub(crate) struct ListQuery {
    #[serde(default)]
    pub(crate) prefix: String,
    /// Resume after this key (the previous page's `next`).
    pub(crate) after: Option<String>,
    pub(crate) limit: Option<usize>,
}

#[derive(Debug, Serialize)]
pub(crate) struct ListedKey {
    pub(crate) key: String,
    pub(crate) rev: u64,
    pub(crate) modified_ms: u64,
    /// Unix ms at which the key expires; absent = never.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) expires_ms: Option<u64>,
    pub(crate) size: usize,
}

#[derive(Debug, Serialize)]
pub(crate) struct Page {
    pub(crate) keys: Vec<ListedKey>,
    /// Pass as `after` for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) next: Option<String>,
}

/// Checks the query (same key alphabet; an empty prefix lists everything) and reads a page.
pub(crate) async fn list(engine: &Engine, q: ListQuery) -> Result<Page, ApiError> {
    if !q.prefix.is_empty() {
        validate_key(&q.prefix)?;
    }
    if let Some(after) = &q.after {
        validate_key(after)?;
    }
    let limit = q.limit.unwrap_or(100);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::bad_request("bad_limit", format!("limit must be 1..={MAX_LIMIT}")));
    }
    let db = engine.db()?;
    let now = system_now_ms();
    let page = tokio::task::spawn_blocking(move || read_page(&db, &q.prefix, q.after.as_deref(), limit, now))
        .await
        .map_err(|_| EngineError::Unavailable)??;
    Ok(page)
}

fn read_page(
    db: &redb::Database,
    prefix: &str,
    after: Option<&str>,
    limit: usize,
    now: u64,
) -> Result<Page, EngineError> {
    let txn = db.begin_read()?;
    let table = txn.open_table(DATA)?;
    let start = match after {
        Some(a) if a >= prefix => a,
        _ => prefix,
    };
    let mut keys = Vec::new();
    let mut next = None;
    for item in table.range(start..)? {
        let (k, v) = item?;
        let key = k.value();
        if !key.starts_with(prefix) {
            break;
        }
        if after == Some(key) {
            continue;
        }
        let rec = StoredValue::decode(v.value()).map_err(|e| EngineError::Storage(e.to_string()))?;
        if !rec.is_live(now) {
            continue;
        }
        if keys.len() == limit {
            next = keys.last().map(|e: &ListedKey| e.key.clone());
            break;
        }
        let expires_ms = (rec.expires_ms != 0).then_some(rec.expires_ms);
        keys.push(ListedKey {
            key: key.to_owned(),
            rev: rec.rev,
            modified_ms: rec.modified_ms,
            expires_ms,
            size: rec.value.len(),
        });
    }
    Ok(Page { keys, next })
}

/// Keys in the data table (expired ones count until purged); O(1) in redb.
pub(crate) async fn key_count(engine: &Engine) -> Result<u64, EngineError> {
    let db = engine.db()?;
    tokio::task::spawn_blocking(move || -> Result<u64, EngineError> { Ok(db.begin_read()?.open_table(DATA)?.len()?) })
        .await
        .map_err(|_| EngineError::Unavailable)?
}
