//! A step of many micro-batches from a recording of [`RECORDED`]: gradient accumulation runs the
//! same code for every micro-batch, so a step of `k` is the first micro-batch (which makes the
//! gradients), `k - 2` middle ones that each do what the second does, and the last (whose loss
//! lives on through the optimizer step). Recording `k` of them costs `k` forwards and backwards
//! at each batch of the ladder, and `advise` weighs up to 1024: the recording of four is
//! extended instead, where its two middle micro-batches show the pattern every middle one repeats.
//!
//! The two middle micro-batches must match event for event, in sizes, ops and in what each
//! frees counted back from its own first allocation; each may free only what it or the one
//! before made, and what each makes must be freed in itself, in the next one, or not within the
//! step's recording, alike. Any other step is refused, and the estimate records the `k`
//! micro-batches as they are.
use anyhow::{bail, ensure, Result};

use super::{Event, Fit};
use crate::schema::Phase;

/// The micro-batches a step with more is recorded at: the first, two middle ones (compared),
/// the last.
pub(super) const RECORDED: usize = 4;

/// Where a micro-batch's events lie: `events` from the start of its first phase up to the next
/// micro-batch's (or the optimizer step's), `allocs` its allocations' numbers, `phases` its
/// phases' indices.
#[derive(Debug, Clone)]
struct Block {
    events: std::ops::Range<usize>,
    allocs: std::ops::Range<usize>,
    phases: std::ops::Range<usize>,
}

/// What happens to an allocation of a middle micro-batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Freed within its own micro-batch.
    Own,
    /// Freed by the next micro-batch.
    Next,
    /// Not freed within the recording (a loss the history keeps, with its graph).
    Kept,
}

impl Fit {
    /// This step (recorded with [`RECORDED`] micro-batches) with `k` of them: the second and
    /// third micro-batches replaced by `k - 2` copies of the third. Refused (with why) where
    /// the middle micro-batches do not repeat as the module says.
    pub(super) fn accumulated(&self, k: usize) -> Result<Fit> {
        ensure!(k >= RECORDED, "{k} micro-batches: the recording has {RECORDED}");
        let steps = self.micro_blocks()?;
        // Each step's second micro-batch's first allocation, and the allocations its copies add.
        let mut shifts: Vec<(usize, usize)> = Vec::new();
        for blocks in &steps {
            let [_, second, third, _] = blocks;
            self.repeats(blocks)?;
            let len = third.allocs.len();
            shifts.push((second.allocs.start, len * (k - RECORDED)));
        }
        // Allocation `old`'s number: after each step's second micro-batch starts, past its copies
        // (the second and third are the last two middle ones of `k`).
        let map =
            |old: usize| old + shifts.iter().filter(|(from, _)| old >= *from).map(|(_, n)| n).sum::<usize>();
        let mut out = Fit {
            events: Vec::new(),
            made_by: Vec::new(),
            phases: Vec::new(),
            extended: true,
            ..self.clone()
        };
        let (mut event, mut phase) = (0, 0);
        for [_, second, third, last] in &steps {
            out.copy(self, event..second.events.start, phase..second.phases.start, &map, None);
            // The first copy's allocations take the second's numbers as they would be with no
            // copies: what it frees of the first micro-batch is then found as the second's was.
            let first_copy = map(second.allocs.start) - (k - RECORDED) * third.allocs.len();
            for t in 0..k - 2 {
                out.copy_middle(self, third, first_copy + t * third.allocs.len(), 1 + t);
            }
            (event, phase) = (last.events.start, last.phases.start);
            out.copy(self, event..last.events.end, phase..last.phases.end, &map, Some(k - 1));
            (event, phase) = (last.events.end, last.phases.end);
        }
        out.copy(self, event..self.events.len(), phase..self.phases.len(), &map, None);
        Ok(out)
    }

