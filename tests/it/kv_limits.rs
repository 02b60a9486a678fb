//! Input limits over real sockets: bad keys, bad JSON, value size, unknown routes and methods.

use crate::support::kv::{raw_http, server_time, KvServer};
use reqwest::{Client, StatusCode};

const MIB: usize = 1_048_576;

fn code(body: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(body).expect("JSON error body");
    v["error"].as_str().expect("error code").to_owned()
}

#[tokio::test]
async fn bad_keys_are_400_and_nothing_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let server = KvServer::start(dir.path(), &[]);
    let http = Client::new();
    let long = "k".repeat(1025);
    let bad =
        ["%2F", "a%2Fb", "%00", "a%00b", "%20", "a%20b", "a%2E", "a:b", "a@b", "a+b", "a/b", "a/", "", long.as_str()];
    for key in bad {
        let url = format!("{}/state/{key}", server.url());
        for req in [http.put(&url).body("1"), http.get(&url), http.delete(&url)] {
            let resp = req.send().await.unwrap();
            assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "key {key:?}");
            server_time(resp.headers());
            assert_eq!(code(&resp.bytes().await.unwrap()), "bad_key", "key {key:?}");
        }
    }
    // What reqwest would normalise away is sent raw: dot segments must never be keys.
    let dots = ["/state/..", "/state/.", "/state/%2E%2E", "/state/%2e", "/state/../healthz", "/state/a/../b"];
    for target in dots {
        let req = format!("GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let resp = raw_http(server.addr(), req.as_bytes());
        assert_eq!(resp.status, 400, "{target}");
        assert!(resp.header("kv-time-ms").is_some());
        assert_eq!(code(&resp.body), "bad_key", "{target}");
    }
    // A raw space or NUL is not HTTP at all; hyper refuses it before our code runs.
    for target in ["/state/a b", "/state/a\0b"] {
        let req = format!("PUT {target} HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nConnection: close\r\n\r\n1");
        assert_eq!(raw_http(server.addr(), req.as_bytes()).status, 400, "{target:?}");
    }
}

#[tokio::test]
async fn key_of_1024_unreserved_bytes_is_fine() {
    let dir = tempfile::tempdir().unwrap();
    let server = KvServer::start(dir.path(), &[]);
    let http = Client::new();
    let key = format!("Az09._~-{}", "x".repeat(1016));
    assert_eq!(key.len(), 1024);
    let url = format!("{}/state/{key}", server.url());
    assert_eq!(http.put(&url).body("1").send().await.unwrap().status(), StatusCode::CREATED);
    assert_eq!(http.get(&url).send().await.unwrap().status(), StatusCode::OK);
}

#[tokio::test]
async fn non_json_bodies_are_400_invalid_json() {
    let dir = tempfile::tempdir().unwrap();
    let server = KvServer::start(dir.path(), &[]);
    let http = Client::new();
    let url = format!("{}/state/j", server.url());
    let bodies: [&[u8]; 6] = [b"", b"{", b"abc", br#"{"a":1} x"#, b"\xff\xfe", b"'single'"];
    for body in bodies {
        for req in [http.put(&url), http.post(&url), http.put(&url).header("if-none-match", "*")] {
            let resp = req.body(body.to_vec()).send().await.unwrap();
            assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{body:?}");
            assert_eq!(code(&resp.bytes().await.unwrap()), "invalid_json");
        }
    }
    assert_eq!(http.get(&url).send().await.unwrap().status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn values_up_to_1_mib_are_stored_and_larger_are_413() {
    let dir = tempfile::tempdir().unwrap();
    let server = KvServer::start(dir.path(), &[]);
    let http = Client::new();
    let url = format!("{}/state/big", server.url());
    let exact = format!("\"{}\"", "a".repeat(MIB - 2));
    assert_eq!(exact.len(), MIB);
    let resp = http.put(&url).body(exact.clone()).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    assert_eq!(http.get(&url).send().await.unwrap().bytes().await.unwrap().len(), MIB);

    // Declared too large: refused from the headers alone, before any body byte is read.
    let req =
        format!("PUT /state/big2 HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", MIB + 1);
    let resp = raw_http(server.addr(), req.as_bytes());
    assert_eq!((resp.status, code(&resp.body).as_str()), (413, "too_large"));
    assert!(resp.header("kv-time-ms").is_some());

    // Undeclared (chunked): cut off once it passes 1 MiB; the last chunk is never needed.
    let mut req = format!(
        "PUT /state/big3 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n\"",
        MIB + 1
    )
    .into_bytes();
    req.extend(vec![b'a'; MIB]);
    let resp = raw_http(server.addr(), &req);
    assert_eq!((resp.status, code(&resp.body).as_str()), (413, "too_large"));

    for key in ["big2", "big3"] {
        let resp = http.get(format!("{}/state/{key}", server.url())).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    }
}

#[tokio::test]
async fn unknown_routes_are_404_and_wrong_methods_405_json() {
    let dir = tempfile::tempdir().unwrap();
    let server = KvServer::start(dir.path(), &[]);
    let http = Client::new();
    for path in ["/", "/nope", "/states/k", "/healthz/x"] {
        let resp = http.get(format!("{}{path}", server.url())).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::NOT_FOUND, "{path}");
        server_time(resp.headers());
        assert_eq!(code(&resp.bytes().await.unwrap()), "not_found");
    }
    let patch = http.patch(format!("{}/state/k", server.url())).body("1");
    let post_health = http.post(format!("{}/healthz", server.url()));
    for req in [patch, post_health] {
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
        server_time(resp.headers());
        assert_eq!(code(&resp.bytes().await.unwrap()), "method_not_allowed");
    }
}
