//! Where the trial under way is: its step and phase, set by the phase recorder at each phase's
//! start and read by what reports on a run from outside the training loop (its progress line,
//! an interrupt's message). Process-wide: one trial trains at a time.
use std::sync::Mutex;
use std::time::Instant;

use crate::schema::Phase;

/// Where the trial under way is.
#[derive(Debug, Clone, Copy)]
pub struct Position {
    pub steps: usize,
    pub started: Instant,
    /// The step and phase now under way (step 0: the set-up).
    pub step: usize,
    pub phase: Option<Phase>,
    /// When step 1 started: the steps' pace is measured from there.
    pub first_step: Option<Instant>,
}

static POSITION: Mutex<Option<Position>> = Mutex::new(None);

/// A trial of `steps` training steps starts now.
pub fn begin_trial(steps: usize) {
    if let Ok(mut p) = POSITION.lock() {
        *p = Some(Position { steps, started: Instant::now(), step: 0, phase: None, first_step: None });
    }
}

/// The trial under way enters `phase` of `step`.
pub fn enter(step: usize, phase: Phase) {
    if let Ok(mut guard) = POSITION.lock() {
        if let Some(p) = guard.as_mut() {
            if step >= 1 && p.first_step.is_none() {
                p.first_step = Some(Instant::now());
            }
            (p.step, p.phase) = (step, Some(phase));
        }
    }
}

/// No trial under way.
pub fn end_trial() {
    if let Ok(mut p) = POSITION.lock() {
        *p = None;
    }
}

/// Where the trial under way is now; `None` between trials.
pub fn now() -> Option<Position> {
    *POSITION.lock().ok()?
}
