//! A Transformer encoder classifier: `nn.Embedding(vocab, d_model)`, then `num_layers` copies
//! of `nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout, batch_first=True,
//! norm_first)` (ReLU, no mask), then the mean over the sequence and a Linear to the classes.
//! Its units are the embedding and each encoder layer.
//!
//! The layer runs in training as PyTorch 2.11's Python does (the fused fast path is for
//! inference only): `TransformerEncoderLayer.forward`, `_sa_block` and `_ff_block`, and through
//! `nn.MultiheadAttention.forward` into `F.multi_head_attention_forward` op for op (the packed
//! in-projection on the sequence-first view, its reshape to three contiguous projections, the
//! per-head views, `scaled_dot_product_attention` with the layer's dropout, the out-projection),
//! each tensor freed where Python drops its last reference.
use tch::{TchError, Tensor};

use super::layers::{deep_copy, xavier_uniform_bound, Embedding, LayerNorm, Linear, Place};
use crate::spec::TransformerSpec;

pub struct Encoder {
    embed: Embedding,
    layers: Vec<EncoderLayer>,
    fc: Linear,
}

struct EncoderLayer {
    in_proj_weight: Tensor,
    in_proj_bias: Tensor,
    out_proj: Linear,
    linear1: Linear,
    linear2: Linear,
    norm1: LayerNorm,
    norm2: LayerNorm,
    nhead: i64,
    dropout: f64,
    norm_first: bool,
}

impl Encoder {
    /// As `nn.Module`s make it: the embedding, one encoder layer, the `TransformerEncoder`'s
    /// deep copies of it (every layer starts equal), the Linear; the first layer is dropped last,
    /// when the constructor returns.
    pub fn new(spec: &TransformerSpec, vocab: usize, classes: usize, place: Place) -> Result<Self, TchError> {
        let embed = Embedding::new(vocab, spec.d_model, place)?;
        let proto = EncoderLayer::new(spec, place)?;
        let layers = (0..spec.num_layers).map(|_| proto.deep_copy()).collect::<Result<_, _>>()?;
        let fc = Linear::new(spec.d_model, classes, place)?;
        drop(proto);
        Ok(Encoder { embed, layers, fc })
    }

    pub fn parameters(&self) -> Vec<&Tensor> {
        let mut out = vec![&self.embed.weight];
        for l in &self.layers {
            out.extend(l.parameters());
        }
        out.extend(self.fc.parameters());
        out
    }

    pub fn units(&self) -> usize {
        1 + self.layers.len()
    }

    /// The embedding (unit 0) or encoder layer `i - 1`.
    pub fn unit(&self, i: usize, x: Tensor) -> Result<Tensor, TchError> {
        match i {
            0 => self.embed.forward(&x),
            _ => self.layers[i - 1].forward(x),
        }
    }

    /// `fc(x.mean(dim=1))`.
    pub fn head(&self, x: Tensor) -> Result<Tensor, TchError> {
        self.fc.forward(&x.f_mean_dim(Some(&[1i64][..]), false, None)?)
    }

    pub fn has_dropout(&self) -> bool {
        self.layers.first().is_some_and(|l| l.dropout > 0.0)
    }

    pub fn handles(&self) -> Encoder {
        Encoder {
            embed: self.embed.handles(),
            layers: self.layers.iter().map(EncoderLayer::handles).collect(),
            fc: self.fc.handles(),
        }
    }
}

impl EncoderLayer {
    /// `TransformerEncoderLayer.__init__`: `MultiheadAttention` (in_proj_weight and
    /// in_proj_bias made empty, then out_proj, a Linear with its own initialisation, then
    /// `_reset_parameters`: xavier_uniform_ of in_proj_weight, zeros in both biases), linear1,
    /// linear2, norm1, norm2.
    fn new(spec: &TransformerSpec, place: Place) -> Result<Self, TchError> {
        let e = spec.d_model as i64;
        let leaf = |shape: &[i64]| -> Result<Tensor, TchError> {
            Tensor::f_empty(shape, (place.kind, place.device))?.f_set_requires_grad(true)
        };
        let (mut in_proj_weight, mut in_proj_bias) = (leaf(&[3 * e, e])?, leaf(&[3 * e])?);
        let mut out_proj = Linear::new(spec.d_model, spec.d_model, place)?;
        {
            let _no_grad = tch::no_grad_guard();
            let a = xavier_uniform_bound(spec.d_model, 3 * spec.d_model);
            let _ = in_proj_weight.f_uniform_(-a, a)?;
            let _ = in_proj_bias.f_fill_(0.0)?;
            let _ = out_proj.bias.f_fill_(0.0)?;
        }
        Ok(EncoderLayer {
            in_proj_weight,
            in_proj_bias,
            out_proj,
            linear1: Linear::new(spec.d_model, spec.dim_feedforward, place)?,
            linear2: Linear::new(spec.dim_feedforward, spec.d_model, place)?,
            norm1: LayerNorm::new(spec.d_model, place)?,
            norm2: LayerNorm::new(spec.d_model, place)?,
            nhead: spec.nhead as i64,
            dropout: spec.dropout,
            norm_first: spec.norm_first,
        })
    }

    /// `copy.deepcopy(layer)`: a clone of every parameter, in parameter order.
    fn deep_copy(&self) -> Result<Self, TchError> {
        let linear = |l: &Linear| -> Result<Linear, TchError> {
            Ok(Linear { weight: deep_copy(&l.weight)?, bias: deep_copy(&l.bias)? })
        };
        let norm = |n: &LayerNorm| -> Result<LayerNorm, TchError> {
            Ok(LayerNorm { weight: deep_copy(&n.weight)?, bias: deep_copy(&n.bias)? })
        };
        Ok(EncoderLayer {
            in_proj_weight: deep_copy(&self.in_proj_weight)?,
            in_proj_bias: deep_copy(&self.in_proj_bias)?,
            out_proj: linear(&self.out_proj)?,
            linear1: linear(&self.linear1)?,
            linear2: linear(&self.linear2)?,
            norm1: norm(&self.norm1)?,
            norm2: norm(&self.norm2)?,
            ..*self
        })
    }

