//! Compiles every kernel of `kernels/` with NVRTC for sm_70, sm_80 and sm_90, as PTX and as
//! CUBIN, failing on any diagnostic. Needs no GPU: NVRTC alone (CI installs the PyPI wheel
//! `nvidia-cuda-nvrtc-cu12` into the project's cache; `KVSTORE_NVRTC_PATH` points at it).
//! Skips with a printed reason when NVRTC is absent, unless `KVSTORE_REQUIRE_NVRTC` is set
//! (scripts/test.sh sets it). A plain program (harness = false) so the skip is printed.

use kvstore::gpu::kernels::{compile_unit, SOURCES};
use kvstore::gpu::nvrtc::{nvrtc, Target};

const ARCHS: [i32; 3] = [70, 80, 90];

fn main() {
    let nv = match nvrtc() {
        Ok(n) => n,
        Err(reason) => {
            assert!(std::env::var_os("KVSTORE_REQUIRE_NVRTC").is_none(), "KVSTORE_REQUIRE_NVRTC is set but {reason}");
            println!("gpu_kernels: skipped: {reason}");
            println!("test result: ok. 0 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out");
            return;
        }
    };
    println!("gpu_kernels: NVRTC {}.{} from {}", nv.version.0, nv.version.1, nv.path);
    let (mut passed, mut failed) = (0, 0);
    for arch in ARCHS {
        for target in [Target::Ptx(arch), Target::Cubin(arch)] {
            for (file, body) in SOURCES {
                let t0 = std::time::Instant::now();
                match compile_unit(nv, file, body, target) {
                    Ok(c) => {
                        let ok = match target {
                            Target::Ptx(_) => c.image.starts_with(b"//") && String::from_utf8_lossy(&c.image).contains(".entry"),
                            Target::Cubin(_) => c.image.starts_with(b"\x7fELF"),
                        };
                        if ok {
                            passed += 1;
                            println!("  {file} {target:?}: {} bytes in {:.0} ms", c.image.len(), t0.elapsed().as_secs_f64() * 1e3);
                        } else {
                            failed += 1;
                            println!("  {file} {target:?}: FAILED: the image is not {target:?}");
                        }
                    }
                    Err(e) => {
                        failed += 1;
                        println!("  {file} {target:?}: FAILED:\n{e}");
                    }
                }
            }
        }
    }
    println!("test result: {}. {passed} passed; {failed} failed; 0 ignored; 0 measured; 0 filtered out", if failed == 0 { "ok" } else { "FAILED" });
    if failed > 0 {
        std::process::exit(1);
    }
}
