//! The v1 protocol over real sockets: status codes, ETags, preconditions, server time.

use crate::support::kv::{etag_rev, header_u64, server_time, KvServer};
use bytes::Bytes;
use reqwest::header::HeaderMap;
use reqwest::{Client, RequestBuilder, StatusCode};
use tempfile::TempDir;

struct Fixture {
    server: KvServer,
    http: Client,
    _dir: TempDir,
}

fn start() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    Fixture { server: KvServer::start(dir.path(), &[]), http: Client::new(), _dir: dir }
}

impl Fixture {
    fn key(&self, key: &str) -> String {
        format!("{}/state/{key}", self.server.url())
    }
}

/// Sends and checks what every response must have (`KV-Time-Ms`).
async fn send(req: RequestBuilder) -> (StatusCode, HeaderMap, Bytes) {
    let resp = req.send().await.expect("request");
    let (status, headers) = (resp.status(), resp.headers().clone());
    server_time(&headers);
    (status, headers, resp.bytes().await.expect("body"))
}

fn error_code(body: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(body).expect("JSON error body");
    assert!(v["message"].is_string(), "error has a message: {v}");
    v["error"].as_str().expect("error code").to_owned()
}

#[tokio::test]
async fn healthz_reports_capabilities_version_and_durability() {
    let f = start();
    let (status, _, body) = send(f.http.get(format!("{}/healthz", f.server.url()))).await;
    assert_eq!(status, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["status"], "ok");
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(v["durability"], "immediate");
    for cap in ["conditional-put", "ttl", "server-time", "cas", "deadline"] {
        assert!(v["capabilities"].as_array().unwrap().iter().any(|c| c == cap), "{cap}");
    }
}

