//! `rediss://` against a real redis-server on a TLS port, with a CA the test makes itself
//! (openssl): a private CA trusted through `tls_ca`, and refused certificates.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::plugin::{creds, Plugin};
use crate::support::redis_tls::Certs;
use crate::support::scenarios;

struct TlsRedis {
    child: Child,
    port: u16,
}

impl TlsRedis {
    fn start(dir: &Path, cert: &str) -> TlsRedis {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into()))
            .args(["--port", "0", "--tls-port", &port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .args(["--appendonly", "no", "--tls-auth-clients", "no"])
            .arg("--tls-cert-file")
            .arg(dir.join(cert))
            .arg("--tls-key-file")
            .arg(dir.join("server.key"))
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (scripts/ensure-redis.sh)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not listen on its TLS port");
            std::thread::sleep(Duration::from_millis(20));
        }
        TlsRedis { child, port }
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rediss_with_a_private_ca_and_refused_certificates() {
    let certs = Certs::make();
    let dir = &certs;
    let ca = certs.ca();
    let good = TlsRedis::start(dir.dir(), "server.pem");
    let url = format!("rediss://127.0.0.1:{}/0?tls_ca={}", good.port, ca.display());
    scenarios::outcomes(&url).await;

    let p = Plugin::spawn(&[("STATEFUL_TOOL_STORE_TIMEOUT_MS", "2000")]).await;
    let ev = serde_json::json!({"event_id": "TLS-1", "event_type": "created"});
    // The public roots do not know the test CA.
    let untrusted = p.invoke("event_ingest", &creds(&format!("rediss://127.0.0.1:{}/0", good.port)), ev.clone()).await;
    assert_eq!(untrusted.error_type(), Some("upstream_error"), "{untrusted:?}");
    assert!(untrusted.message().to_lowercase().contains("cert"), "{}", untrusted.message());
    let refused = p.validate(&creds(&format!("rediss://127.0.0.1:{}/0", good.port))).await;
    assert_eq!(refused.error_type(), Some("ToolProviderCredentialValidationError"), "{refused:?}");
    // Plain text to a TLS port is not a Redis conversation.
    let plain = p.invoke("event_ingest", &creds(&format!("redis://127.0.0.1:{}/0", good.port)), ev.clone()).await;
    assert_eq!(plain.error_type(), Some("upstream_error"), "{plain:?}");
    // A missing CA file is named.
    let missing = p.invoke("event_ingest", &creds(&format!("{url}-missing")), ev.clone()).await;
    assert!(missing.message().contains("tls_ca"), "{missing:?}");

    // An expired certificate from the trusted CA is refused, and says so.
    let expired = TlsRedis::start(dir.dir(), "expired.pem");
    let url = format!("rediss://127.0.0.1:{}/0?tls_ca={}", expired.port, ca.display());
    let old = p.invoke("event_ingest", &creds(&url), ev).await;
    assert_eq!(old.error_type(), Some("upstream_error"), "{old:?}");
    assert!(old.message().to_lowercase().contains("expired"), "{}", old.message());
}