    /// Appends `events` and `phases` of `from`, each allocation renumbered by `map`; with
    /// `micro`, the phases are that micro-batch's.
    fn copy(
        &mut self,
        from: &Fit,
        events: std::ops::Range<usize>,
        phases: std::ops::Range<usize>,
        map: &impl Fn(usize) -> usize,
        micro: Option<usize>,
    ) {
        let first_alloc = from.allocs_before(events.start);
        let mut alloc = first_alloc;
        for e in &from.events[events] {
            self.events.push(renumbered(e, map));
            if matches!(e, Event::Alloc { .. }) {
                self.made_by.push(from.made_by[alloc].clone());
                alloc += 1;
            }
        }
        self.phases.extend(from.phases[phases].iter().map(|&(s, m, p)| (s, micro.unwrap_or(m), p)));
    }

    /// Appends a copy of middle micro-batch `block` of `from` as micro-batch `micro`, its first
    /// allocation numbered `base`: what it frees is counted back from there, as in `block`.
    fn copy_middle(&mut self, from: &Fit, block: &Block, base: usize, micro: usize) {
        let start = block.allocs.start;
        let map = |old: usize| base + old - start;
        // A free of the micro-batch before: `old < start` counts back from `base`.
        let back = |old: usize| if old >= start { map(old) } else { base - (start - old) };
        for e in &from.events[block.events.clone()] {
            self.events.push(renumbered(e, &back));
        }
        self.made_by.extend(from.made_by[block.allocs.clone()].iter().cloned());
        self.phases.extend(from.phases[block.phases.clone()].iter().map(|&(s, _, p)| (s, micro, p)));
    }

    /// Allocations made before event `i`.
    fn allocs_before(&self, i: usize) -> usize {
        self.events[..i].iter().filter(|e| matches!(e, Event::Alloc { .. })).count()
    }

    /// Each training step's four micro-batches, in order.
    fn micro_blocks(&self) -> Result<Vec<[Block; RECORDED]>> {
        // The start of each phase, as an event index, and the allocations made before it.
        let mut starts = Vec::new();
        let mut allocs = 0;
        for (i, e) in self.events.iter().enumerate() {
            match e {
                Event::Start => starts.push((i, allocs)),
                Event::Alloc { .. } => allocs += 1,
                _ => {}
            }
        }
        ensure!(
            starts.len() == self.phases.len(),
            "{} phase starts in the recording for {} phases",
            starts.len(),
            self.phases.len()
        );
        let mut steps = Vec::new();
        let mut p = 0;
        while p < self.phases.len() {
            let (step, micro, phase) = self.phases[p];
            if phase != Phase::ToDevice || micro != 0 {
                p += 1;
                continue;
            }
            // The micro-batches' first phases, then the optimizer step's.
            let mut firsts = vec![p];
            let mut q = p + 1;
            while q < self.phases.len() && self.phases[q].2 != Phase::OptimizerStep {
                let (s, m, ph) = self.phases[q];
                ensure!(s == step, "step {step}'s micro-batches end without an optimizer step");
                if ph == Phase::ToDevice {
                    ensure!(m == firsts.len(), "step {step}'s micro-batch {m} follows {}", firsts.len() - 1);
                    firsts.push(q);
                } else {
                    ensure!(m == firsts.len() - 1, "step {step}'s {ph:?} is of micro-batch {m}");
                }
                q += 1;
            }
            ensure!(q < self.phases.len(), "step {step} has no optimizer step");
            ensure!(
                firsts.len() == RECORDED,
                "step {step} has {} micro-batches, not {RECORDED}",
                firsts.len()
            );
            firsts.push(q);
            let block = |m: usize| Block {
                events: starts[firsts[m]].0..starts[firsts[m + 1]].0,
                allocs: starts[firsts[m]].1..starts[firsts[m + 1]].1,
                phases: firsts[m]..firsts[m + 1],
            };
            steps.push([block(0), block(1), block(2), block(3)]);
            p = q;
        }
        if steps.is_empty() {
            bail!("the recording has no training step");
        }
        Ok(steps)
    }

