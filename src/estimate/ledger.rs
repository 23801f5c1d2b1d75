//! A replay of the allocator: live bytes per category, and the peak of the current phase with
//! what was live at that moment. [`super::phases`] calls `alloc` and `free` in the order libtorch
//! allocates and frees, so the peaks come out as the allocator's own `max_memory_allocated`.
use serde::Serialize;

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
    /// `.grad` of every parameter, from backward to `zero_grad`.
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
        Category::ALL.iter().map(|&c| self.get(c)).sum()
    }
}

/// Live bytes and the phase's peak. Sizes given to it are already as the allocator counts them.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    live: Categories,
    /// What was live at the highest point since the last `reset_peak`.
    at_peak: Categories,
    peak: u64,
}

impl Ledger {
    pub fn alloc(&mut self, c: Category, bytes: u64) {
        *self.live.get_mut(c) += bytes;
        let total = self.live.total();
        if total > self.peak {
            self.peak = total;
            self.at_peak = self.live;
        }
    }

    /// Frees bytes allocated earlier under the same category.
    pub fn free(&mut self, c: Category, bytes: u64) {
        let slot = self.live.get_mut(c);
        debug_assert!(*slot >= bytes, "freeing {bytes} {c:?} bytes of {}", *slot);
        *slot = slot.saturating_sub(bytes);
    }

    /// The same bytes, now counted under another category (no allocation).
    pub fn recategorize(&mut self, from: Category, to: Category, bytes: u64) {
        self.free(from, bytes);
        *self.live.get_mut(to) += bytes;
    }

    /// Starts a phase: the peak restarts from what is live, as the probe's `reset_peak` does.
    pub fn reset_peak(&mut self) {
        self.peak = self.live.total();
        self.at_peak = self.live;
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
        l.recategorize(Category::Transient, Category::History, 10);
        assert_eq!((l.live().transient, l.live().history, l.peak()), (0, 10, 210));
    }
}
