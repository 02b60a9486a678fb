//! Remote-debugging registration: the lines sent before any heartbeat, and spotting the daemon's refusal.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use base64::Engine;
use serde_json::{json, Value};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::watch;

/// What a plugin registers with the daemon for remote debugging: its manifest, its one
/// provider's declaration (`("tool_declaration", provider)`, `("trigger_declaration", …)`;
/// the daemon refuses a registration holding both) and its assets (name, bytes).
#[derive(Debug, Clone, Copy)]
pub struct Registration {
    /// The plugin's manifest (`manifest.yaml` as JSON).
    pub manifest: &'static Value,
    /// The declaration's kind (`tool_declaration`, `trigger_declaration`) and the provider.
    pub declaration: (&'static str, &'static Value),
    /// The files the declarations name (icons), as (name, bytes).
    pub assets: &'static [(&'static str, &'static [u8])],
}

/// Raw bytes per `asset_chunk` (the SDK's size; the daemon accepts any non-empty chunk).
pub(crate) const ASSET_CHUNK: usize = 8192;

/// The whole registration in the order the daemon requires: handshake, manifest (before any
/// category declaration: it replaces the whole declaration), the provider's declaration
/// (`(kind, provider)`: `tool_declaration` or `trigger_declaration`), asset chunks, end. Nothing else may be sent before `end`: any other line, a heartbeat included, makes the
/// daemon refuse the connection.
pub(crate) fn registration(
    key: &str,
    manifest: &Value,
    declaration: (&str, &Value),
    assets: &[(&str, &[u8])],
) -> Vec<u8> {
    let mut out = Vec::new();
    push(&mut out, "handshake", &json!({ "key": key }));
    push(&mut out, "manifest_declaration", manifest);
    let (kind, provider) = declaration;
    push(&mut out, kind, &json!([provider]));
    for &(name, bytes) in assets {
        if bytes.is_empty() {
            // The daemon rejects empty chunk data, so an empty file cannot be sent at all.
            tracing::warn!("asset {name} is empty; not sent");
            continue;
        }
        let count = bytes.len().div_ceil(ASSET_CHUNK);
        for (i, chunk) in bytes.chunks(ASSET_CHUNK).enumerate() {
            let data = base64::engine::general_purpose::STANDARD.encode(chunk);
            push(&mut out, "asset_chunk", &json!({ "filename": name, "data": data, "end": i + 1 == count }));
        }
    }
    push(&mut out, "end", &json!({}));
    out
}

fn push(out: &mut Vec<u8>, kind: &str, data: &Value) {
    serde_json::to_writer(&mut *out, &json!({ "type": kind, "data": data })).expect("serialising JSON cannot fail");
    out.push(b'\n');
}

/// What the daemon has said on one connection so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing yet: the daemon is silent on a successful registration.
    Silent,
    /// Its first bytes opened a JSON object: it is sending requests, so we are registered.
    Speaking,
    /// Its first line was text: the daemon's refusal (bad key, invalid declaration, …).
    Refused(String),
    /// The connection ended (EOF or error) without a refusal.
    Closed,
}

/// The socket's read side, reporting the daemon's verdict as bytes arrive. After registration
/// the daemon writes only JSON lines, while every failure is one text line and a close, so the
/// first non-blank byte decides. A refusal is also returned as an error, so the session loop
/// never mistakes it for a malformed request.
pub(crate) struct Watched<R> {
    inner: R,
    verdict: watch::Sender<Verdict>,
    decided: bool,
}

impl<R> Watched<R> {
    pub(crate) fn new(inner: R) -> (Self, watch::Receiver<Verdict>) {
        let (tx, rx) = watch::channel(Verdict::Silent);
        (Watched { inner, verdict: tx, decided: false }, rx)
    }

