//! Read transactions taken behind a long read, so that its end frees the pages the writer
//! replaced meanwhile a slice at a time instead of all in the next commit.
//!
//! redb frees a page a commit replaced once no read transaction older than that commit
//! lives; the first commit after the oldest reader ends frees every such page at once. At
//! 1 M records, after an integrity check of 6 s under new claims at 500/s, that commit
//! took 41 ms and the next 13 ms, and the claims queued behind them. A long read (the check,
//! a backup) therefore takes a newer read transaction every [`RUNG_EVERY`] while it runs,
//! and when it ends lets go of them oldest first, a short gap apart: a commit then frees
//! about one rung's worth (≤ 100 ms of writes).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redb::{Database, ReadTransaction};

/// How much writing one rung covers.
pub(crate) const RUNG_EVERY: Duration = Duration::from_millis(100);
/// The longest gap between two rungs let go of: a commit at 500 claims/s comes every 2 ms.
const GAP_MAX: Duration = Duration::from_millis(10);
/// The whole descent takes at most this long, whatever the read's length (10 M records:
/// minutes): it holds the database open, and a reopen waits 2 s for readers.
const DESCENT_MAX: Duration = Duration::from_secs(2);

/// Rungs of any kind, oldest first; time is passed in.
#[derive(Debug)]
pub(crate) struct Rungs<T> {
    rungs: VecDeque<T>,
    last: Instant,
}

impl<T> Rungs<T> {
    /// No rung yet; the read it follows began at `now`.
    pub(crate) fn new(now: Instant) -> Self {
        Rungs { rungs: VecDeque::new(), last: now }
    }

    /// Takes a rung with `take` if the last was [`RUNG_EVERY`] ago.
    pub(crate) fn climb(&mut self, now: Instant, take: impl FnOnce() -> Option<T>) {
        if now.saturating_duration_since(self.last) < RUNG_EVERY {
            return;
        }
        self.last = now;
        // A rung that cannot be taken only makes the next slice larger.
        if let Some(rung) = take() {
            self.rungs.push_back(rung);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.rungs.len()
    }

    /// Lets go of the rungs oldest first, `sleep`ing a gap between two; once `hurry` says so
    /// (shutdown, a reopen) the rest go at once.
    pub(crate) fn descend(mut self, hurry: &dyn Fn() -> bool, sleep: &mut dyn FnMut(Duration)) {
        let n = u32::try_from(self.rungs.len()).unwrap_or(u32::MAX).max(1);
        let gap = (DESCENT_MAX / n).min(GAP_MAX);
        while let Some(rung) = self.rungs.pop_front() {
            drop(rung);
            if self.rungs.is_empty() || hurry() {
                break;
            }
            sleep(gap);
        }
    }
}

/// The rungs of one long read of a serving database (a cheap handle: clones share them).
#[derive(Clone)]
pub(crate) struct Ladder(Arc<Mutex<Held>>);

/// Fields drop in order: the transactions before the database.
struct Held {
    rungs: Rungs<ReadTransaction>,
    db: Arc<Database>,
}

impl Ladder {
    /// For a read of `db` that begins now.
    pub(crate) fn new(db: Arc<Database>) -> Ladder {
        Ladder(Arc::new(Mutex::new(Held { rungs: Rungs::new(Instant::now()), db })))
    }

    /// Asked often while the read runs: a rung every [`RUNG_EVERY`].
    pub(crate) fn keep_up(&self) {
        let mut held = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let Held { rungs, db } = &mut *held;
        rungs.climb(Instant::now(), || db.begin_read().ok());
    }

