//! A replay of the allocator: live bytes per category, and the peak of the current phase with
//! what was live at that moment. [`super::phases`] calls `alloc` and `free` in the order libtorch
//! allocates and frees, so the peaks come out as the allocator's own `max_memory_allocated`.
use std::cell::RefCell;
use std::collections::HashMap;
use std::panic::Location;
use std::rc::Rc;

use serde::Serialize;

use super::caching::{BlockId, CachingAllocator, OutOfMemory};
use crate::schema::Phase;

/// One allocation or free of the replay, in order (`estimate --blocks`): what a GPU's
/// allocation history (`torch.cuda.memory._snapshot()`) or the CPU's counting allocator log is
/// held against, so that a difference is pinned to the first allocation where they part.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BlockEvent {
    pub step: usize,
    pub micro: usize,
    pub phase: Phase,
    /// Alloc or free; on CUDA also a segment's alloc, just before the allocation that made
    /// the segment (`requested` and `block` are then the segment's size), as a GPU's history
    /// records `cudaMalloc`; and a cuDNN mark, where a convolution takes its workspace
    /// (`requested` the replay's size, 0 where unmeasured; `site` the call; no allocation).
    /// Between phases, the `Outside` form, under the phase that follows.
    pub action: BlockAction,
    /// The bytes asked for (a tensor's storage).
    pub requested: u64,
    /// The bytes the allocator counts for it: on CUDA the block (512-byte rounding, an unsplit
    /// remainder), on the CPU the request.
    pub block: u64,
    pub category: &'static str,
    /// CUDA: "small" (blocks up to 1 MiB) or "large"; the CPU: "cpu"; a mark: "-".
    pub pool: &'static str,
    /// The replay's line that made the event: the op, as the estimate models it.
    pub site: String,
}

/// What an allocator event did, in the words of PyTorch's allocation history (which
/// `scripts/reference/compare.py` reads beside the estimate's `--blocks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockAction {
    Alloc,
    Free,
    /// CUDA: a segment made (`cudaMalloc`), just before the allocation that made it.
    SegmentAlloc,
    SegmentFree,
    /// A mark where a cuDNN convolution takes its workspace (no allocation of its own).
    Cudnn,
    /// The same, between phases: filed under the phase that follows.
    OutsideAlloc,
    OutsideFree,
    OutsideSegmentAlloc,
    OutsideSegmentFree,
}

impl BlockAction {
    /// The word PyTorch's history (and `--blocks`) writes for it.
    pub fn as_str(self) -> &'static str {
        match self {
            BlockAction::Alloc => "alloc",
            BlockAction::Free => "free",
            BlockAction::SegmentAlloc => "segment_alloc",
            BlockAction::SegmentFree => "segment_free",
            BlockAction::Cudnn => "cudnn",
            BlockAction::OutsideAlloc => "outside_alloc",
            BlockAction::OutsideFree => "outside_free",
            BlockAction::OutsideSegmentAlloc => "outside_segment_alloc",
            BlockAction::OutsideSegmentFree => "outside_segment_free",
        }
    }

    /// The action between phases, as train.py's history names it.
    fn outside(self) -> BlockAction {
        match self {
            BlockAction::Alloc => BlockAction::OutsideAlloc,
            BlockAction::Free => BlockAction::OutsideFree,
            BlockAction::SegmentAlloc => BlockAction::OutsideSegmentAlloc,
            BlockAction::SegmentFree => BlockAction::OutsideSegmentFree,
            other => other,
        }
    }
}

/// What a byte is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// The data set on the device: features and int64 labels.
    Data,
    /// The step's batch, when it is a copy (`index_select`) rather than a view of the data set.
    Batch,
    /// Weights and biases.
    Params,
    /// `.grad` of every parameter, from backward to `zero_grad`; and DDP's buckets, a rank's
    /// second copy of the gradients, from the wrap to the trial's end.
    Grads,
    /// Momentum buffers, Adam's two moments; the fp16 grad scaler's scale and growth tracker.
    OptimizerState,
    /// What the autograd graph keeps from forward to backward (ReLU outputs, log-probabilities,
    /// the loss), and the loss after it.
    Activations,
    /// Autocast's low-precision copies: the cached casts of the weights (until autocast exits,
    /// or backward when the graph saved them) and the batch's cast.
    AmpCopies,
    /// What lives only inside a phase: pre-activation Linear outputs, logits, gradients in
    /// flight during backward, optimizer temporaries, index tensors, wrapped scalars.
    Transient,
    /// What the loop keeps from step to step (`history = "loss_tensor"`: each loss, and without a
    /// backward its whole graph).
    History,
}

