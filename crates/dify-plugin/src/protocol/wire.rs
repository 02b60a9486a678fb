//! Newline framing with a hard cap on line length, generic over any `AsyncBufRead`.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// Longest input line we hold in memory. The daemon's own cap on plugin output is 5 MiB; its
/// requests are far smaller, so anything beyond this is abuse and is skipped, not buffered.
pub const MAX_INPUT_LINE: usize = 8 * 1024 * 1024;

/// How much of an oversize line is kept so its `session_id` can still be answered.
const OVERSIZE_PREFIX: usize = 4096;

/// One input line. The reader hands out borrowed lines (`Line<&[u8]>`) from a buffer it
/// reuses, so reading a request allocates nothing once the buffer has grown.
#[derive(Debug, PartialEq, Eq)]
pub enum Line<B = Vec<u8>> {
    /// A complete line without its terminating `\n` (and without one trailing `\r`).
    Complete(B),
    /// A line longer than the cap: its first bytes and its total length.
    Oversize {
        /// The line's first bytes (up to 4 KiB).
        prefix: B,
        /// The whole line's length in bytes.
        len: usize,
    },
}

impl Line<&[u8]> {
    /// The line with its bytes copied out of the reader's buffer.
    pub fn to_owned(&self) -> Line {
        match self {
            Line::Complete(b) => Line::Complete(b.to_vec()),
            Line::Oversize { prefix, len } => Line::Oversize { prefix: prefix.to_vec(), len: *len },
        }
    }
}

/// A reused buffer larger than this is released after use, so one huge line does not pin
/// its memory for the rest of the process.
const KEEP_BUFFER: usize = 1024 * 1024;

/// Reads newline-delimited lines from `R`, each at most a limit long (longer ones are
/// skipped, their start kept).
pub struct LineReader<R> {
    inner: R,
    max: usize,
    buf: Vec<u8>,
}

/// What `read_one` left in the buffer.
enum Read {
    Complete,
    Oversize(usize),
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    /// A reader with the protocol's limit, [`MAX_INPUT_LINE`].
    pub fn new(inner: R) -> Self {
        Self::with_limit(inner, MAX_INPUT_LINE)
    }

    /// A reader whose lines are at most `max` bytes.
    pub fn with_limit(inner: R, max: usize) -> Self {
        LineReader { inner, max, buf: Vec::new() }
    }

    /// The next non-empty line, or `None` at end of input. A final line without `\n` counts.
    pub async fn next_line(&mut self) -> std::io::Result<Option<Line<&[u8]>>> {
        loop {
            match self.read_one().await? {
                None => return Ok(None),
                Some(Read::Complete) if self.buf.iter().all(|b| b.is_ascii_whitespace()) => continue,
                Some(Read::Complete) => return Ok(Some(Line::Complete(&self.buf))),
                Some(Read::Oversize(len)) => return Ok(Some(Line::Oversize { prefix: &self.buf, len })),
            }
        }
    }

    async fn read_one(&mut self) -> std::io::Result<Option<Read>> {
        if self.buf.capacity() > KEEP_BUFFER {
            self.buf = Vec::new();
        }
        let buf = &mut self.buf;
        buf.clear();
        let mut total = 0usize;
        let mut oversize = false;
        loop {
            let chunk = self.inner.fill_buf().await?;
            if chunk.is_empty() {
                if total == 0 {
                    return Ok(None);
                }
                break;
            }
            let (take, done) = match memchr::memchr(b'\n', chunk) {
                Some(i) => (i, true),
                None => (chunk.len(), false),
            };
            total += take;
            if !oversize {
                if total > self.max {
                    oversize = true;
                    let keep = OVERSIZE_PREFIX.saturating_sub(buf.len()).min(take);
                    buf.extend_from_slice(&chunk[..keep]);
                    buf.truncate(OVERSIZE_PREFIX);
                } else {
                    buf.extend_from_slice(&chunk[..take]);
                }
            }
            self.inner.consume(if done { take + 1 } else { take });
            if done {
                break;
            }
        }
        if oversize {
            return Ok(Some(Read::Oversize(total)));
        }
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
        Ok(Some(Read::Complete))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn all_lines(input: &[u8], max: usize) -> Vec<Line> {
        let mut r = LineReader::with_limit(tokio::io::BufReader::with_capacity(7, input), max);
        let mut out = vec![];
        while let Some(l) = r.next_line().await.unwrap() {
            out.push(l.to_owned());
        }
        out
    }

    #[tokio::test]
    async fn splits_lines_skips_blank_and_strips_cr() {
        let lines = all_lines(b"{\"a\":1}\n\n\r\n{\"b\":2}\r\nlast", 1024).await;
        assert_eq!(
            lines,
            vec![
                Line::Complete(b"{\"a\":1}".to_vec()),
                Line::Complete(b"{\"b\":2}".to_vec()),
                Line::Complete(b"last".to_vec()),
            ]
        );
    }

    #[tokio::test]
    async fn oversize_line_is_skipped_with_prefix_and_next_line_survives() {
        let mut input = b"{\"session_id\":\"s1\",".to_vec();
        input.extend(std::iter::repeat_n(b'x', 100));
        input.extend_from_slice(b"\nok\n");
        let lines = all_lines(&input, 50).await;
        match &lines[0] {
            Line::Oversize { prefix, len } => {
                assert!(prefix.starts_with(b"{\"session_id\":\"s1\""));
                assert_eq!(*len, 119);
            }
            other => panic!("expected oversize, got {other:?}"),
        }
        assert_eq!(lines[1], Line::Complete(b"ok".to_vec()));
    }

    #[tokio::test]
    async fn empty_input_yields_nothing() {
        assert!(all_lines(b"", 10).await.is_empty());
        assert!(all_lines(b"\n\n", 10).await.is_empty());
    }
}
