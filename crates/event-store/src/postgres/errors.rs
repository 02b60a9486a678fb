//! What a PostgreSQL error means for a caller (which `StoreError` class, a message that says
//! what to fix), and the TLS connector (rustls: public roots, or the CA file of `tls_ca`).

use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::error::SqlState;

use crate::error::StoreError;

/// The server's own words when it sent an error, else the innermost cause.
pub(crate) fn db_text(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{} (SQLSTATE {})", db.message(), db.code().code());
    }
    let mut text = e.to_string();
    let mut cur: &dyn std::error::Error = e;
    while let Some(next) = cur.source() {
        text = format!("{e}: {next}");
        cur = next;
    }
    text
}

/// An error from opening a connection: nothing was sent, so nothing is ambiguous.
pub(crate) fn connecting(at: &str, user: &str, e: tokio_postgres::Error) -> StoreError {
    let text = db_text(&e);
    let error = match e.code() {
        _ if text.contains("pg_hba.conf") && text.contains("no encryption") => StoreError::unauthorized(format!(
            "PostgreSQL at {at} accepts role {user} only over TLS ({text}): remove sslmode=disable from kv_url (the \
             default, prefer, uses TLS when the server offers it)"
        )),
        Some(c) if *c == SqlState::INVALID_PASSWORD || *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION => {
            StoreError::unauthorized(format!(
                "PostgreSQL at {at} refused role {user} ({text}): check the user and password in kv_url (a password \
                 with @ : / ? # % must be percent-encoded, e.g. @ as %40)"
            ))
        }
        Some(c) if *c == SqlState::INVALID_CATALOG_NAME => StoreError::config(format!(
            "PostgreSQL at {at}: {text}. Create it first (CREATE DATABASE … OWNER {user}), or name an existing \
             database in kv_url"
        )),
        Some(c) if *c == SqlState::INSUFFICIENT_PRIVILEGE => {
            StoreError::config(format!("PostgreSQL at {at}: {text}: GRANT CONNECT ON DATABASE <database> TO {user};"))
        }
        Some(c) if *c == SqlState::TOO_MANY_CONNECTIONS => StoreError::unreachable(at.to_owned(), text),
        _ if text.contains("does not allow writes") => StoreError::config(format!(
            "PostgreSQL at {at} is a read-only standby (no host in kv_url accepts writes): name the primary, or list \
             every host of the cluster (postgres://user:password@primary:5432,standby:5432/database) so the plugin \
             finds the one that is primary, also after a failover"
        )),
        _ if text.contains("server does not support TLS") => StoreError::unreachable(
            at.to_owned(),
            format!("{text}: the server has no TLS, and sslmode in kv_url requires it (use sslmode=prefer or disable)"),
        ),
        _ if text.contains("invalid peer certificate") || text.contains("UnknownIssuer") => StoreError::unreachable(
            at.to_owned(),
            format!(
                "its TLS certificate was refused ({text}): it must chain to the CA named by tls_ca in kv_url (without \
                 tls_ca, to the public roots), be valid now, and name the address the plugin dials"
            ),
        ),
        _ => StoreError::unreachable(at.to_owned(), text),
    };
    error.caused_by(e)
}

/// An error from a statement. Only a broken connection leaves the outcome unknown.
pub(crate) fn running(timeout: Duration, e: tokio_postgres::Error) -> StoreError {
    let error = match e.code() {
        Some(c) if *c == SqlState::INSUFFICIENT_PRIVILEGE => StoreError::config(db_text(&e)),
        // lock_timeout: a claim on the key is still committing (a synchronous standby has not
        // confirmed it); nothing of this statement was applied.
        Some(c) if *c == SqlState::LOCK_NOT_AVAILABLE => StoreError::Timeout(timeout.as_millis() as u64),
        Some(c) if *c == SqlState::READ_ONLY_SQL_TRANSACTION => StoreError::unexpected(format!(
            "{}: the server became a read-only standby (a failover?); the claim was not made",
            db_text(&e)
        )),
        // The server is shutting down or ended the session: a COMMIT may or may not have happened.
        Some(c) if c.code().starts_with("57") || c.code().starts_with("08") => StoreError::interrupted(db_text(&e)),
        Some(_) => StoreError::unexpected(db_text(&e)),
        None if db_text(&e).contains("timeout") => StoreError::Timeout(timeout.as_millis() as u64),
        None => StoreError::interrupted(db_text(&e)),
    };
    error.caused_by(e)
}

/// The rustls configuration: the CA file's certificates, or the public roots.
pub(crate) fn tls(ca_path: Option<&str>) -> Result<tokio_postgres_rustls::MakeRustlsConnect, StoreError> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    match ca_path {
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        Some(path) => {
            let unreadable = |e: &dyn std::fmt::Display| {
                StoreError::config(format!("the CA file {path:?} named by tls_ca in kv_url cannot be read: {e}"))
            };
            let certs = rustls::pki_types::CertificateDer::pem_file_iter(path).map_err(|e| unreadable(&e))?;
            for cert in certs {
                roots.add(cert.map_err(|e| unreadable(&e))?).map_err(|e| unreadable(&e))?;
            }
            if roots.is_empty() {
                return Err(unreadable(&"it holds no PEM certificate"));
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::config(format!("TLS setup: {e}")).caused_by(e))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}
