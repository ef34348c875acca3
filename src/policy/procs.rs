//! The policy's memory of each process (its state, since when, its starvation guard), dense
//! and in pid order: after a full decision it holds exactly the observation's processes in
//! the observation's (pid) order, so process `i` of an observation is entry `i` here — one
//! cache line read, no map walk — which is what an edge decision deciding 63 processes again
//! relies on. A lookup takes the observation's index as a hint and falls back to a binary
//! search when the hint misses (a process not decided yet, one that came or went).

use super::level::Run;
use crate::ids::Pid;

/// What the policy remembers of one process.
#[derive(Debug, Clone, Copy)]
pub(super) struct ProcState {
    pub(super) run: Run,
    /// When it entered `run`.
    pub(super) since_ns: u64,
    /// The starvation guard lets it run until then.
    pub(super) granted_until: Option<u64>,
    /// Preempted by itself (direct edges, [`super::Policy::preempted_outside`]) since then,
    /// whatever `run` says: counted toward the starvation guard as a preemption the policy
    /// decided is.
    pub(super) self_since: Option<u64>,
}

/// Every process's [`ProcState`], sorted by pid.
#[derive(Debug, Clone, Default)]
pub(super) struct ProcStates(Vec<(Pid, ProcState)>);

impl ProcStates {
    /// Where `pid` is (`Ok`) or would go (`Err`); `hint`: where it is expected.
    fn find(&self, pid: Pid, hint: usize) -> Result<usize, usize> {
        match self.0.get(hint) {
            Some((p, _)) if *p == pid => Ok(hint),
            _ => self.0.binary_search_by_key(&pid, |(p, _)| *p),
        }
    }

    /// The state of `pid` (`hint`: its index in the observation).
    pub(super) fn get(&self, pid: Pid, hint: usize) -> Option<&ProcState> {
        self.find(pid, hint).ok().map(|i| &self.0[i].1)
    }

    /// The state of `pid`, to change.
    pub(super) fn get_mut(&mut self, pid: Pid, hint: usize) -> Option<&mut ProcState> {
        let i = self.find(pid, hint).ok()?;
        Some(&mut self.0[i].1)
    }

    /// Its state now, running for a process not seen before.
    pub(super) fn run_of(&self, pid: Pid, hint: usize) -> Run {
        self.get(pid, hint).map_or(Run::Running, |s| s.run)
    }

    /// The state of `pid`, `new` put in its place first when it has none.
    pub(super) fn or_insert(&mut self, pid: Pid, hint: usize, new: ProcState) -> &mut ProcState {
        let i = match self.find(pid, hint) {
            Ok(i) => i,
            Err(i) => {
                self.0.insert(i, (pid, new));
                i
            }
        };
        &mut self.0[i].1
    }

    /// Keeps the processes in `alive` (sorted) only.
    pub(super) fn retain_sorted(&mut self, alive: &[Pid]) {
        self.0.retain(|(pid, _)| alive.binary_search(pid).is_ok());
    }

    /// Forgets `pid`.
    pub(super) fn remove(&mut self, pid: Pid) {
        if let Ok(i) = self.find(pid, 0) {
            self.0.remove(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(since_ns: u64) -> ProcState {
        ProcState {
            run: Run::Running,
            since_ns,
            granted_until: None,
            self_since: None,
        }
    }

    #[test]
    fn lookups_find_the_process_whatever_the_hint() {
        let mut s = ProcStates::default();
        for pid in [30, 10, 20] {
            s.or_insert(Pid(pid), 0, st(u64::from(pid)));
        }
        // In pid order: the hint is the index, and a wrong one still finds it.
        for (i, pid) in [10, 20, 30].into_iter().enumerate() {
            assert_eq!(s.get(Pid(pid), i).map(|x| x.since_ns), Some(u64::from(pid)));
            assert_eq!(s.get(Pid(pid), 7).map(|x| x.since_ns), Some(u64::from(pid)));
        }
        // An existing entry is not replaced.
        s.or_insert(Pid(20), 0, st(99)).since_ns += 1;
        assert_eq!(s.get(Pid(20), 1).map(|x| x.since_ns), Some(21));
        s.retain_sorted(&[Pid(10), Pid(30)]);
        assert!(s.get(Pid(20), 1).is_none());
        s.remove(Pid(30));
        assert!(s.get(Pid(30), 1).is_none());
        assert_eq!(s.run_of(Pid(30), 0), Run::Running);
        assert!(s.get_mut(Pid(10), 0).is_some());
    }
}
