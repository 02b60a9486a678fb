//! `kv compact`: gives the space of deleted and purged records back, offline. redb reuses
//! freed pages but never shrinks the file, and a file that grew under a backlog keeps its
//! half-empty pages: the live records are copied into a new file, which replaces the old one.
//!
//! The original is read through the integrity check's view (`verify`): every page checksum is
//! checked first, and nothing is written to it, not even redb's "open" marker. The copy is
//! `kv.redb.compact` beside it, written in batches (its memory is the two page caches,
//! whatever the store's size), fsync'd, checked as `kv check` checks a store (every page
//! checksum, every record read back, as many as were copied), and only then, if it holds
//! fewer blocks on disk and is no longer, renamed over `kv.redb` (then the directory is
//! fsync'd). A copy that fails its check is deleted and the store left as it was. A kill at any point before the
//! rename leaves the original byte for byte as it was and a `.compact` leftover, which the
//! next run deletes; after it the store is the copy, complete.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{ensure, Context};
use redb::{AccessGuard, Database, Durability, ReadableTable, ReadableTableMetadata, StorageError};

use super::compact_plan::{Pass, Planned};
use super::counts::{self, Counter};
use super::open::{quietly, refuse_if_open_elsewhere, sync_dir, Damaged, DB_FILE};
use super::record::{system_now_ms, StoredValue};
use super::tables::{DATA, EXPIRY, META};
use super::verify::{self, verify_pages, Failed, Reads, StopWhen, View};

/// The copy being written, beside the data file.
pub(crate) const COMPACT_FILE: &str = "kv.redb.compact";

/// Records per write transaction of the copy: its dirty pages stay a few MiB.
const BATCH: usize = 4096;

/// Page cache of the copy while it is written (the original is read through the check's).
const CACHE_BYTES: usize = 64 << 20;

/// `kv compact`: the stopped store's data directory.
#[derive(clap::Args)]
pub struct CompactArgs {
    /// Data directory of a stopped KV container.
    #[arg(long, default_value = "./data")]
    pub(crate) data: PathBuf,
}

/// What a compaction did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Compacted {
    /// Live records copied (records already expired are left out, as the purge would).
    pub(crate) records: u64,
    /// Their keys and stored values, in bytes.
    pub(crate) record_bytes: u64,
    /// The file's length before and after.
    pub(crate) before: u64,
    pub(crate) after: u64,
    /// The blocks it holds on disk after (`st_blocks` × 512): redb reserves file length ahead
    /// of its pages, as a hole that costs no disk until written.
    pub(crate) after_on_disk: u64,
    /// A `.compact` file of an interrupted run was deleted first.
    pub(crate) leftover_removed: bool,
    /// The copy replaced the data file; not when it would have held no fewer blocks.
    pub(crate) replaced: bool,
}

/// `kv compact`: exit 0 with what it gave back, 1 when there is no store or it is in use.
pub(crate) fn run(args: &CompactArgs) -> anyhow::Result<ExitCode> {
    let path = args.data.join(DB_FILE);
    if !path.exists() {
        eprintln!("kv compact: {} does not exist (no store in {})", path.display(), args.data.display());
        return Ok(ExitCode::FAILURE);
    }
    let done = compact(&args.data, system_now_ms())?;
    if done.leftover_removed {
        println!("removed {COMPACT_FILE}, left by an interrupted kv compact (the store was not changed by it)");
    }
    let per_record = |bytes: u64| bytes.checked_div(done.records).unwrap_or(0);
    if !done.replaced {
        println!(
            "nothing to give back: a copy of {} would hold no less disk than its {} bytes ({} long; {} records); left as it was",
            path.display(),
            done.after_on_disk,
            done.before,
            done.records
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "compacted {}: {} -> {} bytes long, {} on disk ({} records: {} bytes per record on disk, {} of file length, for {} of key and value)",
        path.display(),
        done.before,
        done.after,
        done.after_on_disk,
        done.records,
        per_record(done.after_on_disk),
        per_record(done.after),
        per_record(done.record_bytes),
    );
    Ok(ExitCode::SUCCESS)
}

/// Compacts the store in `dir` (no server may hold it); records expired at `now_ms` are left out.
pub(crate) fn compact(dir: &Path, now_ms: u64) -> anyhow::Result<Compacted> {
    let path = dir.join(DB_FILE);
    refuse_if_open_elsewhere(&path)?;
    let copy = dir.join(COMPACT_FILE);
    let leftover_removed = copy.exists();
    if leftover_removed {
        std::fs::remove_file(&copy).with_context(|| format!("removing the leftover {}", copy.display()))?;
        sync_dir(dir)?;
    }
    let (before, before_on_disk) = (std::fs::metadata(&path)?.len(), on_disk(&path)?);
    let never: StopWhen = Arc::new(|| false);
    let checked = match quietly(|| verify_pages(&path, never, View::Stopped, Reads::Ahead)) {
        Ok(Ok(checked)) => checked,
        Ok(Err(Failed::Damaged(why) | Failed::Incomplete(why))) | Err(why) => {
            let dir = dir.display().to_string();
            return Err(Damaged { path: path.display().to_string(), dir, why }.into());
        }
    };
    let copied = match write_copy(checked.db(), &copy, now_ms) {
        Ok(copied) => copied,
        Err(e) => {
            let _ = std::fs::remove_file(&copy);
            return Err(e.context(format!("writing {}", copy.display())));
        }
    };
    drop(checked);
    let copy_len = std::fs::metadata(&copy)?.len();
    // Judged on the blocks each file holds as well as its length: redb grows a file below
    // 4 GiB by doubling it, so a copy of a store that lost a tenth often has the same length
    // while holding far fewer blocks (its unwritten tail is a hole). It replaces the
    // original when it is no longer and holds fewer blocks.
    if copy_len > before || on_disk(&copy)? >= before_on_disk {
        // Nothing to give back (a small store, or one whose file the copy fills as much):
        // the original stays, untouched.
        std::fs::remove_file(&copy)?;
        sync_dir(dir)?;
        let (records, record_bytes, after_on_disk) = (copied.records, copied.bytes, on_disk(&path)?);
        return Ok(Compacted {
            records,
            record_bytes,
            before,
            after: before,
            after_on_disk,
            leftover_removed,
            replaced: false,
        });
    }
    // The copy is about to be the only one: its pages are checked as the original's were,
    // and its records read back, before it replaces anything.
    match verify::check(&copy) {
        Ok(records) if records == copied.records => {}
        failed => {
            let _ = std::fs::remove_file(&copy);
            let why = match failed {
                Ok(records) => format!("it holds {records} records, not the {} copied", copied.records),
                Err(why) => why,
            };
            anyhow::bail!(
                "the copy {} failed its check ({why}); {} was left as it was",
                copy.display(),
                path.display()
            );
        }
    }
    std::fs::rename(&copy, &path).with_context(|| format!("renaming {} to {}", copy.display(), path.display()))?;
    sync_dir(dir)?;
    let after = std::fs::metadata(&path)?.len();
    Ok(Compacted {
        records: copied.records,
        record_bytes: copied.bytes,
        before,
        after,
        after_on_disk: on_disk(&path)?,
        leftover_removed,
        replaced: true,
    })
}

/// The bytes `path` holds on disk (its blocks, as `du` counts them).
fn on_disk(path: &Path) -> std::io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata(path)?.blocks() * 512)
}

