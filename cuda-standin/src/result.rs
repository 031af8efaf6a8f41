//! CUresult codes the stand-in answers, with the driver's names and descriptions
//! (`cuGetErrorName` / `cuGetErrorString`).

/// A CUDA driver result code (`CUresult`, a C enum passed as `int`).
pub type CUresult = i32;

pub const SUCCESS: CUresult = 0;
pub const INVALID_VALUE: CUresult = 1;
pub const OUT_OF_MEMORY: CUresult = 2;
pub const NOT_INITIALIZED: CUresult = 3;
pub const NO_DEVICE: CUresult = 100;
pub const INVALID_DEVICE: CUresult = 101;
pub const INVALID_IMAGE: CUresult = 200;
pub const INVALID_CONTEXT: CUresult = 201;
pub const INVALID_HANDLE: CUresult = 400;
pub const NOT_FOUND: CUresult = 500;
pub const NOT_READY: CUresult = 600;
pub const ILLEGAL_ADDRESS: CUresult = 700;
pub const PEER_ACCESS_ALREADY_ENABLED: CUresult = 704;
pub const PEER_ACCESS_NOT_ENABLED: CUresult = 705;
pub const CONTEXT_IS_DESTROYED: CUresult = 709;
pub const HOST_MEMORY_ALREADY_REGISTERED: CUresult = 712;
pub const HOST_MEMORY_NOT_REGISTERED: CUresult = 713;
pub const NOT_SUPPORTED: CUresult = 801;
pub const UNKNOWN: CUresult = 999;

/// `(code, name, description)`, NUL-terminated for the C API.
const TABLE: &[(CUresult, &str, &str)] = &[
    (0, "CUDA_SUCCESS\0", "no error\0"),
    (1, "CUDA_ERROR_INVALID_VALUE\0", "invalid argument\0"),
    (2, "CUDA_ERROR_OUT_OF_MEMORY\0", "out of memory\0"),
    (3, "CUDA_ERROR_NOT_INITIALIZED\0", "initialization error\0"),
    (4, "CUDA_ERROR_DEINITIALIZED\0", "driver shutting down\0"),
    (100, "CUDA_ERROR_NO_DEVICE\0", "no CUDA-capable device is detected\0"),
    (101, "CUDA_ERROR_INVALID_DEVICE\0", "invalid device ordinal\0"),
    (200, "CUDA_ERROR_INVALID_IMAGE\0", "device kernel image is invalid\0"),
    (201, "CUDA_ERROR_INVALID_CONTEXT\0", "invalid device context\0"),
    (400, "CUDA_ERROR_INVALID_HANDLE\0", "invalid resource handle\0"),
    (500, "CUDA_ERROR_NOT_FOUND\0", "named symbol not found\0"),
    (600, "CUDA_ERROR_NOT_READY\0", "device not ready\0"),
    (700, "CUDA_ERROR_ILLEGAL_ADDRESS\0", "an illegal memory access was encountered\0"),
    (704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED\0", "peer access is already enabled\0"),
    (705, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED\0", "peer access has not been enabled\0"),
    (709, "CUDA_ERROR_CONTEXT_IS_DESTROYED\0", "context is destroyed\0"),
    (712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED\0", "part or all of the requested memory range is already mapped\0"),
    (713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED\0", "pointer does not correspond to a registered memory region\0"),
    (801, "CUDA_ERROR_NOT_SUPPORTED\0", "operation not supported\0"),
    (999, "CUDA_ERROR_UNKNOWN\0", "unknown error\0"),
];

/// The driver's name and description of `code`, NUL-terminated; `None` for a code the
/// stand-in never answers (the driver then answers CUDA_ERROR_INVALID_VALUE).
pub fn describe(code: CUresult) -> Option<(&'static str, &'static str)> {
    TABLE.iter().find(|(c, _, _)| *c == code).map(|(_, n, d)| (*n, *d))
}