    /// Whether the two middle micro-batches of a step repeat: the same events, counted from
    /// each one's first allocation, the same ops, phases and fates.
    fn repeats(&self, [_, second, third, last]: &[Block; RECORDED]) -> Result<()> {
        let relative = |b: &Block| -> Result<Vec<Event>> {
            // Counted from the micro-batch's first allocation, less one micro-batch's: what it
            // frees of the one before is then at or above 0.
            let from = b.allocs.start - b.allocs.len().min(b.allocs.start);
            let events = &self.events[b.events.clone()];
            if let Some(old) = events.iter().flat_map(named).find(|&old| old < from) {
                bail!("a middle micro-batch frees allocation {old}, made before the micro-batch before it");
            }
            Ok(events.iter().map(|e| renumbered(e, &|old| old - from)).collect())
        };
        ensure!(
            second.allocs.len() == third.allocs.len() && relative(second)? == relative(third)?,
            "its second and third micro-batches allocate and free differently"
        );
        ensure!(
            self.made_by[second.allocs.clone()] == self.made_by[third.allocs.clone()],
            "its second and third micro-batches allocate in other ops"
        );
        let kinds = |b: &Block| self.phases[b.phases.clone()].iter().map(|p| p.2).collect::<Vec<_>>();
        ensure!(kinds(second) == kinds(third), "its second and third micro-batches have other phases");
        let freed = self.freed_at();
        let fates = |b: &Block, next: &Block| -> Result<Vec<Fate>> {
            b.allocs
                .clone()
                .map(|a| match freed[a] {
                    None => Ok(Fate::Kept),
                    Some(i) if b.events.contains(&i) => Ok(Fate::Own),
                    Some(i) if next.events.contains(&i) => Ok(Fate::Next),
                    Some(_) => bail!("allocation {a} of a middle micro-batch is freed after the next one"),
                })
                .collect()
        };
        ensure!(
            fates(second, third)? == fates(third, last)?,
            "what its second and third micro-batches make lives on differently"
        );
        Ok(())
    }

    /// The event that frees each allocation, if one does.
    fn freed_at(&self) -> Vec<Option<usize>> {
        let mut freed = vec![None; self.made_by.len()];
        for (i, e) in self.events.iter().enumerate() {
            if let Event::Free { of } = e {
                if let Some(f) = freed.get_mut(*of) {
                    *f = Some(i);
                }
            }
        }
        freed
    }
}

/// The allocations `e` names.
fn named(e: &Event) -> Vec<usize> {
    match e {
        Event::Free { of } => vec![*of],
        Event::LayerNormGrads { grads, .. } => grads.iter().flatten().map(|(k, _)| *k).collect(),
        _ => Vec::new(),
    }
}

