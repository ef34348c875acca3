//! The partition's CUs and their wave slots: where the dispatcher puts work-groups, and the
//! slots they give back.
//!
//! The dispatcher puts each work-group on the next CU, from a cursor on, that has room for it,
//! and moves the cursor past that CU. [`Slots::place`] places many work-groups of one size in one
//! pass with exactly that result (a pass around the CUs gives each CU with room one work-group),
//! so a batch costs one walk over the CUs instead of one search per work-group; the property
//! test below checks it against one-at-a-time placement.

/// Where a batch runs: (CU, work-groups on it), in placement order.
pub(crate) type Placement = Vec<(u32, u32)>;

/// Free wave slots per CU, with the dispatcher's cursor and the scratch tables of batched
/// placement.
#[derive(Debug, Clone)]
pub(crate) struct Slots {
    /// Free wave slots per CU.
    free: Vec<u32>,
    /// Bit c: CU c has a free wave slot (so a search for room skips full CUs a word at a time).
    room: Vec<u64>,
    /// Free wave slots of all CUs.
    free_total: u64,
    /// Wave slots of one CU.
    per_cu: u32,
    /// The CU the next search starts at.
    cursor: usize,
    /// Scratch of `place`: per CU, how many work-groups of the size being placed it can take;
    /// the CUs by that number; and the first by free slots for `fit_waves`-wave work-groups.
    fits: Vec<u32>,
    fit_counts: Vec<u64>,
    fit_of: Vec<u32>,
    fit_waves: u32,
    /// Placement lists given back, kept for new ones.
    spare: Vec<Placement>,
    /// Per CU, the summed `cu_util` (permille) of the work-groups on it (kept only for
    /// work-groups that give one).
    load: Vec<u32>,
}

impl Slots {
    /// `cus` CUs (at least 1) of `per_cu` wave slots each (at least 1), every slot free.
    pub(crate) fn new(cus: usize, per_cu: u32) -> Self {
        let (cus, per_cu) = (cus.max(1), per_cu.max(1));
        Slots {
            free: vec![per_cu; cus],
            room: (0..cus.div_ceil(64))
                .map(|w| {
                    let bits = (cus - w * 64).min(64);
                    if bits == 64 {
                        u64::MAX
                    } else {
                        (1u64 << bits) - 1
                    }
                })
                .collect(),
            free_total: u64::from(per_cu) * cus as u64,
            per_cu,
            cursor: 0,
            fits: Vec::new(),
            fit_counts: Vec::new(),
            fit_of: Vec::new(),
            fit_waves: 0,
            spare: Vec::new(),
            load: vec![0; cus],
        }
    }

    /// Wave slots of one CU.
    pub(crate) fn per_cu(&self) -> u32 {
        self.per_cu
    }

    /// The summed `cu_util` (permille) of what runs on CU `cu`.
    pub(crate) fn load(&self, cu: u32) -> u32 {
        self.load[cu as usize]
    }

    /// CUs.
    pub(crate) fn cus(&self) -> usize {
        self.free.len()
    }

    /// Occupied wave slots of all CUs.
    pub(crate) fn used(&self) -> u64 {
        u64::from(self.per_cu) * self.free.len() as u64 - self.free_total
    }

