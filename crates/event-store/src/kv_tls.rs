//! TLS for `https://` kv_urls: the query parameters (`tls_ca`, `tls_cert`, `tls_key`), and
//! what a refused handshake or a 403 means, in words a workflow author can act on.

use std::path::Path;

use super::key::parse_storage_key;
use super::kv_http::{client_config, Tls};
use super::redis::url::percent_decode;
use super::url::redact;
use crate::error::StoreError;

/// The TLS parameters of a KV container kv_url (file paths, percent-decoded).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TlsParams {
    /// A PEM CA the container's certificate must chain to, instead of the public roots.
    pub(crate) ca: Option<String>,
    /// A PEM client certificate and its key, offered to a container that asks for one.
    pub(crate) cert: Option<String>,
    pub(crate) key: Option<String>,
}

fn bad(msg: String) -> StoreError {
    StoreError::BadUrl(msg)
}

impl TlsParams {
    /// Splits `url` into the base the requests go to and its TLS parameters.
    pub fn split(url: &str) -> Result<(String, TlsParams), StoreError> {
        let parsed = url::Url::parse(url).map_err(|e| bad(format!("kv_url {:?} is not a URL: {e}", redact(url))))?;
        if parsed.fragment().is_some() {
            return Err(bad("kv_url must not carry a fragment (#…)".into()));
        }
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut p = TlsParams::default();
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let slot = match name {
                "tls_ca" => &mut p.ca,
                "tls_cert" => &mut p.cert,
                "tls_key" => &mut p.key,
                other => {
                    return Err(bad(format!(
                    "kv_url parameter {other:?} is not known for the KV container (known: tls_ca, tls_cert, tls_key)"
                )))
                }
            };
            *slot = Some(percent_decode(value)).filter(|v| !v.is_empty());
        }
        if p != TlsParams::default() && parsed.scheme() != "https" {
            return Err(bad("tls_ca, tls_cert and tls_key need an https:// kv_url".into()));
        }
        if p.cert.is_some() != p.key.is_some() {
            return Err(bad("a client certificate needs both tls_cert and tls_key in kv_url".into()));
        }
        Ok((base.trim_end_matches('/').to_owned(), p))
    }

    /// TLS to `host` (a DNS name or an IP address), as [`TlsParams::client_config`] sets it up.
    pub(crate) fn connector(&self, host: &str) -> Result<Tls, StoreError> {
        let config = std::sync::Arc::new(self.client_config()?);
        let name = rustls_pki_types::ServerName::try_from(host.to_owned())
            .map_err(|_| bad(format!("kv_url's host {host:?} is not a name a certificate can carry")))?;
        Ok(Tls { connector: tokio_rustls::TlsConnector::from(config), name })
    }

    /// The rustls client configuration: trusting `ca` alone when given, else the public roots,
    /// and offering the client certificate when given (also what the `kv` admin commands use).
    pub fn client_config(&self) -> Result<rustls::ClientConfig, StoreError> {
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};
        let mut roots = rustls::RootCertStore::empty();
        match &self.ca {
            Some(path) => {
                let pem = read(path, "tls_ca")?;
                // As before: one unreadable certificate refuses the whole file, not just itself.
                let no_cert =
                    || StoreError::config(format!("the CA file {path:?} named by tls_ca holds no PEM certificate"));
                let certs =
                    CertificateDer::pem_slice_iter(&pem).collect::<Result<Vec<_>, _>>().map_err(|_| no_cert())?;
                if certs.is_empty() {
                    return Err(no_cert());
                }
                for cert in certs {
                    roots.add(cert).map_err(|_| no_cert())?;
                }
            }
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
        let identity = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                let unusable = |e: String| {
                    StoreError::config(format!(
                        "tls_cert {cert:?} and tls_key {key:?} are not a usable PEM certificate and key: {e}"
                    ))
                };
                let chain = CertificateDer::pem_slice_iter(&read(cert, "tls_cert")?)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| unusable(e.to_string()))?;
                if chain.is_empty() {
                    return Err(unusable("no certificate in tls_cert".into()));
                }
                let private =
                    PrivateKeyDer::from_pem_slice(&read(key, "tls_key")?).map_err(|e| unusable(e.to_string()))?;
                Some((chain, private))
            }
            _ => None,
        };
        client_config(roots, identity)
            .map_err(|e| StoreError::config(format!("the TLS settings of kv_url cannot be used: {e}")).caused_by(e))
    }
}

fn read(path: &str, param: &str) -> Result<Vec<u8>, StoreError> {
    std::fs::read(Path::new(path)).map_err(|e| {
        StoreError::config(format!("the file {path:?} named by {param} in kv_url cannot be read: {e}")).caused_by(e)
    })
}

