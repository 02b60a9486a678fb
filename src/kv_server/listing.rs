//! Read-only views over one MVCC snapshot: the key count for `/metrics`.

use redb::ReadableTableMetadata;

use super::batch::DATA;
use super::engine::{Engine, EngineError};

/// Keys in the data table (expired ones count until purged); O(1) in redb.
pub async fn key_count(engine: &Engine) -> Result<u64, EngineError> {
    let db = engine.db().clone();
    tokio::task::spawn_blocking(move || -> Result<u64, EngineError> { Ok(db.begin_read()?.open_table(DATA)?.len()?) })
        .await
        .map_err(|_| EngineError::Unavailable)?
}
