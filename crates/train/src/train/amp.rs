//! Mixed precision, as PyTorch does it: an autocast guard for the forward pass and a dynamic
//! gradient scaler for fp16.
//!
//! **Autocast** makes libtorch run the ops on its lower-precision list (`linear`, `matmul`,
//! convolutions, ...) in fp16 or bf16 while keeping numerically touchy ones (`nll_loss`,
//! `log_softmax`, `sum`, ...) in fp32. The parameters stay fp32 ("master weights"), so amp does
//! not shrink them, their gradients or the optimizer state; what it shrinks is the activations
//! saved for backward, which are stored at half the width. It also costs something: while
//! autocast is on, libtorch caches the low-precision copy of every fp32 leaf weight it casts (so
//! the copy is made once per forward, not once per use), which holds a second, half-size copy of
//! the weights until autocast is switched off and the cache cleared. The guard here does both,
//! on drop.
//!
//! **The scaler** exists because fp16 has a narrow range: small gradients underflow to zero.
//! PyTorch's `GradScaler` multiplies the loss by a large scale (65536 by default) before
//! backward, so the gradients land in fp16's range, then divides the fp32 gradients by it before
//! the optimizer step. If the scale was too large some gradient overflows to inf/NaN: the step is
//! skipped and the scale backed off; after `growth_interval` clean steps in a row it grows again.
//! bf16 has fp32's exponent range, so it needs no scaler.
use std::cell::{Cell, OnceCell};
use std::marker::PhantomData;

use tch::{Device, Kind, TchError, Tensor};

use super::optim::Optimizer;
use crate::libtorch::scalar;

use crate::ffi;
use crate::spec::{Amp, ScalerSpec};

thread_local! {
    /// The dtype a live guard has switched autocast to, per device type (CPU, CUDA, meta as CUDA), on this
    /// thread. libtorch's autocast state is thread-local, so this is too. It lets a nested guard
    /// hand back its outer guard's state on drop instead of switching autocast off under it.
    static CURRENT: Cell<[Option<Kind>; 3]> = const { Cell::new([None, None, None]) };
}

/// RAII: autocast on for the device type with the amp dtype while alive; off (and its cache
/// cleared) on drop, also during a panic unwind. A nested guard restores the outer guard's dtype
/// instead (and leaves the cache to it), as PyTorch's `torch.autocast` does.
///
/// Not `Send`: autocast state belongs to the thread that switched it on, and a drop on another
/// thread would switch off that thread's state instead.
pub struct Autocast {
    device_type: i32,
    outer: Option<Kind>,
    _thread_bound: PhantomData<*const ()>,
}

impl Autocast {
    /// None when amp is Off.
    pub fn enter(device: Device, amp: &Amp) -> Result<Option<Autocast>, TchError> {
        let Some(kind) = amp.autocast() else { return Ok(None) };
        let device_type = device_type(device)?;
        let outer = current(device_type);
        switch(device_type, Some(kind)).map_err(TchError::Torch)?;
        set_current(device_type, Some(kind));
        Ok(Some(Autocast { device_type, outer, _thread_bound: PhantomData }))
    }
}

impl Drop for Autocast {
    fn drop(&mut self) {
        // Disabling clears the cast cache in the shim; re-enabling for an outer guard does not,
        // so the outer forward keeps its cached weight copies, as in PyTorch. A failure here has
        // nowhere to go (drop may run during an unwind), and the shim never throws.
        let _ = switch(self.device_type, self.outer);
        set_current(self.device_type, self.outer);
    }
}

/// A 0-d tensor of `v` on `device`; on the meta device (which tch cannot name in a factory call,
/// [`ffi::META`]) its shape alone.
fn full_0d(v: f64, kind: Kind, device: Device) -> Result<Tensor, TchError> {
    match device {
        ffi::META => ffi::meta_empty(&[], kind).map_err(TchError::Torch),
        _ => scalar::full_0d(v, (kind, device)),
    }
}

