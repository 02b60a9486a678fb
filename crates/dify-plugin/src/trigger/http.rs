//! The raw HTTP/1.1 messages a trigger's wire carries hex-encoded: the webhook delivery in, the sender's response out.

use serde::de::DeserializeOwned;

/// A webhook delivery as Dify received it: request line, headers and body, decoded from the
/// request's `raw_http_request` (the hex of the raw HTTP/1.1 request Dify rebuilt).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    /// The request method (`POST`, …).
    pub method: String,
    /// The path and query, e.g. `/triggers/plugin/<endpoint id>?a=1`.
    pub path: String,
    /// The headers in order, names as sent (Dify normalises their case: match them with
    /// [`HttpRequest::header`]).
    pub headers: Vec<(String, String)>,
    /// Everything after the blank line, verbatim (already de-chunked by Dify).
    pub body: Vec<u8>,
}

impl HttpRequest {
    /// The request `hex` encodes, or `None` when it is not hex or holds no HTTP head.
    pub fn from_hex(hex: &str) -> Option<HttpRequest> {
        HttpRequest::parse(&unhex(hex)?)
    }

    /// The request in `raw`: a request line, headers, a blank line and the body; `None`
    /// without the blank line or a request line.
    pub fn parse(raw: &[u8]) -> Option<HttpRequest> {
        let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
        let head = String::from_utf8_lossy(&raw[..end]);
        let mut lines = head.split("\r\n");
        let mut request_line = lines.next()?.split(' ');
        let (method, path) = (request_line.next()?.to_owned(), request_line.next()?.to_owned());
        let headers = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(name, value)| (name.trim().to_owned(), value.trim().to_owned()))
            .collect();
        Some(HttpRequest { method, path, headers, body: raw[end + 4..].to_vec() })
    }

    /// The first value of header `name`, in any case.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(key, _)| key.eq_ignore_ascii_case(name)).map(|(_, value)| value.as_str())
    }

    /// The body read as JSON into `T`.
    pub fn json<T: DeserializeOwned>(&self) -> serde_json::Result<T> {
        serde_json::from_slice(&self.body)
    }
}

/// What the webhook's sender hears: Dify hands it on as it is (any status, any body).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// The headers in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// A response of `status` without headers or body.
    pub fn new(status: u16) -> HttpResponse {
        HttpResponse { status, headers: Vec::new(), body: Vec::new() }
    }

    /// With header `name: value` after those it has.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> HttpResponse {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// With `body`, announced by `Content-Type: content_type` and its `Content-Length`.
    pub fn with_body(self, content_type: &str, body: impl Into<Vec<u8>>) -> HttpResponse {
        let body = body.into();
        let mut response =
            self.with_header("Content-Type", content_type).with_header("Content-Length", body.len().to_string());
        response.body = body;
        response
    }

    /// The raw HTTP/1.1 response. The reason phrase is left empty, as the Python SDK writes
    /// it: Dify reads only the code.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = format!("HTTP/1.1 {} \r\n", self.status).into_bytes();
        for (name, value) in &self.headers {
            out.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.body);
        out
    }

    /// [`HttpResponse::to_bytes`] in lowercase hex, as a dispatch's `response` carries it.
    pub fn to_hex(&self) -> String {
        hex(&self.to_bytes())
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    let digits = text.as_bytes();
    if digits.len() % 2 != 0 {
        return None;
    }
    let digit = |d: u8| (d as char).to_digit(16).and_then(|d| u8::try_from(d).ok());
    digits.chunks_exact(2).map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delivery_reads_from_its_hex() {
        let raw =
            "POST /triggers/plugin/e1?x=1 HTTP/1.1\r\nX-Api-Key: k\r\nContent-Type: application/json\r\n\r\n{\"a\":1}";
        let request = HttpRequest::from_hex(&hex(raw.as_bytes())).unwrap();
        assert_eq!((request.method.as_str(), request.path.as_str()), ("POST", "/triggers/plugin/e1?x=1"));
        assert_eq!(request.header("x-api-key"), Some("k"));
        assert_eq!(request.header("missing"), None);
        assert_eq!(request.json::<serde_json::Value>().unwrap(), serde_json::json!({"a": 1}));
        assert_eq!(HttpRequest::from_hex(&hex(b"GET / HTTP/1.1\r\n\r\n")).unwrap().body, b"");
    }

    #[test]
    fn what_is_not_a_hex_encoded_request_is_none() {
        for bad in ["abc", "zz", "", &hex(b"GET / HTTP/1.1\r\nno blank line"), &hex(b"\r\n\r\nbody")] {
            assert_eq!(HttpRequest::from_hex(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_response_is_written_as_the_python_sdk_writes_it() {
        let response = HttpResponse::new(200).with_body("application/json", r#"{"status": "ok"}"#);
        let python =
            "HTTP/1.1 200 \r\nContent-Type: application/json\r\nContent-Length: 16\r\n\r\n{\"status\": \"ok\"}";
        assert_eq!(String::from_utf8(response.to_bytes()).unwrap(), python);
        assert_eq!(response.to_hex(), hex(python.as_bytes()));
        assert_eq!(unhex(&response.to_hex()).unwrap(), python.as_bytes());
    }
}