impl Category {
    pub const ALL: [Category; 9] = [
        Category::Data,
        Category::Batch,
        Category::Params,
        Category::Grads,
        Category::OptimizerState,
        Category::Activations,
        Category::AmpCopies,
        Category::Transient,
        Category::History,
    ];

    /// A short column name.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Data => "data",
            Category::Batch => "batch",
            Category::Params => "params",
            Category::Grads => "grads",
            Category::OptimizerState => "opt_state",
            Category::Activations => "activations",
            Category::AmpCopies => "amp_copies",
            Category::Transient => "transient",
            Category::History => "history",
        }
    }
}

/// Bytes per category.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Categories {
    pub data: u64,
    pub batch: u64,
    pub params: u64,
    pub grads: u64,
    pub optimizer_state: u64,
    pub activations: u64,
    pub amp_copies: u64,
    pub transient: u64,
    pub history: u64,
}

impl Categories {
    pub fn get(&self, c: Category) -> u64 {
        match c {
            Category::Data => self.data,
            Category::Batch => self.batch,
            Category::Params => self.params,
            Category::Grads => self.grads,
            Category::OptimizerState => self.optimizer_state,
            Category::Activations => self.activations,
            Category::AmpCopies => self.amp_copies,
            Category::Transient => self.transient,
            Category::History => self.history,
        }
    }

    fn get_mut(&mut self, c: Category) -> &mut u64 {
        match c {
            Category::Data => &mut self.data,
            Category::Batch => &mut self.batch,
            Category::Params => &mut self.params,
            Category::Grads => &mut self.grads,
            Category::OptimizerState => &mut self.optimizer_state,
            Category::Activations => &mut self.activations,
            Category::AmpCopies => &mut self.amp_copies,
            Category::Transient => &mut self.transient,
            Category::History => &mut self.history,
        }
    }

    pub fn total(&self) -> u64 {
        Category::ALL.iter().fold(0u64, |sum, &c| sum.saturating_add(self.get(c)))
    }
}

/// Live bytes and the phase's peak. Sizes given to it are already as the allocator counts them
/// on the CPU; on CUDA each allocation is a block of the caching allocator's replay
/// ([`CachingAllocator`]), which may count more (an unsplit remainder) and reserves segments.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    live: Categories,
    /// What was live at the highest point since the last `reset_peak`.
    at_peak: Categories,
    peak: u64,
    /// Allocations so far, and how many there had been at the peak: a block made by then and
    /// still live was live at the peak, so refiling it refiles it there too.
    made: u64,
    made_at_peak: u64,
    cuda: Option<Blocks>,
    /// CPU: the budget the counting allocator enforces (it refuses the allocation that would
    /// take the live bytes past it), and the first allocation it would refuse.
    cap: Option<u64>,
    over: Option<OutOfMemory>,
    /// When recording: every event so far, and the phase they fall in.
    log: Option<Vec<BlockEvent>>,
    label: (usize, usize, Option<Phase>),
    /// When recording: events since the last phase ended, written with the phase that follows
    /// (as a GPU history's are, by scripts/reference/train.py).
    between: Vec<BlockEvent>,
    /// The op the next events come from, where the caller knows it (a recorded step's): the
    /// log's `site` then names it instead of the replay's line.
    op: Option<String>,
}

/// The CUDA side: the allocator's replay and, per category, the blocks live in it (the bytes
/// asked for, the block, the bytes it counts), most recent last.
#[derive(Debug, Clone)]
struct Blocks {
    allocator: CachingAllocator,
    live: HashMap<Category, Vec<(u64, BlockId, u64)>>,
    /// What was there before the trial: allocated and reserved bytes.
    baseline: (u64, u64),
    /// The first request the limit refused.
    refused: Option<OutOfMemory>,
}

impl Ledger {
    /// A ledger for a CUDA device: the allocator's replay under `limit`, holding `workspaces`
    /// (made in that order, before the trial) outside every category.
    pub fn cuda(limit: Option<u64>, workspaces: impl IntoIterator<Item = u64>) -> Self {
        let mut allocator = CachingAllocator::new(limit);
        // Workspaces the limit refuses are refused in a run too (its warm-up, then each
        // trial's first matrix product, asks for them under the same memory fraction): the
        // trial is out of memory from its first phase, whatever it allocates itself.
        let mut refused = None;
        for w in workspaces.into_iter().filter(|&w| w > 0) {
            refused = refused.or(allocator.malloc(w).2);
        }
        let baseline = (allocator.allocated(), allocator.reserved());
        allocator.reset_peak();
        let cuda = Blocks { allocator, live: HashMap::new(), baseline, refused };
        Ledger { cuda: Some(cuda), ..Ledger::default() }
    }

