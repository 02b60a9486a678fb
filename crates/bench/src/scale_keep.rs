//! Where the scale section's store lives: a temporary directory, or `--scale-data DIR`, kept
//! after the run with what it holds written beside it, so a later run measures the same
//! store again instead of filling it anew (23 minutes at 10 M records).

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// What the kept store holds, in the terms the section fills and deletes by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Filled {
    /// Fill records written, ids 0..filled of the fill's kind.
    pub filled: u64,
    /// Records in the store: the fill's, the claims', less those deleted.
    pub live: u64,
    /// The fill's records below this id have had their tenth deleted.
    pub deleted_upto: u64,
    /// The last round of claims (each round's ids are its own, see `claims_from`).
    pub round: u64,
    /// Keys and values as the fill wrote them, per record.
    pub record_bytes: u64,
}

/// The state file beside the store.
const STATE: &str = "scale-bench.json";

/// The store's directory, and what it holds: nothing for a new one.
pub(crate) fn open(kept: Option<&Path>, tmp: &Path) -> anyhow::Result<(PathBuf, Filled)> {
    let data = kept.map_or_else(|| tmp.join("scale-data"), Path::to_path_buf);
    std::fs::create_dir_all(&data).with_context(|| format!("creating {}", data.display()))?;
    let state = data.join(STATE);
    let filled = match std::fs::read(&state) {
        Ok(bytes) => serde_json::from_slice(&bytes).with_context(|| format!("reading {}", state.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            anyhow::ensure!(
                !data.join("kv.redb").exists(),
                "{} holds a store without {STATE}: not one this bench filled",
                data.display()
            );
            Filled::default()
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", state.display())),
    };
    Ok((data, filled))
}

/// Records what the stopped store holds, for the next run.
pub(crate) fn save(data: &Path, filled: &Filled) -> anyhow::Result<()> {
    let tmp = data.join(format!("{STATE}.new"));
    std::fs::write(&tmp, serde_json::to_vec_pretty(filled)?)?;
    std::fs::rename(&tmp, data.join(STATE))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_store_resumes_where_the_last_run_left_it_and_a_foreign_one_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let kept = tmp.path().join("kept");
        let (data, filled) = open(Some(&kept), tmp.path()).unwrap();
        assert_eq!((data.as_path(), filled), (kept.as_path(), Filled::default()));
        let after = Filled { filled: 1_000, live: 950, deleted_upto: 1_000, round: 2, record_bytes: 794 };
        save(&data, &after).unwrap();
        assert_eq!(open(Some(&kept), tmp.path()).unwrap().1, after);
        // Without --scale-data: a new store in the run's temporary directory.
        let (fresh, none) = open(None, tmp.path()).unwrap();
        assert_eq!((fresh, none), (tmp.path().join("scale-data"), Filled::default()));
        // A store the bench did not fill: its contents are unknown, so it is not measured.
        let foreign = tmp.path().join("foreign");
        std::fs::create_dir_all(&foreign).unwrap();
        std::fs::write(foreign.join("kv.redb"), b"x").unwrap();
        assert!(open(Some(&foreign), tmp.path()).is_err());
    }
}
