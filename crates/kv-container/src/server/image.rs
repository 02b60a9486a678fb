//! Image backups: the data file itself, copied in page order under a held commit (`pin`),
//! so a backup reads the disk sequentially in large reads instead of walking the records in
//! key order, which at ten million records reads their pages in no order at all.
//!
//! Format: a JSON header line (`format`, `version`, `last_rev`, `taken_ms`, `records`,
//! `length`), then exactly `length` bytes of the file as of the held commit (its first page
//! as that commit left it), then a JSON trailer line with the length again and the SHA-256
//! of those bytes. Pages free in that commit may hold anything a later write put there; no
//! tree leads to them, and `kv restore` opens the copy through redb's recovery and checks
//! every page and record of it before it becomes the store.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, ensure, Context};
use redb::{Database, ReadableTableMetadata};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::open::{header_page, quietly};
use super::pin::Pinned;
use super::tables::{DATA, META, REV_KEY};
use super::verify::{read_records, verify_pages, Commit, Failed, Reads, StopWhen, View};

pub(crate) const FORMAT: &str = "stateful-tool-kv-image";
const VERSION: u32 = 1;
/// Bytes per read: large enough that the disk streams, small enough to stay out of memory.
const CHUNK: usize = 1 << 20;
/// A header line is a few hundred bytes; anything longer is not one.
const MAX_LINE: usize = 4096;

/// What a backup or restore covered, in either format (the JSON lines' `backup` uses it
/// too; it lives here so this format needs nothing from the module above it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Summary {
    pub(crate) records: u64,
    pub(crate) last_rev: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Header {
    pub(crate) format: String,
    pub(crate) version: u32,
    pub(crate) last_rev: u64,
    pub(crate) taken_ms: u64,
    /// Records stored in the held commit (expired ones not purged yet included).
    pub(crate) records: u64,
    /// The data file's length.
    pub(crate) length: u64,
    /// The bytes that follow: the file up to the end of its last written block (redb grows
    /// a file by doubling it, and the part not written yet is a hole).
    pub(crate) data: u64,
}

#[derive(Serialize, Deserialize)]
struct Trailer {
    end: bool,
    data: u64,
    sha256: String,
}

/// Writes the image of the held commit of the file at `path` to `out`; `still` is asked
/// at the end whether the commit stayed held (the store was not reopened meanwhile).
pub(crate) fn write_image(
    p: &Pinned,
    path: &Path,
    taken_ms: u64,
    still: &dyn Fn() -> bool,
    out: &mut impl Write,
) -> anyhow::Result<Summary> {
    let last_rev = p.txn.open_table(META)?.get(REV_KEY)?.map_or(0, |g| g.value());
    let records = p.txn.open_table(DATA)?.len()?;
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let data = data_end(&file, p.len)?;
    let header = Header { format: FORMAT.into(), version: VERSION, last_rev, taken_ms, records, length: p.len, data };
    out.write_all(&serde_json::to_vec(&header)?)?;
    out.write_all(b"\n")?;
    // SAFETY: a hint about this descriptor's reads; its failure changes nothing but speed.
    let _ = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_SEQUENTIAL) };
    let mut hash = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    let mut at = 0u64;
    while at < data {
        let n = CHUNK.min((data - at) as usize);
        let chunk = &mut buf[..n];
        let read = read_upto(&file, chunk, at)?;
        // Past the end (redb shrank the file since): pages no tree of the commit leads to.
        chunk[read..].fill(0);
        if at == 0 {
            let h = p.header.len().min(n);
            chunk[..h].copy_from_slice(&p.header[..h]);
        }
        hash.update(&*chunk);
        out.write_all(chunk)?;
        at += n as u64;
        p.ladder.keep_up();
    }
    ensure!(still(), "the store was reopened during the backup (after a failed write); take it again");
    let trailer = Trailer { end: true, data, sha256: hex::encode(hash.finalize()) };
    out.write_all(&serde_json::to_vec(&trailer)?)?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(Summary { records, last_rev })
}

/// Where the file's last written block ends, at most `len`: every page a commit uses was
/// written, so none lies in a hole.
fn data_end(file: &File, len: u64) -> anyhow::Result<u64> {
    let (fd, mut at, mut end) = (file.as_raw_fd(), 0i64, 0i64);
    loop {
        // SAFETY: lseek on a descriptor this function borrows; it only moves its offset.
        let data = unsafe { libc::lseek(fd, at, libc::SEEK_DATA) };
        if data < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                // No data at or after `at`.
                Some(libc::ENXIO) => return Ok((end as u64).min(len)),
                // A file system without holes: all of it is data.
                Some(libc::EINVAL) => return Ok(len),
                _ => return Err(e).context("finding the data file's written blocks"),
            }
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        if hole < 0 {
            return Err(io::Error::last_os_error()).context("finding the data file's written blocks");
        }
        (at, end) = (hole, hole);
        if hole as u64 >= len {
            return Ok(len);
        }
    }
}

