//! Minimal keep-alive HTTP/1.1 and RESP clients, so the raw column is the store, not a client library.

use std::io::{self, Write};
use std::net::SocketAddr;

use event_store::kv_wire::{STATE_PREFIX, TTL_MS};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn bad(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

struct Conn {
    stream: TcpStream,
    req: Vec<u8>,
    buf: Vec<u8>,
}

impl Conn {
    async fn connect(addr: SocketAddr) -> io::Result<Conn> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Conn { stream, req: Vec::with_capacity(2048), buf: Vec::with_capacity(8192) })
    }

    /// Reads more bytes into `buf`; a closed connection is an error (we always expect more).
    async fn fill(&mut self) -> io::Result<()> {
        self.buf.reserve(8192);
        if self.stream.read_buf(&mut self.buf).await? == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "server closed the connection"));
        }
        Ok(())
    }
}

/// One HTTP/1.1 connection to the KV container.
pub(crate) struct Http(Conn);

impl Http {
    pub(crate) async fn connect(addr: SocketAddr) -> io::Result<Http> {
        Ok(Http(Conn::connect(addr).await?))
    }

    /// `PUT /state/{key}` with `If-None-Match: *` (the claim); returns the status (201 or 412).
    pub(crate) async fn put_if_absent(&mut self, key: &str, value: &[u8], ttl_ms: u64) -> io::Result<u16> {
        let c = &mut self.0;
        c.req.clear();
        write!(
            c.req,
            "PUT {STATE_PREFIX}{key} HTTP/1.1\r\nhost: kv\r\nif-none-match: *\r\n{TTL_MS}: {ttl_ms}\r\n\
             content-type: application/json\r\ncontent-length: {}\r\n\r\n",
            value.len()
        )?;
        c.req.extend_from_slice(value);
        Ok(self.exchange().await?.0)
    }

    /// `GET /state/{key}`; returns the status (200 or 404).
    pub(crate) async fn get(&mut self, key: &str) -> io::Result<u16> {
        let c = &mut self.0;
        c.req.clear();
        write!(c.req, "GET {STATE_PREFIX}{key} HTTP/1.1\r\nhost: kv\r\n\r\n")?;
        Ok(self.exchange().await?.0)
    }

    /// `DELETE /state/{key}`; returns the status (204 or 404).
    pub(crate) async fn delete(&mut self, key: &str) -> io::Result<u16> {
        let c = &mut self.0;
        c.req.clear();
        write!(c.req, "DELETE {STATE_PREFIX}{key} HTTP/1.1\r\nhost: kv\r\n\r\n")?;
        Ok(self.exchange().await?.0)
    }

    /// `GET {path}` (`/healthz`, `/metrics`, `/ui/api/now`): the status and the body.
    pub(crate) async fn get_path(&mut self, path: &str) -> io::Result<(u16, Vec<u8>)> {
        let c = &mut self.0;
        c.req.clear();
        write!(c.req, "GET {path} HTTP/1.1\r\nhost: kv\r\n\r\n")?;
        let (status, body) = self.exchange().await?;
        Ok((status, self.0.buf[body].to_vec()))
    }

    /// Sends the request in `req` and reads the answer: its status and where its body is in `buf`.
    async fn exchange(&mut self) -> io::Result<(u16, std::ops::Range<usize>)> {
        let c = &mut self.0;
        c.stream.write_all(&c.req).await?;
        c.buf.clear();
        let head_end = loop {
            if let Some(i) = find(&c.buf, b"\r\n\r\n") {
                break i + 4;
            }
            c.fill().await?;
        };
        let head = std::str::from_utf8(&c.buf[..head_end]).map_err(|_| bad("non-UTF-8 response head"))?;
        let status = head.get(9..12).and_then(|s| s.parse().ok()).ok_or_else(|| bad("bad status line"))?;
        let mut len = 0usize;
        for line in head.split("\r\n").skip(1) {
            let Some((name, value)) = line.split_once(':') else { continue };
            if name.eq_ignore_ascii_case("content-length") {
                len = value.trim().parse().map_err(|_| bad("bad content-length"))?;
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                return Err(bad("chunked responses are not expected from the KV container"));
            }
        }
        while c.buf.len() < head_end + len {
            c.fill().await?;
        }
        Ok((status, head_end..head_end + len))
    }
}

/// One RESP connection to Redis.
pub(crate) struct Resp(Conn);

impl Resp {
    pub(crate) async fn connect(addr: SocketAddr) -> io::Result<Resp> {
        Ok(Resp(Conn::connect(addr).await?))
    }

    /// `SET key value NX GET PX ttl` (the claim): true when this call created the key.
    pub(crate) async fn set_nx_get(&mut self, key: &str, value: &[u8], ttl_ms: u64) -> io::Result<bool> {
        let ttl = ttl_ms.to_string();
        self.command(&[b"SET", key.as_bytes(), value, b"NX", b"GET", b"PX", ttl.as_bytes()]).await?;
        Ok(self.bulk_reply().await?.is_none())
    }

    /// `GET key`: true when the key exists.
    pub(crate) async fn get(&mut self, key: &str) -> io::Result<bool> {
        self.command(&[b"GET", key.as_bytes()]).await?;
        Ok(self.bulk_reply().await?.is_some())
    }

    async fn command(&mut self, args: &[&[u8]]) -> io::Result<()> {
        let c = &mut self.0;
        c.req.clear();
        write!(c.req, "*{}\r\n", args.len())?;
        for a in args {
            write!(c.req, "${}\r\n", a.len())?;
            c.req.extend_from_slice(a);
            c.req.extend_from_slice(b"\r\n");
        }
        c.stream.write_all(&c.req).await
    }

    /// A bulk-string reply: its length, or None for nil. Errors (`-ERR …`) become io errors.
    async fn bulk_reply(&mut self) -> io::Result<Option<usize>> {
        let c = &mut self.0;
        c.buf.clear();
        let line_end = loop {
            if let Some(i) = find(&c.buf, b"\r\n") {
                break i;
            }
            c.fill().await?;
        };
        let head = std::str::from_utf8(&c.buf[1..line_end]).map_err(|_| bad("non-UTF-8 reply"))?.to_owned();
        match c.buf[0] {
            b'$' if head == "-1" => Ok(None),
            b'$' => {
                let len: usize = head.parse().map_err(|_| bad("bad bulk length"))?;
                while c.buf.len() < line_end + 2 + len + 2 {
                    c.fill().await?;
                }
                Ok(Some(len))
            }
            b'-' => Err(io::Error::other(format!("redis: {head}"))),
            other => Err(bad(format!("unexpected reply type {:?}", other as char))),
        }
    }
}