    /// Places up to `want` work-groups of `waves` waves on the CUs `mask` allows (None: every
    /// CU), exactly where the dispatcher would put them one after the other: each on the next
    /// CU, from the cursor on, that has room, so a pass around the CUs gives each CU with room
    /// one work-group. Returns how many were placed and where (empty when none was). Each adds
    /// `util` to its CU's load.
    pub(crate) fn place(
        &mut self,
        mask: Option<&[bool]>,
        waves: u32,
        want: u64,
        util: u32,
    ) -> (u64, Placement) {
        if want == 0 || u64::from(waves) > self.free_total || waves > self.per_cu {
            return (0, Vec::new());
        }
        let n = self.free.len();
        let start = self.cursor;
        let allowed = |c: usize| mask.is_none_or(|m| m[c]);
        let mut cus = self.spare.pop().unwrap_or_default();
        if want == 1 {
            // One work-group: the first CU from the cursor with room.
            let (room, free) = (&self.room, &self.free);
            let fits = |c: usize| free[c] >= waves && allowed(c);
            let Some(c) = first_with_room(room, start, n, fits)
                .or_else(|| first_with_room(room, 0, start, fits))
            else {
                self.spare.push(cus);
                return (0, Vec::new());
            };
            self.free[c] -= waves;
            self.load[c] += util;
            self.set_room(c);
            self.free_total -= u64::from(waves);
            self.cursor = if c + 1 == n { 0 } else { c + 1 };
            cus.push((c as u32, 1));
            return (1, cus);
        }
        // How many work-groups of this size each CU can take (a table by free slots, so no
        // division per CU), and fit_counts[v]: the CUs that can take exactly v.
        if self.fit_waves != waves {
            self.fit_waves = waves;
            self.fit_of = (0..=self.per_cu).map(|f| f / waves).collect();
        }
        let most = (self.per_cu / waves) as usize;
        self.fit_counts.clear();
        self.fit_counts.resize(most + 1, 0);
        self.fits.clear();
        // Counted in runs of equal values: CUs mostly have the same room.
        let (mut run_fit, mut run_len) = (0u32, 0u64);
        for (c, &free) in self.free.iter().enumerate() {
            let f = if allowed(c) {
                self.fit_of[free as usize]
            } else {
                0
            };
            self.fits.push(f);
            if f != run_fit {
                self.fit_counts[run_fit as usize] += run_len;
                (run_fit, run_len) = (f, 0);
            }
            run_len += 1;
        }
        self.fit_counts[run_fit as usize] += run_len;
        // Whole passes: pass k places one work-group on each CU with room for more than k.
        let mut left = want;
        let mut passes = 0u32;
        let mut in_pass = n as u64 - self.fit_counts[0];
        while in_pass > 0 && left >= in_pass {
            left -= in_pass;
            passes += 1;
            in_pass -= self.fit_counts[passes as usize];
        }
        // Then a partial pass of `left` work-groups, unless every CU is full.
        let mut partial = if in_pass > 0 { left } else { 0 };
        let placed = want - left + partial;
        if placed == 0 {
            self.spare.push(cus);
            return (0, Vec::new());
        }
        // The last work-group goes to the partial pass's last CU, or else to the last CU (from
        // the cursor on) that took a whole pass's work-group.
        let mut last = None;
        // CUs left full lose their room bit; the bits are gathered per word (CU order).
        let (mut word, mut full) = (start / 64, 0u64);
        cus.reserve(n);
        for range in [start..n, 0..start] {
            for c in range {
                let f = self.fits[c];
                let mut give = f.min(passes);
                if partial > 0 && f > passes {
                    partial -= 1;
                    give += 1;
                    if partial == 0 {
                        last = Some(c);
                    }
                }
                if give > 0 {
                    self.free[c] -= give * waves;
                    self.load[c] += give * util;
                    if c / 64 != word {
                        self.room[word] &= !full;
                        (word, full) = (c / 64, 0);
                    }
                    full |= u64::from(self.free[c] == 0) << (c % 64);
                    cus.push((c as u32, give));
                }
            }
        }
        self.room[word] &= !full;
        let last = last.unwrap_or_else(|| {
            (start..n)
                .chain(0..start)
                .rev()
                .find(|&c| self.fits[c] >= passes)
                .unwrap_or(start)
        });
        self.free_total -= placed * u64::from(waves);
        self.cursor = if last + 1 == n { 0 } else { last + 1 };
        (placed, cus)
    }

    /// Gives back the slots (and the `util` load each) of `count` work-groups of `waves` waves
    /// placed at `cus`, and keeps the list for a later placement.
    pub(crate) fn release(&mut self, mut cus: Placement, waves: u32, count: u64, util: u32) {
        // The room bits are gathered per word (a list mostly runs in CU order, so the word
        // rarely changes).
        let (mut word, mut bits) = (0usize, 0u64);
        for &(cu, n) in &cus {
            let cu = cu as usize;
            self.free[cu] += n * waves;
            self.load[cu] -= n * util;
            if cu / 64 != word {
                self.room[word] |= bits;
                (word, bits) = (cu / 64, 0);
            }
            bits |= 1 << (cu % 64);
        }
        self.room[word] |= bits;
        cus.clear();
        self.spare.push(cus);
        self.free_total += count * u64::from(waves);
    }

    /// Updates CU `c`'s bit in `room` after its free slots changed.
    fn set_room(&mut self, c: usize) {
        let bit = 1u64 << (c % 64);
        if self.free[c] > 0 {
            self.room[c / 64] |= bit;
        } else {
            self.room[c / 64] &= !bit;
        }
    }
}

