//! HTTPS on the KV container with certificates the test makes (rcgen): the plugin over
//! `https://` with `tls_ca`, h2 and HTTP/1.1 by ALPN, each certificate problem named, and mTLS.

use serde_json::{json, Value};

use crate::support::kv::{serve_refused, KvServer};
use crate::support::kv_pki::Pki;
use crate::support::plugin::{creds, Plugin};
use crate::support::scenarios;

fn start(dir: &std::path::Path, pki: &Pki, cert: &str, extra: &[&str]) -> KvServer {
    let mut args = pki.serve_args(cert);
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    KvServer::start(dir, &args)
}

/// A reqwest client trusting only the test CA, optionally offering `client`'s certificate.
fn client(pki: &Pki, client: Option<&str>) -> reqwest::ClientBuilder {
    let ca = reqwest::Certificate::from_pem(&std::fs::read(pki.cert("ca")).unwrap()).unwrap();
    let mut b = reqwest::Client::builder().tls_built_in_root_certs(false).add_root_certificate(ca);
    if let Some(name) = client {
        let mut pem = std::fs::read(pki.cert(name)).unwrap();
        pem.extend(std::fs::read(pki.key(name)).unwrap());
        b = b.identity(reqwest::Identity::from_pem(&pem).unwrap());
    }
    b
}

