//! The KV client's transport: HTTP/1.1 keep-alive connections (hyper's own client), plain or TLS.
//
// reqwest put a redirect layer, a retry layer and two full URL parses (the redirect policy's
// and the response's) around every request: about a third of a KV ingest's instructions and
// some 60 of its allocations. The container speaks one protocol at one address, never
// redirects, and each request already has its deadline; what remains is a pool of HTTP/1.1
// connections, which this is.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{HeaderMap, HeaderValue, CONTENT_LENGTH, HOST};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;

/// Why an exchange failed, by what may have reached the container.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Nothing was sent: connecting, or the TLS handshake, failed.
    Connect(Box<dyn std::error::Error + Send + Sync>),
    /// Connecting took longer than the connect timeout: nothing was sent.
    ConnectTimeout(Duration),
    /// The request was sent, or may have been: the exchange broke after that.
    Exchange(Box<dyn std::error::Error + Send + Sync>),
    /// The answer is longer than the cap; it was not read.
    TooBig,
}

/// What came back.
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

/// TLS to the container: the client configuration and the name its certificate must carry.
pub(crate) struct Tls {
    pub(crate) connector: tokio_rustls::TlsConnector,
    pub(crate) name: ServerName<'static>,
}

/// Connections to one container. Idle ones are kept for the next request; the caller bounds
/// how many are in use at once.
pub(crate) struct Transport {
    /// Host (an IPv6 address without its brackets) and port to connect to.
    host: String,
    port: u16,
    /// The `Host` header: the kv_url's authority.
    authority: HeaderValue,
    tls: Option<Tls>,
    connect_timeout: Duration,
    idle: Mutex<Vec<SendRequest<Full<Bytes>>>>,
}

impl Transport {
    pub(crate) fn new(
        host: String,
        port: u16,
        authority: HeaderValue,
        tls: Option<Tls>,
        connect_timeout: Duration,
    ) -> Self {
        Transport { host, port, authority, tls, connect_timeout, idle: Mutex::new(Vec::new()) }
    }

    /// The host connected to and the `Host` header sent.
    #[cfg(test)]
    pub(crate) fn endpoint(&self) -> (&str, &str) {
        (&self.host, self.authority.to_str().unwrap_or_default())
    }

    /// Sends `req` (origin-form URI; the `Host` header is added here) and reads the whole
    /// answer, refusing one longer than `cap` bytes. A kept connection that the container
    /// closed in the meantime takes the request back unsent, and it goes on a new one.
    pub(crate) async fn exchange(&self, mut req: Request<Full<Bytes>>, cap: usize) -> Result<Reply, Failure> {
        req.headers_mut().insert(HOST, self.authority.clone());
        loop {
            let (mut sender, kept) = match self.take_idle().await {
                Some(sender) => (sender, true),
                None => (self.connect().await?, false),
            };
            match sender.try_send_request(req).await {
                Ok(resp) => {
                    let (parts, body) = resp.into_parts();
                    let too_big = parts
                        .headers
                        .get(CONTENT_LENGTH)
                        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                        .is_some_and(|n| n > cap as u64);
                    if too_big {
                        return Err(Failure::TooBig);
                    }
                    let body = read_capped(body, cap).await?;
                    self.keep(sender);
                    return Ok(Reply { status: parts.status, headers: parts.headers, body });
                }
                Err(mut e) => match e.take_message() {
                    Some(unsent) if kept => req = unsent,
                    Some(_) => return Err(Failure::Connect(Box::new(e.into_error()))),
                    None => return Err(Failure::Exchange(Box::new(e.into_error()))),
                },
            }
        }
    }

    /// A kept connection that is still open, ready for a request (a connection's driver
    /// may not have taken up the next request yet when its last answer was read).
    async fn take_idle(&self) -> Option<SendRequest<Full<Bytes>>> {
        loop {
            let mut sender = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop()?;
            if sender.ready().await.is_ok() {
                return Some(sender);
            }
        }
    }

    fn keep(&self, sender: SendRequest<Full<Bytes>>) {
        if !sender.is_closed() {
            self.idle.lock().unwrap_or_else(|p| p.into_inner()).push(sender);
        }
    }

    /// A new connection, its TLS handshake done and its HTTP/1.1 driver running.
    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, Failure> {
        let connecting = async {
            let tcp = TcpStream::connect((self.host.as_str(), self.port)).await.map_err(boxed)?;
            tcp.set_nodelay(true).map_err(boxed)?;
            match &self.tls {
                None => handshake(tcp).await,
                Some(tls) => handshake(tls.connector.connect(tls.name.clone(), tcp).await.map_err(boxed)?).await,
            }
        };
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        tracing::debug!("kv: connecting to {scheme}://{}", self.authority.to_str().unwrap_or(&self.host));
        match tokio::time::timeout(self.connect_timeout, connecting).await {
            Err(_) => Err(Failure::ConnectTimeout(self.connect_timeout)),
            Ok(connected) => connected.map_err(Failure::Connect),
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn boxed(e: impl std::error::Error + Send + Sync + 'static) -> BoxError {
    Box::new(e)
}

async fn handshake<S>(stream: S) -> Result<SendRequest<Full<Bytes>>, BoxError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = http1::handshake(TokioIo::new(stream)).await.map_err(boxed)?;
    // The connection's driver ends when the container closes it; its sender then reports
    // closed and is not kept.
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("a KV container connection ended: {e}");
        }
    });
    sender.ready().await.map_err(boxed)?;
    Ok(sender)
}

/// The body, refused (without buffering the rest) once it passes `cap`. A record's answer is
/// one chunk, kept as it came; only a longer one is joined.
async fn read_capped(mut body: hyper::body::Incoming, cap: usize) -> Result<Bytes, Failure> {
    let mut first: Option<Bytes> = None;
    let mut joined = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| Failure::Exchange(Box::new(e)))?;
        let Ok(chunk) = frame.into_data() else { continue };
        let held = first.as_ref().map_or(0, Bytes::len) + joined.len();
        if held + chunk.len() > cap {
            return Err(Failure::TooBig);
        }
        match first.take() {
            None if joined.is_empty() => first = Some(chunk),
            earlier => {
                if let Some(earlier) = earlier {
                    joined.extend_from_slice(&earlier);
                }
                joined.extend_from_slice(&chunk);
            }
        }
    }
    Ok(first.unwrap_or_else(|| joined.freeze()))
}

/// The rustls client configuration of the KV client: `roots` to trust, and a client
/// certificate when the container asks for one. HTTP/1.1 is the one protocol offered.
pub(crate) fn client_config(
    roots: rustls::RootCertStore,
    identity: Option<(Vec<rustls_pki_types::CertificateDer<'static>>, rustls_pki_types::PrivateKeyDer<'static>)>,
) -> Result<rustls::ClientConfig, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    let mut config = match identity {
        Some((chain, key)) => builder.with_client_auth_cert(chain, key)?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}
