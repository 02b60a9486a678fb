//! The order `kv compact` writes records in, so that the copy's data pages come out full.
//!
//! redb has no bulk load: a leaf that overflows splits where its bytes are halved, and keys
//! appended in order then only ever reach the right half. With records of the plugin's size
//! (four to a 4 KiB page) that leaves three in every page; in random order, under three.
//! The copy therefore groups the records, in key order, into runs that fill one page each
//! and writes them in two passes: first the last part of each run (just over half its
//! bytes), in key order, so that every split falls exactly between two runs; then the
//! first part, which lands in its run's page, beside the records already there, and fills
//! it without a split. A run's page takes every key above the run before it (redb's branch
//! key is the last key of the page to its left), so the earlier keys go where they belong.
//!
//! The plan only orders the writes: whatever it decides, every record is written once, and
//! a plan that misjudges a page (redb's layout changing) costs fill, never a record.

use std::collections::VecDeque;

/// redb's page size; a leaf needing more splits.
const PAGE: usize = 4096;

/// Bytes a redb leaf needs for `n` entries of variable-size keys and values of `bytes` in all:
/// its 4-byte header and the end offset (u32) of each key and each value.
fn leaf_bytes(n: usize, bytes: usize) -> usize {
    4 + 8 * n + bytes
}

/// Which pass of the copy writes an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pass {
    /// The last part of each run, in key order: lays out one page per run.
    First,
    /// The rest, into the pages the first pass laid out.
    Second,
}

/// Tags entries given in key order with their pass; the same entries give the same tags, so
/// each pass reads the source again instead of remembering which keys it left for later.
pub(crate) struct Planned<I: Iterator> {
    source: I,
    /// The run being gathered: its entries with their sizes, and their bytes.
    run: Vec<(I::Item, usize)>,
    run_bytes: usize,
    ready: VecDeque<(I::Item, Pass)>,
    size_of: fn(&I::Item) -> Option<usize>,
}

impl<I: Iterator> Planned<I> {
    /// `size_of` gives an entry's key and value bytes; `None` (an error the caller will see)
    /// is passed through at once, in the first pass.
    pub(crate) fn new(source: I, size_of: fn(&I::Item) -> Option<usize>) -> Self {
        Planned { source, run: Vec::new(), run_bytes: 0, ready: VecDeque::new(), size_of }
    }

    /// Tags the gathered run: the shortest tail holding more than half its bytes goes first.
    fn close_run(&mut self) {
        let mut tail = 0;
        let mut first_from = self.run.len();
        while first_from > 0 && tail * 2 <= self.run_bytes {
            first_from -= 1;
            tail += self.run[first_from].1;
        }
        for (i, (item, _)) in self.run.drain(..).enumerate() {
            self.ready.push_back((item, if i < first_from { Pass::Second } else { Pass::First }));
        }
        self.run_bytes = 0;
    }
}

impl<I: Iterator> Iterator for Planned<I> {
    type Item = (I::Item, Pass);

    fn next(&mut self) -> Option<Self::Item> {
        while self.ready.is_empty() {
            let Some(item) = self.source.next() else {
                self.close_run();
                return self.ready.pop_front();
            };
            let Some(size) = (self.size_of)(&item) else {
                return Some((item, Pass::First));
            };
            // A run is as many entries as one page holds (an entry larger than a page alone).
            if !self.run.is_empty() && leaf_bytes(self.run.len() + 1, self.run_bytes + size) > PAGE {
                self.close_run();
            }
            self.run.push((item, size));
            self.run_bytes += size;
        }
        self.ready.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passes(sizes: &[usize]) -> Vec<Pass> {
        Planned::new(sizes.iter().copied(), |s| Some(*s)).map(|(_, p)| p).collect()
    }

    #[test]
    fn four_to_a_page_leaves_one_in_four_for_the_second_pass() {
        // 830 bytes: four fit a page (3,356 bytes), five do not.
        let tags = passes(&[830; 8]);
        use Pass::{First as F, Second as S};
        assert_eq!(tags, [S, F, F, F, S, F, F, F]);
    }

    #[test]
    fn every_entry_is_tagged_once_in_order_whatever_the_sizes() {
        let sizes: Vec<usize> = (0..1000).map(|i| [40, 830, 5000, 300, 1200][i % 5] + i % 7).collect();
        let out: Vec<(usize, Pass)> = Planned::new(sizes.iter().copied(), |s| Some(*s)).collect();
        assert_eq!(out.iter().map(|(s, _)| *s).collect::<Vec<_>>(), sizes);
        // An entry larger than a page is a run of its own, written first.
        assert!(out.iter().filter(|(s, _)| *s >= 5000).all(|(_, p)| *p == Pass::First));
    }

    #[test]
    fn an_entry_without_a_size_is_passed_through_first() {
        let out: Vec<(Option<usize>, Pass)> = Planned::new([Some(830), None, Some(830)].into_iter(), |s| *s).collect();
        assert_eq!(out.len(), 3);
        assert_eq!(out[0], (None, Pass::First));
    }
}
