//! The server commands, numbered as MXNet 1.9 numbers them (`kvstore_dist_server.h`,
//! `python/mxnet/kvstore/kvstore.py`).

/// A command a worker sends to every server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// 0: run the frontend's controller on the `RunServer` thread.
    Controller,
    /// 1: keep float32 master copies of non-float32 keys.
    SetMultiPrecision,
    /// 2: end `RunServer`.
    StopServer,
    /// 3: wait for every worker's push before updating.
    SyncMode,
    /// 4: gradient-compression parameters.
    SetGradientCompression,
    /// 5: profiler parameters (accepted; libkvstore has no server profiler).
    SetProfilerParams,
}

impl Command {
    /// MXNet's number.
    pub fn id(self) -> i32 {
        match self {
            Command::Controller => 0,
            Command::SetMultiPrecision => 1,
            Command::StopServer => 2,
            Command::SyncMode => 3,
            Command::SetGradientCompression => 4,
            Command::SetProfilerParams => 5,
        }
    }

    /// The command numbered `id`; any other number is handed to nothing, as in MXNet.
    pub fn from_id(id: i32) -> Option<Command> {
        [
            Command::Controller,
            Command::SetMultiPrecision,
            Command::StopServer,
            Command::SyncMode,
            Command::SetGradientCompression,
            Command::SetProfilerParams,
        ]
        .into_iter()
        .find(|c| c.id() == id)
    }
}

/// MXNet's encoding of compression parameters for the servers: `"<type>,<threshold>"`, type 1
/// for `2bit` (and 2 for libkvstore's `1bit`).
pub fn encode_compression(gc: &crate::backend::GradientCompression) -> String {
    let kind = match gc.kind {
        crate::backend::CompressionType::TwoBit => 1,
        crate::backend::CompressionType::OneBit => 2,
    };
    format!("{kind},{:.6}", gc.threshold)
}

/// The compression a server applies for `body`; `None` for type 0 (none).
pub fn decode_compression(body: &str) -> crate::Result<Option<crate::backend::GradientCompression>> {
    use crate::backend::{CompressionType, GradientCompression};
    let mut parts = body.split(',');
    let kind = parts.next().unwrap_or("").trim();
    let threshold = match parts.next().map(str::trim).filter(|t| !t.is_empty()) {
        Some(t) => t.parse::<f32>().map_err(|_| crate::Error::new(format!("compression threshold '{t}' is not a number")))?,
        None => 0.5,
    };
    let kind = match kind {
        "0" => return Ok(None),
        "1" => CompressionType::TwoBit,
        "2" => CompressionType::OneBit,
        other => crate::bail!("unknown compression type '{other}' in a server command"),
    };
    Ok(Some(GradientCompression { kind, threshold }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_ids_are_mxnets() {
        assert_eq!(Command::Controller.id(), 0);
        assert_eq!(Command::SetMultiPrecision.id(), 1);
        assert_eq!(Command::StopServer.id(), 2);
        assert_eq!(Command::SyncMode.id(), 3);
        assert_eq!(Command::SetGradientCompression.id(), 4);
        assert_eq!(Command::SetProfilerParams.id(), 5);
        for id in 0..6 {
            assert_eq!(Command::from_id(id).map(Command::id), Some(id));
        }
        assert_eq!(Command::from_id(6), None);
        assert_eq!(Command::from_id(-1), None);
    }

    #[test]
    fn compression_parameters_round_trip_in_mxnets_encoding() {
        let gc = crate::backend::GradientCompression { kind: crate::backend::CompressionType::TwoBit, threshold: 0.5 };
        assert_eq!(encode_compression(&gc), "1,0.500000");
        assert_eq!(decode_compression("1,0.500000").unwrap(), Some(gc));
        assert_eq!(decode_compression("0").unwrap(), None);
        assert!(decode_compression("9,1").is_err());
    }
}
