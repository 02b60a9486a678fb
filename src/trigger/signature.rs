//! Webhook signatures over the raw body bytes, compared in constant time: GitHub, Stripe,
//! Shopify, Standard Webhooks and a generic HMAC-SHA256 header.

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use ring::hmac;

use super::raw::RawRequest;

/// The `signature_scheme` values.
pub(crate) const SCHEMES: [&str; 6] = ["none", "github", "stripe", "shopify", "standard_webhooks", "hmac_sha256"];

/// How deliveries are signed, with everything needed to check them.
#[derive(Clone)]
pub(crate) enum Scheme {
    None,
    /// `X-Hub-Signature-256: sha256=<hex>` over the body.
    Github(hmac::Key),
    /// `Stripe-Signature: t=<unix>,v1=<hex>[,v1=…]` over `t.body`.
    Stripe(hmac::Key),
    /// `X-Shopify-Hmac-Sha256: <base64>` over the body.
    Shopify(hmac::Key),
    /// `webhook-signature: v1,<base64> …` over `webhook-id.webhook-timestamp.body`; the secret
    /// is `whsec_<base64 key>`.
    StandardWebhooks(hmac::Key),
    /// `<header>: [sha256=]<hex or base64>` over the body.
    HmacSha256 {
        key: hmac::Key,
        header: String,
    },
}

impl std::fmt::Debug for Scheme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never prints the key.
        f.write_str(self.name())
    }
}

impl Scheme {
    /// Builds a scheme from its name and secret; the error is a configuration mistake.
    pub(crate) fn new(name: &str, secret: Option<&str>, header: Option<&str>) -> Result<Scheme, String> {
        if name == "none" {
            return Ok(Scheme::None);
        }
        if !SCHEMES.contains(&name) {
            return Err(format!("signature_scheme {name:?} is not one of: {}", SCHEMES.join(", ")));
        }
        let secret = secret.ok_or_else(|| format!("signature_scheme {name} needs the webhook_secret"))?;
        let key = |bytes: &[u8]| hmac::Key::new(hmac::HMAC_SHA256, bytes);
        Ok(match name {
            "github" => Scheme::Github(key(secret.as_bytes())),
            "stripe" => Scheme::Stripe(key(secret.as_bytes())),
            "shopify" => Scheme::Shopify(key(secret.as_bytes())),
            "standard_webhooks" => {
                let b64 = secret.strip_prefix("whsec_").unwrap_or(secret);
                let raw = STANDARD.decode(b64).map_err(|_| {
                    "webhook_secret for standard_webhooks must be whsec_ followed by base64 (as the sender shows it)"
                        .to_owned()
                })?;
                Scheme::StandardWebhooks(key(&raw))
            }
            _ => Scheme::HmacSha256 { key: key(secret.as_bytes()), header: header.unwrap_or("X-Signature").to_owned() },
        })
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            Scheme::None => "none",
            Scheme::Github(_) => "github",
            Scheme::Stripe(_) => "stripe",
            Scheme::Shopify(_) => "shopify",
            Scheme::StandardWebhooks(_) => "standard_webhooks",
            Scheme::HmacSha256 { .. } => "hmac_sha256",
        }
    }

    /// Checks `req` at unix time `now_s`; timestamps may differ from it by `tolerance_s`.
    /// The error says why (it goes to the plugin log, never the secret).
    pub(crate) fn verify(&self, req: &RawRequest, now_s: i64, tolerance_s: i64) -> Result<(), String> {
        let body = req.body.as_slice();
        let header = |name: &str| req.header(name).ok_or_else(|| format!("the {name} header is missing"));
        match self {
            Scheme::None => Ok(()),
            Scheme::Github(key) => {
                let value = header("X-Hub-Signature-256")?;
                let tags = value.split(',').filter_map(|v| v.trim().strip_prefix("sha256=")).filter_map(from_hex);
                any_matches(key, &[body], tags)
            }
            Scheme::Shopify(key) => {
                let value = header("X-Shopify-Hmac-Sha256")?;
                any_matches(key, &[body], value.split(',').filter_map(from_base64))
            }
            Scheme::HmacSha256 { key, header: name } => {
                let value = header(name)?;
                let tags = value.split(',').map(|v| {
                    let v = v.trim();
                    v.strip_prefix("sha256=").unwrap_or(v).to_owned()
                });
                any_matches(key, &[body], tags.filter_map(|v| from_hex(&v).or_else(|| from_base64(&v))))
            }
            Scheme::Stripe(key) => {
                let value = header("Stripe-Signature")?;
                let t = fields(&value, "t=").next().ok_or("Stripe-Signature has no t= timestamp")?;
                fresh(t, now_s, tolerance_s)?;
                any_matches(key, &[t.as_bytes(), b".", body], fields(&value, "v1=").filter_map(from_hex))
            }
            Scheme::StandardWebhooks(key) => {
                let id = header("webhook-id")?;
                let ts = header("webhook-timestamp")?;
                fresh(&ts, now_s, tolerance_s)?;
                let value = header("webhook-signature")?;
                let tags = value.split([' ', ',']).filter(|s| !s.is_empty() && *s != "v1").filter_map(from_base64);
                any_matches(key, &[id.as_bytes(), b".", ts.as_bytes(), b".", body], tags)
            }
        }
    }
}

/// A timestamp header within the tolerance of now (either side: clocks drift both ways).
fn fresh(ts: &str, now_s: i64, tolerance_s: i64) -> Result<(), String> {
    let t: i64 = ts.trim().parse().map_err(|_| format!("the signature timestamp {ts:?} is not a number"))?;
    if (now_s - t).abs() > tolerance_s {
        return Err(format!(
            "the signature timestamp is {} s away from now; the tolerance is {tolerance_s} s",
            now_s - t
        ));
    }
    Ok(())
}

/// The values of `name=` items in a comma-separated header (`t=…,v1=…`).
fn fields<'a>(value: &'a str, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    value.split(',').filter_map(move |kv| kv.trim().strip_prefix(name))
}

fn from_hex(s: &str) -> Option<Vec<u8>> {
    hex::decode(s.trim()).ok()
}

fn from_base64(s: &str) -> Option<Vec<u8>> {
    let s = s.trim();
    STANDARD.decode(s).or_else(|_| URL_SAFE_NO_PAD.decode(s.trim_end_matches('='))).ok()
}

/// True when one of `tags` is the HMAC of the concatenated `parts`.
fn any_matches(key: &hmac::Key, parts: &[&[u8]], tags: impl Iterator<Item = Vec<u8>>) -> Result<(), String> {
    let mut ctx = hmac::Context::with_key(key);
    for part in parts {
        ctx.update(part);
    }
    let expected = ctx.sign();
    let mut seen = false;
    let mut ok = false;
    for tag in tags {
        seen = true;
        // Every candidate is compared, so the time taken does not say which one matched.
        ok |= constant_time_eq(expected.as_ref(), &tag);
    }
    match (seen, ok) {
        (_, true) => Ok(()),
        (false, _) => Err("the signature header holds no signature in the expected format".into()),
        (true, false) => Err("the signature does not match the body (wrong secret, or the body was altered)".into()),
    }
}

/// Compares without an early exit (the length of an HMAC tag is public).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
#[path = "signature_tests.rs"]
mod tests;
