//! The raw HTTP request Dify hands a trigger: lowercase hex of `request line, headers, blank
//! line, body`, as Dify's `serialize_request` wrote it.
//
// Quirks of that serialisation (trigger spec §1.2, captures S3/S4): header names arrive
// WSGI-normalised and re-capitalised (`X-Github-Delivery`), a repeated header is merged into
// one `a,b` line, a stale `Transfer-Encoding: chunked` can sit next to a body the WSGI server
// already de-chunked, `Content-Length` may be missing or (after Dify's re-serialisation)
// disagree with the body. So names are matched case-insensitively, framing headers are never
// believed, and the body is every byte after the first blank line, verbatim.

/// A decoded request. Header names keep their spelling; look them up with [`RawRequest::header`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RawRequest {
    pub(crate) method: String,
    /// Path and query, as sent (`/triggers/plugin/<endpoint>?x=1`).
    pub(crate) target: String,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl RawRequest {
    /// Decodes the hex field (either case) and parses it; the error says what is wrong.
    pub(crate) fn from_hex(hex_text: &str) -> Result<RawRequest, String> {
        let bytes = hex::decode(hex_text.trim())
            .map_err(|e| format!("raw_http_request is not a hex string ({e}); Dify sends the request hex-encoded"))?;
        Ok(RawRequest::parse(bytes))
    }

    /// Parses request bytes. Never fails: a request without a blank line is all head and no
    /// body, and lines that are not `Name: value` are skipped.
    pub(crate) fn parse(mut bytes: Vec<u8>) -> RawRequest {
        let (head_end, body_start) = match memchr::memmem::find(&bytes, b"\r\n\r\n") {
            Some(i) => (i, i + 4),
            None => match memchr::memmem::find(&bytes, b"\n\n") {
                Some(i) => (i, i + 2),
                None => (bytes.len(), bytes.len()),
            },
        };
        let body = bytes.split_off(body_start);
        let head = String::from_utf8_lossy(&bytes[..head_end]);
        let mut lines = head.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
        let mut request_line = lines.next().unwrap_or_default().split(' ');
        let method = request_line.next().unwrap_or_default().to_owned();
        let target = request_line.next().unwrap_or_default().to_owned();
        let headers = lines
            .filter_map(|line| {
                let (name, value) = line.split_once(':')?;
                let name = name.trim();
                (!name.is_empty()).then(|| (name.to_owned(), value.trim().to_owned()))
            })
            .collect();
        RawRequest { method, target, headers, body }
    }

    /// The value of header `name`, matched case-insensitively; repeated lines are joined with
    /// `,` as WSGI joins them.
    pub(crate) fn header(&self, name: &str) -> Option<String> {
        let mut found = self.headers.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str());
        let first = found.next()?;
        let rest: Vec<&str> = found.collect();
        Some(if rest.is_empty() { first.to_owned() } else { format!("{first},{}", rest.join(",")) })
    }

    /// Every header with its name lower-cased (repeats joined), in first-seen order.
    pub(crate) fn lower_headers(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut out = serde_json::Map::new();
        for (name, value) in &self.headers {
            let lower = name.to_ascii_lowercase();
            match out.get_mut(&lower) {
                Some(serde_json::Value::String(prev)) => {
                    prev.push(',');
                    prev.push_str(value);
                }
                _ => {
                    out.insert(lower, serde_json::Value::String(value.clone()));
                }
            }
        }
        out
    }

    /// The `Content-Type` header as sent ("" when absent).
    pub(crate) fn content_type(&self) -> String {
        self.header("content-type").unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hex_of(s: &[u8]) -> String {
        hex::encode(s)
    }

    #[test]
    fn wsgi_quirks_are_read_as_dify_wrote_them() {
        // Capture 07: chunked upload with a stale Transfer-Encoding, no Content-Length, a
        // repeated header merged by WSGI, a lower-case header re-capitalised.
        let raw = b"POST /triggers/plugin/5b0e?event=feed_update&x=1&x=2 HTTP/1.1\r\nHost: 127.0.0.1:5001\r\n\
Transfer-Encoding: chunked\r\nX-Multi: one,two\r\nConnection: close\r\nX-Github-Delivery: d-1\r\n\r\n{\"a\":1}";
        let r = RawRequest::from_hex(&hex_of(raw)).unwrap();
        assert_eq!((r.method.as_str(), r.target.as_str()), ("POST", "/triggers/plugin/5b0e?event=feed_update&x=1&x=2"));
        assert_eq!(r.header("x-github-delivery").as_deref(), Some("d-1"));
        assert_eq!(r.header("X-GITHUB-DELIVERY").as_deref(), Some("d-1"));
        assert_eq!(r.header("x-multi").as_deref(), Some("one,two"));
        assert_eq!(r.header("content-length"), None);
        assert_eq!(r.body, b"{\"a\":1}");
        let upper = RawRequest::from_hex(&hex_of(raw).to_uppercase()).unwrap();
        assert_eq!(upper, r, "Dify accepts upper-case hex, so do we");
    }

    #[test]
    fn the_body_is_everything_after_the_first_blank_line_verbatim() {
        let raw = b"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nab\r\n\r\ncd\x00\xff";
        let r = RawRequest::parse(raw.to_vec());
        assert_eq!(r.body, b"ab\r\n\r\ncd\x00\xff", "Content-Length is not believed");
        let repeated = RawRequest::parse(b"GET / HTTP/1.1\r\nA: 1\r\na: 2\r\n\r\n".to_vec());
        assert_eq!(repeated.header("A").as_deref(), Some("1,2"));
        assert_eq!(repeated.lower_headers()["a"], "1,2");
        assert!(RawRequest::parse(b"GET / HTTP/1.1\r\nNo-Body: x".to_vec()).body.is_empty());
    }

    #[test]
    fn bad_hex_is_a_message_not_a_panic() {
        for bad in ["zz", "abc", "0g"] {
            assert!(RawRequest::from_hex(bad).unwrap_err().contains("not a hex string"), "{bad}");
        }
        assert_eq!(RawRequest::from_hex("").unwrap(), RawRequest::default());
    }

    proptest! {
        #[test]
        fn any_bytes_parse_and_the_body_survives(head in "[ -~]{0,80}", body in proptest::collection::vec(any::<u8>(), 0..300)) {
            let extra = if head.is_empty() { String::new() } else { format!("{head}\r\n") };
            let mut raw = format!("POST /p HTTP/1.1\r\nX-Id: 1\r\n{extra}\r\n").into_bytes();
            raw.extend_from_slice(&body);
            let r = RawRequest::from_hex(&hex::encode(&raw)).unwrap();
            prop_assert_eq!(&r.body, &body);
            prop_assert_eq!(r.header("x-id").map(|v| v.starts_with('1')), Some(true));
        }
    }
}
