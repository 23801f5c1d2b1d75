//! Where a recorded step's fit comes from: recordings at a ladder of small batches, each fitted
//! once per process, and past them a recording at the batch asked for (of the step itself, or
//! of one like it) that checks the fit there.
use std::sync::{Arc, Mutex};

use anyhow::Result;

use super::{accumulation, Fit, On, Replayed};
use crate::spec::Config;
use crate::train::record::{record_for_cpu, record_for_cuda, RecordedOn, Recording};

/// A recording of `config`'s step, as it stands for a CUDA run where `for_cuda`.
fn record_as(config: &Config, for_cuda: bool) -> Result<Recording> {
    if for_cuda {
        record_for_cuda(config)
    } else {
        record_for_cpu(config)
    }
}

/// The batches a step is recorded at, tried in turn: the fit takes the first and last of a set,
/// the middle checks it. Some CPU kernels (oneDNN's convolutions) take buffers at small batches
/// that they do not take at larger ones, so a set whose recordings part is followed by a set of
/// larger batches.
pub(super) const LADDER: [[usize; 3]; 4] = [[4, 6, 8], [16, 24, 32], [32, 48, 64], [64, 96, 128]];

/// The fit for `config`'s step whatever its batch, recorded once per process: the first set of
/// [`LADDER`] within the data set whose recordings agree; the batches it was fitted at. A step
/// that no set fits is refused once: asking again (a search over the batch, `advise`'s options)
/// gets the same answer without recording the ladder again.
pub(super) fn fit(
    config: &Config,
    samples: usize,
    budget: Option<std::time::Duration>,
    for_cuda: bool,
) -> Result<(Arc<Fit>, [usize; 3])> {
    type Fits = Vec<(String, std::result::Result<(Arc<Fit>, [usize; 3]), String>)>;
    static FITS: Mutex<Fits> = Mutex::new(Vec::new());
    let config = &one_place(config);
    let mut key = config.clone();
    key.training.batch_size = 0;
    let key = format!("{samples} {for_cuda} {}", serde_json::to_string(&key)?);
    if let Some((_, known)) = FITS.lock().unwrap_or_else(|e| e.into_inner()).iter().find(|(k, _)| *k == key) {
        return known.clone().map_err(|e| anyhow::anyhow!(e));
    }
    // Many micro-batches: the step recorded with four, extended where its middle ones repeat;
    // else recorded as it is.
    let extended = match fewer_micro_batches(config) {
        Some((four, k)) => {
            let (four, batches) = fit(&four, samples, budget, for_cuda)?;
            four.accumulated(k).ok().map(|f| (Arc::new(f), batches))
        }
        None => None,
    };
    let fitted = extended.map_or_else(|| fit_ladder(config, samples, budget, for_cuda), Ok);
    // Only the step's own verdicts are kept: an error in recording (a file gone) is not.
    if let Ok(f) = &fitted {
        FITS.lock().unwrap_or_else(|e| e.into_inner()).push((key, Ok(f.clone())));
    } else if let Err(Refusal(why)) = &fitted {
        FITS.lock().unwrap_or_else(|e| e.into_inner()).push((key, Err(why.clone())));
    }
    fitted.map_err(|e| match e {
        Refusal(why) => anyhow::anyhow!(why),
        Failed(e) => e,
    })
}

/// `config` with [`accumulation::RECORDED`] micro-batches a step, and its own count, where it
/// has more: a recording of four is extended to its count.
pub(super) fn fewer_micro_batches(config: &Config) -> Option<(Config, usize)> {
    let k = config.training.techniques.accumulation;
    (k > accumulation::RECORDED).then(|| {
        let mut four = config.clone();
        four.training.techniques.accumulation = accumulation::RECORDED;
        (four, k)
    })
}

/// Why a step has no fit: no set of the ladder agreed (a verdict on the step), or recording
/// failed.
pub(super) enum NoFit {
    Refusal(String),
    Failed(anyhow::Error),
}
use NoFit::{Failed, Refusal};

