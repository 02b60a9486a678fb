//! With a token, every route but `/healthz` needs `Authorization: Bearer <token>`, refused
//! before the handler runs.

use axum::http::{Method, StatusCode};

use crate::support::Kv;

const TOKEN: &str = "correct horse battery staple";

#[tokio::test]
async fn requests_without_the_token_are_refused_with_401_and_write_nothing() {
    let kv = Kv::open(Some(TOKEN));
    let wrong = [None, Some("Bearer wrong"), Some("Bearer correct horse"), Some(TOKEN), Some("Basic x")];
    for authorization in wrong {
        let headers: Vec<(&str, &str)> = authorization.map(|a| ("authorization", a)).into_iter().collect();
        for method in [Method::GET, Method::PUT, Method::POST, Method::DELETE] {
            let reply = kv.send(method.clone(), "/state/k", &headers, "1").await;
            assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{method} with {authorization:?}");
            assert_eq!(reply.error_code(), "unauthorized");
            assert!(!String::from_utf8_lossy(&reply.body).contains(TOKEN), "the token is never echoed");
        }
    }
    let bearer = format!("Bearer {TOKEN}");
    let auth = [("authorization", bearer.as_str())];
    assert_eq!(kv.send(Method::GET, "/state/k", &auth, "").await.status, StatusCode::NOT_FOUND, "nothing was written");
    assert_eq!(kv.send(Method::PUT, "/state/k", &auth, "1").await.status, StatusCode::CREATED);
    assert_eq!(kv.send(Method::GET, "/state/k", &auth, "").await.body, b"1");
    assert_eq!(kv.send(Method::GET, "/healthz", &[], "").await.status, StatusCode::OK, "the probe needs no token");
}
