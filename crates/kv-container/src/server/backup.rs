//! Backups: a consistent snapshot of every live key as JSON lines, and restoring one.
//!
//! A snapshot is one redb read transaction (MVCC), so it is consistent while writes go on:
//! every write acknowledged before it began is in it, none is half in it. Format, one JSON
//! object per line: a header (`format`, `version`, `last_rev`, `taken_ms`), one line per
//! key (`key`, `rev`, `modified_ms`, `expires_ms`, `value` as the stored JSON text), and a
//! trailer with the record count and the SHA-256 of the record lines, so a truncated or
//! edited file is refused before anything is restored. TTLs are absolute expiry times.
//! The other format, the data file copied in page order, is `image`'s; `kv restore` takes
//! either.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, ensure, Context};
use redb::{Database, Durability, ReadableTable};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::counts::Counter;
use super::engine::DB_FILE;
use super::image::{self, Summary};
use super::ladder::Ladder;
use super::open::{sync_dir, sync_parent};
use super::pin::{pin, First};
use super::record::{system_now_ms, StoredValue, Value};
use super::tables::{DATA, EXPIRY, META, REV_KEY};

const FORMAT: &str = "stateful-tool-kv-backup";
const VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct Header {
    format: String,
    version: u32,
    last_rev: u64,
    taken_ms: u64,
}

#[derive(Serialize, Deserialize)]
struct Line {
    key: String,
    rev: u64,
    modified_ms: u64,
    expires_ms: u64,
    value: String,
}

#[derive(Serialize, Deserialize)]
struct Trailer {
    end: bool,
    records: u64,
    sha256: String,
}

/// Records between two calls of a snapshot's `keep_up` (see `ladder`).
const KEEP_UP_EVERY: u64 = 1024;

/// Writes a snapshot of `db` (one read transaction) to `out`; keys already expired are left
/// out. `keep_up` is called every [`KEEP_UP_EVERY`] records (a serving store's ladder).
pub(crate) fn write_snapshot(db: &Database, out: &mut impl Write, keep_up: &dyn Fn()) -> anyhow::Result<Summary> {
    let txn = db.begin_read()?;
    let last_rev = txn.open_table(META)?.get(REV_KEY)?.map_or(0, |g| g.value());
    let taken_ms = system_now_ms();
    let header = Header { format: FORMAT.into(), version: VERSION, last_rev, taken_ms };
    write_line(out, &serde_json::to_vec(&header)?)?;
    let mut hash = Sha256::new();
    let mut records = 0u64;
    for item in txn.open_table(DATA)?.iter()? {
        let (k, v) = item?;
        let rec = StoredValue::decode(v.value())?;
        if !rec.is_live(taken_ms) {
            continue;
        }
        // Values are JSON the server validated on write, hence UTF-8.
        let value = String::from_utf8(rec.value.to_vec()).context("a stored value is not UTF-8")?;
        let line = Line {
            key: k.value().to_owned(),
            rev: rec.rev,
            modified_ms: rec.modified_ms,
            expires_ms: rec.expires_ms,
            value,
        };
        let bytes = serde_json::to_vec(&line)?;
        hash.update(&bytes);
        hash.update(b"\n");
        write_line(out, &bytes)?;
        records += 1;
        if records.is_multiple_of(KEEP_UP_EVERY) {
            keep_up();
        }
    }
    let trailer = Trailer { end: true, records, sha256: hex::encode(hash.finalize()) };
    write_line(out, &serde_json::to_vec(&trailer)?)?;
    out.flush()?;
    Ok(Summary { records, last_rev })
}

fn write_line(out: &mut impl Write, bytes: &[u8]) -> std::io::Result<()> {
    out.write_all(bytes)?;
    out.write_all(b"\n")
}

/// What `kv backup` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum BackupFormat {
    /// One JSON line per live record, in key order (portable, readable, the records only).
    #[default]
    Jsonl,
    /// The data file in page order under one held commit (sequential reads: for large stores).
    Image,
}

impl BackupFormat {
    /// Its name in `GET /backup?format=`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            BackupFormat::Jsonl => "jsonl",
            BackupFormat::Image => "image",
        }
    }
}

