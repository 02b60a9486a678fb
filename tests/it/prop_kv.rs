//! Property tests of the KV container's request handling over real sockets (proptest
//! standing in for a fuzzer): arbitrary methods, paths, headers and bodies never crash the
//! server, never get a 5xx (no storage failure is injected here), and a key outside the
//! URL-unreserved charset is always 400 — `?` included: a query string on `/state/` is refused,
//! never ignored; valid JSON under a valid key reads back unchanged.

use crate::support::kv::{raw_http, KvServer};
use crate::support::property;
use proptest::prelude::*;

/// Failing cases proptest found, replayed before every run.
const REGRESSIONS: &str = "tests/it/proptest-regressions/prop_kv.txt";

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"._~-".contains(&b)
}

/// A path segment after `/state/`: mostly valid keys, often with characters that are not.
fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[A-Za-z0-9._~-]{1,30}",
        4 => "[A-Za-z0-9._~%:@!$&'()*+,;=/\"<>\\[\\]^`{|}\\\\-]{0,30}",
        1 => "[ \\x00-\\x1f\\x7f]{1,3}",
        1 => "\\PC{1,6}",
        1 => prop::sample::select(vec!["", ".", "..", "%2E%2E", "%2F", "a%00b", "a/../b", "evt_x/..", "~", "a?", "a?b=c", "?"])
            .prop_map(str::to_owned),
        1 => (1020usize..1030).prop_map(|n| "k".repeat(n)),
    ]
}

fn path() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => segment().prop_map(|s| format!("/state/{s}")),
        1 => prop::sample::select(vec!["/healthz", "/", "/state", "/state/", "/states/a", "/healthz/x", "//state/a"])
            .prop_map(str::to_owned),
        1 => "/[a-z]{0,6}(/[a-z]{0,6}){0,2}",
    ]
}

fn headers() -> impl Strategy<Value = Vec<(String, String)>> {
    let name = prop::sample::select(vec![
        "if-match",
        "if-none-match",
        "kv-ttl-ms",
        "kv-ttl-seconds",
        "authorization",
        "content-type",
        "x-anything",
        "If-Match",
    ]);
    let value = prop_oneof![
        "[ -~]{0,24}",
        prop::sample::select(vec!["*", "\"1\"", "1", "0", "-1", "\"x\"", "99999999999999999999999", "Bearer x"])
            .prop_map(str::to_owned),
    ];
    prop::collection::vec((name.prop_map(str::to_owned), value), 0..4)
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(vec![]),
        crate::support::arb::json().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        prop::collection::vec(any::<u8>(), 0..64),
    ]
}

fn method() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["GET", "PUT", "POST", "DELETE", "HEAD", "PATCH", "OPTIONS", "TRACE", "FOO", "get"])
        .prop_map(str::to_owned)
}

fn request(method: &str, path: &str, headers: &[(String, String)], body: &[u8]) -> Vec<u8> {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: kv\r\nConnection: close\r\n").into_bytes();
    for (k, v) in headers {
        req.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
    }
    req.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
    req.extend_from_slice(body);
    req
}

#[test]
fn arbitrary_requests_never_5xx_and_bad_keys_are_400() {
    let dir = tempfile::tempdir().unwrap();
    let server = KvServer::start(dir.path(), &[]);
    let request_parts = (method(), path(), headers(), body());
    property::check(
        REGRESSIONS,
        "arbitrary_requests_never_5xx_and_bad_keys_are_400",
        700,
        &request_parts,
        |(method, path, headers, body)| {
            let resp = raw_http(server.addr(), &request(&method, &path, &headers, &body));
            prop_assert!(resp.status < 500, "{method} {path:?} {headers:?}: {} {:?}", resp.status, resp.body);
            if let Some(key) = path.strip_prefix("/state/") {
                let bad =
                    key.is_empty() || key == "." || key == ".." || key.len() > 1024 || !key.bytes().all(is_unreserved);
                if bad && ["GET", "HEAD", "PUT", "POST", "DELETE"].contains(&method.as_str()) {
                    prop_assert_eq!(resp.status, 400, "{} {:?} must be refused as a bad key", method, path);
                } else if bad {
                    prop_assert!([400, 405].contains(&resp.status), "{method} {path:?}: {}", resp.status);
                }
            }
            Ok(())
        },
    );
    // Still serving, and healthy.
    let resp = raw_http(server.addr(), b"GET /healthz HTTP/1.1\r\nHost: kv\r\nConnection: close\r\n\r\n");
    assert_eq!(resp.status, 200);
}

#[test]
fn json_under_a_valid_key_reads_back_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let server = KvServer::start(dir.path(), &[]);
    let value = crate::support::arb::json().prop_map(|v| serde_json::to_vec(&v).unwrap());
    let key = "[A-Za-z0-9._~-]{1,40}".prop_filter("not a dot segment", |k| k != "." && k != "..");
    property::check(REGRESSIONS, "json_under_a_valid_key_reads_back_unchanged", 200, &(key, value), |(key, value)| {
        let put = raw_http(server.addr(), &request("PUT", &format!("/state/{key}"), &[], &value));
        prop_assert!([200, 201].contains(&put.status), "PUT {key}: {}", put.status);
        let get = raw_http(server.addr(), &request("GET", &format!("/state/{key}"), &[], b""));
        prop_assert_eq!(get.status, 200);
        prop_assert_eq!(get.body, value);
        Ok(())
    });
}
