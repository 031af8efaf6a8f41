//! The host build declares every kernel with the parameters NVRTC's image of the same source
//! declares: same names, same count, same sizes. cuLaunchKernel copies parameters by the
//! image's sizes and the host build reads them by its own, so a difference would be read as
//! garbage.

mod common;
use common::nvrtc::{self, FILES};
use cuda_standin::host_kernels::{find, names, param_sizes};

#[test]
fn the_host_build_takes_the_parameters_nvrtcs_image_declares() {
    let Some(nvrtc) = nvrtc::load() else { return };
    let mut checked = 0;
    for file in FILES {
        let ptx = nvrtc.compile(file, "compute_90");
        let text = std::str::from_utf8(&ptx).unwrap().trim_end_matches('\0');
        for kernel in cuda_standin::image::ptx_kernels(text).unwrap() {
            let index = find(&kernel.name).unwrap_or_else(|| panic!("{file}: {} is not in the host build", kernel.name));
            let host: Vec<usize> = param_sizes(index).unwrap().into_iter().map(|s| s as usize).collect();
            assert_eq!(host, kernel.params, "{file}: {} parameter sizes, host build vs NVRTC", kernel.name);
            checked += 1;
        }
    }
    assert_eq!(checked, names().len(), "every kernel of the host build is in one image");
}