/// c10's DeviceType numbering, for the shim: CPU = 0, CUDA = 1; and [`META_AS_CUDA`].
fn device_type(device: Device) -> Result<i32, TchError> {
    match device {
        Device::Cpu => Ok(0),
        Device::Cuda(_) => Ok(1),
        ffi::META if crate::nn::script::recording_for_cuda() => Ok(META_AS_CUDA),
        ffi::META => Err(TchError::Torch(
            "autocast on the meta device runs CUDA's op lists only, for a step recorded for a CUDA estimate; \
             a CPU step under autocast is recorded on the CPU"
                .into(),
        )),
        other => Err(TchError::Torch(format!("autocast: unsupported device {other:?}"))),
    }
}

/// Meta tensors under CUDA's autocast: a step recorded on the meta device for a CUDA estimate,
/// which libtorch's own autocast never casts (`ffi::meta_autocast`).
const META_AS_CUDA: i32 = 2;

/// Autocast for a device type on with a dtype, or off (its cast cache cleared).
fn switch(device_type: i32, kind: Option<Kind>) -> Result<(), String> {
    match (device_type, kind) {
        (META_AS_CUDA, kind) => ffi::meta_autocast(kind),
        (_, Some(kind)) => ffi::autocast_set(device_type, true, kind),
        (_, None) => ffi::autocast_set(device_type, false, Kind::Float),
    }
}

fn current(device_type: i32) -> Option<Kind> {
    CURRENT.with(|c| c.get()[device_type as usize])
}

fn set_current(device_type: i32, kind: Option<Kind>) {
    CURRENT.with(|c| {
        let mut all = c.get();
        all[device_type as usize] = kind;
        c.set(all);
    });
}

/// PyTorch's GradScaler, dynamic: scale the loss, unscale the grads, skip the step on inf/NaN,
/// grow the scale after `growth_interval` clean steps, back off on inf.
pub struct GradScaler {
    /// The scale, a 0-d f32 on the device as PyTorch keeps it (multiplying a loss by a 0-d
    /// tensor keeps the loss's shape, and the update op changes it in place without a host round
    /// trip), and the growth tracker, a 0-d i32 of clean steps in a row since the last growth or
    /// back-off. Made together at the first `scale()`, as PyTorch's
    /// `_lazy_init_scale_growth_tracker` does.
    state: OnceCell<(Tensor, Tensor)>,
    device: Device,
    spec: ScalerSpec,
}

impl GradScaler {
    pub fn new(spec: &ScalerSpec, device: Device) -> Result<Self, TchError> {
        Ok(GradScaler { state: OnceCell::new(), device, spec: *spec })
    }

    /// The scale and growth tracker, made on first use (the scale first).
    fn state(&self) -> Result<&(Tensor, Tensor), TchError> {
        if self.state.get().is_none() {
            let scale = full_0d(self.spec.init_scale, Kind::Float, self.device)?;
            let tracker = full_0d(0.0, Kind::Int, self.device)?;
            let _ = self.state.set((scale, tracker));
        }
        Ok(self.state.get().expect("made above"))
    }

    fn scale_tensor(&self) -> Result<&Tensor, TchError> {
        Ok(&self.state()?.0)
    }

    /// loss * scale (a new tensor in the graph).
    pub fn scale(&self, loss: &Tensor) -> Result<Tensor, TchError> {
        loss.f_mul(self.scale_tensor()?)
    }