/// Offline backup of a stopped server's data directory into `out` (written via a temporary
/// file and renamed, so `out` is never a partial snapshot).
pub(crate) fn backup_dir(dir: &Path, out: &Path, format: BackupFormat) -> anyhow::Result<Summary> {
    let path = dir.join(DB_FILE);
    ensure!(path.exists(), "{} does not exist", path.display());
    let db = Database::open(&path).with_context(|| {
        format!("opening {} (a running server holds it: use --url for an online backup)", path.display())
    })?;
    match format {
        BackupFormat::Jsonl => write_atomically(out, |f| write_snapshot(&db, f, &|| ())),
        BackupFormat::Image => {
            // Nothing else writes to a stopped store: no gate to hold.
            let pinned = pin(Arc::new(db), &path, First::Durable).map_err(anyhow::Error::msg)?;
            write_atomically(out, |f| image::write_image(&pinned, &path, system_now_ms(), &|| true, f))
        }
    }
}

/// Creates `path` through `<path>.partial`: fsync'd, then renamed.
fn write_atomically<T>(path: &Path, fill: impl FnOnce(&mut BufWriter<File>) -> anyhow::Result<T>) -> anyhow::Result<T> {
    let tmp = partial(path);
    let file = File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let mut w = BufWriter::new(file);
    let result = fill(&mut w).and_then(|t| {
        let file = w.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        Ok(t)
    });
    match result {
        Ok(t) => {
            std::fs::rename(&tmp, path).with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))?;
            // The rename is durable only once the directory is.
            sync_parent(path)?;
            Ok(t)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

fn partial(path: &Path) -> PathBuf {
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".partial");
    path.with_file_name(name)
}

/// Reads a snapshot, checking header, every line and the trailer; calls `each` per record.
pub(crate) fn read_snapshot(
    file: &Path,
    mut each: impl FnMut(&str, StoredValue) -> anyhow::Result<()>,
) -> anyhow::Result<Summary> {
    let f = File::open(file).with_context(|| format!("opening {}", file.display()))?;
    let mut lines = BufReader::new(f).lines();
    let first = lines.next().transpose()?.context("the backup is empty")?;
    let header: Header = serde_json::from_str(&first).context("not a stateful-tool KV backup (bad header)")?;
    ensure!(header.format == FORMAT, "not a stateful-tool KV backup (format {:?})", header.format);
    ensure!(header.version == VERSION, "backup format version {} is not supported", header.version);
    let mut hash = Sha256::new();
    let (mut records, mut max_rev) = (0u64, 0u64);
    for line in lines {
        let line = line?;
        if let Ok(trailer) = serde_json::from_str::<Trailer>(&line) {
            ensure!(trailer.end && trailer.records == records, "the backup's record count does not match its trailer");
            ensure!(
                trailer.sha256 == hex::encode(hash.finalize()),
                "the backup's checksum does not match: edited or damaged"
            );
            return Ok(Summary { records, last_rev: header.last_rev.max(max_rev) });
        }
        let rec: Line = serde_json::from_str(&line).with_context(|| format!("record {} is damaged", records + 1))?;
        hash.update(line.as_bytes());
        hash.update(b"\n");
        serde_json::from_str::<serde::de::IgnoredAny>(&rec.value)
            .with_context(|| format!("record {} is not JSON", rec.key))?;
        max_rev = max_rev.max(rec.rev);
        let value = StoredValue {
            value: rec.value.into_bytes().into(),
            rev: rec.rev,
            modified_ms: rec.modified_ms,
            expires_ms: rec.expires_ms,
        };
        each(&rec.key, value)?;
        records += 1;
    }
    bail!("the backup is truncated (no trailer after {records} records)")
}