    /// A ledger for the CPU under the counting allocator's `cap`, if any.
    pub fn cpu(cap: Option<u64>) -> Self {
        Ledger { cap, ..Ledger::default() }
    }

    /// Records every allocation and free from now on ([`BlockEvent`]).
    pub fn record(&mut self) {
        self.log.get_or_insert_with(Vec::new);
    }

    /// The phase the next events fall in; what happened since the last phase ended is logged
    /// under it, as `outside_` events.
    pub fn label(&mut self, step: usize, micro: usize, phase: Phase) {
        self.label = (step, micro, Some(phase));
        if let Some(log) = &mut self.log {
            log.extend(self.between.drain(..).map(|e| BlockEvent { step, micro, phase, ..e }));
        }
    }

    /// The op the next events come from, for the log (`None`: the replay's own line).
    pub fn at_op(&mut self, op: Option<&str>) {
        self.op = op.filter(|o| !o.is_empty()).map(str::to_string);
    }

    /// Between phases: a probe reads only inside them, so what the loop frees between them falls
    /// in no phase's trace row; the log keeps it, as `outside_alloc` / `outside_free` under the
    /// next phase.
    pub fn unlabel(&mut self) {
        self.label.2 = None;
    }

    /// The events recorded (empty when not recording); those after the last phase under it.
    pub fn take_log(&mut self) -> Vec<BlockEvent> {
        let mut log = self.log.take().unwrap_or_default();
        log.append(&mut self.between);
        log
    }

    fn note(&mut self, action: BlockAction, requested: u64, block: u64, c: Category, site: &Location) {
        self.note_in(action, requested, block, c, site, block);
    }

    /// [`Self::note`] in the pool of a block of `pooled` bytes (a segment is in its request's).
    fn note_in(
        &mut self,
        action: BlockAction,
        requested: u64,
        block: u64,
        c: Category,
        site: &Location,
        pooled: u64,
    ) {
        let pool = match (&self.cuda, pooled) {
            (None, _) => "cpu",
            (Some(_), b) if b <= super::caching::SMALL_SIZE => "small",
            (Some(_), _) => "large",
        };
        if self.log.is_some() {
            let site = self.op.clone().unwrap_or_else(|| format!("{}:{}", site.file(), site.line()));
            self.log_event(action, requested, block, c, pool, site);
        }
    }

    /// Appends an event to the log, when recording: inside a phase as it is, between phases
    /// as `outside_` to be labelled by the next phase (until then, the last one's).
    fn log_event(
        &mut self,
        action: BlockAction,
        requested: u64,
        block: u64,
        c: Category,
        pool: &'static str,
        site: String,
    ) {
        let Some(log) = &mut self.log else { return };
        let (step, micro, phase) = self.label;
        let category = c.as_str();
        match phase {
            Some(phase) => {
                log.push(BlockEvent { step, micro, phase, action, requested, block, category, pool, site })
            }
            None => {
                let phase = log.last().map_or(Phase::Data, |e| e.phase);
                let action = action.outside();
                self.between.push(BlockEvent {
                    step,
                    micro,
                    phase,
                    action,
                    requested,
                    block,
                    category,
                    pool,
                    site,
                });
            }
        }
    }

    #[track_caller]
    pub fn alloc(&mut self, c: Category, bytes: u64) {
        let site = Location::caller();
        let mut made = None;
        let counted = match &mut self.cuda {
            Some(_) if bytes == 0 => 0,
            Some(b) => {
                let (id, counted, refused, segment) = b.allocator.malloc_made(bytes);
                b.refused = b.refused.or(refused);
                b.live.entry(c).or_default().push((bytes, id, counted));
                made = segment;
                counted
            }
            None => {
                // `cpu_alloc` in ffi/shim.cpp: live + bytes over the cap is refused.
                let live = self.live.total();
                if self.over.is_none() && self.cap.is_some_and(|cap| live.saturating_add(bytes) > cap) {
                    self.over = Some(OutOfMemory { requested: bytes, reserved: live });
                }
                bytes
            }
        };
        if bytes > 0 && self.log.is_some() {
            if let Some(segment) = made {
                self.note_in(BlockAction::SegmentAlloc, segment, segment, c, site, counted);
            }
            self.note(BlockAction::Alloc, bytes, counted, c, site);
        }
        let slot = self.live.get_mut(c);
        *slot = slot.saturating_add(counted);
        self.made += 1;
        let total = self.live.total();
        if total > self.peak {
            self.peak = total;
            self.at_peak = self.live;
            self.made_at_peak = self.made;
        }
    }

