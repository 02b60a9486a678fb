//! HTTPS for the KV container: `--tls-cert`/`--tls-key` (PEM), h2 and HTTP/1.1 by ALPN, and
//! with `--tls-client-ca` a client certificate signed by that CA required on every connection.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// The TLS files of `kv serve`.
pub(crate) struct TlsFiles<'a> {
    pub(crate) cert: &'a Path,
    pub(crate) key: &'a Path,
    pub(crate) client_ca: Option<&'a Path>,
}

fn certs(path: &Path, what: &str) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("{what} {}: not a readable PEM certificate file", path.display()))?;
    anyhow::ensure!(!certs.is_empty(), "{what} {}: holds no PEM certificate", path.display());
    Ok(certs)
}

/// The acceptor for `files`; every problem names the file and the flag it came from.
pub(crate) fn acceptor(files: &TlsFiles<'_>) -> anyhow::Result<TlsAcceptor> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certs(files.cert, "--tls-cert")?;
    let key = PrivateKeyDer::from_pem_file(files.key)
        .with_context(|| format!("--tls-key {}: not a readable PEM private key", files.key.display()))?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?;
    let builder = match files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in certs(ca, "--tls-client-ca")? {
                roots.add(cert).with_context(|| format!("--tls-client-ca {}: not a usable CA", ca.display()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .with_context(|| format!("--tls-client-ca {}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(chain, key).with_context(|| {
        format!("--tls-cert {} and --tls-key {} do not make a usable pair", files.cert.display(), files.key.display())
    })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// The refusal reason (a fixed name for metrics) and a description of a failed handshake.
pub(crate) fn handshake_failure(e: &std::io::Error) -> (&'static str, String) {
    let rustls_error = e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>());
    match rustls_error {
        Some(rustls::Error::NoCertificatesPresented) => ("no_client_certificate", "no client certificate".into()),
        Some(rustls::Error::InvalidCertificate(why)) => {
            ("bad_client_certificate", format!("client certificate refused: {why:?}"))
        }
        Some(other) => ("tls_handshake", format!("TLS handshake failed: {other}")),
        None => ("tls_handshake", format!("TLS handshake failed: {e}")),
    }
}

/// What the accept loop needs to serve HTTPS: the acceptor, and where refusals are counted.
#[derive(Clone)]
pub(crate) struct Tls {
    pub(crate) acceptor: TlsAcceptor,
    pub(crate) refusals: Arc<super::auth::Refusals>,
}