pub(super) fn fit_ladder(
    config: &Config,
    samples: usize,
    budget: Option<std::time::Duration>,
    for_cuda: bool,
) -> std::result::Result<(Arc<Fit>, [usize; 3]), NoFit> {
    let at = |batch: usize| {
        let mut c = config.clone();
        c.training.batch_size = batch;
        c
    };
    let mut why = Vec::new();
    let started = std::time::Instant::now();
    for batches in LADDER.into_iter().filter(|b| b[2] <= samples) {
        // Each set costs more than the one before (larger batches): past the budget, a step
        // that no set has fitted yet is left to `oomlab run`.
        if !why.is_empty() && budget.is_some_and(|b| started.elapsed() > b) {
            why.push(format!(
                "the larger batches not tried: recording took {:.0} s already",
                started.elapsed().as_secs_f64()
            ));
            break;
        }
        // A first trial makes what libtorch keeps for the process (kernels' caches): not the step's.
        record_as(&at(batches[0]), for_cuda).map_err(Failed)?;
        let recordings: Vec<(usize, Recording)> = batches
            .iter()
            .map(|&b| record_as(&at(b), for_cuda).map(|r| (b, r)))
            .collect::<Result<_>>()
            .map_err(Failed)?;
        match Fit::new(&recordings, for_cuda) {
            Ok(fit) => return Ok((Arc::new(fit), batches)),
            Err(e) => why.push(format!("at batches {batches:?}, {e:#}")),
        }
    }
    if why.is_empty() {
        return Err(Refusal(
            "the estimate records the step at batches 4, 6 and 8 at least: data.samples must be at least 8"
                .into(),
        ));
    }
    Err(Refusal(why.join("; ")))
}

/// Above this peak, a batch past the recorded ones is not checked by a recording of its own:
/// a recording runs the step on this host without a cap (one on the meta device takes no
/// memory, and is checked at any batch).
pub(super) const CHECK_LIMIT: u64 = 512 << 20;

/// How the step at the batch asked for was found.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Found {
    /// Within the recorded batches, where the fit was checked.
    Fitted,
    /// Past them, and a recording at the batch gave the fit's bytes.
    Checked,
    /// Past them, and a recording at the batch of a step like it ([`like`]) gave its own fit's
    /// bytes: what a kernel takes at this micro-batch was seen.
    CheckedAlike,
    /// Past them, where a recording at the batch parted from the fit by `off` of its peak (the
    /// fit's peak less the recording's, over the recording's): the recording's bytes are used.
    Corrected { off: f64 },
    /// Past them, and not checked: the fit's peak there is over [`CHECK_LIMIT`].
    Unchecked { peak: u64 },
    /// No set of the ladder agreed (`why`: a CPU library's buffers that change with the batch,
    /// as oneDNN's depthwise convolutions take on some CPUs at small batches): the step was
    /// recorded at the batch itself ([`own_batch`]).
    Own { why: String },
}

/// The step of `config` at `batch` where no set of the ladder agreed (`why`): recorded at the
/// batch itself, an exact answer at that batch, where that recording can be made. Within the
/// ladder's largest batch the data set holds (`top`), the ladder's own recordings were as large;
/// past it, only where the step at `top`, scaled to the batch, stays within [`CHECK_LIMIT`] (a
/// recording runs the step on this host without a cap; one on meta takes no memory). Else the
/// refusal stands, saying why.
pub(super) fn own_batch(
    config: &Config,
    samples: usize,
    batch: usize,
    for_cuda: bool,
    why: String,
) -> Result<(Arc<Fit>, Found)> {
    let refused = |more: String| Err(anyhow::anyhow!("{why}{more}"));
    let Some(top) = LADDER.iter().map(|b| b[2]).filter(|&b| b <= samples).max() else {
        return refused(String::new());
    };
    if batch > samples {
        return refused(format!(
            "; nor can the step be recorded at batch {batch}, past the data set's {samples} rows"
        ));
    }
    if batch > top {
        let at_top = checked(config, top, for_cuda)?;
        let cpu = super::On::default();
        let scaled = at_top.replay(top, None, &cpu)?.peak() as f64 * batch as f64 / top as f64;
        if at_top.on != RecordedOn::Meta && scaled > CHECK_LIMIT as f64 {
            return refused(format!(
                "; nor is it recorded at batch {batch} itself: about {} there, over oomlab's {} limit for one \
                 recording on this host",
                crate::spec::format_size(scaled as u64),
                crate::spec::format_size(CHECK_LIMIT)
            ));
        }
    }
    Ok((checked(config, batch, for_cuda)?, Found::Own { why }))
}