/// The first CU in `lo..hi` whose bit in `room` is set and that `fits` accepts.
fn first_with_room(
    room: &[u64],
    lo: usize,
    hi: usize,
    fits: impl Fn(usize) -> bool,
) -> Option<usize> {
    let mut c = lo;
    while c < hi {
        let word = room[c / 64] >> (c % 64);
        if word == 0 {
            c = (c / 64 + 1) * 64;
            continue;
        }
        let candidate = c + word.trailing_zeros() as usize;
        if candidate >= hi {
            return None;
        }
        if fits(candidate) {
            return Some(candidate);
        }
        c = candidate + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Work-groups per CU of a placement.
    fn per_cu(cus: usize, placed: &Placement) -> Vec<u32> {
        let mut v = vec![0; cus];
        for &(c, n) in placed {
            v[c as usize] += n;
        }
        v
    }

    #[test]
    fn a_batch_fills_whole_passes_then_a_partial_one_from_the_cursor() {
        // 4 CUs of 8 slots, 2-wave work-groups: 4 per CU at most.
        let mut s = Slots::new(4, 8);
        let (n, at) = s.place(None, 2, 1, 0);
        assert_eq!((n, at), (1, vec![(0, 1)]));
        // 6 more from CU 1: a whole pass over the 4 CUs, then CUs 1 and 2.
        let (n, at) = s.place(None, 2, 6, 0);
        assert_eq!(n, 6);
        assert_eq!(per_cu(4, &at), [1, 2, 2, 1]);
        assert_eq!(s.cursor, 3);
        assert_eq!(s.used(), 14);
        // More than fit: every CU filled, the rest not placed.
        let (n, _) = s.place(None, 2, 100, 0);
        assert_eq!(n, 9);
        assert_eq!(s.used(), 32);
        assert_eq!(s.place(None, 1, 1, 0).0, 0);
        // Released slots are found again, wherever the cursor is.
        s.release(vec![(2, 1)], 2, 1, 0);
        assert_eq!(s.place(None, 2, 5, 0), (1, vec![(2, 1)]));
    }

    #[test]
    fn a_mask_keeps_work_groups_off_other_cus_and_too_large_ones_do_not_fit() {
        let mut s = Slots::new(70, 4);
        let mask: Vec<bool> = (0..70).map(|c| c == 3 || c == 66).collect();
        let (n, at) = s.place(Some(&mask), 1, 100, 250);
        assert_eq!(n, 8);
        assert_eq!(per_cu(70, &at)[3], 4);
        assert_eq!(per_cu(70, &at)[66], 4);
        assert_eq!((s.free[3], s.free[66], s.free[4]), (0, 0, 4));
        assert_eq!((s.load(3), s.load(66), s.load(4)), (1000, 1000, 0));
        assert_eq!(s.place(Some(&mask), 1, 1, 0).0, 0);
        assert_eq!(s.place(None, 5, 1, 0).0, 0, "5 waves never fit 4 slots");
    }

    #[derive(Debug, Clone)]
    enum Op {
        Place {
            waves: u32,
            want: u64,
            mask: Option<Vec<bool>>,
        },
        /// Releases the n-th (mod count) placement still held.
        Release(usize),
    }

    fn op(cus: usize) -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (1u32..9, 0u64..300, proptest::option::of(proptest::collection::vec(any::<bool>(), cus)))
                .prop_map(|(waves, want, mask)| Op::Place { waves, want, mask }),
            1 => any::<usize>().prop_map(Op::Release),
        ]
    }

    fn case() -> impl Strategy<Value = (usize, u32, Vec<Op>)> {
        (1usize..140, 1u32..33).prop_flat_map(|(cus, per_cu)| {
            (
                Just(cus),
                Just(per_cu),
                proptest::collection::vec(op(cus), 1..40),
            )
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Placing `want` work-groups in one call puts them where `want` calls of one each
        /// would, and leaves the same free slots and cursor behind.
        #[test]
        fn batched_placement_equals_one_at_a_time((cus, slots_per_cu, ops) in case()) {
            let mut batched = Slots::new(cus, slots_per_cu);
            let mut single = Slots::new(cus, slots_per_cu);
            let mut held: Vec<(Placement, Placement, u32, u64)> = Vec::new();
            for op in ops {
                match op {
                    Op::Place { waves, want, mask } => {
                        let (n, at) = batched.place(mask.as_deref(), waves, want, waves * 10);
                        let mut one = Vec::new();
                        let mut m = 0;
                        while m < want {
                            let (k, at) = single.place(mask.as_deref(), waves, 1, waves * 10);
                            if k == 0 {
                                break;
                            }
                            m += k;
                            one.extend(at);
                        }
                        prop_assert_eq!(n, m);
                        prop_assert_eq!(per_cu(cus, &at), per_cu(cus, &one));
                        prop_assert_eq!(&batched.free, &single.free);
                        prop_assert_eq!(batched.cursor, single.cursor);
                        prop_assert_eq!(batched.free_total, single.free_total);
                        prop_assert_eq!(&batched.room, &single.room);
                        prop_assert_eq!(&batched.load, &single.load);
                        if n > 0 {
                            held.push((at, one, waves, n));
                        }
                    }
                    Op::Release(k) if !held.is_empty() => {
                        let (a, b, waves, n) = held.swap_remove(k % held.len());
                        batched.release(a, waves, n, waves * 10);
                        single.release(b, waves, n, waves * 10);
                        prop_assert_eq!(&batched.free, &single.free);
                        prop_assert_eq!(&batched.room, &single.room);
                    }
                    Op::Release(_) => {}
                }
                let free: u64 = batched.free.iter().map(|&f| u64::from(f)).sum();
                prop_assert_eq!(free, batched.free_total);
            }
        }
    }
}
