//! Which streams (level 1) or queues (levels 0, 2, 3) an agent's target names in this process's
//! registry, or why it names none.

use kfdq::QueueId;
use kfdq::proto::Target;

use crate::command_error::CommandError;
use crate::state::State;

/// The ids of `ids` that `known` rejects, in order.
fn unknown<T: Copy>(ids: &[T], known: impl Fn(T) -> bool) -> Vec<T> {
    ids.iter().copied().filter(|&id| !known(id)).collect()
}

/// Every queue id of `qs` is one of this process's KFD queues, or the error naming the others.
fn known_queues(st: &State, qs: &[QueueId]) -> Result<(), CommandError> {
    let unknown: Vec<u32> = unknown(qs, |q| st.queue(q.0).is_some())
        .into_iter()
        .map(|q| q.0)
        .collect();
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(CommandError::UnknownQueues(unknown))
    }
}

/// Stream ids a target names (level 1).
pub fn streams_of(st: &State, t: &Target) -> Result<Vec<u64>, CommandError> {
    match t {
        Target::All => Ok(st.streams.iter().map(|s| s.id).collect()),
        Target::Streams(ids) => {
            let unknown = unknown(ids, |i| st.stream(i).is_some());
            if unknown.is_empty() {
                Ok(ids.clone())
            } else {
                Err(CommandError::UnknownStreams(unknown))
            }
        }
        Target::Queues(qs) => {
            known_queues(st, qs)?;
            Ok(st
                .streams
                .iter()
                .filter(|s| s.queue.is_some_and(|q| qs.contains(&QueueId(q))))
                .map(|s| s.id)
                .collect())
        }
    }
}

/// Queue ids a target names (levels 0, 2, 3).
pub fn queues_of(st: &State, t: &Target) -> Result<Vec<u32>, CommandError> {
    match t {
        Target::All => Ok(st
            .queues()
            .iter()
            .filter(|q| !q.dying)
            .map(|q| q.id)
            .collect()),
        Target::Queues(qs) => {
            known_queues(st, qs)?;
            Ok(qs.iter().map(|q| q.0).collect())
        }
        Target::Streams(ids) => {
            let mut out = Vec::new();
            for id in ids {
                match st.stream(*id) {
                    None => return Err(CommandError::UnknownStreams(vec![*id])),
                    Some(s) => match s.queue {
                        None => return Err(CommandError::StreamWithoutQueue(*id)),
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
