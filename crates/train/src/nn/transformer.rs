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
use super::layers::{xavier_uniform_bound, Embedding, LayerNorm, Linear};
use super::ops::{Init, Ops, Place, Result};
use crate::spec::TransformerSpec;

pub struct Encoder<T> {
    embed: Embedding<T>,
    layers: Vec<EncoderLayer<T>>,
    fc: Linear<T>,
}

struct EncoderLayer<T> {
    in_proj_weight: T,
    in_proj_bias: T,
    out_proj: Linear<T>,
    linear1: Linear<T>,
    linear2: Linear<T>,
    norm1: LayerNorm<T>,
    norm2: LayerNorm<T>,
    nhead: i64,
    dropout: f64,
    norm_first: bool,
}

impl<T: Ops> Encoder<T> {
    /// As `nn.Module`s make it: the embedding, one encoder layer, the `TransformerEncoder`'s
    /// deep copies of it (every layer starts equal), the Linear; the first layer is dropped last,
    /// when the constructor returns.
    pub fn new(spec: &TransformerSpec, vocab: usize, classes: usize, place: Place) -> Result<Self> {
        let embed = Embedding::new(vocab, spec.d_model, place)?;
        let proto = EncoderLayer::new(spec, place)?;
        let layers = (0..spec.num_layers).map(|_| proto.deep_copy()).collect::<Result<_>>()?;
        let fc = Linear::new(spec.d_model, classes, place)?;
        drop(proto);
        Ok(Encoder { embed, layers, fc })
    }

    pub fn parameters(&self) -> Vec<&T> {
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
    pub fn unit(&self, i: usize, x: T) -> Result<T> {
        match i {
            0 => self.embed.forward(&x),
            _ => self.layers[i - 1].forward(x),
        }
    }

    /// `fc(x.mean(dim=1))`.
    pub fn head(&self, x: T) -> Result<T> {
        self.fc.forward(&x.f_mean1()?)
    }

    pub fn has_dropout(&self) -> bool {
        self.layers.first().is_some_and(|l| l.dropout > 0.0)
    }

    pub fn handles(&self) -> Self {
        Encoder {
            embed: self.embed.handles(),
            layers: self.layers.iter().map(EncoderLayer::handles).collect(),
            fc: self.fc.handles(),
        }
    }
}

impl<T: Ops> EncoderLayer<T> {
    /// `TransformerEncoderLayer.__init__`: `MultiheadAttention` (in_proj_weight and
    /// in_proj_bias made empty, then out_proj, a Linear with its own initialisation, then
    /// `_reset_parameters`: xavier_uniform_ of in_proj_weight, zeros in both biases), linear1,
    /// linear2, norm1, norm2.
    fn new(spec: &TransformerSpec, place: Place) -> Result<Self> {
        let e = spec.d_model as i64;
        // Made empty (a fill of 0 draws nothing), initialised after out_proj's own draws.
        let mut in_proj_weight = T::param(&[3 * e, e], place, Init::Fill(0.0))?;
        let mut in_proj_bias = T::param(&[3 * e], place, Init::Fill(0.0))?;
        let mut out_proj = Linear::<T>::new(spec.d_model, spec.d_model, place)?;
        in_proj_weight.init_(Init::Uniform(xavier_uniform_bound(spec.d_model, 3 * spec.d_model)))?;
        in_proj_bias.init_(Init::Fill(0.0))?;
        out_proj.bias.init_(Init::Fill(0.0))?;
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
    fn deep_copy(&self) -> Result<Self> {
        Ok(EncoderLayer {
            in_proj_weight: self.in_proj_weight.deep_copy()?,
            in_proj_bias: self.in_proj_bias.deep_copy()?,
            out_proj: self.out_proj.deep_copy()?,
            linear1: self.linear1.deep_copy()?,
            linear2: self.linear2.deep_copy()?,
            norm1: self.norm1.deep_copy()?,
            norm2: self.norm2.deep_copy()?,
            ..*self
        })
    }

    fn parameters(&self) -> Vec<&T> {
        let mut out = vec![&self.in_proj_weight, &self.in_proj_bias];
        out.extend(self.out_proj.parameters());
        out.extend(self.linear1.parameters());
        out.extend(self.linear2.parameters());
        out.extend(self.norm1.parameters());
        out.extend(self.norm2.parameters());
        out
    }

    fn handles(&self) -> Self {
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
    fn forward(&self, src: T) -> Result<T> {
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
    fn sa_block(&self, x: &T) -> Result<T> {
        self.self_attention(x)?.f_dropout(self.dropout)
    }

    /// `_ff_block`: `dropout2(linear2(dropout(relu(linear1(x)))))`.
    fn ff_block(&self, x: &T) -> Result<T> {
        let h = self.linear1.forward(x)?;
        let r = h.f_relu()?;
        drop(h);
        let d = r.f_dropout(self.dropout)?;
        drop(r);
        let l = self.linear2.forward(&d)?;
        drop(d);
        l.f_dropout(self.dropout)
    }

    /// `MultiheadAttention.forward(x, x, x, need_weights=False)` with `batch_first=True`, through
    /// `F.multi_head_attention_forward`: the output `[N, L, E]` (a transposed view).
    fn self_attention(&self, x: &T) -> Result<T> {
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
            p.f_unflatten(-1, &[3, e])?
                .f_unsqueeze(0)?
                .f_transpose(0, -2)?
                .f_squeeze_dim(-2)?
                .f_contiguous()?
        };
        drop(query);
        // q, k, v = proj[0], proj[1], proj[2]; then each .view(L, N*H, hd).transpose(0, 1), then
        // each .view(N, H, L, hd): views of the projection, alive until the function returns.
        // In PyTorch's order, op by op: the backward runs its nodes latest first, so the order
        // decides when each gradient's copies are made and freed.
        let (q, k, v) = (proj.f_select(0, 0)?, proj.f_select(0, 1)?, proj.f_select(0, 2)?);
        let split = |t: T| -> Result<T> { t.f_view(&[l, n * h, hd])?.f_transpose(0, 1) };
        let (q, k, v) = (split(q)?, split(k)?, split(v)?);
        let (q, k, v) = (q.f_view(&[n, h, l, hd])?, k.f_view(&[n, h, l, hd])?, v.f_view(&[n, h, l, hd])?);
        drop(proj);
        // attn_output = sdpa(q, k, v, None, dropout_p, False)
        //   .permute(2, 0, 1, 3).contiguous().view(N * L, E): sdpa's output goes after the copy.
        let attn = {
            let a = T::f_sdpa(&q, &k, &v, self.dropout)?;
            a.f_permute(&[2, 0, 1, 3])?.f_contiguous()?.f_view(&[l * n, e])?
        };
        // attn_output = linear(attn_output, out_proj...).view(L, N, E); MHA returns it transposed.
        let out = {
            let projected = self.out_proj.forward(&attn)?;
            drop(attn);
            projected.f_view(&[l, n, e])?
        };
        drop((q, k, v));
        out.f_transpose(1, 0)
    }
}
