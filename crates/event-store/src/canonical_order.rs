//! What both canonical writers share: how an object's members are put in order, and the name that makes an object a number.

use std::cmp::Ordering;
use std::ops::Range;

/// What serde_json (`arbitrary_precision`) reports a number as: a one-entry map under this
/// key. `Value` treats any object whose first key is this one as a number, and so do both
/// writers (the fast pass by handing such an object to the serde writer).
pub(crate) const NUMBER_TOKEN: &str = "$serde_json::private::Number";

/// Rewrites the object at `out[start..]` from its `members` (each a name and where its text
/// stands in `out`) sorted by `order`, a repeated name keeping its last value (as a map insert
/// does; the stable sort leaves repeats in input order, so the last of each run is the one).
/// `write` appends a member from its name and its text. Both writers order objects this way.
pub(crate) fn rewrite_in_order<N>(
    out: &mut Vec<u8>,
    moved: &mut Vec<u8>,
    start: usize,
    members: &mut [(N, Range<usize>)],
    order: impl Fn(&N, &N) -> Ordering,
    mut write: impl FnMut(&mut Vec<u8>, &N, &[u8]),
) {
    members.sort_by(|a, b| order(&a.0, &b.0));
    moved.clear();
    moved.extend_from_slice(&out[start..]);
    out.truncate(start);
    out.push(b'{');
    let mut written = false;
    for (i, (name, text)) in members.iter().enumerate() {
        if members.get(i + 1).is_some_and(|next| order(&next.0, name).is_eq()) {
            continue;
        }
        if written {
            out.push(b',');
        }
        written = true;
        write(out, name, &moved[text.start - start..text.end - start]);
    }
    out.push(b'}');
}