/// Restores `file` (either format) into the empty data directory `dir`. The file is checked
/// completely first; the database is built as `kv.redb.partial` and renamed into place once
/// it is whole.
pub(crate) fn restore(file: &Path, dir: &Path) -> anyhow::Result<Summary> {
    let target = dir.join(DB_FILE);
    ensure!(!target.exists(), "{} already exists: restore into an empty data directory", target.display());
    let image = format_of(file)? == image::FORMAT;
    if !image {
        read_snapshot(file, |_, _| Ok(()))?;
    }
    if !dir.exists() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        sync_parent(dir)?;
    }
    let tmp = partial(&target);
    let _ = std::fs::remove_file(&tmp);
    let built = if image { image::restore(file, &tmp) } else { restore_lines(file, &tmp) };
    match built {
        Ok(summary) => {
            std::fs::rename(&tmp, &target)?;
            sync_dir(dir)?;
            Ok(summary)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// The `format` of a backup's header line.
fn format_of(file: &Path) -> anyhow::Result<String> {
    #[derive(Deserialize)]
    struct Format {
        format: String,
    }
    let f = File::open(file).with_context(|| format!("opening {}", file.display()))?;
    let mut first = Vec::new();
    BufReader::new(f).take(4096).read_until(b'\n', &mut first)?;
    ensure!(!first.is_empty(), "the backup is empty");
    let header: Format = serde_json::from_slice(&first).context("not a stateful-tool KV backup (bad header)")?;
    Ok(header.format)
}

/// Builds the data file `tmp` from the JSON lines of `file`.
fn restore_lines(file: &Path, tmp: &Path) -> anyhow::Result<Summary> {
    let db = Database::create(tmp)?;
    let mut txn = db.begin_write()?;
    txn.set_durability(Durability::Immediate);
    let summary = {
        let (mut data, mut expiry) = (txn.open_table(DATA)?, txn.open_table(EXPIRY)?);
        // The status counts in the same transaction: a first start of the restored store
        // then has nothing to build (a scan of every record, minutes at ten million).
        let mut counter = Counter::open(&txn)?;
        let summary = read_snapshot(file, |key, rec| {
            // The backup's value as it is (a reference, not a copy), compressed like a PUT's.
            let stored = Value::from(rec.value.clone()).encode(rec.rev, rec.modified_ms, rec.expires_ms);
            data.insert(key, stored.as_slice())?;
            if rec.expires_ms != 0 {
                expiry.insert((rec.expires_ms, key), ())?;
            }
            counter.added(key, &rec.value, rec.modified_ms)?;
            Ok(())
        })?;
        counter.finish(&txn)?;
        // Revisions keep growing from where the backed-up server was: ETags never repeat.
        txn.open_table(META)?.insert(REV_KEY, summary.last_rev)?;
        summary
    };
    txn.commit()?;
    Ok(summary)
}

/// `GET /backup`: a snapshot streamed as `write` produces it (on a blocking thread). A
/// failure mid-way aborts the body, so the client sees no trailer and refuses the file.
/// `metrics` learns the snapshot's time once the whole stream was handed over (the
/// `kv_last_backup_timestamp_seconds` that backup-age alerts watch). The read's rungs (see
/// `ladder`) are let go of once the body has ended, so the client does not wait for them.
pub(crate) fn stream(
    taken_ms: u64,
    metrics: std::sync::Arc<super::metrics::Metrics>,
    write: impl FnOnce(&mut dyn Write) -> anyhow::Result<(Summary, Ladder)> + Send + 'static,
) -> axum::body::Body {
    type Chunk = Result<bytes::Bytes, std::io::Error>;
    let (tx, rx) = tokio::sync::mpsc::channel::<Chunk>(8);
    tokio::task::spawn_blocking(move || {
        let mut w = BufWriter::with_capacity(64 * 1024, ChannelWriter(tx.clone()));
        let rungs = match write(&mut w) {
            Ok((s, ladder)) => {
                tracing::info!("kv: backup streamed: {} records, revision {}", s.records, s.last_rev);
                metrics.ops.backup_taken(taken_ms);
                Some(ladder)
            }
            Err(e) => {
                tracing::warn!("kv: backup stream ended early: {e:#}");
                let _ = tx.blocking_send(Err(std::io::Error::other("backup failed")));
                None
            }
        };
        drop((w, tx));
        if let Some(ladder) = rungs {
            ladder.descend(&|| false);
        }
    });
    let chunks = futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) });
    axum::body::Body::from_stream(chunks)
}

/// Hands written bytes to the response body; fails once the client has gone.
struct ChannelWriter(tokio::sync::mpsc::Sender<Result<bytes::Bytes, std::io::Error>>);

impl Write for ChannelWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .blocking_send(Ok(bytes::Bytes::copy_from_slice(buf)))
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the client went away"))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