fn event(id: &str) -> Value {
    json!({"event_id": id, "event_type": "created", "payload": "{}"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_over_https_with_a_private_ca() {
    let pki = Pki::make();
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &pki, "server", &[]);
    assert!(server.url().starts_with("https://127.0.0.1:"), "{}", server.url());
    // Claims, duplicates, conflicts, reads, completion and the credential check, over TLS.
    scenarios::outcomes(&format!("{}?tls_ca={}", server.url(), pki.cert("ca").display())).await;

    // ALPN offers h2 and HTTP/1.1: a client gets the one it asks for.
    let h2 = client(&pki, None).build().unwrap().get(format!("{}/healthz", server.url())).send().await.unwrap();
    assert_eq!((h2.status().as_u16(), h2.version()), (200, reqwest::Version::HTTP_2));
    let h1 = client(&pki, None).http1_only().build().unwrap();
    let h1 = h1.get(format!("{}/healthz", server.url())).send().await.unwrap();
    assert_eq!((h1.status().as_u16(), h1.version()), (200, reqwest::Version::HTTP_11));
    // Plain HTTP to the TLS port is not answered as HTTP.
    let plain = reqwest::get(format!("http://{}/healthz", server.addr())).await;
    assert!(plain.is_err() || !plain.unwrap().status().is_success());
}

/// Each certificate problem is an `upstream_error` at call time and a failed credential
/// check, naming its cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_problems_are_refused_with_their_cause() {
    let pki = Pki::make();
    let dir = tempfile::tempdir().unwrap();
    let good = start(&dir.path().join("good"), &pki, "server", &[]);
    let expired = start(&dir.path().join("expired"), &pki, "expired", &[]);
    let wrong_name = start(&dir.path().join("wrong"), &pki, "wrong-name", &[]);
    let p = Plugin::spawn(&[("STATEFUL_TOOL_STORE_TIMEOUT_MS", "3000")]).await;
    let with_ca = |s: &KvServer, ca: &str| format!("{}?tls_ca={}", s.url(), pki.cert(ca).display());
    for (url, cause) in [
        (with_ca(&good, "other-ca"), "unknown issuer"),
        (good.url(), "unknown issuer"),
        (with_ca(&expired, "ca"), "expired"),
        (with_ca(&wrong_name, "ca"), "wrong name"),
    ] {
        let call = p.invoke("event_ingest", &creds(&url), event("TLS-1")).await;
        assert_eq!(call.error_type(), Some("upstream_error"), "{url}: {call:?}");
        assert!(call.message().contains(cause), "{url}: {}", call.message());
        let check = p.validate(&creds(&url)).await;
        assert_eq!(check.error_type(), Some("ToolProviderCredentialValidationError"), "{check:?}");
        assert!(check.message().contains(cause), "{url}: {}", check.message());
    }
    // A CA file that is not there is named, as is tls_ca on a plain http:// kv_url.
    let missing =
        p.invoke("event_ingest", &creds(&format!("{}?tls_ca=/nonexistent/ca.pem", good.url())), event("T")).await;
    assert!(missing.message().contains("tls_ca"), "{missing:?}");
    let plain = p.invoke("event_ingest", &creds(&format!("http://{}?tls_ca=/ca.pem", good.addr())), event("T")).await;
    assert_eq!(plain.error_type(), Some("param_invalid"), "{plain:?}");
    // Nothing was stored through any refused connection.
    let ok = p.invoke("event_ingest", &creds(&with_ca(&good, "ca")), event("TLS-1")).await;
    assert_eq!(ok.outcome(), "accepted", "{ok:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_refuses_a_client_without_a_certificate_from_its_ca() {
    let pki = Pki::make();
    let dir = tempfile::tempdir().unwrap();
    let ca = pki.cert("ca").display().to_string();
    let server = start(dir.path(), &pki, "server", &["--tls-client-ca", &ca]);
    let p = Plugin::spawn(&[("STATEFUL_TOOL_STORE_TIMEOUT_MS", "3000")]).await;
    let url = |client: Option<&str>| match client {
        None => format!("{}?tls_ca={ca}", server.url()),
        Some(c) => {
            format!("{}?tls_ca={ca}&tls_cert={}&tls_key={}", server.url(), pki.cert(c).display(), pki.key(c).display())
        }
    };
    let ok = p.invoke("event_ingest", &creds(&url(Some("client"))), event("M-1")).await;
    assert_eq!(ok.outcome(), "accepted", "{ok:?}");
    assert_eq!(p.validate(&creds(&url(Some("client")))).await.chunks, vec![json!({"result": true})]);
    for refused in [None, Some("other-client")] {
        let call = p.invoke("event_ingest", &creds(&url(refused)), event("M-2")).await;
        assert_eq!(call.error_type(), Some("upstream_error"), "{refused:?}: {call:?}");
        assert!(call.message().contains("client certificate"), "{refused:?}: {}", call.message());
        let check = p.validate(&creds(&url(refused))).await;
        assert!(check.message().contains("client certificate"), "{refused:?}: {check:?}");
    }
    // Both refusals are counted by reason (read with an accepted client certificate).
    let metrics = client(&pki, Some("client")).build().unwrap();
    let text = metrics.get(format!("{}/metrics", server.url())).send().await.unwrap().text().await.unwrap();
    for reason in ["no_client_certificate", "bad_client_certificate"] {
        assert!(text.contains(&format!("kv_auth_failures_total{{reason=\"{reason}\"}}")), "{reason}:\n{text}");
    }
    let refused = client(&pki, None).build().unwrap().get(format!("{}/healthz", server.url())).send().await;
    assert!(refused.is_err(), "no client certificate, no answer: {refused:?}");
}

#[test]
fn unusable_certificate_files_refuse_to_start() {
    let pki = Pki::make();
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pem");
    for (args, named) in [
        (
            vec![
                "--tls-cert".into(),
                missing.display().to_string(),
                "--tls-key".into(),
                pki.key("server").display().to_string(),
            ],
            "--tls-cert",
        ),
        (
            vec![
                "--tls-cert".into(),
                pki.cert("server").display().to_string(),
                "--tls-key".into(),
                pki.key("client").display().to_string(),
            ],
            "do not make a usable pair",
        ),
        (vec!["--tls-cert".into(), pki.cert("server").display().to_string()], "--tls-key"),
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let err = serve_refused(&dir.path().join("data"), &args);
        assert!(err.contains(named), "{args:?}: {err}");
    }
}