/// `e` with the allocations it names renumbered by `map`.
fn renumbered(e: &Event, map: &impl Fn(usize) -> usize) -> Event {
    match e {
        Event::Free { of } => Event::Free { of: map(*of) },
        Event::LayerNormGrads { input, grads } => {
            Event::LayerNormGrads { input: *input, grads: grads.map(|g| g.map(|(k, size)| (map(k), size))) }
        }
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::super::{Place, Span};
    use super::*;

    /// A recording's step built by name: allocations, frees and phases.
    #[derive(Default)]
    struct Builder {
        events: Vec<Event>,
        made_by: Vec<String>,
        phases: Vec<(usize, usize, Phase)>,
        live: HashMap<String, usize>,
    }

    impl Builder {
        fn alloc(&mut self, name: &str, a: i64, c: i64) {
            self.live.insert(name.into(), self.made_by.len());
            self.made_by.push(format!("op {}", name.split('#').next().unwrap()));
            self.events.push(Event::Alloc { a, c, place: Place::Device, span: Span::Outside });
        }

        fn free(&mut self, name: &str) {
            let of = self.live.remove(name).unwrap_or_else(|| panic!("{name} is not live"));
            self.events.push(Event::Free { of });
        }

        fn phase(&mut self, at: (usize, usize, Phase), body: impl FnOnce(&mut Self)) {
            self.phases.push(at);
            self.events.push(Event::Start);
            body(self);
            self.events.push(Event::End);
        }

        fn fit(self) -> Fit {
            let (events, made_by, phases) = (self.events, self.made_by, self.phases);
            let on = crate::train::record::RecordedOn::Cpu { not_meta: None };
            Fit { events, made_by, phases, param_count: 2, param_bytes: 8, extended: false, on }
        }
    }

    /// Two steps of `k` micro-batches: each micro-batch's input freed by the next one's
    /// gathering (a loader that prefetches), the first's backward making the gradient, the
    /// others' adding theirs into it, the last loss living through the optimizer step; with
    /// `history`, every loss kept with its activation.
    fn steps(k: usize, history: bool) -> Fit {
        let mut b = Builder::default();
        b.phase((0, 0, Phase::Model), |b| b.alloc("param", 8, 0));
        for step in 1..=2 {
            for m in 0..k {
                let x = format!("x#{step}.{m}");
                b.phase((step, m, Phase::ToDevice), |b| {
                    b.alloc(&x, 0, 4);
                    if m > 0 {
                        b.free(&format!("x#{step}.{}", m - 1));
                    }
                });
                let (act, loss) = (format!("act#{step}.{m}"), format!("loss#{step}.{m}"));
                b.phase((step, m, Phase::Forward), |b| {
                    b.alloc(&act, 16, 8);
                    b.alloc(&loss, 4, 0);
                });
                b.phase((step, m, Phase::Backward), |b| {
                    b.alloc("g", 8, 0);
                    if m == 0 {
                        b.live.insert("grad".into(), b.live["g"]);
                        b.live.remove("g");
                    } else {
                        b.free("g");
                    }
                    if !history {
                        b.free(&act);
                    }
                });
                if !history && m + 1 < k {
                    b.free(&loss);
                }
            }
            b.free(&format!("x#{step}.{}", k - 1));
            b.phase((step, 0, Phase::OptimizerStep), |b| {
                if step == 1 {
                    b.alloc("state", 16, 0);
                }
                if !history {
                    b.free(&format!("loss#{step}.{}", k - 1));
                }
            });
            b.phase((step, 0, Phase::ZeroGrad), |b| b.free("grad"));
        }
        b.fit()
    }

    #[test]
    fn a_step_of_four_micro_batches_extended_is_the_step_of_k() {
        for history in [false, true] {
            let four = steps(RECORDED, history);
            for k in RECORDED..=9 {
                let got = four.accumulated(k).unwrap_or_else(|e| panic!("k {k}: {e:#}"));
                assert_eq!(got, Fit { extended: true, ..steps(k, history) }, "k {k}, history {history}");
            }
        }
    }

    #[test]
    fn middle_micro_batches_that_do_not_repeat_are_refused() {
        // The third micro-batch's activation is larger.
        let mut four = steps(RECORDED, false);
        let third = four.made_by.iter().enumerate().filter(|(_, op)| *op == "op act").nth(2).unwrap().0;
        let i = four
            .events
            .iter()
            .enumerate()
            .filter(|(_, e)| matches!(e, Event::Alloc { .. }))
            .nth(third)
            .unwrap()
            .0;
        four.events[i] = Event::Alloc { a: 16, c: 9, place: Place::Device, span: Span::Outside };
        let err = four.accumulated(8).unwrap_err().to_string();
        assert!(err.contains("second and third"), "{err}");
        // The third frees the first micro-batch's input, two micro-batches back.
        let mut b = Builder::default();
        b.phase((0, 0, Phase::Model), |b| b.alloc("param", 8, 0));
        for m in 0..RECORDED {
            b.phase((1, m, Phase::ToDevice), |b| {
                b.alloc(&format!("x{m}"), 0, 4);
                if m == 2 {
                    b.free("x0");
                }
            });
        }
        b.phase((1, 0, Phase::OptimizerStep), |_| {});
        let err = b.fit().accumulated(8).unwrap_err().to_string();
        assert!(err.contains("before the micro-batch before it"), "{err}");
        // Fewer micro-batches than recorded.
        assert!(steps(RECORDED, false).accumulated(3).is_err());
        assert!(steps(5, false).accumulated(8).is_err(), "a step of five is not the recording of four");
    }
}
