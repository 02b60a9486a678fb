//! Credential validation against real PostgreSQL clusters: each way a kv_url can be wrong
//! gets a message that names what to fix, and never echoes the password.

use std::os::unix::fs::PermissionsExt;

use serde_json::json;

use crate::support::plugin::{creds, Plugin, Reply};
use crate::support::postgres::PgServer;
use crate::support::redis_tls::Certs;

/// The validation failed with a message containing every one of `words`.
fn refused(r: &Reply, words: &[&str]) {
    assert_eq!(r.error_type(), Some("ToolProviderCredentialValidationError"), "{r:?}");
    for w in words {
        assert!(r.message().contains(w), "{w:?} missing from: {}", r.message());
    }
    assert!(!r.message().contains("-pw") && !r.message().contains("nope"), "a password echoed: {}", r.message());
}

fn accepted(r: &Reply) {
    assert_eq!(r.chunks, vec![json!({"result": true})], "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wrong_password_missing_database_and_each_missing_privilege_are_named() {
    let pg = PgServer::start(&[]);
    let p = Plugin::spawn(&[("STATEFUL_TOOL_STORE_TIMEOUT_MS", "5000")]).await;
    let url = pg.app("app", "events");
    let wrong = url.replace("app-pw", "nope");
    refused(
        &p.validate(&creds(&wrong)).await,
        &["refused role app", "password authentication failed", "check the user and password"],
    );
    refused(
        &p.validate(&creds(&url.replace("/events", "/nosuchdb"))).await,
        &["\"nosuchdb\" does not exist", "CREATE DATABASE"],
    );
    // A role that may connect to a database it does not own, privilege by privilege.
    pg.must("postgres", "CREATE ROLE lim LOGIN PASSWORD 'lim-pw'");
    pg.must("postgres", "CREATE DATABASE shared");
    let lim = pg.url("lim", "shared");
    refused(
        &p.validate(&creds(&lim)).await,
        &["role lim lacks the CREATE privilege on database shared", "GRANT CREATE ON DATABASE shared TO lim"],
    );
    // The admin's first use creates the tables; lim gets some rights on them.
    accepted(&p.validate(&creds(&pg.url("admin", "shared"))).await);
    pg.must("shared", "GRANT USAGE ON SCHEMA stateful_tool TO lim");
    refused(&p.validate(&creds(&lim)).await, &["lacks the SELECT privilege on table stateful_tool.meta"]);
    pg.must(
        "shared",
        "GRANT SELECT ON stateful_tool.meta TO lim; GRANT SELECT, INSERT, UPDATE ON stateful_tool.events TO lim",
    );
    refused(
        &p.validate(&creds(&lim)).await,
        &[
            "role lim lacks the DELETE privilege on table stateful_tool.events",
            "GRANT DELETE ON stateful_tool.events TO lim",
        ],
    );
    pg.must("shared", "GRANT DELETE ON stateful_tool.events TO lim");
    refused(&p.validate(&creds(&lim)).await, &["lacks the USAGE privilege on sequence stateful_tool.versions"]);
    pg.must("shared", "GRANT USAGE ON SEQUENCE stateful_tool.versions TO lim");
    accepted(&p.validate(&creds(&lim)).await);
    let ev = json!({"event_id": "LIM-1", "event_type": "created"});
    assert_eq!(p.invoke("event_ingest", &creds(&lim), ev).await.outcome(), "accepted");
    // min_replicas without synchronous replication is refused, saying what the operator sets.
    let sync = json!({"kv_url": url, "min_replicas": "1"});
    refused(&p.validate(&sync).await, &["min_replicas is 1", "synchronous_standby_names"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_that_requires_tls_and_a_standby_named_alone() {
    let certs = Certs::make();
    let tls = ["ssl=on", "ssl_cert_file=server.pem", "ssl_key_file=server.key"];
    let pg = PgServer::start_prepared(&tls, |data| {
        for f in ["server.pem", "server.key"] {
            std::fs::copy(certs.dir().join(f), data.join(f)).unwrap();
        }
        std::fs::set_permissions(data.join("server.key"), std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(
            data.join("pg_hba.conf"),
            "hostssl all all 127.0.0.1/32 scram-sha-256\nhostssl replication all 127.0.0.1/32 scram-sha-256\n",
        )
        .unwrap();
    });
    let p = Plugin::spawn(&[("STATEFUL_TOOL_STORE_TIMEOUT_MS", "5000")]).await;
    let url = pg.app("app", "events");
    refused(
        &p.validate(&creds(&format!("{url}?sslmode=disable"))).await,
        &["accepts role app only over TLS", "sslmode=disable"],
    );
    // TLS is offered but its certificate chains to no public root.
    refused(&p.validate(&creds(&url)).await, &["certificate was refused", "tls_ca"]);
    refused(
        &p.validate(&creds(&format!("{url}?tls_ca={}", certs.other_ca().display()))).await,
        &["certificate was refused"],
    );
    accepted(&p.validate(&creds(&format!("{url}?sslmode=verify-full&tls_ca={}", certs.ca().display()))).await);
    // A standby of it, named alone: refused, saying to name the primary or list both.
    let standby = PgServer::standby_of(&pg, "s1", &tls);
    let alone = format!("postgres://app:app-pw@127.0.0.1:{}/events?tls_ca={}", standby.port, certs.ca().display());
    refused(&p.validate(&creds(&alone)).await, &["read-only standby", "name the primary", "list every host"]);
    let both = format!(
        "postgres://app:app-pw@127.0.0.1:{},127.0.0.1:{}/events?tls_ca={}",
        standby.port,
        pg.port,
        certs.ca().display()
    );
    accepted(&p.validate(&creds(&both)).await);
}
