//! What a diverged trial's message says: the usual suspects (data, learning rate), and a known
//! PyTorch 2.11 fault where the configuration meets it, so that a NaN from the library is not
//! taken for the user's own.
//!
//! The fault: on a CPU, a bfloat16 convolution's backward (3x3, stride 2) whose input is 1x1
//! gives an inf or NaN weight gradient now and then (4 of 3,000 passes in plain PyTorch, two
//! threads; none at 2x2 input, none with one thread). A torchvision ResNet meets it at images of
//! 16x16 or smaller, where the first block of a stage past the stem strides over a 1x1 map.
use crate::spec::{Amp, CnnSpec, Config, DataSpec, Dtype, ModelSpec};

/// The message of a trial whose loss is `loss` (not finite) on `device`.
pub fn message(loss: f64, config: &Config, device: tch::Device) -> String {
    let mut m = format!("loss is {loss}: training diverged (check the data and training.lr");
    if let Some(size) = bf16_conv_on_one_pixel(config, device) {
        m.push_str(&format!(
            "; or PyTorch 2.11's fault on a CPU: a bf16 convolution's backward (3x3, stride 2) over a 1x1 input \
             now and then gives an inf or NaN weight gradient, and this ResNet's {size}x{size} images shrink to \
             1x1 before a strided convolution: images larger than 16x16, float32, or one thread \
             (OMP_NUM_THREADS=1) tell the two apart"
        ));
    }
    m.push(')');
    m
}

/// The image size, where `config` runs a ResNet in bf16 on the CPU with a stride-2 convolution
/// over a 1x1 map.
fn bf16_conv_on_one_pixel(config: &Config, device: tch::Device) -> Option<usize> {
    let t = &config.training;
    let bf16 = t.dtype == Dtype::Bfloat16 || t.techniques.amp == Amp::Bf16;
    let (ModelSpec::Cnn(CnnSpec::Resnet(_)), DataSpec::Images { size, .. }) = (&config.model, &config.data)
    else {
        return None;
    };
    if device != tch::Device::Cpu || !bf16 {
        return None;
    }
    // The stem's 7x7 stride-2 convolution and 3x3 stride-2 max pool, then the strided first
    // blocks of stages 2 and 3 (padding keeps `(h - 1) / 2 + 1` for each): what stage 4's
    // strided convolution sees, the smallest map a strided convolution sees.
    let halve = |h: usize| h.saturating_sub(1) / 2 + 1;
    let last = (0..4).fold(*size, |h, _| halve(h));
    (last <= 1).then_some(*size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::ResNet;

    fn resnet(size: usize, dtype: Dtype, amp: Amp) -> Config {
        let mut c = crate::spec::examples::mlp(
            1,
            8,
            4,
            crate::spec::OptimizerSpec::Adam { lr: 0.001, weight_decay: 0.0 },
        );
        c.model = ModelSpec::Cnn(CnnSpec::Resnet(ResNet::R18));
        c.data = DataSpec::Images { samples: 8, channels: 3, size, classes: 10, seed: 0 };
        c.training.dtype = dtype;
        c.training.techniques.amp = amp;
        c
    }

    #[test]
    fn the_fault_is_named_where_a_strided_convolution_sees_one_pixel() {
        let _alone = crate::probe::cpu_alone();
        let cpu = tch::Device::Cpu;
        for size in [8, 16] {
            let m = message(f64::NAN, &resnet(size, Dtype::Float32, Amp::Bf16), cpu);
            assert!(m.contains(&format!("this ResNet's {size}x{size} images shrink to 1x1")), "{m}");
            assert!(
                m.starts_with("loss is NaN: training diverged (check the data and training.lr; or"),
                "{m}"
            );
        }
        assert!(message(f64::INFINITY, &resnet(8, Dtype::Bfloat16, Amp::Off), cpu)
            .contains("PyTorch 2.11's fault"));
        // 32x32 reaches stage 4 at 2x2; float32 has no such fault; CUDA is another kernel.
        let plain = "loss is NaN: training diverged (check the data and training.lr)";
        assert_eq!(message(f64::NAN, &resnet(32, Dtype::Float32, Amp::Bf16), cpu), plain);
        assert_eq!(message(f64::NAN, &resnet(8, Dtype::Float32, Amp::Off), cpu), plain);
        assert_eq!(message(f64::NAN, &resnet(8, Dtype::Float32, Amp::Bf16), tch::Device::Cuda(0)), plain);
        let mlp = crate::spec::examples::mlp(
            2,
            8,
            4,
            crate::spec::OptimizerSpec::Sgd { lr: 0.1, momentum: 0.0, weight_decay: 0.0 },
        );
        assert_eq!(message(f64::NAN, &mlp, cpu), plain);
    }
}