/// What the copy holds.
struct Copied {
    records: u64,
    bytes: u64,
}

/// Writes the live records of `source` into a new store at `to`, with their indexes and
/// counts, fsync'd; checks it holds every one of them.
fn write_copy(source: &Database, to: &Path, now: u64) -> anyhow::Result<Copied> {
    let read = source.begin_read()?;
    let data = read.open_table(DATA)?;
    let mut target = Database::builder().set_cache_size(CACHE_BYTES).create(to)?;
    let (mut records, mut bytes) = (0u64, 0u64);
    // Two passes over the source, each planning the same runs (see `compact_plan`).
    for pass in [Pass::First, Pass::Second] {
        let live = data.iter()?.filter(|e| e.as_ref().map_or(true, |(_, raw)| is_live(raw.value(), now)));
        let size_of = |e: &Result<(AccessGuard<&str>, AccessGuard<&[u8]>), StorageError>| {
            e.as_ref().ok().map(|(k, raw)| k.value().len() + raw.value().len())
        };
        let mut entries = Planned::new(live, size_of).filter(|(_, p)| *p == pass).map(|(e, _)| e);
        loop {
            let mut txn = target.begin_write()?;
            // Each batch durable: pages a batch replaces are reused by the next ones (with no
            // durability they would only be freed at the end, and the copy would double).
            txn.set_durability(Durability::Immediate);
            let mut taken = 0;
            {
                let (mut out, mut expiry, mut counter) =
                    (txn.open_table(DATA)?, txn.open_table(EXPIRY)?, Counter::open(&txn)?);
                for entry in entries.by_ref() {
                    let (key, raw) = entry?;
                    let (key, raw) = (key.value(), raw.value());
                    let rec = StoredValue::decode(raw).with_context(|| format!("the record under key {key:?}"))?;
                    // The stored bytes as they are: ETag, times and checksum travel unchanged.
                    out.insert(key, raw)?;
                    if rec.expires_ms != 0 {
                        expiry.insert((rec.expires_ms, key), ())?;
                    }
                    counter.added(key, &rec.value, rec.modified_ms)?;
                    records += 1;
                    bytes += (key.len() + raw.len()) as u64;
                    taken += 1;
                    if taken == BATCH {
                        break;
                    }
                }
                counter.finish(&txn)?;
            }
            txn.commit()?;
            if taken < BATCH {
                break;
            }
        }
    }
    let mut txn = target.begin_write()?;
    txn.set_durability(Durability::Immediate);
    {
        let mut meta = txn.open_table(META)?;
        for entry in read.open_table(META)?.iter()? {
            let (name, value) = entry?;
            meta.insert(name.value(), value.value())?;
        }
        // Every table a store has, even when empty, so the server's start writes nothing.
        txn.open_table(DATA)?;
        txn.open_table(EXPIRY)?;
        txn.open_table(counts::COUNTS)?;
        txn.open_table(counts::LISTED)?;
        ensure!(counts::agree_in(&txn)?, "the copy's counts do not add up to its records");
    }
    txn.commit()?;
    ensure!(
        target.begin_read()?.open_table(DATA)?.len()? == records,
        "the copy holds a different number of records than were copied"
    );
    // Pages the batches left behind at the file's end are given back.
    target.compact()?;
    drop(target);
    std::fs::File::open(to)?.sync_all()?;
    Ok(Copied { records, bytes })
}

/// Whether the stored bytes are a record still live at `now`; a record that does not decode
/// counts as live, so the copy meets it and fails on it instead of leaving it out.
fn is_live(raw: &[u8], now: u64) -> bool {
    StoredValue::decode(raw).map_or(true, |rec| rec.is_live(now))
}

#[cfg(test)]
#[path = "compact_tests.rs"]
pub(crate) mod tests;
