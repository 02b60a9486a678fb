//! Every signature scheme against vectors: the senders' published ones where they publish
//! one (GitHub, Standard Webhooks), else ones computed with Python's `hmac` module.

use super::*;

fn request(headers: &[(&str, &str)], body: &[u8]) -> RawRequest {
    RawRequest {
        method: "POST".into(),
        target: "/triggers/plugin/x".into(),
        headers: headers.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect(),
        body: body.to_vec(),
    }
}

fn scheme(name: &str, secret: &str) -> Scheme {
    Scheme::new(name, Some(secret), None).unwrap()
}

#[test]
fn github_docs_vector() {
    // docs.github.com, "Validating webhook deliveries", "Testing the webhook payload validation".
    let s = scheme("github", "It's a Secret to Everybody");
    let sig = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
    // WSGI re-capitalises the name: X-Hub-Signature-256 arrives as is, any case matches.
    assert_eq!(s.verify(&request(&[("X-Hub-Signature-256", sig)], b"Hello, World!"), 0, 0), Ok(()));
    assert_eq!(s.verify(&request(&[("x-hub-signature-256", sig)], b"Hello, World!"), 0, 0), Ok(()));
    let err = s.verify(&request(&[("X-Hub-Signature-256", sig)], b"Hello, World?"), 0, 0).unwrap_err();
    assert!(err.contains("does not match"), "{err}");
    assert!(s.verify(&request(&[], b"Hello, World!"), 0, 0).unwrap_err().contains("missing"));
    let sha1_only = request(&[("X-Hub-Signature-256", "sha1=abcd")], b"Hello, World!");
    assert!(s.verify(&sha1_only, 0, 0).unwrap_err().contains("no signature in the expected format"));
}

#[test]
fn standard_webhooks_spec_vector() {
    // The Standard Webhooks / Svix reference test vector.
    let s = scheme("standard_webhooks", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
    let headers = [
        ("Webhook-Id", "msg_p5jXN8AQM9LWM0D4loKWxJek"),
        ("Webhook-Timestamp", "1614265330"),
        (
            "Webhook-Signature",
            "v1,bm9ldHUjKzFob2xlbnRpZXJ2ZXNoYWxsb3dkZWV2 v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
        ),
    ];
    let body = br#"{"test": 2432232314}"#;
    assert_eq!(s.verify(&request(&headers, body), 1614265330, 300), Ok(()));
    assert_eq!(s.verify(&request(&headers, body), 1614265330 + 300, 300), Ok(()));
    let stale = s.verify(&request(&headers, body), 1614265330 + 301, 300).unwrap_err();
    assert!(stale.contains("tolerance"), "{stale}");
    assert!(s.verify(&request(&headers, b"{\"test\": 1}"), 1614265330, 300).is_err());
    assert!(Scheme::new("standard_webhooks", Some("whsec_***"), None).unwrap_err().contains("base64"));
}

#[test]
fn stripe_vector_and_tolerance() {
    // HMAC-SHA256("whsec_test_secret", "1700000000." + body), computed with Python's hmac.
    let s = scheme("stripe", "whsec_test_secret");
    let body = br#"{"id":"evt_1","object":"event"}"#;
    let good = "0c8670ed117751cc551a20e35839447075c42800ea3cf3e8a2fbda99cd1e6edd";
    let header = format!("t=1700000000,v1={},v1={good},v0=ignored", "00".repeat(32));
    let req = request(&[("Stripe-Signature", &header)], body);
    assert_eq!(s.verify(&req, 1700000100, 300), Ok(()), "any v1 may match (secret rotation)");
    assert!(s.verify(&req, 1700000301, 300).unwrap_err().contains("tolerance"));
    assert!(s.verify(&req, 1699999699, 300).is_err(), "a timestamp from the future is refused too");
    let wrong_t = request(&[("Stripe-Signature", &format!("t=1700000001,v1={good}"))], body);
    assert!(s.verify(&wrong_t, 1700000001, 300).unwrap_err().contains("does not match"));
    let no_t = request(&[("Stripe-Signature", &format!("v1={good}"))], body);
    assert!(s.verify(&no_t, 1700000000, 300).unwrap_err().contains("no t="));
}

#[test]
fn shopify_vector() {
    // base64(HMAC-SHA256("shpss_secret", body)), computed with Python's hmac.
    let s = scheme("shopify", "shpss_secret");
    let body = br#"{"id":"evt_1","object":"event"}"#;
    let req = request(&[("X-Shopify-Hmac-Sha256", "hX0Km2JYBoPr5JjBEPZJI6W5L2if3GGfalqTCBEN4tk=")], body);
    assert_eq!(s.verify(&req, 0, 0), Ok(()));
    let bad = request(&[("X-Shopify-Hmac-Sha256", "hX0Km2JYBoPr5JjBEPZJI6W5L2if3GGfalqTCBEN4tl=")], body);
    assert!(s.verify(&bad, 0, 0).is_err());
}

#[test]
fn generic_hmac_accepts_hex_or_base64_under_its_header() {
    let body = br#"{"id":"evt_1","object":"event"}"#;
    let s = Scheme::new("hmac_sha256", Some("shpss_secret"), Some("X-Sig")).unwrap();
    let b64 = "hX0Km2JYBoPr5JjBEPZJI6W5L2if3GGfalqTCBEN4tk=";
    let hex = hex::encode(STANDARD.decode(b64).unwrap());
    for value in [b64.to_owned(), hex.clone(), format!("sha256={hex}"), b64.trim_end_matches('=').replace('/', "_")] {
        assert_eq!(s.verify(&request(&[("x-sig", &value)], body), 0, 0), Ok(()), "{value}");
    }
    assert!(s.verify(&request(&[("X-Signature", &hex)], body), 0, 0).unwrap_err().contains("X-Sig header"));
}

#[test]
fn configuration_mistakes_are_named() {
    assert!(Scheme::new("github", None, None).unwrap_err().contains("needs the webhook_secret"));
    assert!(Scheme::new("slack", Some("x"), None).unwrap_err().contains("is not one of"));
    assert!(matches!(Scheme::new("none", None, None), Ok(Scheme::None)));
    assert_eq!(format!("{:?}", scheme("github", "topsecret")), "github", "Debug never shows the key");
}

#[test]
fn comparison_is_exact() {
    assert!(constant_time_eq(b"abc", b"abc"));
    assert!(!constant_time_eq(b"abc", b"abd"));
    assert!(!constant_time_eq(b"abc", b"ab"));
}