    /// `GradScaler.step`: unscales every parameter's gradient in place (params without a grad are
    /// skipped), checks for inf/NaN, steps the optimizer unless found, then updates the scale (the
    /// same update rule as PyTorch, through `_amp_update_scale_`). A fused optimizer unscales in
    /// its own kernel instead. Returns true when the step was skipped.
    pub fn step<'a>(
        &mut self,
        opt: &Optimizer,
        params: impl IntoIterator<Item = &'a Tensor>,
    ) -> Result<bool, TchError> {
        if opt.takes_grad_scale() {
            return self.step_fused(opt, params);
        }
        let found_inf = self.unscale_grads(params)?;
        // Reading found_inf syncs the device; PyTorch's `_maybe_opt_step` does the same.
        let skipped = self.found(&found_inf)?;
        if !skipped {
            opt.step()?;
        }
        self.update(&found_inf)?;
        Ok(skipped)
    }

    /// The `_step_supports_amp_scaling` branch of `GradScaler.step`: `_check_inf_per_device`
    /// checks the gradients with an inv_scale of 1 (they stay scaled), `sum([found_inf])` and
    /// `scale * 1` make the copies the optimizer is handed as `found_inf` and `grad_scale`, and
    /// the kernel unscales and skips by itself, without a host round trip.
    fn step_fused<'a>(
        &mut self,
        opt: &Optimizer,
        params: impl IntoIterator<Item = &'a Tensor>,
    ) -> Result<bool, TchError> {
        let found_inf = {
            let dummy_inv_scale = full_0d(1.0, Kind::Float, self.device)?;
            // PyTorch's `_check_inf_per_device` allows fp16 gradients (`allow_fp16=True`).
            self.check_and_unscale(params, &dummy_inv_scale, true)?
        };
        let summed = scalar::add(&found_inf, 0.0)?; // Python's sum() starts from 0
        let grad_scale = scalar::mul(self.scale_tensor()?, 1.0)?;
        opt.step_scaled(&grad_scale, &summed)?;
        drop(grad_scale); // `del optimizer.grad_scale`; the sum goes when step() returns
        drop(summed);
        let skipped = self.found(&found_inf)?;
        self.update(&found_inf)?;
        Ok(skipped)
    }

    /// Whether `found_inf` says a gradient was inf or NaN. A step recorded on the meta device has
    /// no values to find one in: its steps are all taken, as a CUDA step is but for an overflow.
    fn found(&self, found_inf: &Tensor) -> Result<bool, TchError> {
        if self.device == ffi::META {
            return Ok(false);
        }
        Ok(found_inf.f_double_value(&[])? != 0.0)
    }

    /// The current scale (the initial one before the first `scale()`, as `get_scale()`).
    pub fn scale_value(&self) -> Result<f64, TchError> {
        match self.state.get() {
            Some((s, _)) => s.f_double_value(&[]),
            None => Ok(self.spec.init_scale),
        }
    }

    /// 1/scale, computed in fp64 and rounded to fp32, as PyTorch does: an fp32 reciprocal can be
    /// imprecise under some compile options.
    fn inv_scale(&self) -> Result<Tensor, TchError> {
        // One statement apiece: Python frees each intermediate as soon as the next op has it
        // (two scalars live at most), where one Rust expression would keep all three.
        let double = self.scale_tensor()?.f_to_kind(Kind::Double)?;
        let reciprocal = double.f_reciprocal()?;
        drop(double);
        reciprocal.f_to_kind(Kind::Float)
    }

    /// Multiplies every gradient by 1/scale in place and returns found_inf: a 0-d f32 that is
    /// non-zero when any gradient holds an inf or NaN (`_amp_foreach_non_finite_check_and_unscale_`
    /// sets it and never clears it).
    fn unscale_grads<'a>(&self, params: impl IntoIterator<Item = &'a Tensor>) -> Result<Tensor, TchError> {
        let inv_scale = self.inv_scale()?;
        self.check_and_unscale(params, &inv_scale, false)
    }

    /// `_unscale_grads_`: a new found_inf, and every gradient multiplied by `inv_scale` in place
    /// while checked for inf/NaN.
    fn check_and_unscale<'a>(
        &self,
        params: impl IntoIterator<Item = &'a Tensor>,
        inv_scale: &Tensor,
        allow_fp16: bool,
    ) -> Result<Tensor, TchError> {
        let mut found_inf = full_0d(0.0, Kind::Float, self.device)?;
        for param in params {
            // A handle to the parameter's own gradient, so the in-place unscale changes it.
            let mut grad = param.f_grad()?;
            if !grad.defined() {
                continue;
            }
            // PyTorch refuses these too: fp16 master gradients mean fp16 parameters, which
            // amp's scheme (fp32 weights, low-precision compute) does not intend.
            if grad.kind() == Kind::Half && !allow_fp16 {
                return Err(TchError::Kind("Attempting to unscale FP16 gradients.".into()));
            }
            grad.f_internal_amp_non_finite_check_and_unscale(&mut found_inf, inv_scale)?;
        }
        Ok(found_inf)
    }

    /// On inf: scale *= backoff_factor and the tracker resets. Otherwise the tracker counts the
    /// clean step, and on reaching growth_interval the scale grows by growth_factor (unless that
    /// would make it inf) and the tracker resets. Both tensors change in place.
    fn update(&mut self, found_inf: &Tensor) -> Result<(), TchError> {
        let interval = i64::try_from(self.spec.growth_interval).unwrap_or(i64::MAX);
        // A handle to the scale itself: the update changes both tensors in place.
        let (scale, tracker) = self.state()?;
        let mut scale = scale.shallow_clone();
        let _ = scale.f_internal_amp_update_scale_(
            tracker,
            found_inf,
            self.spec.growth_factor,
            self.spec.backoff_factor,
            interval,
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::panic::{catch_unwind, AssertUnwindSafe};

    use super::*;
    use crate::nn::{mlp::Mlp, Model, CPU_F32};
    use crate::spec::{OptimizerImpl, OptimizerSpec};

    const CPU: Device = Device::Cpu;

    fn fp16() -> Amp {
        Amp::Fp16 { scaler: ScalerSpec::default() }
    }

    fn leaf(values: &[f32]) -> Tensor {
        Tensor::from_slice(values).set_requires_grad(true)
    }

    fn sgd(params: &[&Tensor], lr: f64) -> Optimizer {
        sgd_as(OptimizerImpl::ForLoop, params, lr)
    }

    fn sgd_as(implementation: OptimizerImpl, params: &[&Tensor], lr: f64) -> Optimizer {
        let spec = OptimizerSpec::Sgd { lr, momentum: 0.0, weight_decay: 0.0 };
        Optimizer::over(&spec, implementation, params).unwrap()
    }

    /// A loss with non-trivial gradients: sum((w * x)^2) + sum(b).
    fn toy_loss(w: &Tensor, b: &Tensor) -> Tensor {
        let x = Tensor::from_slice(&[0.5f32, -1.5, 2.0]);
        (w * x).square().sum(Kind::Float) + b.sum(Kind::Float)
    }

    fn tracker(s: &GradScaler) -> i64 {
        s.state.get().map_or(0, |(_, t)| t.int64_value(&[]))
    }

    fn linear_out_kind() -> Kind {
        let x = Tensor::randn([4, 3], (Kind::Float, CPU));
        let w = Tensor::randn([2, 3], (Kind::Float, CPU)).set_requires_grad(true);
        x.f_linear::<Tensor>(&w, None).unwrap().kind()
    }

    #[test]
    fn an_inf_or_nan_gradient_skips_the_step_and_backs_off() {
        let _alone = crate::probe::cpu_alone();
        // The fused step unscales and skips in its kernel, the others before the step.
        let cases =
            [OptimizerImpl::ForLoop, OptimizerImpl::Fused].map(|i| [(i, f64::INFINITY), (i, f64::NAN)]);
        for (implementation, bad) in cases.into_iter().flatten() {
            let (w, b) = (leaf(&[1.0, 2.0, 3.0]), leaf(&[0.1, 0.2]));
            let opt = sgd_as(implementation, &[&w, &b], 0.1);
            let mut scaler = GradScaler::new(&ScalerSpec::default(), CPU).unwrap();

            // One clean step first, so there is a growth tracker to reset.
            scaler.scale(&toy_loss(&w, &b)).unwrap().backward();
            assert!(!scaler.step(&opt, [&w, &b]).unwrap());
            assert_eq!(tracker(&scaler), 1);
            opt.zero_grad().unwrap();

            scaler.scale(&toy_loss(&w, &b)).unwrap().backward();
            // In the first gradient: found_inf must survive the clean ones unscaled after it.
            let _ = w.grad().get(1).fill_(bad);
            let before = (w.copy(), b.copy());
            assert!(scaler.step(&opt, [&w, &b]).unwrap(), "{implementation:?}: step not skipped for {bad}");
            assert!(
                w.equal(&before.0) && b.equal(&before.1),
                "{implementation:?}: parameters moved for {bad}"
            );
            assert_eq!(scaler.scale_value().unwrap(), 32768.0);
            assert_eq!(tracker(&scaler), 0);
        }
    }

    #[test]
    fn the_scale_grows_after_growth_interval_clean_steps_not_before() {
        let _alone = crate::probe::cpu_alone();
        let spec = ScalerSpec { init_scale: 8.0, growth_interval: 3, ..ScalerSpec::default() };
        let (w, b) = (leaf(&[1.0, 2.0, 3.0]), leaf(&[0.1, 0.2]));
        let opt = sgd(&[&w, &b], 0.01);
        let mut scaler = GradScaler::new(&spec, CPU).unwrap();
        let mut seen = vec![];
        for _ in 0..4 {
            opt.zero_grad().unwrap();
            scaler.scale(&toy_loss(&w, &b)).unwrap().backward();
            assert!(!scaler.step(&opt, [&w, &b]).unwrap());
            seen.push((scaler.scale_value().unwrap(), tracker(&scaler)));
        }
        assert_eq!(seen, vec![(8.0, 1), (8.0, 2), (16.0, 0), (16.0, 1)]);
    }

    #[test]
    fn a_clean_step_equals_an_unscaled_sgd_step() {
        let _alone = crate::probe::cpu_alone();
        for implementation in [OptimizerImpl::ForLoop, OptimizerImpl::Fused] {
            clean_step_equals_unscaled(implementation);
        }
    }

    fn clean_step_equals_unscaled(implementation: OptimizerImpl) {
        let lr = 0.05;
        let spec = ScalerSpec { init_scale: 4096.0, ..ScalerSpec::default() };
        let (w, b) = (leaf(&[1.0, 2.0, 3.0]), leaf(&[0.1, 0.2]));
        let (w_ref, b_ref) = (leaf(&[1.0, 2.0, 3.0]), leaf(&[0.1, 0.2]));
        let opt = sgd_as(implementation, &[&w, &b], lr);
        let opt_ref = sgd(&[&w_ref, &b_ref], lr);
        let mut scaler = GradScaler::new(&spec, CPU).unwrap();

        let scaled = scaler.scale(&toy_loss(&w, &b)).unwrap();
        assert_eq!(scaled.size(), Vec::<i64>::new(), "a 0-d loss stays 0-d");
        scaled.backward();
        assert!(!scaler.step(&opt, [&w, &b]).unwrap());
        toy_loss(&w_ref, &b_ref).backward();
        opt_ref.step().unwrap();

        for (p, r, start) in [(&w, &w_ref, leaf(&[1.0, 2.0, 3.0])), (&b, &b_ref, leaf(&[0.1, 0.2]))] {
            let moved = (r - &start).abs().max().double_value(&[]);
            assert!(moved > 1e-3, "the reference step moved nothing");
            let rel = ((p - r).abs() / r.abs()).max().double_value(&[]);
            assert!(rel < 1e-6, "relative error {rel}: {p} vs {r}");
        }
    }

    #[test]
    fn autocast_sets_the_dtype_and_drop_restores_float() {
        let _alone = crate::probe::cpu_alone();
        assert_eq!(linear_out_kind(), Kind::Float);
        for (amp, kind) in [(Amp::Bf16, Kind::BFloat16), (fp16(), Kind::Half)] {
            {
                let _guard = Autocast::enter(CPU, &amp).unwrap().expect("a guard");
                assert!(ffi::autocast_enabled(0));
                assert_eq!(linear_out_kind(), kind);
            }
            assert!(!ffi::autocast_enabled(0));
            assert_eq!(linear_out_kind(), Kind::Float);
        }
    }

    #[test]
    fn a_panic_inside_the_guard_leaves_autocast_off() {
        let _alone = crate::probe::cpu_alone();
        let result = catch_unwind(AssertUnwindSafe(|| {
            let _guard = Autocast::enter(CPU, &Amp::Bf16).unwrap();
            assert!(ffi::autocast_enabled(0));
            // An unwind without the panic hook's noise in the test output.
            std::panic::resume_unwind(Box::new("inside the guard"));
        }));
        assert!(result.is_err());
        assert!(!ffi::autocast_enabled(0));
        assert_eq!(linear_out_kind(), Kind::Float);
    }

    #[test]
    fn a_nested_guard_hands_back_the_outer_dtype() {
        let _alone = crate::probe::cpu_alone();
        let outer = Autocast::enter(CPU, &Amp::Bf16).unwrap();
        {
            let _inner = Autocast::enter(CPU, &fp16()).unwrap();
            assert_eq!(linear_out_kind(), Kind::Half);
        }
        assert!(ffi::autocast_enabled(0));
        assert_eq!(linear_out_kind(), Kind::BFloat16);
        drop(outer);
        assert!(!ffi::autocast_enabled(0));
    }

    #[test]
    fn off_gives_no_guard_and_leaves_autocast_off() {
        let _alone = crate::probe::cpu_alone();
        assert!(Autocast::enter(CPU, &Amp::Off).unwrap().is_none());
        assert!(!ffi::autocast_enabled(0));
        assert_eq!(linear_out_kind(), Kind::Float);
    }

    #[test]
    fn fp16_gradients_are_refused_as_pytorch_does() {
        let _alone = crate::probe::cpu_alone();
        let w = Tensor::from_slice(&[1.0f32, 2.0]).to_kind(Kind::Half).set_requires_grad(true);
        let opt = sgd(&[&w], 0.1);
        let mut scaler = GradScaler::new(&ScalerSpec::default(), CPU).unwrap();
        w.sum(Kind::Float).backward();
        assert!(scaler.step(&opt, [&w]).is_err());
    }

    #[test]
    fn fp16_autocast_with_the_scaler_trains_an_mlp() {
        let _alone = crate::probe::cpu_alone();
        tch::manual_seed(0);
        let (n, features, classes) = (64, 10, 3);
        let x = Tensor::randn([n, features as i64], (Kind::Float, CPU));
        // Labels from a fixed linear teacher, so there is something to learn.
        let teacher = Tensor::randn([features as i64, classes as i64], (Kind::Float, CPU));
        let y = x.matmul(&teacher).argmax(1, false);
        let model = Model::<Tensor>::Mlp(Mlp::new(features, &[32, 32], classes, CPU_F32).unwrap());
        let spec = OptimizerSpec::Adam { lr: 1e-2, weight_decay: 0.0 };
        let opt = Optimizer::new(&spec, None, &model).unwrap();
        let amp = fp16();
        let mut scaler = GradScaler::new(&ScalerSpec::default(), CPU).unwrap();

        let mut losses = vec![];
        for _ in 0..30 {
            opt.zero_grad().unwrap();
            let loss = {
                let _autocast = Autocast::enter(CPU, &amp).unwrap();
                let logits = model.forward(&x).unwrap();
                assert_eq!(logits.kind(), Kind::Half);
                model.loss(&logits, &y).unwrap()
            };
            scaler.scale(&loss).unwrap().backward();
            scaler.step(&opt, model.parameters()).unwrap();
            losses.push(loss.double_value(&[]));
        }
        let (start, end) = (losses[0], losses[losses.len() - 1]);
        assert!(end < start, "loss did not fall: {losses:?}");
        assert!(model.parameters().iter().all(|p| p.kind() == Kind::Float), "master weights stay fp32");
    }
}
