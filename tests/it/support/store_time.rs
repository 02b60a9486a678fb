//! A store's clock the test moves: the real server (KV container, redis-server, postgres)
//! runs under libfaketime, reading its offset from a file this test rewrites. Time under
//! test is then injected, not slept: a minute passes for the store when the test says so.

use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};

/// Where Debian installs libfaketime's thread-safe build (scripts/ensure-faketime.sh).
pub(crate) fn libfaketime() -> PathBuf {
    std::fs::read_dir("/usr/lib")
        .expect("/usr/lib")
        .filter_map(|e| Some(e.ok()?.path().join("faketime/libfaketimeMT.so.1")))
        .find(|p| p.exists())
        .expect("libfaketime is missing: scripts/ensure-faketime.sh installs it")
}

/// One store's clock: its offset from the real time, in whole seconds, moved forward only.
pub(crate) struct StoreTime {
    dir: tempfile::TempDir,
    offset_s: AtomicI64,
}

impl Default for StoreTime {
    fn default() -> Self {
        Self::new()
    }
}

impl StoreTime {
    pub(crate) fn new() -> StoreTime {
        let t = StoreTime { dir: tempfile::tempdir().unwrap(), offset_s: AtomicI64::new(0) };
        // Readable by a server running as another user (postgres).
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(t.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        t.write(0);
        t
    }

    fn file(&self) -> PathBuf {
        self.dir.path().join("offset")
    }

    /// Written whole and renamed into place: the server never reads half an offset.
    fn write(&self, offset_s: i64) {
        let tmp = self.dir.path().join("offset.tmp");
        std::fs::write(&tmp, format!("{offset_s:+}\n")).unwrap();
        std::fs::rename(&tmp, self.file()).unwrap();
    }

    /// The environment that puts a server on this clock. The monotonic clock stays real, so
    /// the server's own timers (timeouts, flushes) are unaffected.
    pub(crate) fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("LD_PRELOAD", libfaketime().display().to_string()),
            ("FAKETIME_TIMESTAMP_FILE", self.file().display().to_string()),
            ("FAKETIME_NO_CACHE", "1".to_owned()),
            // No shared memory between a process and its children: postgres drops root
            // (setpriv) and could not open a semaphore root made.
            ("FAKETIME_DISABLE_SHM", "1".to_owned()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_owned()),
            ("DONT_FAKE_MONOTONIC", "1".to_owned()),
        ]
    }

    /// Moves the store's clock `secs` forward.
    pub(crate) fn advance(&self, secs: i64) {
        let now = self.offset_s.fetch_add(secs, Ordering::SeqCst) + secs;
        self.write(now);
    }
}
