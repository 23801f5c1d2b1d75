//! The replay's machinery on small graphs: views, the engine's accumulation and stealing, and
//! the measured kernels' profiles.
use std::rc::Rc;

use tch::{Device, Kind};

use super::kernels::tests_support::fit;
use super::tensor::view_strides;
use super::*;
use crate::estimate::ledger::{Ledger, Shared};
use crate::estimate::Category;
use crate::nn::{Init, Ops, Place};

fn replay() -> (Rc<Ctx>, Installed) {
    let ctx = Ctx::new(Shared::new(Ledger::default()), Target::Cpu, 1, Default::default());
    let installed = ctx.install();
    (ctx, installed)
}

const CPU: Place = Place { kind: Kind::Float, device: Device::Cpu };

#[test]
fn views_exist_where_atens_compute_stride_finds_one() {
    // A contiguous tensor views any way.
    assert_eq!(view_strides(&[2, 3, 4], &[12, 4, 1], &[6, 4]), Some(vec![4, 1]));
    // Attention's heads: [N*H, L, hd] transposed from [L, N*H, hd], viewed as [N, H, L, hd].
    assert_eq!(view_strides(&[8, 5, 2], &[2, 16, 1], &[2, 4, 5, 2]), Some(vec![8, 2, 16, 1]));
    // ... and merged back.
    assert_eq!(view_strides(&[2, 4, 5, 2], &[8, 2, 16, 1], &[8, 5, 2]), Some(vec![2, 16, 1]));
    // A transpose cannot be flattened: only a copy can.
    assert_eq!(view_strides(&[3, 4], &[1, 3], &[12]), None);
}

#[test]
fn one_gradient_handed_twice_to_one_input_is_summed_into_a_new_tensor() {
    let (ctx, _i) = replay();
    let live = || ctx.ledger.live().total();
    let w = Sym::param(&[4], CPU, Init::Fill(0.0)).unwrap();
    // h + h: AddBackward0 hands one gradient to both inputs of one node, so the second cannot be
    // added in place into the first (it is the same tensor): a new sum, then w steals it.
    let h = w.f_relu().unwrap();
    let twice = h.f_add(&h).unwrap();
    let loss = twice.f_sum().unwrap();
    drop((h, twice));
    let before = live();
    ctx.ledger.reset_peak();
    loss.backward().unwrap();
    // At ReluBackward: the seed (4 B), the sum of the two gradients (16 B), the ReLU's gradient
    // (16 B); in place, the sum would have cost nothing.
    assert_eq!(ctx.ledger.peak() - before, 4 + 16 + 16);
    assert!(w.has_grad());
    assert_eq!(ctx.ledger.live().grads, 16);
    assert_eq!(live(), before, "the ReLU's saved output went, w's .grad came");
    drop(loss);
}

#[test]
fn accumulate_grad_steals_a_gradient_nobody_else_holds_and_adds_into_an_existing_one() {
    let (ctx, _i) = replay();
    let w = Sym::param(&[8], CPU, Init::Fill(0.0)).unwrap();
    let loss = w.f_relu().unwrap().f_sum().unwrap();
    loss.backward().unwrap();
    assert_eq!(ctx.ledger.live().grads, 32, "stolen, filed as a gradient");
    let grads = ctx.ledger.live().grads;
    let loss2 = w.f_relu().unwrap().f_sum().unwrap();
    loss2.backward().unwrap();
    assert_eq!(ctx.ledger.live().grads, grads, "added in place");
    w.drop_grad();
    assert_eq!(ctx.ledger.live().grads, 0);
    drop((loss, loss2));
}

#[test]
fn saved_activations_live_until_their_node_has_run() {
    let (ctx, _i) = replay();
    let w = Sym::param(&[2, 3], CPU, Init::Fill(0.0)).unwrap();
    let b = Sym::param(&[2], CPU, Init::Fill(0.0)).unwrap();
    let x = Sym::made(&[5, 3], Kind::Float, Category::Batch, false);
    let y = Sym::made(&[5], Kind::Int64, Category::Batch, false);
    let loss = x.f_linear(&w, Some(&b)).unwrap().f_relu().unwrap().f_cross_entropy(&y).unwrap();
    // Saved: the ReLU's output (40 B), the log-probabilities (40 B), total_weight (4 B).
    assert_eq!(ctx.ledger.live().activations, 40 + 40 + 4);
    loss.backward().unwrap();
    assert_eq!(ctx.ledger.live().activations, 0, "released as their nodes ran");
    assert_eq!(ctx.ledger.live().grads, 24 + 8);
    assert_eq!(ctx.ledger.live().transient, 4, "the loss");
    drop(loss);
}

#[test]
fn a_kernels_profile_is_linear_in_the_batch_or_refused() {
    // Sizes at batches 17 and 18: a reorder of the batch (10 n), a scratch buffer (64).
    let at = |n: i64| vec![(10 * n, 1), (64, 2), (-64, 2), (-(10 * n), 1)];
    let p = fit(&at(17), &at(18), 17).expect("alike");
    assert_eq!(p.sizes_at(40), vec![400, 64]);
    // A kernel that allocates otherwise at the next batch is measured at the real one instead.
    let other = vec![(270, 1), (-270, 1)];
    assert!(fit(&at(17), &other, 17).is_none());
    // So is one whose scratch is neither constant nor proportional (bf16's weight gradient
    // doubles its scratch from 17 to 18, then keeps it).
    let jump = |n: i64| vec![(10 * n, 1), (if n < 18 { 643_460 } else { 1_261_956 }, 2), (-1, 2)];
    assert!(fit(&jump(17), &jump(18), 17).is_none());
}

#[test]
fn autocast_caches_a_parameters_cast_until_it_exits_and_casts_its_gradient_back() {
    let (ctx, _i) = replay();
    let w = Sym::param(&[2, 3], CPU, Init::Fill(0.0)).unwrap();
    let b = Sym::param(&[2], CPU, Init::Fill(0.0)).unwrap();
    let x = Sym::made(&[5, 3], Kind::Float, Category::Batch, false);
    let y = Sym::made(&[5], Kind::Int64, Category::Batch, false);
    let loss = {
        let _autocast = ctx.autocast_mode(Some(Kind::BFloat16));
        // Two uses of the weight under one autocast: one cast, found in the cache the second time.
        let h = x.f_linear(&w, Some(&b)).unwrap();
        assert_eq!(h.kind(), Kind::BFloat16);
        let h2 = x.f_linear(&w, Some(&b)).unwrap();
        assert_eq!(ctx.cast_cache.borrow().len(), 2, "the weight's and the bias's casts, once each");
        drop(h2);
        // The loss in fp32 (cross_entropy is on the fp32 list).
        let loss = h.f_cross_entropy(&y).unwrap();
        assert_eq!(loss.kind(), Kind::Float);
        loss
    };
    assert!(ctx.cast_cache.borrow().is_empty(), "exiting autocast empties the cache");
    // What outlives it: the weight's cast (6 x 2 B), which AddmmBackward saved for the batch's
    // gradient, if the batch needed one; it does not, so only the batch's cast (15 x 2 B) is
    // saved, for the weight's gradient; the bias's cast (4 B) is gone.
    assert_eq!(ctx.ledger.live().amp_copies, 30);
    loss.backward().unwrap();
    // ToCopyBackward casts the gradients back: fp32 `.grad`s of the parameters' size.
    assert_eq!(w.f_grad().unwrap().kind(), Kind::Float);
    assert_eq!(ctx.ledger.live().grads, 24 + 8);
    assert_eq!(ctx.ledger.live().amp_copies, 0);
}
