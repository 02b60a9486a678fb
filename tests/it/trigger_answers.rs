//! What the door tells whoever sent the request. A real delivery's answer names the outcome,
//! the delivery id and a short reason, never a host, URL, setting or property value (the
//! detail goes to the plugin's log); a delivery while the subscription is being built claims
//! nothing and names every problem a real delivery would meet, without the store's address.

use serde_json::{json, Value};

use crate::support::fake::closed_port;
use crate::support::kv::KvServer;
use crate::support::plugin::Plugin;
use crate::trigger_door::{chunk, dispatch_data, http, raw_request, ENV};

/// What is sent (the subscription's properties and extra headers) and what the sender gets.
type Case<'a> = (&'a str, Value, Vec<(&'a str, &'a str)>, u16, &'a str);

const SECRET: &str = "s3cr3t-webhook-value";
const TOKEN: &str = "kv-token-value-42";

/// Every value of `props`, and every host and URL in them, that must not reach the sender.
fn secrets(props: &Value) -> Vec<String> {
    let mut out = vec![];
    for (name, v) in props.as_object().unwrap() {
        let Some(text) = v.as_str() else { continue };
        // Values that are also the protocol's own words ("none", a header the sender sent).
        if ["signature_scheme", "id_header"].contains(&name.as_str()) || text.len() < 3 {
            continue;
        }
        out.push(text.to_owned());
        if let Some((_, rest)) = text.split_once("://") {
            let hosts = rest.split(['/', '?']).next().unwrap();
            let hosts = hosts.rsplit_once('@').map_or(hosts, |(_, h)| h);
            for host in hosts.split(',') {
                out.push(host.to_owned());
                out.push(host.rsplit_once(':').map_or(host, |(h, _)| h).to_owned());
            }
        }
    }
    out.extend(["127.0.0.1".to_owned(), "localhost".to_owned(), "://".to_owned()]);
    out
}

