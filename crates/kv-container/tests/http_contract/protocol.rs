//! Create-if-absent, compare-and-swap by ETag, unconditional writes and deletes.

use axum::http::{Method, StatusCode};

use crate::support::Kv;

#[tokio::test]
async fn healthz_reports_capabilities_version_and_durability() {
    let kv = Kv::open(None);
    let reply = kv.send(Method::GET, "/healthz", &[], "").await;
    assert_eq!(reply.status, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!((v["status"].as_str(), v["durability"].as_str()), (Some("ok"), Some("immediate")));
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    for cap in ["conditional-put", "ttl", "server-time", "cas", "deadline"] {
        assert!(v["capabilities"].as_array().unwrap().iter().any(|c| c == cap), "{cap}: {v}");
    }
}

#[tokio::test]
async fn if_none_match_creates_once_and_the_412_carries_the_stored_value() {
    let kv = Kv::open(None);
    let create = |value: &'static str| kv.put("evt_1", &[("if-none-match", "*")], value);
    let first = create(r#"{"first":true}"#).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert!(first.body.is_empty() && first.etag().is_some());
    let second = create(r#"{"second":true}"#).await;
    assert_eq!(second.status, StatusCode::PRECONDITION_FAILED);
    assert_eq!(second.body, br#"{"first":true}"#, "the duplicate learns the stored value");
    assert_eq!(second.etag(), first.etag());
    assert_eq!(second.header_u64("kv-modified-ms"), first.header_u64("kv-modified-ms"));
    let read = kv.get("evt_1").await;
    assert_eq!((read.status, read.body.as_slice()), (StatusCode::OK, &br#"{"first":true}"#[..]));
    assert_eq!(read.headers["content-type"], "application/json");
}

#[tokio::test]
async fn if_match_is_compare_and_swap_by_etag() {
    let kv = Kv::open(None);
    let r1 = kv.put("c", &[], "1").await.etag().unwrap();
    let kv = &kv;
    let swap = |tag: String, value: &'static str| async move { kv.put("c", &[("if-match", &tag)], value).await };
    let won = swap(format!("\"{r1}\""), "2").await;
    assert_eq!(won.status, StatusCode::OK);
    let r2 = won.etag().unwrap();
    assert!(r2 > r1, "ETags strictly increase");
    let stale = swap(format!("\"{r1}\""), "3").await;
    assert_eq!(stale.status, StatusCode::PRECONDITION_FAILED, "a stale ETag loses");
    assert_eq!((stale.body.as_slice(), stale.etag()), (&b"2"[..], Some(r2)));
    assert_eq!(swap(r2.to_string(), "4").await.status, StatusCode::OK, "an unquoted ETag is accepted");
    assert_eq!(swap("*".into(), "5").await.status, StatusCode::OK, "If-Match: * means the key exists");
    assert_eq!(kv.get("c").await.body, b"5");
    for tag in ["\"1\"", "*"] {
        let absent = kv.put("absent", &[("if-match", tag)], "1").await;
        assert_eq!(absent.status, StatusCode::PRECONDITION_FAILED);
        assert!(absent.body.is_empty() && absent.etag().is_none(), "an absent key: an empty 412");
    }
    assert_eq!(kv.get("absent").await.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn put_creates_then_replaces_and_get_returns_the_exact_bytes() {
    let kv = Kv::open(None);
    let verbatim = r#"{ "b" : [1, 2] ,"a":"x" }"#;
    let created = kv.put("k", &[], verbatim).await;
    assert_eq!(created.status, StatusCode::CREATED);
    assert!(created.headers.get("kv-expires-ms").is_none(), "no TTL, no expiry");
    assert_eq!(kv.get("k").await.body, verbatim.as_bytes(), "stored bytes come back, not re-serialised");
    let replaced = kv.put("k", &[], "2").await;
    assert_eq!(replaced.status, StatusCode::OK);
    assert!(replaced.etag() > created.etag());
    // POST is the legacy unconditional write; a precondition there would be ignored, so it is refused.
    let post = kv.send(Method::POST, "/state/k", &[], "3").await;
    assert_eq!(post.status, StatusCode::OK);
    let refused = kv.send(Method::POST, "/state/k", &[("if-none-match", "*")], "4").await;
    assert_eq!((refused.status, refused.error_code()), (StatusCode::BAD_REQUEST, "bad_precondition".into()));
    assert_eq!(kv.get("k").await.body, b"3");
}

#[tokio::test]
async fn delete_checks_its_etag_and_answers_404_for_an_absent_key() {
    let kv = Kv::open(None);
    let absent = kv.send(Method::DELETE, "/state/d", &[], "").await;
    assert_eq!((absent.status, absent.error_code()), (StatusCode::NOT_FOUND, "not_found".into()));
    let rev = kv.put("d", &[], r#""v""#).await.etag().unwrap();
    let stale = kv.send(Method::DELETE, "/state/d", &[("if-match", &format!("\"{}\"", rev + 1))], "").await;
    assert_eq!(
        (stale.status, stale.etag(), stale.body.as_slice()),
        (StatusCode::PRECONDITION_FAILED, Some(rev), &br#""v""#[..])
    );
    let deleted = kv.send(Method::DELETE, "/state/d", &[("if-match", &format!("\"{rev}\""))], "").await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    assert_eq!(kv.get("d").await.status, StatusCode::NOT_FOUND);
}
