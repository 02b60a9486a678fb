//! Credential validation: a writable primary, every privilege the claims need, and what the
//! server's replication settings promise about an acknowledged claim (`min_replicas`).

use tokio_postgres::Client;

use super::errors::db_text;
use super::schema;
use crate::error::StoreError;

/// What validation found: a one-line description and what to warn about.
pub(crate) struct Found {
    pub(crate) summary: String,
    pub(crate) warnings: Vec<String>,
}

/// Inspects the server behind `client`. `Err` = claims cannot be made (or not as promised).
pub(crate) async fn inspect(
    client: &Client,
    schema: &str,
    user: &str,
    at: &str,
    min_replicas: u32,
) -> Result<Found, StoreError> {
    let fail =
        |e: tokio_postgres::Error| StoreError::config(format!("PostgreSQL at {at}: {}", db_text(&e))).caused_by(e);
    let row = client
        .query_one(
            "SELECT current_setting('server_version'), pg_is_in_recovery(), current_setting('synchronous_commit'), \
                    current_setting('synchronous_standby_names')",
            &[],
        )
        .await
        .map_err(fail)?;
    let (version, standby, commit, standbys): (String, bool, String, String) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    if standby {
        return Err(StoreError::config(format!(
            "PostgreSQL at {at} is a read-only standby: name the primary, or list every host of the cluster in kv_url"
        )));
    }
    if let Some(lacking) = schema::lacking_to_use(client, schema, user).await.map_err(fail)? {
        return Err(StoreError::config(format!("PostgreSQL at {at}: {lacking}")));
    }
    let mut warnings = vec![];
    let waits_for_standbys =
        !standbys.trim().is_empty() && matches!(commit.as_str(), "on" | "remote_write" | "remote_apply");
    let replication = if waits_for_standbys {
        format!("each commit waits for synchronous standbys ({standbys}, synchronous_commit={commit})")
    } else {
        "commits do not wait for any standby: a failover can lose the last acknowledged claims".to_owned()
    };
    if min_replicas > 0 {
        if !waits_for_standbys {
            return Err(StoreError::config(format!(
                "min_replicas is {min_replicas} but PostgreSQL at {at} does not wait for standbys \
                 (synchronous_standby_names={standbys:?}, synchronous_commit={commit}): the operator sets \
                 synchronous_standby_names (e.g. 'FIRST {min_replicas} (standby1, standby2)') and synchronous_commit=on; \
                 or set min_replicas to 0"
            )));
        }
        // Roles without pg_read_all_stats see the rows but not their sync_state.
        let row = client
            .query_one(
                "SELECT count(*) FILTER (WHERE sync_state IN ('sync', 'quorum')), count(*) FILTER (WHERE sync_state IS NULL) \
                 FROM pg_stat_replication",
                &[],
            )
            .await
            .map_err(fail)?;
        let (sync, hidden): (i64, i64) = (row.get(0), row.get(1));
        if hidden > 0 {
            warnings.push(format!(
                "role {user} cannot see the standbys' state (GRANT pg_read_all_stats TO {user} lets validation count \
                 them); commits still wait as synchronous_standby_names says"
            ));
        } else if sync < min_replicas as i64 {
            return Err(StoreError::config(format!(
                "min_replicas is {min_replicas} but PostgreSQL at {at} has {sync} synchronous standby(s) streaming: \
                 every claim would wait for a standby that is not there"
            )));
        }
    }
    if commit == "off" {
        warnings.push(format!(
            "synchronous_commit is off at {at}: a crash of the server loses the claims of its last moments"
        ));
    }
    Ok(Found { summary: format!("PostgreSQL {version} ({at}), schema {schema}; {replication}"), warnings })
}
