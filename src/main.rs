mod ffi;
use tch::{Device, Kind, Tensor};
fn main() {
    ffi::cpu_install().unwrap();
    println!("torch {} cuda {:?} lib {:?} cuda avail {}", ffi::torch_version(), ffi::cuda_runtime_version(), ffi::libtorch_path(), tch::Cuda::is_available());
    let base = ffi::cpu_stats();
    let t = Tensor::f_zeros([1024, 1024], (Kind::Float, Device::Cpu)).unwrap();
    let s = ffi::cpu_stats();
    println!("after 4MiB: {:?} delta {}", s, s.allocated - base.allocated);
    ffi::cpu_set_cap(Some((s.allocated + 1_000_000) as u64));
    let r = Tensor::f_zeros([1024, 1024], (Kind::Float, Device::Cpu));
    println!("oom: {:?}", r.err());
    drop(t);
    println!("after drop {:?}", ffi::cpu_stats());
    ffi::cpu_set_cap(None);
    println!("autocast cpu {}", ffi::autocast_enabled(0));
}