    /// Frees bytes allocated earlier under the same category: one allocation of that size, or
    /// several that add up to it (a graph's saved tensors), the most recent first.
    #[track_caller]
    pub fn free(&mut self, c: Category, bytes: u64) {
        let site = Location::caller();
        let freed: Vec<(u64, u64)> = match &mut self.cuda {
            Some(b) => {
                b.take(c, bytes).into_iter().map(|(asked, id, _)| (asked, b.allocator.free(id))).collect()
            }
            None if bytes > 0 => vec![(bytes, bytes)],
            None => Vec::new(),
        };
        if self.log.is_some() {
            for &(asked, block) in &freed {
                self.note(BlockAction::Free, asked, block, c, site);
            }
        }
        let counted = freed.iter().map(|f| f.1).sum();
        self.uncount(c, counted);
    }

    /// Takes `counted` bytes off category `c`'s live total (never more than it holds).
    fn uncount(&mut self, c: Category, counted: u64) {
        let slot = self.live.get_mut(c);
        debug_assert!(*slot >= counted, "taking {counted} {c:?} bytes off {}", *slot);
        *slot = slot.saturating_sub(counted);
    }

    /// Starts a phase: the peak restarts from what is live, as the probe's `reset_peak` does.
    pub fn reset_peak(&mut self) {
        self.peak = self.live.total();
        self.at_peak = self.live;
        self.made_at_peak = self.made;
        if let Some(b) = &mut self.cuda {
            b.allocator.reset_peak();
        }
    }

    pub fn live(&self) -> Categories {
        self.live
    }

    pub fn peak(&self) -> u64 {
        self.peak
    }

    pub fn at_peak(&self) -> Categories {
        self.at_peak
    }

    /// Reserved memory now and its peak since the phase began, over the baseline's (on the CPU,
    /// which has no cache, the allocated ones).
    pub fn reserved(&self) -> (u64, u64) {
        match &self.cuda {
            Some(b) => {
                let base = b.baseline.1;
                (
                    b.allocator.reserved().saturating_sub(base),
                    b.allocator.peak_reserved().saturating_sub(base),
                )
            }
            None => (self.live.total(), self.peak),
        }
    }

    /// Allocated and reserved bytes before the trial (the workspaces; zero on the CPU).
    pub fn baseline(&self) -> (u64, u64) {
        self.cuda.as_ref().map_or((0, 0), |b| b.baseline)
    }

    /// The first allocation the limit refused, if one was.
    pub fn refused(&self) -> Option<OutOfMemory> {
        self.cuda.as_ref().and_then(|b| b.refused).or(self.over)
    }
}

/// One allocation, to be freed by name: `free` takes the most recent of a size, which is the
/// wrong block on CUDA when an older one of the same size goes first (a square root freed after
/// the quotient made from it).
#[derive(Debug, Clone, Copy)]
pub struct Held {
    c: Category,
    bytes: u64,
    block: Option<BlockId>,
    /// Its place among the ledger's allocations (`Ledger::made` once it was made).
    made: u64,
}

impl Ledger {
    /// A CUDA reduction's staging buffer and semaphores (`cuda_reduce::sum_rows_staging`), held
    /// for the kernel's life: the buffer, then the semaphores, freed in the reverse order.
    #[track_caller]
    pub fn hold_staging(&mut self, staging: Option<(u64, u64)>) {
        if let Some((buffer, semaphores)) = staging {
            let buffer = self.hold(Category::Transient, buffer);
            let semaphores = self.hold(Category::Transient, semaphores);
            self.release(semaphores);
            self.release(buffer);
        }
    }

    /// A kernel's workspace (cuDNN's convolutions, `cudnn_conv`): first a mark in the log that
    /// allocates nothing, naming `what` (its site) and the `bytes` a GPU measured (0: unknown),
    /// for a script to read the size off a GPU's history; then those bytes held for the kernel
    /// and freed (none where unknown).
    #[track_caller]
    pub fn hold_workspace(&mut self, action: BlockAction, bytes: Option<u64>, what: String) {
        self.log_event(action, bytes.unwrap_or(0), 0, Category::Transient, "-", what);
        if let Some(bytes) = bytes.filter(|&b| b > 0) {
            let held = self.hold(Category::Transient, bytes);
            self.release(held);
        }
    }