#[tokio::test]
async fn put_creates_then_replaces_and_get_returns_exact_bytes() {
    let f = start();
    let first = r#"{ "b" : [1, 2] ,"a":"x" }"#;
    let (status, h1, _) = send(f.http.put(f.key("k")).body(first)).await;
    assert_eq!(status, StatusCode::CREATED);
    let r1 = etag_rev(&h1).expect("ETag on create");
    assert!(header_u64(&h1, "kv-modified-ms").is_some());
    assert!(h1.get("kv-expires-ms").is_none(), "no TTL, no expiry");

    let (status, h2, _) = send(f.http.put(f.key("k")).body(r#"{"v":2}"#)).await;
    assert_eq!(status, StatusCode::OK);
    let r2 = etag_rev(&h2).unwrap();
    assert!(r2 > r1, "ETags strictly increase");

    let (status, h, body) = send(f.http.get(f.key("k"))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(&body[..], br#"{"v":2}"#);
    assert_eq!(etag_rev(&h), Some(r2));
    assert_eq!(h["content-type"], "application/json");
    assert_eq!(header_u64(&h, "kv-modified-ms"), header_u64(&h2, "kv-modified-ms"));

    // Stored bytes are returned verbatim, not re-serialised.
    send(f.http.put(f.key("raw")).body(first)).await;
    assert_eq!(&send(f.http.get(f.key("raw"))).await.2[..], first.as_bytes());
}

#[tokio::test]
async fn post_is_an_unconditional_write() {
    let f = start();
    let (status, h1, _) = send(f.http.post(f.key("p")).body("1")).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, h2, _) = send(f.http.post(f.key("p")).body("2")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(etag_rev(&h2) > etag_rev(&h1));
    assert_eq!(&send(f.http.get(f.key("p"))).await.2[..], b"2");
    // A precondition on POST would be ignored by legacy semantics, so it is refused.
    let (status, _, body) = send(f.http.post(f.key("p")).header("if-none-match", "*").body("3")).await;
    assert_eq!((status, error_code(&body).as_str()), (StatusCode::BAD_REQUEST, "bad_precondition"));
}

#[tokio::test]
async fn get_of_a_missing_key_is_404_json() {
    let f = start();
    let (status, h, body) = send(f.http.get(f.key("nothing-here"))).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error_code(&body), "not_found");
    assert!(h.get("etag").is_none());
}

#[tokio::test]
async fn if_none_match_creates_once_and_412_carries_the_current_value() {
    let f = start();
    let put = |v: &'static str| f.http.put(f.key("evt_1")).header("if-none-match", "*").body(v);
    let (status, h1, body) = send(put(r#"{"first":true}"#)).await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(body.is_empty());
    let (status, h2, body) = send(put(r#"{"second":true}"#)).await;
    assert_eq!(status, StatusCode::PRECONDITION_FAILED);
    assert_eq!(&body[..], br#"{"first":true}"#, "duplicate learns the stored value");
    assert_eq!(etag_rev(&h2), etag_rev(&h1));
    assert_eq!(header_u64(&h2, "kv-modified-ms"), header_u64(&h1, "kv-modified-ms"));
    assert_eq!(&send(f.http.get(f.key("evt_1"))).await.2[..], br#"{"first":true}"#);
}

#[tokio::test]
async fn if_match_is_compare_and_swap() {
    let f = start();
    let (_, h, _) = send(f.http.put(f.key("c")).body("1")).await;
    let r1 = etag_rev(&h).unwrap();
    let cas = |tag: String, v: &'static str| f.http.put(f.key("c")).header("if-match", tag).body(v);

    let (status, h, _) = send(cas(format!("\"{r1}\""), "2")).await;
    assert_eq!(status, StatusCode::OK);
    let r2 = etag_rev(&h).unwrap();
    assert!(r2 > r1);

    let (status, h, body) = send(cas(format!("\"{r1}\""), "3")).await;
    assert_eq!(status, StatusCode::PRECONDITION_FAILED, "stale etag loses");
    assert_eq!((&body[..], etag_rev(&h)), (&b"2"[..], Some(r2)));

    let (status, h, _) = send(cas(r2.to_string(), "4")).await;
    assert_eq!(status, StatusCode::OK, "unquoted etag accepted");
    let (status, _, _) = send(cas("*".into(), "5")).await;
    assert_eq!(status, StatusCode::OK, "If-Match: * means exists");
    assert!(etag_rev(&h).unwrap() > r2);
    assert_eq!(&send(f.http.get(f.key("c"))).await.2[..], b"5");

    for tag in ["\"1\"", "*"] {
        let absent = f.http.put(f.key("absent")).header("if-match", tag).body("1");
        let (status, h, body) = send(absent).await;
        assert_eq!(status, StatusCode::PRECONDITION_FAILED);
        assert!(body.is_empty() && h.get("etag").is_none(), "absent key: empty 412");
    }
    assert_eq!(send(f.http.get(f.key("absent"))).await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn delete_paths() {
    let f = start();
    let (status, _, body) = send(f.http.delete(f.key("d"))).await;
    assert_eq!((status, error_code(&body).as_str()), (StatusCode::NOT_FOUND, "not_found"));

    let (_, h, _) = send(f.http.put(f.key("d")).body(r#""v""#)).await;
    let rev = etag_rev(&h).unwrap();
    let (status, h, body) = send(f.http.delete(f.key("d")).header("if-match", format!("\"{}\"", rev + 1000))).await;
    assert_eq!(status, StatusCode::PRECONDITION_FAILED);
    assert_eq!((&body[..], etag_rev(&h)), (&br#""v""#[..], Some(rev)));

    let (status, _, body) = send(f.http.delete(f.key("d")).header("if-match", format!("\"{rev}\""))).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert!(body.is_empty());
    assert_eq!(send(f.http.get(f.key("d"))).await.0, StatusCode::NOT_FOUND);

    send(f.http.put(f.key("d")).body("1")).await;
    assert_eq!(send(f.http.delete(f.key("d"))).await.0, StatusCode::NO_CONTENT);
    let (status, _, body) = send(f.http.delete(f.key("d")).header("if-none-match", "*")).await;
    assert_eq!((status, error_code(&body).as_str()), (StatusCode::BAD_REQUEST, "bad_precondition"));
}

#[tokio::test]
async fn malformed_preconditions_are_400() {
    let f = start();
    let cases: [&[(&str, &str)]; 4] = [
        &[("if-match", "\"abc\"")],
        &[("if-match", "\"1")],
        &[("if-none-match", "\"7\"")],
        &[("if-match", "\"1\""), ("if-none-match", "*")],
    ];
    for headers in cases {
        let mut req = f.http.put(f.key("m")).body("1");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let (status, _, body) = send(req).await;
        assert_eq!((status, error_code(&body).as_str()), (StatusCode::BAD_REQUEST, "bad_precondition"), "{headers:?}");
    }
    assert_eq!(send(f.http.get(f.key("m"))).await.0, StatusCode::NOT_FOUND, "nothing written");
}

#[tokio::test]
async fn etags_keep_increasing_across_keys_and_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let http = Client::new();
    let mut last = 0;
    for round in 0..2 {
        let mut server = KvServer::start(dir.path(), &[]);
        for key in ["a", "b", "a"] {
            let (_, h, _) = send(http.put(format!("{}/state/{key}", server.url())).body("1")).await;
            let rev = etag_rev(&h).unwrap();
            assert!(rev > last, "round {round}: {rev} after {last}");
            last = rev;
        }
        assert!(server.terminate().success(), "clean exit on SIGTERM");
    }
}

/// `KV-Deadline-Ms`: a write the container applies after it is refused with 409
/// `deadline_passed` (not 412) and writes nothing, whatever its precondition; before it, the
/// write is applied as usual; a malformed value is 400.
#[tokio::test]
async fn writes_past_their_deadline_are_refused_and_write_nothing() {
    let f = start();
    let (_, h, _) = send(f.http.get(format!("{}/healthz", f.server.url()))).await;
    let now = server_time(&h);
    let past = (now - 1).to_string();
    let future = (now + 60_000).to_string();
    let late =
        send(f.http.put(f.key("d")).header("if-none-match", "*").header("kv-deadline-ms", &past).body("1")).await;
    assert_eq!((late.0, error_code(&late.2).as_str()), (StatusCode::CONFLICT, "deadline_passed"));
    assert_eq!(send(f.http.get(f.key("d"))).await.0, StatusCode::NOT_FOUND, "nothing was written");
    let (status, h, _) =
        send(f.http.put(f.key("d")).header("if-none-match", "*").header("kv-deadline-ms", &future).body("1")).await;
    assert_eq!(status, StatusCode::CREATED);
    let tag = format!("\"{}\"", etag_rev(&h).unwrap());
    let late_cas =
        send(f.http.put(f.key("d")).header("if-match", &tag).header("kv-deadline-ms", &past).body("2")).await;
    assert_eq!((late_cas.0, error_code(&late_cas.2).as_str()), (StatusCode::CONFLICT, "deadline_passed"));
    let late_delete = send(f.http.delete(f.key("d")).header("if-match", &tag).header("kv-deadline-ms", &past)).await;
    assert_eq!(late_delete.0, StatusCode::CONFLICT);
    let (status, _, body) = send(f.http.get(f.key("d"))).await;
    assert_eq!((status, &body[..]), (StatusCode::OK, &b"1"[..]), "the late swap and delete changed nothing");
    let on_time =
        send(f.http.put(f.key("d")).header("if-match", &tag).header("kv-deadline-ms", &future).body("3")).await;
    assert_eq!(on_time.0, StatusCode::OK);
    for bad in ["soon", "-5", "1.5"] {
        let r = send(f.http.put(f.key("d")).header("kv-deadline-ms", bad).body("4")).await;
        assert_eq!((r.0, error_code(&r.2).as_str()), (StatusCode::BAD_REQUEST, "bad_deadline"), "{bad}");
    }
}
