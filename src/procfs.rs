//! `/proc/<pid>/stat`'s numeric fields as proc(5) numbers them, counted after the command in
//! parentheses (which may hold spaces and parentheses itself). One parser for every reader:
//! the agent's identities (the parent, the start time), the shim (its thread count), `kfdq
//! demo` (a process's group and CPU time) and the decision bench.

/// Fields `ns` of one `stat` text, numbered from 1 as proc(5) does; each is a numeric field
/// (4 and above; 3 is the state letter). `None` when one is missing or not a number.
///
/// ```
/// // pid (comm) state ppid pgrp ...
/// let stat = "42 (a (b) c) S 1 40 40 0";
/// assert_eq!(kfdq::procfs::stat_fields(stat, [4, 5]), Some([1, 40]));
/// assert_eq!(kfdq::procfs::stat_fields(stat, [22]), None);
/// ```
pub fn stat_fields<const N: usize>(stat: &str, ns: [usize; N]) -> Option<[u64; N]> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut out = [0; N];
    for (o, n) in out.iter_mut().zip(ns) {
        *o = rest
            .split_whitespace()
            .nth(n.checked_sub(3)?)?
            .parse()
            .ok()?;
    }
    Some(out)
}