    /// Allocates like `alloc` and returns the allocation, for [`Ledger::release`].
    #[track_caller]
    pub fn hold(&mut self, c: Category, bytes: u64) -> Held {
        self.alloc(c, bytes);
        let block = match &self.cuda {
            Some(b) if bytes > 0 => b.live.get(&c).and_then(|l| l.last()).map(|e| e.1),
            _ => None,
        };
        Held { c, bytes, block, made: self.made }
    }

    /// The allocation `held`, filed under `to` from now on (no allocation). When it was live at
    /// the phase's peak, the peak's categories say so too: a tensor is often known for what it
    /// is only just after it is made (an output a node then saves, a gradient that becomes a
    /// `.grad`), and the peak is often that moment.
    pub fn refile(&mut self, held: Held, to: Category) -> Held {
        let counted = match (&mut self.cuda, held.block) {
            (Some(b), Some(id)) => {
                let list = b.live.get_mut(&held.c).expect("a held block's category is live");
                let i = list.iter().position(|e| e.1 == id).expect("a held block is live");
                let entry = list.remove(i);
                b.live.entry(to).or_default().push(entry);
                entry.2
            }
            (Some(_), None) => 0,
            (None, _) => held.bytes,
        };
        self.uncount(held.c, counted);
        let slot = self.live.get_mut(to);
        *slot = slot.saturating_add(counted);
        if held.made <= self.made_at_peak {
            let from = self.at_peak.get_mut(held.c);
            *from = from.saturating_sub(counted);
            let slot = self.at_peak.get_mut(to);
            *slot = slot.saturating_add(counted);
        }
        Held { c: to, ..held }
    }

    /// Frees exactly the allocation `held`.
    #[track_caller]
    pub fn release(&mut self, held: Held) {
        let site = Location::caller();
        let counted = match (&mut self.cuda, held.block) {
            (Some(b), Some(id)) => {
                let list = b.live.get_mut(&held.c).expect("a held block's category is live");
                let i = list.iter().position(|e| e.1 == id).expect("a held block is released once");
                let (_, id, _) = list.remove(i);
                b.allocator.free(id)
            }
            (Some(_), None) => 0,
            (None, _) => held.bytes,
        };
        if held.bytes > 0 && self.log.is_some() {
            self.note(BlockAction::Free, held.bytes, counted, held.c, site);
        }
        self.uncount(held.c, counted);
    }
}

/// A ledger shared by the replay's driver and the symbolic tensors (which free themselves when
/// their last holder lets go): the same calls, through a shared handle.
#[derive(Debug, Clone)]
pub struct Shared(Rc<RefCell<Ledger>>);

impl Shared {
    pub fn new(ledger: Ledger) -> Self {
        Shared(Rc::new(RefCell::new(ledger)))
    }

    #[track_caller]
    pub fn alloc(&self, c: Category, bytes: u64) {
        self.0.borrow_mut().alloc(c, bytes)
    }

    #[track_caller]
    pub fn free(&self, c: Category, bytes: u64) {
        self.0.borrow_mut().free(c, bytes)
    }

    #[track_caller]
    pub fn hold(&self, c: Category, bytes: u64) -> Held {
        self.0.borrow_mut().hold(c, bytes)
    }

    #[track_caller]
    pub fn release(&self, held: Held) {
        self.0.borrow_mut().release(held)
    }

    #[track_caller]
    pub fn hold_staging(&self, staging: Option<(u64, u64)>) {
        self.0.borrow_mut().hold_staging(staging)
    }

    #[track_caller]
    pub fn hold_workspace(&self, action: BlockAction, bytes: Option<u64>, what: String) {
        self.0.borrow_mut().hold_workspace(action, bytes, what)
    }

    pub fn refile(&self, held: Held, to: Category) -> Held {
        self.0.borrow_mut().refile(held, to)
    }

    /// The bytes an allocation asked for.
    pub fn bytes_of(&self, held: Held) -> u64 {
        held.bytes
    }

    pub fn reset_peak(&self) {
        self.0.borrow_mut().reset_peak()
    }

    pub fn record(&self) {
        self.0.borrow_mut().record()
    }

    pub fn label(&self, step: usize, micro: usize, phase: Phase) {
        self.0.borrow_mut().label(step, micro, phase)
    }