    /// Once the read itself has let go: the rungs, oldest first, at most 2 s in all.
    pub(crate) fn descend(self, hurry: &dyn Fn() -> bool) {
        let rungs = {
            let mut held = self.0.lock().unwrap_or_else(|p| p.into_inner());
            std::mem::replace(&mut held.rungs, Rungs::new(Instant::now()))
        };
        rungs.descend(hurry, &mut std::thread::sleep);
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use redb::{Durability, TableDefinition};

    use super::*;

    /// A rung that records when it is let go of.
    struct Rung(u32, Rc<RefCell<Vec<String>>>);

    impl Drop for Rung {
        fn drop(&mut self) {
            self.1.borrow_mut().push(format!("drop {}", self.0));
        }
    }

    fn climbed(n: u32, log: &Rc<RefCell<Vec<String>>>) -> Rungs<Rung> {
        let t0 = Instant::now();
        let mut rungs = Rungs::new(t0);
        for i in 1..=n * 4 {
            // Every 30 ms: a rung at 120, 240, 360 … ms (100 ms since the last).
            rungs.climb(t0 + Duration::from_millis(30 * u64::from(i)), || Some(Rung(i, log.clone())));
        }
        rungs
    }

    #[test]
    fn a_rung_is_taken_every_hundred_ms_of_the_read_not_more_often() {
        let log = Rc::new(RefCell::new(Vec::new()));
        let rungs = climbed(3, &log);
        assert_eq!(rungs.len(), 3, "12 calls over 360 ms");
        let t0 = Instant::now();
        let mut r = Rungs::new(t0);
        r.climb(t0 + Duration::from_millis(99), || Some(Rung(0, log.clone())));
        assert_eq!(r.len(), 0);
        r.climb(t0 + RUNG_EVERY, || None);
        r.climb(t0 + RUNG_EVERY + Duration::from_millis(50), || Some(Rung(0, log.clone())));
        assert_eq!(r.len(), 0, "a rung that could not be taken still counts as the last");
    }

    #[test]
    fn rungs_are_let_go_oldest_first_a_gap_apart_within_two_seconds() {
        let log = Rc::new(RefCell::new(Vec::new()));
        let rungs = climbed(3, &log);
        let slept = log.clone();
        rungs.descend(&|| false, &mut |gap| slept.borrow_mut().push(format!("sleep {}", gap.as_millis())));
        assert_eq!(*log.borrow(), ["drop 4", "sleep 10", "drop 8", "sleep 10", "drop 12"]);

        // Many rungs (a long read): smaller gaps, the whole descent within DESCENT_MAX.
        let log = Rc::new(RefCell::new(Vec::new()));
        let (total, n) = (Rc::new(RefCell::new(Duration::ZERO)), 1000);
        let sum = total.clone();
        climbed(n, &log).descend(&|| false, &mut |gap| *sum.borrow_mut() += gap);
        assert_eq!(log.borrow().len(), n as usize);
        assert!(*total.borrow() <= DESCENT_MAX, "{:?}", total.borrow());
        assert!(*total.borrow() >= DESCENT_MAX / 2, "{:?}", total.borrow());
    }

    #[test]
    fn a_hurried_descent_lets_go_of_the_rest_at_once() {
        let log = Rc::new(RefCell::new(Vec::new()));
        let rungs = climbed(4, &log);
        let slept = log.clone();
        let asked = Rc::new(RefCell::new(0));
        let hurry = {
            let asked = asked.clone();
            move || {
                *asked.borrow_mut() += 1;
                *asked.borrow() >= 2
            }
        };
        rungs.descend(&hurry, &mut |_| slept.borrow_mut().push("sleep".into()));
        assert_eq!(*log.borrow(), ["drop 4", "sleep", "drop 8", "drop 12", "drop 16"]);
    }

    const T: TableDefinition<u64, &[u8]> = TableDefinition::new("t");

    /// One durable commit rewriting 20 of 2,000 records (its replaced pages go to the
    /// freed list); then the pages in use.
    fn commit(db: &Database, i: u64) -> u64 {
        let mut txn = db.begin_write().unwrap();
        txn.set_durability(Durability::Immediate);
        {
            let mut t = txn.open_table(T).unwrap();
            for k in 0..20 {
                t.insert((i * 97 + k * 101) % 2000, [i as u8; 300].as_slice()).unwrap();
            }
        }
        txn.commit().unwrap();
        in_use(db)
    }

    fn in_use(db: &Database) -> u64 {
        let txn = db.begin_write().unwrap();
        let pages = txn.stats().unwrap().allocated_pages();
        txn.abort().unwrap();
        pages
    }

    /// The pages in use before and after each commit that follows the end of a read held
    /// over 100 commits, with or without rungs (one per 10 commits), let go of one per commit.
    fn frees_after_a_long_read(rungs_every: Option<u64>) -> Vec<i64> {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::create(dir.path().join("t.redb")).unwrap();
        for i in 0..100 {
            commit(&db, i);
        }
        let (t0, held) = (Instant::now(), db.begin_read().unwrap());
        let mut rungs = Rungs::new(t0);
        for i in 1..=100u64 {
            commit(&db, 100 + i);
            if rungs_every.is_some_and(|n| i % n == 0) {
                rungs.climb(t0 + RUNG_EVERY * (i as u32), || db.begin_read().ok());
            }
        }
        let mut before = in_use(&db);
        drop(held);
        let mut freed = Vec::new();
        let mut next = 300;
        let mut after_each = |db: &Database| {
            let after = commit(db, next);
            next += 1;
            freed.push(before as i64 - after as i64);
            before = after;
        };
        after_each(&db);
        let steps = rungs.rungs.len();
        let mut sleep = |_| after_each(&db);
        rungs.descend(&|| false, &mut sleep);
        // The commit after the last rung went.
        if steps > 0 {
            after_each(&db);
        }
        freed
    }

    #[test]
    fn on_a_real_store_the_rungs_spread_what_the_end_of_a_long_read_frees_over_commits() {
        let at_once = frees_after_a_long_read(None);
        let spread = frees_after_a_long_read(Some(10));
        let (most_at_once, most_spread) = (at_once[0], *spread.iter().max().unwrap());
        // One commit frees what 100 replaced, against one rung's worth (10 commits) each.
        assert!(most_at_once > 100, "{at_once:?}");
        assert!(most_spread * 4 < most_at_once, "spread {spread:?} against at once {at_once:?}");
        assert_eq!(spread.len(), 11, "{spread:?}");
        let total = |v: &[i64]| v.iter().sum::<i64>();
        // The same pages are freed in the end, whether at once or spread.
        assert!((total(&spread) - total(&at_once)).abs() * 10 < total(&at_once), "{spread:?} {at_once:?}");
    }
}