/// The cause of a refused TLS handshake, when `e` is one.
pub(crate) fn refusal(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        let rustls_error = err.downcast_ref::<rustls::Error>().or_else(|| {
            err.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(r) = rustls_error {
            return describe(r);
        }
        // Wrappers that hold a boxed error hide its type from `downcast_ref`: read its words.
        if let Some(why) = describe_text(&err.to_string()) {
            return Some(why);
        }
        cur = err.source();
    }
    None
}

/// The cause in rustls's own words (`invalid peer certificate: …`, `received fatal alert: …`).
fn describe_text(text: &str) -> Option<String> {
    use rustls::{AlertDescription as A, CertificateError as C, Error as E};
    if let Some(detail) = text.split_once("invalid peer certificate: ").map(|(_, d)| d) {
        let error = if detail.starts_with("UnknownIssuer") {
            C::UnknownIssuer
        } else if detail.contains("expired") || detail.starts_with("Expired") {
            C::Expired
        } else if detail.contains("not valid for name") || detail.starts_with("NotValidForName") {
            C::NotValidForName
        } else {
            C::Other(rustls::OtherError(std::sync::Arc::new(std::io::Error::other(detail.to_owned()))))
        };
        return describe(&E::InvalidCertificate(error));
    }
    let alert = text.split_once("received fatal alert: ")?.1;
    let alert = [A::CertificateRequired, A::BadCertificate, A::UnknownCA, A::CertificateUnknown, A::AccessDenied]
        .into_iter()
        .find(|a| alert.starts_with(&format!("{a:?}")))
        .unwrap_or(A::HandshakeFailure);
    // Any other alert: reported as the end of the handshake, without a certificate cause.
    describe(&E::AlertReceived(alert))
}

fn describe(e: &rustls::Error) -> Option<String> {
    use rustls::{AlertDescription as A, CertificateError as C, Error as E};
    let certificate = |cause: &str| Some(format!("TLS certificate problem, {cause}"));
    match e {
        E::InvalidCertificate(C::UnknownIssuer) => certificate(
            "unknown issuer: the store's certificate does not chain to the CA named by tls_ca in kv_url (without \
             tls_ca, to the public roots)",
        ),
        E::InvalidCertificate(C::Expired | C::ExpiredContext { .. }) => {
            certificate("expired: the store's certificate is past its end of validity; renew it")
        }
        E::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => {
            certificate("wrong name: the store's certificate does not name the host written in kv_url")
        }
        E::InvalidCertificate(other) => certificate(&format!("the store's certificate was refused: {other}")),
        E::AlertReceived(
            A::CertificateRequired | A::BadCertificate | A::UnknownCA | A::CertificateUnknown | A::AccessDenied,
        ) => certificate(
            "the store refused this plugin's client certificate (or its absence): set tls_cert and tls_key in \
             kv_url to a certificate signed by the CA of the store's --tls-client-ca",
        ),
        E::AlertReceived(alert) => Some(format!("the store ended the TLS handshake ({alert:?})")),
        other => Some(format!("the TLS handshake failed ({other}); is kv_url's host:port a TLS listener?")),
    }
}

/// A 403: the token is valid, but the container binds it to other namespaces.
pub(crate) fn forbidden(path: &str) -> StoreError {
    let msg = match path.strip_prefix(super::kv_wire::STATE_PREFIX).map(parse_storage_key) {
        Some(Some((Some(ns), _))) => format!(
            "kv_token does not cover namespace {ns:?}: the KV container binds this token to other namespaces; use \
             the token issued for {ns:?}, or set the namespace credential to the one this token belongs to"
        ),
        Some(Some((None, _))) => "kv_token does not cover events without a namespace: the KV container binds this \
             token to namespaces; set the namespace credential to the one this token belongs to"
            .to_owned(),
        _ => "kv_token does not cover this request: it needs a token for every namespace (`*`)".to_owned(),
    };
    StoreError::Forbidden(msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_are_split_off_and_checked() {
        let (base, p) =
            TlsParams::split("https://kv:8443/?tls_ca=/a%20b/ca.pem&tls_cert=/c.pem&tls_key=/k.pem").unwrap();
        assert_eq!(base, "https://kv:8443");
        assert_eq!(p.ca.as_deref(), Some("/a b/ca.pem"));
        assert_eq!((p.cert.as_deref(), p.key.as_deref()), (Some("/c.pem"), Some("/k.pem")));
        assert_eq!(TlsParams::split("http://h:1/").unwrap(), ("http://h:1".to_owned(), TlsParams::default()));
        for bad in [
            "http://h:1?tls_ca=/ca.pem",
            "https://h:1?tls_cert=/c.pem",
            "https://h:1?tls_key=/k.pem",
            "https://h:1?token=x",
            "https://h:1#frag",
            "https://",
        ] {
            assert!(matches!(TlsParams::split(bad), Err(StoreError::BadUrl(_))), "{bad}");
        }
    }

    #[test]
    fn refusals_in_rustls_words_name_their_cause() {
        for (text, cause) in [
            ("error sending request: invalid peer certificate: UnknownIssuer", "unknown issuer"),
            ("invalid peer certificate: certificate expired: verification time 1, but …", "expired"),
            (
                "invalid peer certificate: certificate not valid for name \"x\"; certificate is only valid for …",
                "wrong name",
            ),
            ("received fatal alert: CertificateRequired", "client certificate"),
        ] {
            let why = describe_text(text).unwrap();
            assert!(why.contains(cause), "{text}: {why}");
        }
        assert!(describe_text("received fatal alert: DecodeError").unwrap().contains("ended the TLS handshake"));
        assert_eq!(describe_text("connection refused"), None);
    }

    #[test]
    fn a_403_names_the_namespace() {
        let key = crate::key::storage_key(Some("acme"), "E1");
        let e = forbidden(&format!("/state/{key}")).to_string();
        assert!(e.contains("does not cover namespace \"acme\""), "{e}");
        assert!(forbidden("/state/evt_E1").to_string().contains("without a namespace"));
        assert!(forbidden("/backup").to_string().contains("`*`"));
    }
}