    pub fn unlabel(&self) {
        self.0.borrow_mut().unlabel()
    }

    pub fn take_log(&self) -> Vec<BlockEvent> {
        self.0.borrow_mut().take_log()
    }

    pub fn live(&self) -> Categories {
        self.0.borrow().live()
    }

    pub fn peak(&self) -> u64 {
        self.0.borrow().peak()
    }

    pub fn at_peak(&self) -> Categories {
        self.0.borrow().at_peak()
    }

    pub fn reserved(&self) -> (u64, u64) {
        self.0.borrow().reserved()
    }

    pub fn baseline(&self) -> (u64, u64) {
        self.0.borrow().baseline()
    }

    pub fn refused(&self) -> Option<OutOfMemory> {
        self.0.borrow().refused()
    }
}

impl Blocks {
    /// Takes live blocks of category `c` asked for with `bytes` in all: the most recent of
    /// exactly that size, else the most recent that add up to it.
    fn take(&mut self, c: Category, bytes: u64) -> Vec<(u64, BlockId, u64)> {
        let Some(list) = self.live.get_mut(&c) else { return Vec::new() };
        if bytes == 0 {
            return Vec::new();
        }
        if let Some(i) = list.iter().rposition(|e| e.0 == bytes) {
            return vec![list.remove(i)];
        }
        let mut left = bytes;
        let mut taken = Vec::new();
        let mut i = list.len();
        while i > 0 && left > 0 {
            i -= 1;
            if list[i].0 <= left {
                left -= list[i].0;
                taken.push(list.remove(i));
            }
        }
        debug_assert_eq!(left, 0, "no live {c:?} blocks add up to {bytes}");
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspaces_over_the_limit_are_refused_before_the_trial_allocates() {
        let ws = [32 << 20, 1 << 20, 32 << 20];
        assert_eq!(Ledger::cuda(Some(100 << 20), ws).refused(), None);
        let l = Ledger::cuda(Some(1 << 20), ws);
        assert_eq!(l.refused(), Some(OutOfMemory { requested: 32 << 20, reserved: 0 }));
        // The later ones too would be refused, but the first refusal is the one reported.
        let l = Ledger::cuda(Some(40 << 20), ws);
        assert_eq!(l.refused(), Some(OutOfMemory { requested: 32 << 20, reserved: 34 << 20 }));
    }

    #[test]
    fn a_held_block_is_the_one_released() {
        let mut l = Ledger::cuda(None, []);
        let older = l.hold(Category::Transient, 4 << 20);
        l.alloc(Category::Transient, 4 << 20);
        l.release(older);
        // The newer block is still live: freeing by size now takes it, and nothing is left.
        assert_eq!(l.live().transient, 4 << 20);
        l.free(Category::Transient, 4 << 20);
        assert_eq!(l.live().transient, 0);
        let mut cpu = Ledger::default();
        let h = cpu.hold(Category::Grads, 12);
        cpu.release(h);
        assert_eq!(cpu.live().total(), 0);
    }

    #[test]
    fn the_peak_remembers_what_was_live_then() {
        let mut l = Ledger::default();
        l.alloc(Category::Params, 100);
        l.reset_peak();
        l.alloc(Category::Transient, 50);
        l.alloc(Category::Grads, 100);
        l.free(Category::Transient, 50);
        l.alloc(Category::Transient, 10);
        assert_eq!(l.peak(), 250);
        assert_eq!(l.at_peak().transient, 50);
        assert_eq!(l.at_peak().total(), 250);
        assert_eq!(l.live().total(), 210);
        l.reset_peak();
        assert_eq!(l.peak(), 210);
    }

    #[test]
    fn a_block_refiled_after_the_peak_is_refiled_at_the_peak_if_it_was_live_then() {
        for mut l in [Ledger::default(), Ledger::cuda(None, [])] {
            let before = l.hold(Category::Transient, 512);
            let at = l.hold(Category::Transient, 1024);
            let gone = l.hold(Category::Transient, 2048);
            l.release(gone);
            let after = l.hold(Category::Transient, 512);
            l.refile(before, Category::Grads);
            l.refile(at, Category::Activations);
            l.refile(after, Category::Grads);
            let p = l.at_peak();
            assert_eq!((p.grads, p.activations, p.transient), (512, 1024, 2048));
            assert_eq!((l.live().grads, l.live().activations, l.live().transient), (1024, 1024, 0));
        }
    }
}
