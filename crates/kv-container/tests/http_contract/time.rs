//! TTLs and deadlines judged by the store's clock, which the tests move: nothing sleeps.

use axum::http::StatusCode;

use crate::support::{Kv, T0};

#[tokio::test]
async fn a_value_lives_until_its_ttl_runs_out_on_the_stores_clock() {
    let kv = Kv::open(None);
    let written = kv.put("lease", &[("kv-ttl-ms", "1000")], r#"{"attempt":1}"#).await;
    assert_eq!(written.status, StatusCode::CREATED);
    assert_eq!(written.header_u64("kv-modified-ms"), Some(T0));
    assert_eq!(written.header_u64("kv-expires-ms"), Some(T0 + 1000));
    kv.set_clock(999);
    let read = kv.get("lease").await;
    assert_eq!((read.status, read.header_u64("kv-expires-ms")), (StatusCode::OK, Some(T0 + 1000)));
    assert_eq!(read.header_u64("kv-time-ms"), Some(T0 + 999), "a read tells the store's time it saw");
    kv.set_clock(1000);
    let gone = kv.get("lease").await;
    assert_eq!((gone.status, gone.error_code()), (StatusCode::NOT_FOUND, "not_found".into()));
    // An expired value is absent for create-if-absent too: the next claim wins.
    let claimed = kv.put("lease", &[("if-none-match", "*")], r#"{"attempt":2}"#).await;
    assert_eq!(claimed.status, StatusCode::CREATED);
    assert!(claimed.etag() > written.etag());
}

#[tokio::test]
async fn ttl_seconds_count_too_and_a_rewrite_without_a_ttl_never_expires() {
    let kv = Kv::open(None);
    let written = kv.put("s", &[("kv-ttl-seconds", "2")], "1").await;
    assert_eq!(written.header_u64("kv-expires-ms"), Some(T0 + 2000));
    let rewritten = kv.put("s", &[], "2").await;
    assert!(rewritten.headers.get("kv-expires-ms").is_none(), "a write without a TTL keeps the value");
    kv.set_clock(10_000);
    assert_eq!(kv.get("s").await.body, b"2");
}

#[tokio::test]
async fn a_write_that_reaches_the_store_after_its_deadline_is_refused_and_writes_nothing() {
    let kv = Kv::open(None);
    let deadline = (T0 + 500).to_string();
    kv.set_clock(500);
    let in_time = kv.put("d1", &[("kv-deadline-ms", &deadline)], "1").await;
    assert_eq!(in_time.status, StatusCode::CREATED, "a write at its deadline is in time");
    kv.set_clock(501);
    let late = kv.put("d2", &[("kv-deadline-ms", &deadline)], "1").await;
    assert_eq!((late.status, late.error_code()), (StatusCode::CONFLICT, "deadline_passed".into()));
    assert_eq!(kv.get("d2").await.status, StatusCode::NOT_FOUND);
}
