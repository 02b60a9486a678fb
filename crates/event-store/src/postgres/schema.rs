//! Our tables: created on first use (under an advisory lock, so plugin processes starting
//! together do not race), the schema version recorded for forward migration, and the
//! privilege check that names exactly what the role lacks.

use tokio_postgres::Client;

use super::errors::db_text;
use crate::error::StoreError;

/// The layout this build writes. A later layout migrates forward from the recorded one.
pub(crate) const SCHEMA_VERSION: i32 = 1;

/// The statements that create layout 1 in `schema` (all idempotent).
fn create_v1(schema: &str) -> String {
    format!(
        "CREATE SCHEMA IF NOT EXISTS {schema};
         CREATE TABLE IF NOT EXISTS {schema}.meta (
             one boolean PRIMARY KEY DEFAULT true CHECK (one),
             schema_version integer NOT NULL);
         CREATE SEQUENCE IF NOT EXISTS {schema}.versions;
         CREATE TABLE IF NOT EXISTS {schema}.events (
             key text PRIMARY KEY,
             value bytea NOT NULL,
             version bigint NOT NULL,
             claim_id text NOT NULL DEFAULT '',
             expires_at timestamptz NOT NULL);
         CREATE INDEX IF NOT EXISTS events_expires_at ON {schema}.events (expires_at);
         INSERT INTO {schema}.meta (schema_version) VALUES ({SCHEMA_VERSION}) ON CONFLICT DO NOTHING;"
    )
}

/// The recorded layout version, or None when our tables are not there (yet). Each missing
/// privilege on what exists is named, with its GRANT.
async fn recorded(
    client: &Client,
    schema: &str,
    user: &str,
) -> Result<Result<Option<i32>, String>, tokio_postgres::Error> {
    let row = client
        .query_one(
            "SELECT to_regnamespace($1) IS NOT NULL, \
                    CASE WHEN to_regnamespace($1) IS NULL THEN false ELSE has_schema_privilege($1, 'USAGE') END",
            &[&schema],
        )
        .await?;
    let (exists, usage): (bool, bool) = (row.get(0), row.get(1));
    if !exists {
        return Ok(Ok(None));
    }
    if !usage {
        return Ok(Err(format!(
            "role {user} lacks the USAGE privilege on schema {schema}: GRANT USAGE ON SCHEMA {schema} TO {user};"
        )));
    }
    let meta = format!("{schema}.meta");
    if !client.query_one("SELECT to_regclass($1) IS NOT NULL", &[&meta]).await?.get::<_, bool>(0) {
        return Ok(Ok(None));
    }
    match client.query_opt(&format!("SELECT schema_version FROM {meta}"), &[]).await {
        Ok(row) => Ok(Ok(row.map(|r| r.get(0)))),
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE) => Ok(Err(format!(
            "role {user} lacks the SELECT privilege on table {meta}: GRANT SELECT ON {meta} TO {user};"
        ))),
        Err(e) => Err(e),
    }
}

/// Makes sure our tables exist in `schema` at [`SCHEMA_VERSION`]. Creating them needs the
/// CREATE privilege; when it is lacking, the error says which one, on what.
pub(crate) async fn ensure(client: &mut Client, schema: &str, user: &str) -> Result<(), StoreError> {
    let fail = |e: tokio_postgres::Error| {
        StoreError::config(format!("preparing schema {schema}: {}", db_text(&e))).caused_by(e)
    };
    match recorded(client, schema, user).await.map_err(fail)?.map_err(StoreError::config)? {
        Some(SCHEMA_VERSION) => return Ok(()),
        Some(v) if v > SCHEMA_VERSION => {
            return Err(StoreError::config(format!(
                "schema {schema} holds layout {v}, written by a newer stateful-tool; this one knows layout \
                 {SCHEMA_VERSION}: upgrade the plugin, or point kv_url at another schema (?schema=…)"
            )))
        }
        _ => {}
    }
    if let Some(lacking) = lacking_to_create(client, schema, user).await.map_err(fail)? {
        return Err(StoreError::config(lacking));
    }
    let tx = client.transaction().await.map_err(fail)?;
    // One creator at a time across every plugin process; the others find the tables made.
    tx.execute("SELECT pg_advisory_xact_lock(hashtext('stateful_tool schema ' || $1::text))", &[&schema])
        .await
        .map_err(fail)?;
    tx.batch_execute(&create_v1(schema)).await.map_err(fail)?;
    tx.commit().await.map_err(fail)?;
    tracing::info!("postgres: created schema {schema} (layout {SCHEMA_VERSION})");
    Ok(())
}

/// What `user` lacks to create our tables, as a sentence with the GRANT that fixes it.
async fn lacking_to_create(client: &Client, schema: &str, user: &str) -> Result<Option<String>, tokio_postgres::Error> {
    let row = client
        .query_one(
            "SELECT current_database(), \
                    to_regnamespace($1) IS NOT NULL, \
                    has_database_privilege(current_database(), 'CREATE'), \
                    CASE WHEN to_regnamespace($1) IS NULL THEN false ELSE has_schema_privilege($1, 'CREATE') END, \
                    CASE WHEN to_regnamespace($1) IS NULL THEN false ELSE has_schema_privilege($1, 'USAGE') END",
            &[&schema],
        )
        .await?;
    let (db, exists, db_create, schema_create, usage): (String, bool, bool, bool, bool) =
        (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
    Ok(if !exists && !db_create {
        Some(format!(
            "role {user} lacks the CREATE privilege on database {db}, needed to create schema {schema} on first use: \
             GRANT CREATE ON DATABASE {db} TO {user}; (or create the schema yourself: CREATE SCHEMA {schema} \
             AUTHORIZATION {user};)"
        ))
    } else if exists && !usage {
        Some(format!("role {user} lacks the USAGE privilege on schema {schema}: GRANT USAGE, CREATE ON SCHEMA {schema} TO {user};"))
    } else if exists && !schema_create {
        Some(format!(
            "role {user} lacks the CREATE privilege on schema {schema}, needed to create our tables on first use: \
             GRANT CREATE ON SCHEMA {schema} TO {user};"
        ))
    } else {
        None
    })
}

/// What `user` lacks to use the existing tables (each privilege checked on its own, so the
/// message names exactly the missing one); None when every claim can be made.
pub(crate) async fn lacking_to_use(
    client: &Client,
    schema: &str,
    user: &str,
) -> Result<Option<String>, tokio_postgres::Error> {
    let (events, versions) = (format!("{schema}.events"), format!("{schema}.versions"));
    let mut lacking = vec![];
    for privilege in ["SELECT", "INSERT", "UPDATE", "DELETE"] {
        let row = client.query_one("SELECT has_table_privilege($1, $2)", &[&events, &privilege]).await?;
        if !row.get::<_, bool>(0) {
            lacking.push(privilege);
        }
    }
    if !lacking.is_empty() {
        let list = lacking.join(", ");
        return Ok(Some(format!(
            "role {user} lacks the {list} privilege on table {events}: GRANT {list} ON {events} TO {user};"
        )));
    }
    let row = client.query_one("SELECT has_sequence_privilege($1, 'USAGE')", &[&versions]).await?;
    if !row.get::<_, bool>(0) {
        return Ok(Some(format!(
            "role {user} lacks the USAGE privilege on sequence {versions}: GRANT USAGE ON SEQUENCE {versions} TO {user};"
        )));
    }
    Ok(None)
}
