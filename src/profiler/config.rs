//! The profiler's configuration: MXNet 1.9's `ProfileConfigParam` keys and defaults.

use crate::error::Result;

/// What `MXSetProfilerConfig` set. Keys MXNet accepts and libkvstore has nothing to do with
/// (`profile_memory`: no memory events yet) are checked and kept.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Config {
    pub filename: String,
    /// Calls at the store's entry (MXNet's `profile_api`, the C API domain).
    pub profile_api: bool,
    /// Engine ops (MXNet's `profile_imperative` and `profile_symbolic`: operators).
    pub profile_ops: bool,
    pub profile_memory: bool,
    pub continuous_dump: bool,
    pub dump_period: f32,
    pub aggregate_stats: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            filename: "profile.json".to_string(),
            profile_api: true,
            profile_ops: true,
            profile_memory: true,
            continuous_dump: true,
            dump_period: 1.0,
            aggregate_stats: false,
        }
    }
}

/// Which process a profiler call addresses (`profile_process`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Process {
    Worker,
    Server,
}

impl Process {
    pub(crate) fn from_int(v: i32) -> Result<Process> {
        match v {
            0 => Ok(Process::Worker),
            1 => Ok(Process::Server),
            _ => crate::bail!("profile_process {v} is not 0 (worker) or 1 (server)"),
        }
    }
}

/// dmlc's bool parameter: true/false in any case, or an integer (non-zero is true).
fn parse_bool(key: &str, value: &str) -> Result<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        v => match v.parse::<i64>() {
            Ok(n) => Ok(n != 0),
            Err(_) => crate::bail!("invalid value '{value}' for {key}: expected True, False, 1 or 0"),
        },
    }
}

/// Parses `key=value` pairs over MXNet's defaults. Every key is checked before anything is
/// applied; an unknown key or a malformed value is refused. A repeated key: the last wins.
pub(crate) fn parse(pairs: &[(&str, &str)]) -> Result<(Config, Process)> {
    let mut c = Config::default();
    let mut all = false;
    let (mut symbolic, mut imperative) = (true, true);
    let mut process = Process::Worker;
    for (key, value) in pairs {
        match *key {
            "profile_all" => all = parse_bool(key, value)?,
            "profile_symbolic" => symbolic = parse_bool(key, value)?,
            "profile_imperative" => imperative = parse_bool(key, value)?,
            "profile_memory" => c.profile_memory = parse_bool(key, value)?,
            "profile_api" => c.profile_api = parse_bool(key, value)?,
            "continuous_dump" => c.continuous_dump = parse_bool(key, value)?,
            "aggregate_stats" => c.aggregate_stats = parse_bool(key, value)?,
            "filename" => {
                crate::ensure!(!value.is_empty(), "profiler config: filename is empty");
                c.filename = (*value).to_string();
            }
            "dump_period" => {
                c.dump_period = value
                    .trim()
                    .parse::<f32>()
                    .ok()
                    .filter(|p| p.is_finite() && *p > 0.0)
                    .ok_or_else(|| crate::Error::new(format!("invalid value '{value}' for dump_period: expected seconds > 0")))?
            }
            "profile_process" => {
                process = match *value {
                    "worker" => Process::Worker,
                    "server" => Process::Server,
                    _ => crate::bail!("invalid value '{value}' for profile_process: expected worker or server"),
                }
            }
            _ => crate::bail!(
                "unknown profiler config key '{key}' (known: profile_all, profile_symbolic, profile_imperative, \
                 profile_memory, profile_api, filename, continuous_dump, dump_period, aggregate_stats, profile_process)"
            ),
        }
    }
    c.profile_api |= all;
    c.profile_memory |= all;
    c.profile_ops = all || symbolic || imperative;
    Ok((c, process))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_mxnets_and_python_spellings_parse() {
        let (c, p) = parse(&[]).unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(p, Process::Worker);
        let (c, _) = parse(&[("filename", "t.json"), ("profile_all", "True"), ("aggregate_stats", "1"), ("profile_api", "False")])
            .unwrap();
        assert_eq!(c.filename, "t.json");
        assert!(c.aggregate_stats && c.profile_api && c.profile_ops, "profile_all turns every kind on");
        let (c, _) = parse(&[("profile_api", "false"), ("profile_symbolic", "0"), ("profile_imperative", "False")]).unwrap();
        assert!(!c.profile_api && !c.profile_ops);
    }

    #[test]
    fn bad_keys_and_values_are_refused() {
        assert!(parse(&[("profile_everything", "True")]).unwrap_err().message().contains("unknown profiler config key 'profile_everything'"));
        assert!(parse(&[("profile_all", "yes")]).unwrap_err().message().contains("invalid value 'yes' for profile_all"));
        assert!(parse(&[("dump_period", "-1")]).is_err());
        assert!(parse(&[("filename", "")]).is_err());
        assert!(parse(&[("profile_process", "scheduler")]).is_err());
        assert_eq!(parse(&[("filename", "a"), ("filename", "b")]).unwrap().0.filename, "b");
    }
}