    fn parameters(&self) -> Vec<&Tensor> {
        let mut out = vec![&self.in_proj_weight, &self.in_proj_bias];
        out.extend(self.out_proj.parameters());
        out.extend(self.linear1.parameters());
        out.extend(self.linear2.parameters());
        out.extend(self.norm1.parameters());
        out.extend(self.norm2.parameters());
        out
    }

    fn handles(&self) -> EncoderLayer {
        EncoderLayer {
            in_proj_weight: self.in_proj_weight.shallow_clone(),
            in_proj_bias: self.in_proj_bias.shallow_clone(),
            out_proj: self.out_proj.handles(),
            linear1: self.linear1.handles(),
            linear2: self.linear2.handles(),
            norm1: self.norm1.handles(),
            norm2: self.norm2.handles(),
            ..*self
        }
    }

    /// `TransformerEncoderLayer.forward` in training. `src` (the argument) lives until it
    /// returns; every other tensor goes when Python's last reference to it does.
    fn forward(&self, src: Tensor) -> Result<Tensor, TchError> {
        if self.norm_first {
            // x = x + self._sa_block(self.norm1(x)); x = x + self._ff_block(self.norm2(x))
            let x = {
                let n = self.norm1.forward(&src)?;
                let sa = self.sa_block(&n)?;
                drop(n);
                src.f_add(&sa)?
            };
            let out = {
                let n = self.norm2.forward(&x)?;
                let ff = self.ff_block(&n)?;
                drop(n);
                x.f_add(&ff)?
            };
            drop(x);
            Ok(out)
        } else {
            // x = self.norm1(x + self._sa_block(x)); x = self.norm2(x + self._ff_block(x))
            let x = {
                let sa = self.sa_block(&src)?;
                let sum = src.f_add(&sa)?;
                drop(sa);
                self.norm1.forward(&sum)?
            };
            let out = {
                let ff = self.ff_block(&x)?;
                let sum = x.f_add(&ff)?;
                drop(ff);
                self.norm2.forward(&sum)?
            };
            drop(x);
            Ok(out)
        }
    }

    /// `_sa_block`: self-attention, then dropout1.
    fn sa_block(&self, x: &Tensor) -> Result<Tensor, TchError> {
        self.self_attention(x)?.f_dropout(self.dropout, true)
    }

    /// `_ff_block`: `dropout2(linear2(dropout(relu(linear1(x)))))`.
    fn ff_block(&self, x: &Tensor) -> Result<Tensor, TchError> {
        let h = self.linear1.forward(x)?;
        let r = h.f_relu()?;
        drop(h);
        let d = r.f_dropout(self.dropout, true)?;
        drop(r);
        let l = self.linear2.forward(&d)?;
        drop(d);
        l.f_dropout(self.dropout, true)
    }

    /// `MultiheadAttention.forward(x, x, x, need_weights=False)` with `batch_first=True`, through
    /// `F.multi_head_attention_forward`: the output `[N, L, E]` (a transposed view).
    fn self_attention(&self, x: &Tensor) -> Result<Tensor, TchError> {
        let size = x.size();
        let (n, l, e) = (size[0], size[1], size[2]);
        let (h, hd) = (self.nhead, e / self.nhead);
        // query = key = value = query.transpose(1, 0): the sequence first.
        let query = x.f_transpose(1, 0)?;
        // _in_projection_packed: proj = linear(q, w, b), then
        // proj.unflatten(-1, (3, E)).unsqueeze(0).transpose(0, -2).squeeze(-2).contiguous();
        // the linear's output goes once the contiguous copy exists.
        let proj = {
            let p = query.f_linear(&self.in_proj_weight, Some(&self.in_proj_bias))?;
            p.f_unflatten(-1, [3, e])?
                .f_unsqueeze(0)?
                .f_transpose(0, -2)?
                .f_squeeze_dim(-2)?
                .f_contiguous()?
        };
        drop(query);
        // q, k, v = proj[0], proj[1], proj[2]; then each .view(L, N*H, hd).transpose(0, 1) and
        // .view(N, H, L, hd): views of the projection, alive until the function returns.
        let heads = |i: i64| -> Result<Tensor, TchError> {
            proj.f_select(0, i)?.f_view_([l, n * h, hd])?.f_transpose(0, 1)?.f_view_([n, h, l, hd])
        };
        let (q, k, v) = (heads(0)?, heads(1)?, heads(2)?);
        drop(proj);
        // attn_output = sdpa(q, k, v, None, dropout_p, False)
        //   .permute(2, 0, 1, 3).contiguous().view(N * L, E): sdpa's output goes after the copy.
        let attn = {
            let a = Tensor::f_scaled_dot_product_attention(
                &q,
                &k,
                &v,
                None::<Tensor>,
                self.dropout,
                false,
                None,
                false,
            )?;
            a.f_permute([2, 0, 1, 3])?.f_contiguous()?.f_view_([l * n, e])?
        };
        // attn_output = linear(attn_output, out_proj...).view(L, N, E); MHA returns it transposed.
        let out = {
            let projected = self.out_proj.forward(&attn)?;
            drop(attn);
            projected.f_view_([l, n, e])?
        };
        drop((q, k, v));
        out.f_transpose(1, 0)
    }
}