/// The answer's head and body as the sender gets them, checked for every secret of `props`
/// and for the names of the plugin's settings.
fn assert_nothing_internal(what: &str, c: &Value, props: &Value) -> (u16, Value) {
    let text = String::from_utf8(hex::decode(c["response"].as_str().unwrap()).unwrap()).unwrap();
    for leak in
        secrets(props).iter().chain(&["STATEFUL_TOOL".to_owned(), "kv_url".to_owned(), "webhook_secret".to_owned()])
    {
        assert!(!text.contains(leak.as_str()), "{what}: the sender's answer carries {leak:?}:\n{text}");
    }
    let (status, _, body) = http(c);
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_answer_to_a_sender_carries_a_host_a_url_or_a_property_value() {
    let dir = tempfile::tempdir().unwrap();
    let kv = KvServer::start(dir.path(), &["--token", TOKEN]);
    let p = Plugin::spawn(&ENV).await;
    let down = format!("http://127.0.0.1:{}", closed_port());
    let signed = |props: Value| {
        let mut base = json!({"signature_scheme": "github", "webhook_secret": SECRET, "namespace": "tenant-ns-7"});
        base.as_object_mut().unwrap().extend(props.as_object().unwrap().clone());
        base
    };
    let id = format!("leak-{:x}", rand::random::<u64>());
    let headers = [("X-Github-Delivery", id.as_str())];
    let cases: Vec<Case> = vec![
        (
            "bogus store scheme",
            json!({"kv_url": "redis+bogus://user:pw-x@10.0.0.5:6379/0", "signature_scheme": "none", "namespace": "tenant-ns-7"}),
            vec![],
            500,
            "misconfigured",
        ),
        (
            "unparsable number",
            signed(json!({"kv_url": kv.url(), "lease_seconds": "soon-ish"})),
            vec![],
            500,
            "misconfigured",
        ),
        (
            "scheme without its secret",
            json!({"kv_url": kv.url(), "signature_scheme": "stripe"}),
            vec![],
            500,
            "misconfigured",
        ),
        ("store down", json!({"kv_url": down, "signature_scheme": "none"}), vec![], 503, "store_unavailable"),
        (
            "store refuses the token",
            json!({"kv_url": kv.url(), "kv_token": "wrong-token-value", "signature_scheme": "none"}),
            vec![],
            503,
            "store_unavailable",
        ),
        (
            "bad signature",
            signed(json!({"kv_url": kv.url(), "kv_token": TOKEN})),
            vec![("X-Hub-Signature-256", "sha256=00")],
            401,
            "unsigned",
        ),
        (
            "no id where configured",
            json!({"kv_url": kv.url(), "kv_token": TOKEN, "signature_scheme": "none", "id_header": "X-Custom-Delivery-Header"}),
            vec![],
            400,
            "no_id",
        ),
        (
            "no id in the body",
            json!({"kv_url": kv.url(), "kv_token": TOKEN, "signature_scheme": "none", "id_json_pointer": "/meta/private_id"}),
            vec![],
            400,
            "no_id",
        ),
    ];
    for (what, props, extra, status, outcome) in cases {
        let all: Vec<(&str, &str)> = headers.iter().copied().chain(extra).collect();
        let c = chunk(&p.request(dispatch_data(props.clone(), &raw_request(&all, "{}"))).await).clone();
        let (got, body) = assert_nothing_internal(what, &c, &props);
        assert_eq!((got, body["outcome"].as_str()), (status, Some(outcome)), "{what}: {body}");
        assert_eq!(c["events"], json!([]), "{what}");
    }
    // An accepted delivery and its duplicate: the same rule.
    let ok = json!({"kv_url": kv.url(), "kv_token": TOKEN, "signature_scheme": "none", "namespace": "tenant-ns-7"});
    for expected in ["accepted", "in_progress"] {
        let c = chunk(&p.request(dispatch_data(ok.clone(), &raw_request(&headers, "{}"))).await).clone();
        let (_, body) = assert_nothing_internal(expected, &c, &ok);
        assert_eq!(body["outcome"], expected);
    }
}

/// A builder-phase delivery (the bare endpoint id, as while the subscription is created).
async fn builder(p: &Plugin, props: Value, headers: &[(&str, &str)], body: &str) -> (Value, Value) {
    let mut data = dispatch_data(props.clone(), &raw_request(headers, body));
    data["subscription"]["endpoint"] = json!("0c1e2f3a-0000-4000-8000-000000000001");
    let c = chunk(&p.request(data).await).clone();
    let (status, body) = assert_nothing_hosted(&c, &props);
    assert_eq!((status, &c["events"], body["outcome"].as_str()), (200, &json!([]), Some("builder")), "{body}");
    (c, body)
}

/// Builder answers name problems (property names included: the admin reads them in the
/// builder's log), but never a host or URL.
fn assert_nothing_hosted(c: &Value, props: &Value) -> (u16, Value) {
    let text = String::from_utf8(hex::decode(c["response"].as_str().unwrap()).unwrap()).unwrap();
    let hosts: Vec<String> = secrets(props).into_iter().filter(|s| !s.contains(' ')).collect();
    for leak in hosts.iter().filter(|h| h.contains('.') || h.contains("://") || h.contains(':')) {
        assert!(!text.contains(leak.as_str()), "the builder's answer carries {leak:?}:\n{text}");
    }
    let (status, _, body) = http(c);
    (status, body)
}

fn problems(body: &Value) -> Vec<String> {
    body["problems"].as_array().unwrap().iter().map(|p| p.as_str().unwrap().to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_test_ping_while_building_names_every_problem_and_claims_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let kv = KvServer::start(dir.path(), &["--token", TOKEN]);
    let p = Plugin::spawn(&ENV).await;
    let ping = [("X-Github-Delivery", "ping-1")];

    // Nothing filled in that has no default: both named.
    let (_, body) = builder(&p, json!({}), &ping, "{}").await;
    let found = problems(&body);
    assert!(found.iter().any(|p| p.contains("signature_scheme is not set")), "{found:?}");
    assert!(found.iter().any(|p| p.contains("kv_url is not set")), "{found:?}");

    // GitHub without its secret, and a store that is not there: both named, no address.
    let down = format!("http://127.0.0.1:{}", closed_port());
    let (_, body) = builder(&p, json!({"signature_scheme": "github", "kv_url": down}), &ping, "{}").await;
    let found = problems(&body);
    assert!(found.iter().any(|p| p.contains("needs the webhook_secret")), "{found:?}");
    assert!(found.iter().any(|p| p.starts_with("store: ")), "{found:?}");

    // The store refuses the token (in its own words), and the id is not where configured.
    let props = json!({"signature_scheme": "none", "kv_url": kv.url(), "kv_token": "wrong", "id_json_pointer": "/id"});
    let (_, body) = builder(&p, props, &ping, r#"{"zen":"hi"}"#).await;
    let found = problems(&body);
    assert!(found.iter().any(|p| p.starts_with("delivery id: no delivery id")), "{found:?}");
    assert!(found.iter().any(|p| p.starts_with("store: ") && p.contains("401")), "{found:?}");

    // All good: no problem, the id it would claim, and nothing claimed.
    let props = json!({"signature_scheme": "none", "kv_url": kv.url(), "kv_token": TOKEN});
    let (_, body) = builder(&p, props.clone(), &ping, "{}").await;
    assert_eq!((problems(&body).len(), body["delivery_id"].as_str()), (0, Some("ping-1")), "{body}");
    let st =
        p.invoke("event_status", &json!({"kv_url": kv.url(), "kv_token": TOKEN}), json!({"event_id": "ping-1"})).await;
    assert_eq!(st.json()["found"], false, "a test ping claims nothing: {st:?}");
}