    fn closed(&self) {
        self.verdict.send_if_modified(|v| match v {
            Verdict::Refused(_) | Verdict::Closed => false,
            _ => {
                *v = Verdict::Closed;
                true
            }
        });
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Watched<R> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Err(e)) => {
                this.closed();
                return Poll::Ready(Err(e));
            }
            Poll::Ready(Ok(())) => {}
        }
        let new = &buf.filled()[before..];
        if new.is_empty() {
            this.closed();
        } else if !this.decided {
            if let Some(&first) = new.iter().find(|b| !b.is_ascii_whitespace()) {
                this.decided = true;
                if first == b'{' {
                    this.verdict.send_replace(Verdict::Speaking);
                } else {
                    let text = refusal_text(new);
                    this.verdict.send_replace(Verdict::Refused(text.clone()));
                    // A failed read must leave the buffer as it found it.
                    buf.set_filled(before);
                    return Poll::Ready(Err(io::Error::new(io::ErrorKind::ConnectionRefused, text)));
                }
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// The refusal's first line, printable and short (it is quoted in our error message).
fn refusal_text(bytes: &[u8]) -> String {
    let start = bytes.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(0);
    let line = bytes[start..].split(|&b| b == b'\n').next().unwrap_or_default();
    let text: String = String::from_utf8_lossy(line).chars().filter(|c| !c.is_control()).take(300).collect();
    text.trim().to_owned()
}

/// What to tell the developer about a refusal, by the daemon's wording.
pub(crate) fn explain_refusal(text: &str, addr: &str) -> String {
    if text.contains("invalid key") {
        format!(
            "the daemon refused the debugging key: get a fresh one in Dify → Plugins → Debug and set REMOTE_INSTALL_KEY \
             (in .env or the environment); daemon at {addr} said {text:?}"
        )
    } else if text.starts_with("HTTP/") {
        format!(
            "{addr} answered in HTTP ({text:?}): REMOTE_INSTALL_URL must name the plugin daemon's remote-debugging \
             port (PLUGIN_REMOTE_INSTALLING_PORT, 5003 by default), not a web or API port"
        )
    } else {
        format!("the daemon at {addr} refused the plugin's registration: {text:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    fn lines(bytes: &[u8]) -> Vec<Value> {
        bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()).map(|l| serde_json::from_slice(l).unwrap()).collect()
    }

    #[test]
    fn order_and_asset_chunking() {
        let big: Vec<u8> = (0..ASSET_CHUNK * 2 + 5).map(|i| i as u8).collect();
        let assets: [(&str, &[u8]); 3] = [("big.png", &big), ("empty.svg", b""), ("icon.svg", b"<svg/>")];
        let out = lines(&registration("k", &json!({"m": 1}), ("tool_declaration", &json!({"p": 2})), &assets));
        let kinds: Vec<&str> = out.iter().map(|l| l["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "handshake",
                "manifest_declaration",
                "tool_declaration",
                "asset_chunk",
                "asset_chunk",
                "asset_chunk",
                "asset_chunk",
                "end"
            ]
        );
        assert_eq!(out[0]["data"], json!({"key": "k"}));
        assert_eq!(out[2]["data"], json!([{"p": 2}]));
        let mut joined = Vec::new();
        for chunk in &out[3..6] {
            assert_eq!(chunk["data"]["filename"], "big.png");
            let raw =
                base64::engine::general_purpose::STANDARD.decode(chunk["data"]["data"].as_str().unwrap()).unwrap();
            assert!(!raw.is_empty() && raw.len() <= ASSET_CHUNK);
            joined.extend(raw);
        }
        assert_eq!(joined, big);
        let ends: Vec<bool> = out[3..7].iter().map(|c| c["data"]["end"].as_bool().unwrap()).collect();
        assert_eq!(ends, [false, false, true, true]);
        assert_eq!(out[7], json!({"type": "end", "data": {}}));
    }

    async fn verdict_of(input: &[u8]) -> (Verdict, bool) {
        let (mut r, rx) = Watched::new(input);
        let mut sink = Vec::new();
        let failed = r.read_to_end(&mut sink).await.is_err();
        let v = rx.borrow().clone();
        (v, failed)
    }

    #[tokio::test]
    async fn first_byte_decides() {
        assert_eq!(
            verdict_of(b"handshake failed, invalid key\n").await,
            (Verdict::Refused("handshake failed, invalid key".into()), true)
        );
        assert_eq!(verdict_of(b"\n  {\"session_id\":\"s\"}\nnot json later\n").await, (Verdict::Closed, false));
        assert_eq!(verdict_of(b"").await, (Verdict::Closed, false));
        let (mut r, rx) = Watched::new(&b"{\"a\":1}\n"[..]);
        let mut one = [0u8; 3];
        r.read_exact(&mut one).await.unwrap();
        assert_eq!(*rx.borrow(), Verdict::Speaking);
    }

    #[test]
    fn explanations_name_the_cause() {
        assert!(explain_refusal("handshake failed, invalid key", "h:1").contains("Dify → Plugins → Debug"));
        assert!(explain_refusal("HTTP/1.1 400 Bad Request", "h:1").contains("5003"));
        assert!(explain_refusal("plugin validation failed", "h:1").contains("plugin validation failed"));
    }
}
