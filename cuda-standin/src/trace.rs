//! `CUDA_STANDIN_TRACE=path`: one line per driver call, appended to `path`, in the format
//! docs/gpu-standin.md documents:
//!
//! `standin pid=<pid> tid=<os thread id> call=<entry point> dev=<ordinal|-> stream=<handle|-> bytes=<n|-> result=<code>[ key=value...]`

use once_cell::sync::Lazy;
use parking_lot::Mutex;
use std::fmt::Write as _;
use std::fs::File;
use std::io::Write as _;

static SINK: Lazy<Option<Mutex<File>>> = Lazy::new(|| {
    let path = std::env::var_os("CUDA_STANDIN_TRACE")?;
    match std::fs::OpenOptions::new().create(true).append(true).open(&path) {
        Ok(file) => Some(Mutex::new(file)),
        Err(e) => {
            eprintln!("cuda-standin: cannot open CUDA_STANDIN_TRACE={path:?}: {e}");
            None
        }
    }
});

/// What one call's trace line reports besides its name and result.
#[derive(Default)]
pub struct Fields {
    pub device: Option<i32>,
    pub stream: Option<u64>,
    pub bytes: Option<u64>,
    /// Further ` key=value` pairs, each with its leading space.
    pub extra: String,
}

impl Fields {
    pub fn add(&mut self, key: &str, value: impl std::fmt::Display) {
        let _ = write!(self.extra, " {key}={value}");
    }
}

pub fn enabled() -> bool {
    SINK.is_some()
}

fn or_dash(value: Option<impl std::fmt::Display>) -> String {
    value.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// Appends the line of one finished call (one write, so lines of threads and processes
/// appending to one file never interleave).
pub fn record(name: &str, fields: &Fields, result: i32) {
    let Some(sink) = SINK.as_ref() else { return };
    // SAFETY: getpid and gettid take no arguments and cannot fail.
    let (pid, tid) = unsafe { (libc::getpid(), libc::gettid()) };
    let line = format!(
        "standin pid={pid} tid={tid} call={name} dev={} stream={} bytes={} result={result}{}\n",
        or_dash(fields.device),
        or_dash(fields.stream.map(|s| format!("{s:#x}"))),
        or_dash(fields.bytes),
        fields.extra
    );
    let _ = sink.lock().write_all(line.as_bytes());
}
