//! Checking the device contexts users ask for (the types are `base::context`'s).

use super::{Context, DeviceType};
use crate::error::Result;

impl Context {
    /// The context with these MXNet codes. Whether a GPU context can hold values is the GPU
    /// backend's to say (`gpu::usable_context`), checked where arrays are made.
    pub fn from_codes(dev_type: i32, dev_id: i32) -> Result<Context> {
        let dev_type = DeviceType::from_code(dev_type)?;
        crate::ensure!(dev_id >= 0, "device id {dev_id} is negative");
        Ok(Context { dev_type, dev_id })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_codes_match_mxnet() {
        assert_eq!(DeviceType::Cpu as i32, 1);
        assert_eq!(DeviceType::Gpu as i32, 2);
        assert_eq!(DeviceType::CpuPinned as i32, 3);
        assert_eq!(DeviceType::CpuShared as i32, 5);
        assert!(DeviceType::from_code(4).is_err());
        assert_eq!(Context::from_codes(3, 0).unwrap(), Context::cpu_pinned(0));
        assert!(Context::from_codes(1, -1).is_err());
    }
}
