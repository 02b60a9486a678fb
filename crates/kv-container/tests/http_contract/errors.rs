//! Every refusal is a JSON body `{"error", "message"}` with a fitting status, and nothing is written.

use axum::http::{Method, StatusCode};

use crate::support::Kv;

#[tokio::test]
async fn malformed_preconditions_are_400_and_write_nothing() {
    let kv = Kv::open(None);
    let cases: [&[(&str, &str)]; 4] = [
        &[("if-match", "\"abc\"")],
        &[("if-match", "\"1")],
        &[("if-none-match", "\"7\"")],
        &[("if-match", "\"1\""), ("if-none-match", "*")],
    ];
    for headers in cases {
        let reply = kv.put("m", headers, "1").await;
        assert_eq!(
            (reply.status, reply.error_code()),
            (StatusCode::BAD_REQUEST, "bad_precondition".into()),
            "{headers:?}"
        );
    }
    assert_eq!(kv.get("m").await.status, StatusCode::NOT_FOUND, "nothing written");
}

#[tokio::test]
async fn bad_keys_bodies_and_routes_are_named() {
    let kv = Kv::open(None);
    let cases = [
        (Method::PUT, "/state/", "1", StatusCode::BAD_REQUEST, "bad_key"),
        (Method::PUT, "/state/a%2Fb", "1", StatusCode::BAD_REQUEST, "bad_key"),
        (Method::PUT, "/state/k?x=1", "1", StatusCode::BAD_REQUEST, "bad_key"),
        (Method::GET, "/nowhere", "", StatusCode::NOT_FOUND, "not_found"),
        (Method::PATCH, "/state/k", "1", StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
        (Method::GET, "/backup?format=tar", "", StatusCode::BAD_REQUEST, "bad_query"),
    ];
    for (method, path, body, status, code) in cases {
        let reply = kv.send(method.clone(), path, &[], body).await;
        assert_eq!((reply.status, reply.error_code()), (status, code.to_owned()), "{method} {path}");
    }
    let refusals = [
        (vec![], "{not json".to_owned(), StatusCode::BAD_REQUEST, "invalid_json"),
        (vec![], "1".repeat((1 << 20) + 1), StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
        (vec![("kv-ttl-ms", "soon")], "1".to_owned(), StatusCode::BAD_REQUEST, "bad_ttl"),
        (vec![("kv-ttl-ms", "1"), ("kv-ttl-seconds", "1")], "1".to_owned(), StatusCode::BAD_REQUEST, "bad_ttl"),
        (vec![("kv-deadline-ms", "noon")], "1".to_owned(), StatusCode::BAD_REQUEST, "bad_deadline"),
    ];
    for (headers, body, status, code) in refusals {
        let reply = kv.put("k", &headers, &body).await;
        assert_eq!((reply.status, reply.error_code()), (status, code.to_owned()), "{headers:?}");
    }
    assert_eq!(kv.get("k").await.status, StatusCode::NOT_FOUND, "nothing written");
}