/// The step at `batch` under `cap`: the fit's replay within the recorded `batches`; past them
/// (where a kernel may change its buffers with the batch, as oneDNN's bf16 matmuls do), checked
/// against a recording at the batch (`record_at`, when the fit's peak there is at most
/// [`CHECK_LIMIT`]), whose bytes win where the two part; unless a step like it (`alike`: one
/// micro-batch, one optimizer implementation) was checked at the batch and held.
pub(super) fn at_batch(
    fit: &Fit,
    batches: [usize; 3],
    batch: usize,
    cap: Option<u64>,
    on: On,
    alike: impl FnOnce(usize) -> bool,
    record_at: impl FnOnce(usize) -> Result<Arc<Fit>>,
) -> Result<(Replayed, Found)> {
    let replayed = fit.replay(batch, cap, &on)?;
    if (batches[0]..=batches[2]).contains(&batch) {
        return Ok((replayed, Found::Fitted));
    }
    // The check is of the recording (the CPU's bytes), whatever the target.
    let cpu = On::default();
    let fitted = fit.replay(batch, None, &cpu)?;
    // On the meta device a recording takes no memory: any batch is checked.
    if fitted.peak() > CHECK_LIMIT && fit.on != RecordedOn::Meta {
        return Ok((replayed, Found::Unchecked { peak: fitted.peak() }));
    }
    if alike(batch) {
        return Ok((replayed, Found::CheckedAlike));
    }
    let measured = record_at(batch)?;
    let exact = measured.replay(batch, None, &cpu)?;
    if exact.bytes() == fitted.bytes() {
        return Ok((replayed, Found::Checked));
    }
    let exact_peak = exact.peak().max(1);
    let off = (fitted.peak() as f64 - exact_peak as f64) / exact_peak as f64;
    Ok((measured.replay(batch, cap, &on)?, Found::Corrected { off }))
}

/// A step like `config`'s whose recording at a batch checks it there: one micro-batch, the
/// foreach optimizer, the data set on the device. What a kernel takes with the micro-batch
/// (oneDNN's buffers, what [`at_batch`] checks for) is the same in both: the micro-batches
/// repeat the same forward and backward (the loss divided by their count, a scalar), the
/// optimizer's kernels do not see the batch.
pub(super) fn like(config: &Config) -> Config {
    let mut c = one_place(config);
    c.training.techniques.accumulation = 1;
    c.training.techniques.optimizer_impl = Some(crate::spec::OptimizerImpl::Foreach);
    c
}

/// Whether the step like `config`'s ([`like`]), where it is another, recorded at `batch` gives
/// its fit's bytes there; false where it does not, where its peak there is over
/// [`CHECK_LIMIT`], or where it has no fit (the step's own check follows).
pub(super) fn checked_alike(
    config: &Config,
    samples: usize,
    budget: Option<std::time::Duration>,
    for_cuda: bool,
    batch: usize,
) -> bool {
    let like = like(config);
    if like == one_place(config) {
        return false;
    }
    let cpu = On::default();
    let held = || -> Result<bool> {
        let (fit, _) = fit(&like, samples, budget, for_cuda)?;
        let fitted = fit.replay(batch, None, &cpu)?;
        if fitted.peak() > CHECK_LIMIT && fit.on != RecordedOn::Meta {
            return Ok(false);
        }
        Ok(checked(&like, batch, for_cuda)?.replay(batch, None, &cpu)?.bytes() == fitted.bytes())
    };
    held().unwrap_or(false)
}

/// `config` with its data set on the device: a recording on the CPU is the same wherever the
/// data set lives (the replay places it, [`Place::Data`]), so one serves both.
pub(super) fn one_place(config: &Config) -> Config {
    let mut c = config.clone();
    c.location = crate::spec::DataLocation::Device;
    c
}

/// Whether a CUDA run keeps the data set, and gathers each batch, on the host.
pub(super) fn data_on_host(config: &Config) -> bool {
    config.location == crate::spec::DataLocation::Host
}

/// The step of `config` at `batch` recorded as it is, once per process.
pub(super) fn checked(config: &Config, batch: usize, for_cuda: bool) -> Result<Arc<Fit>> {
    static RECORDED: Mutex<Vec<(String, Arc<Fit>)>> = Mutex::new(Vec::new());
    let mut at = one_place(config);
    at.training.batch_size = batch;
    let key = format!("{for_cuda} {}", serde_json::to_string(&at)?);
    if let Some((_, f)) = RECORDED.lock().unwrap_or_else(|e| e.into_inner()).iter().find(|(k, _)| *k == key) {
        return Ok(f.clone());
    }
    // As `fit` does: many micro-batches extended from four where they repeat.
    let extended = match fewer_micro_batches(&at) {
        Some((four, k)) => checked(&four, batch, for_cuda)?.accumulated(k).ok(),
        None => None,
    };
    let fit = Arc::new(match extended {
        Some(f) => f,
        None => Fit::new(&[(batch, record_as(&at, for_cuda)?)], for_cuda)?,
    });
    RECORDED.lock().unwrap_or_else(|e| e.into_inner()).push((key, fit.clone()));
    Ok(fit)
}
