//! Which streams (level 1) or queues (levels 0, 2, 3) an agent's target names in this process's
//! registry, or why it names none.

use kfdq::proto::Target;

use crate::state::State;

/// The ids of `ids` that `known` rejects, in order.
fn unknown<T: Copy>(ids: &[T], known: impl Fn(T) -> bool) -> Vec<T> {
    ids.iter().copied().filter(|&id| !known(id)).collect()
}

/// Every queue id of `qs` is one of this process's KFD queues, or the error naming the others.
fn known_queues(st: &State, qs: &[u32]) -> Result<(), String> {
    let unknown = unknown(qs, |q| st.queue(q).is_some());
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(format!("no KFD queue {unknown:?} in this process"))
    }
}

/// Stream ids a target names (level 1).
pub fn streams_of(st: &State, t: &Target) -> Result<Vec<u64>, String> {
    match t {
        Target::All => Ok(st.streams.iter().map(|s| s.id).collect()),
        Target::Streams(ids) => {
            let unknown = unknown(ids, |i| st.stream(i).is_some());
            if unknown.is_empty() {
                Ok(ids.clone())
            } else {
                Err(format!(
                    "no stream {unknown:?} in this process (see the registry for stream ids)"
                ))
            }
        }
        Target::Queues(qs) => {
            known_queues(st, qs)?;
            Ok(st
                .streams
                .iter()
                .filter(|s| s.queue.is_some_and(|q| qs.contains(&q)))
                .map(|s| s.id)
                .collect())
        }
    }
}

/// Queue ids a target names (levels 0, 2, 3).
pub fn queues_of(st: &State, t: &Target) -> Result<Vec<u32>, String> {
    match t {
        Target::All => Ok(st
            .queues()
            .iter()
            .filter(|q| !q.dying)
            .map(|q| q.id)
            .collect()),
        Target::Queues(qs) => {
            known_queues(st, qs)?;
            Ok(qs.clone())
        }
        Target::Streams(ids) => {
            let mut out = Vec::new();
            for id in ids {
                match st.stream(*id) {
                    None => return Err(format!("no stream {id} in this process")),
                    Some(s) => match s.queue {
                        None => {
                            return Err(format!(
                                "stream {id} has no KFD queue yet (it has not launched any work); levels 2 and 3 act on queues"
                            ));
                        }
                        Some(q) => {
                            if !out.contains(&q) {
                                out.push(q);
                            }
                        }
                    },
                }
            }
            Ok(out)
        }
    }
}
