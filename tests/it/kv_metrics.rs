//! `GET /metrics` of the real KV container, parsed by a grammar-based parser of the
//! Prometheus text format (`openmetrics-parser`): what a scraper would make of it.

use std::time::{Duration, Instant};

use openmetrics_parser::{MetricsExposition, PrometheusType, PrometheusValue};
use reqwest::StatusCode;

use crate::support::kv::KvServer;

const TOKEN: &str = "metrics-test-token";
type Exposition = MetricsExposition<PrometheusType, PrometheusValue>;

async fn scrape(http: &reqwest::Client, url: &str, token: Option<&str>) -> (StatusCode, String, String) {
    let mut req = http.get(format!("{url}/metrics"));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    let ctype = resp.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    (resp.status(), ctype, resp.text().await.unwrap())
}

fn parse(text: &str) -> Exposition {
    openmetrics_parser::prometheus::parse_prometheus(text).unwrap_or_else(|e| panic!("unparseable: {e:?}\n{text}"))
}

/// Sum over the family's samples whose labels include `labels`: counter and gauge values,
/// or a histogram's observation count (`_count`) and sum.
fn value(exp: &Exposition, family: &str, labels: &[(&str, &str)]) -> (f64, f64) {
    let fam = exp.families.get(family).unwrap_or_else(|| panic!("no family {family}: {:?}", exp.families.keys()));
    let mut total = (0.0, 0.0);
    for s in fam.iter_samples() {
        let set = s.get_labelset().unwrap();
        if !labels.iter().all(|(k, v)| set.get_label_value(k) == Some(*v)) {
            continue;
        }
        let (n, sum) = match &s.value {
            PrometheusValue::Counter(c) => (c.value.as_f64(), 0.0),
            PrometheusValue::Gauge(n) | PrometheusValue::Unknown(n) => (n.as_f64(), 0.0),
            PrometheusValue::Histogram(h) => (h.count.unwrap_or(0) as f64, h.sum.as_ref().map_or(0.0, |m| m.as_f64())),
            PrometheusValue::Summary(_) => panic!("no summaries are exported"),
        };
        total = (total.0 + n, total.1 + sum);
    }
    total
}

#[tokio::test]
async fn metrics_parse_and_count_what_happened() {
    let data = tempfile::tempdir().unwrap();
    let kv = KvServer::start(data.path(), &["--token", TOKEN, "--purge-interval-ms", "20"]);
    let http = reqwest::Client::new();
    let url = kv.url();
    // Authenticated like every route but /healthz.
    assert_eq!(scrape(&http, &url, None).await.0, StatusCode::UNAUTHORIZED);
    for i in 0..20 {
        let resp = http
            .put(format!("{url}/state/evt_m{i}"))
            .bearer_auth(TOKEN)
            .header("If-None-Match", "*")
            .body(format!("{{\"n\":{i}}}"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::CREATED);
    }
    let dup = http.put(format!("{url}/state/evt_m0")).bearer_auth(TOKEN).header("If-None-Match", "*").body("{}");
    assert_eq!(dup.send().await.unwrap().status(), StatusCode::PRECONDITION_FAILED);
    // Five keys that expire at once, for the purge counter.
    for i in 0..5 {
        let put = http.put(format!("{url}/state/short{i}")).bearer_auth(TOKEN).header("KV-TTL-Ms", "1").body("1");
        assert!(put.send().await.unwrap().status().is_success());
    }
    let missing = http.get(format!("{url}/state/nope")).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);

    // The purge runs in the background: wait (bounded) until it has taken the five keys.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (ctype, text, m) = loop {
        let (status, ctype, text) = scrape(&http, &url, Some(TOKEN)).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let m = parse(&text);
        let purged = value(&m, "kv_keys_purged_total", &[]).0 >= 5.0;
        // The counter moves after the purge commit is answered; the key count is read per scrape.
        if (purged && value(&m, "kv_keys", &[]).0 <= 20.0) || Instant::now() > deadline {
            break (ctype, text, m);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(ctype.starts_with("text/plain; version=0.0.4"), "{ctype}");
    let put = [("route", "/state/{key}"), ("method", "PUT")];
    assert_eq!(value(&m, "kv_requests_total", &[put[0], put[1], ("status", "201")]).0, 25.0, "{text}");
    assert_eq!(value(&m, "kv_requests_total", &[put[0], put[1], ("status", "412")]).0, 1.0);
    assert_eq!(value(&m, "kv_requests_total", &[("route", "/state/{key}"), ("status", "404")]).0, 1.0);
    assert_eq!(value(&m, "kv_requests_total", &[("route", "/metrics"), ("status", "401")]).0, 1.0);
    assert!(value(&m, "kv_request_duration_seconds", &[("route", "/state/{key}")]).0 >= 27.0);
    // 25 acknowledged writes went through committed batches (the duplicate committed nothing).
    let (commits, writes) = value(&m, "kv_write_batch_size", &[]);
    assert!(commits >= 1.0 && writes >= 25.0, "{commits} commits, {writes} writes\n{text}");
    assert!(value(&m, "kv_commit_duration_seconds", &[]).0 >= commits);
    assert_eq!(value(&m, "kv_keys_purged_total", &[]).0, 5.0, "{text}");
    assert_eq!(value(&m, "kv_keys", &[]).0, 20.0, "{text}");
    assert!(value(&m, "kv_data_file_size_bytes", &[]).0 > 0.0);
    assert!(value(&m, "kv_open_connections", &[]).0 >= 1.0, "this scrape's own connection");
    assert_eq!(value(&m, "kv_writer_errors_total", &[]).0, 0.0);
    assert_eq!(value(&m, "kv_evicted_connections_total", &[]).0, 0.0);
    assert!(!text.contains(TOKEN));
}

#[tokio::test]
async fn metrics_public_opens_only_metrics() {
    let data = tempfile::tempdir().unwrap();
    let kv = KvServer::start(data.path(), &["--token", TOKEN, "--metrics-public"]);
    let http = reqwest::Client::new();
    let (status, _, text) = scrape(&http, &kv.url(), None).await;
    assert_eq!(status, StatusCode::OK);
    parse(&text);
    let get = http.get(format!("{}/state/evt_x", kv.url())).send().await.unwrap();
    assert_eq!(get.status(), StatusCode::UNAUTHORIZED, "the data stays behind the token");
    for path in ["/state?prefix=evt_", "/backup"] {
        let resp = http.get(format!("{}{path}", kv.url())).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{path} needs the token");
    }
    let open = KvServer::start(tempfile::tempdir().unwrap().path(), &[]);
    assert_eq!(scrape(&http, &open.url(), None).await.0, StatusCode::OK, "no token configured: open");
}