/// Reads into `buf` from `offset` until it is full or the file ends; how many bytes came.
fn read_upto(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Reads an image as it arrives (a download, a file): checks the header, the length and
/// the checksum, and hands the file's bytes on.
pub(crate) struct ImageReader {
    state: State,
}

enum State {
    Header(Vec<u8>),
    Body { header: Header, left: u64, hash: Sha256 },
    Trailer { header: Header, sha256: String, line: Vec<u8> },
}

impl Default for ImageReader {
    fn default() -> Self {
        ImageReader { state: State::Header(Vec::new()) }
    }
}

impl ImageReader {
    /// Takes the next bytes of the image; the data file's bytes among them go to `body`.
    pub(crate) fn push(
        &mut self,
        mut bytes: &[u8],
        body: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> anyhow::Result<()> {
        while !bytes.is_empty() {
            match &mut self.state {
                State::Header(line) => {
                    let (taken, ended) = take_line(line, bytes)?;
                    bytes = &bytes[taken..];
                    if ended {
                        let header: Header =
                            serde_json::from_slice(line).context("not a stateful-tool KV image (bad header)")?;
                        ensure!(header.format == FORMAT, "not a stateful-tool KV image (format {:?})", header.format);
                        ensure!(header.version == VERSION, "image format version {} is not supported", header.version);
                        ensure!(
                            header.data <= header.length,
                            "the image's header is inconsistent (data past the file's length)"
                        );
                        let left = header.data;
                        self.state = State::Body { header, left, hash: Sha256::new() };
                    }
                }
                State::Body { header, left, hash } => {
                    let n = bytes.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                    hash.update(&bytes[..n]);
                    body(&bytes[..n])?;
                    (*left, bytes) = (*left - n as u64, &bytes[n..]);
                    if *left == 0 {
                        let sha256 = hex::encode(std::mem::take(hash).finalize());
                        let header = header.clone();
                        self.state = State::Trailer { header, sha256, line: Vec::new() };
                    }
                }
                State::Trailer { line, .. } => {
                    let (taken, ended) = take_line(line, bytes)?;
                    ensure!(!ended || taken == bytes.len(), "the image has bytes after its trailer");
                    bytes = &bytes[taken..];
                }
            }
        }
        Ok(())
    }

    /// Once every byte was pushed: the header, if the image is whole and unedited.
    pub(crate) fn finish(self) -> anyhow::Result<Header> {
        let State::Trailer { header, sha256, line } = self.state else {
            bail!("the image is truncated (it ends before its {} bytes of data and trailer)", self.length_hint())
        };
        let trailer: Trailer = serde_json::from_slice(&line).context("the image is truncated (no whole trailer)")?;
        ensure!(trailer.end && trailer.data == header.data, "the image's length does not match its trailer");
        ensure!(trailer.sha256 == sha256, "the image's checksum does not match: edited or damaged");
        Ok(header)
    }

    fn length_hint(&self) -> String {
        match &self.state {
            State::Body { header, .. } | State::Trailer { header, .. } => header.data.to_string(),
            State::Header(_) => "announced".into(),
        }
    }
}

/// Appends `bytes` up to and including a newline to `line`; (bytes taken, line ended).
fn take_line(line: &mut Vec<u8>, bytes: &[u8]) -> anyhow::Result<(usize, bool)> {
    let (taken, ended) = match bytes.iter().position(|&b| b == b'\n') {
        Some(i) => (i + 1, true),
        None => (bytes.len(), false),
    };
    line.extend_from_slice(&bytes[..taken - usize::from(ended)]);
    ensure!(line.len() <= MAX_LINE, "not a stateful-tool KV image (a line longer than any header or trailer)");
    Ok((taken, ended))
}

/// Writes the data file of the image `file` as `tmp` (the caller renames it into place):
/// the bytes checked whole first (length, checksum), then every page and every record of
/// the commit it holds, and redb's recovery run on it, so it opens like a store closed cleanly.
pub(crate) fn restore(file: &Path, tmp: &Path) -> anyhow::Result<Summary> {
    let mut src = File::open(file).with_context(|| format!("opening {}", file.display()))?;
    let out = File::create(tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let mut reader = ImageReader::default();
    let (mut buf, mut at) = (vec![0u8; CHUNK], 0u64);
    // Blocks of zeros stay holes, as they were in the file the image was taken of.
    let mut body = |b: &[u8]| {
        if b.iter().any(|&x| x != 0) {
            out.write_all_at(b, at)?;
        }
        at += b.len() as u64;
        Ok(())
    };
    loop {
        let n = src.read(&mut buf)?;
        if n == 0 {
            break;
        }
        reader.push(&buf[..n], &mut body)?;
    }
    let header = reader.finish()?;
    out.set_len(header.length)?;
    out.sync_all()?;
    drop(out);
    let page = header_page(tmp)?;
    let never: StopWhen = Arc::new(|| false);
    let why = |f| match f {
        Failed::Damaged(why) | Failed::Incomplete(why) => anyhow::anyhow!("the image's data file is damaged: {why}"),
    };
    // Its newest commit was complete when it was copied: redb going back to the one before
    // would be damage, as in the check of a running store.
    let checked = quietly(|| {
        verify_pages(tmp, never.clone(), View::Running(Commit { header: &page, len: header.length }), Reads::Ahead)
    })
    .map_err(anyhow::Error::msg)?
    .map_err(why)?;
    let records = quietly(|| read_records(checked.db(), &never)).map_err(anyhow::Error::msg)?.map_err(why)?;
    drop(checked);
    ensure!(records == header.records, "the image holds {records} records, its header says {}", header.records);
    // The copy says it was open for writing: redb's recovery rebuilds its free-page state
    // from the pages in use, and the clean close records it.
    let db = quietly(|| Database::builder().set_cache_size(32 << 20).open(tmp))
        .map_err(anyhow::Error::msg)?
        .context("opening the restored data file")?;
    drop(db);
    Ok(Summary { records, last_rev: header.last_rev })
}
