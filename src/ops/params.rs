//! Op parameters as the frontends send them: strings such as `shape="(4, 4)"`,
//! `ctx="cpu(0)"`, `dtype="float32"`, `scalar="4.0"`, `keepdims="True"`, `axis="(0,)"`.

use super::info::OpInfo;
use crate::error::Result;
use crate::ndarray::{Context, DType, StorageType, ALL_DTYPES};
use std::collections::HashMap;

/// The parameters of one invocation, checked against the op's declared parameters.
#[derive(Debug)]
pub struct Params {
    op: &'static str,
    values: HashMap<String, String>,
}

impl Params {
    /// Pairs `keys[i] = vals[i]`; a key the op does not declare is refused, as MXNet does.
    pub fn new(info: &OpInfo, keys: &[&str], vals: &[&str]) -> Result<Params> {
        let mut values = HashMap::new();
        for (k, v) in keys.iter().zip(vals) {
            let declared = info.args.iter().any(|a| a.name == *k && !OpInfo::is_input(a)) || *k == info.key_var_num_args;
            crate::ensure!(declared, "operator {} has no parameter '{k}'", info.name);
            values.insert((*k).to_string(), (*v).to_string());
        }
        Ok(Params { op: info.name, values })
    }

    /// The raw string of `key`, if given.
    pub fn raw(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(|s| s.trim())
    }

    fn bad(&self, key: &str, value: &str, want: &str) -> crate::Error {
        crate::Error::new(format!("operator {}: parameter {key}='{value}' is not {want}", self.op))
    }

    /// A number parameter (`scalar`, `src`, `value`).
    pub fn f64(&self, key: &str) -> Result<Option<f64>> {
        match self.raw(key) {
            None => Ok(None),
            Some(v) => parse_number(v).map(Some).ok_or_else(|| self.bad(key, v, "a number")),
        }
    }

    /// A boolean parameter: `True`/`False`, `true`/`false`, `1`/`0`.
    pub fn bool(&self, key: &str) -> Result<Option<bool>> {
        match self.raw(key) {
            None => Ok(None),
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "true" | "1" => Ok(Some(true)),
                "false" | "0" => Ok(Some(false)),
                _ => Err(self.bad(key, v, "a boolean")),
            },
        }
    }

    /// A shape parameter: `(4, 4)`, `[2,3]`, `(2,)`, `5`, `()`; `None` and "" count as absent.
    pub fn shape(&self, key: &str) -> Result<Option<Vec<usize>>> {
        match self.raw(key) {
            None | Some("None") | Some("") => Ok(None),
            Some(v) => parse_tuple(v)
                .and_then(|dims| dims.into_iter().map(|d| usize::try_from(d).ok()).collect())
                .map(Some)
                .ok_or_else(|| self.bad(key, v, "a shape like (2, 3)")),
        }
    }

    /// An axis list, possibly negative: `(0, -1)`, `1`, `()`; `None` counts as absent.
    pub fn axes(&self, key: &str) -> Result<Option<Vec<i64>>> {
        match self.raw(key) {
            None | Some("None") | Some("") => Ok(None),
            Some(v) => parse_tuple(v).map(Some).ok_or_else(|| self.bad(key, v, "an axis or a tuple of axes")),
        }
    }

    /// A dtype parameter by MXNet name (`float32`, `int64`, ...).
    pub fn dtype(&self, key: &str) -> Result<Option<DType>> {
        match self.raw(key) {
            None | Some("None") => Ok(None),
            Some(v) => {
                let name = v.trim_matches(|c| c == '\'' || c == '"');
                ALL_DTYPES.iter().find(|d| d.name() == name).copied().map(Some).ok_or_else(|| self.bad(key, v, "a dtype name"))
            }
        }
    }

    /// A storage type parameter: `default`, `row_sparse`, `csr`.
    pub fn stype(&self, key: &str) -> Result<Option<StorageType>> {
        match self.raw(key) {
            None => Ok(None),
            Some(v) => [StorageType::Default, StorageType::RowSparse, StorageType::Csr]
                .into_iter()
                .find(|s| s.name() == v)
                .map(Some)
                .ok_or_else(|| self.bad(key, v, "a storage type (default, row_sparse, csr)")),
        }
    }

    /// A context parameter: `cpu(0)`, `cpu_pinned(1)`, `cpu_shared(0)`, `gpu(0)`; "" is absent.
    pub fn ctx(&self, key: &str) -> Result<Option<Context>> {
        match self.raw(key) {
            None | Some("") => Ok(None),
            Some(v) => parse_context(v).ok_or_else(|| self.bad(key, v, "a context like cpu(0)"))?.map(Some),
        }
    }
}

fn parse_number(v: &str) -> Option<f64> {
    match v {
        "True" | "true" => Some(1.0),
        "False" | "false" => Some(0.0),
        "inf" | "Infinity" => Some(f64::INFINITY),
        "-inf" | "-Infinity" => Some(f64::NEG_INFINITY),
        _ => v.parse::<f64>().ok(),
    }
}

/// `(1, 2)`, `[1,2]`, `(1,)`, `3`, `()` → the integers, read as MXNet's tuple parser reads
/// them: one bracketed list (`(` or `[` open it, `)` or `]` close it), integers with an
/// optional sign and an optional `L` suffix (Python 2), one trailing comma allowed, spaces
/// around anything; a bare integer is a one-element tuple. Anything else is refused:
/// `(2,,3)`, `((2,3))`, `(,2)`, `(2,3` or `2,3` are not read as `(2,3)`.
fn parse_tuple(v: &str) -> Option<Vec<i64>> {
    let mut rest = v.trim();
    if !rest.starts_with(['(', '[']) {
        return parse_int(rest).map(|i| vec![i]);
    }
    rest = rest[1..].trim_start();
    let mut out = Vec::new();
    loop {
        if let Some(after) = rest.strip_prefix([')', ']']) {
            // An empty tuple, or the close after a trailing comma.
            return after.trim().is_empty().then_some(out);
        }
        let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '-' || c == '+')).unwrap_or(rest.len());
        out.push(parse_int(&rest[..end])?);
        rest = rest[end..].trim_start();
        rest = rest.strip_prefix('L').unwrap_or(rest);
        if let Some(after) = rest.strip_prefix(',') {
            rest = after.trim_start();
            // A comma must be followed by another integer or the close.
            if !rest.starts_with([')', ']']) && !rest.starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '+') {
                return None;
            }
        } else if !rest.starts_with([')', ']']) {
            return None;
        }
    }
}

/// An integer with an optional sign and an optional `L` suffix, nothing else.
fn parse_int(s: &str) -> Option<i64> {
    let s = s.strip_suffix('L').unwrap_or(s);
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn parse_context(v: &str) -> Option<Result<Context>> {
    let (kind, rest) = v.split_once('(')?;
    let id: i32 = rest.strip_suffix(')')?.trim().parse().ok()?;
    let code = match kind.trim() {
        "cpu" => 1,
        "gpu" => 2,
        "cpu_pinned" => 3,
        "cpu_shared" => 5,
        _ => return None,
    };
    Some(Context::from_codes(code, id).and_then(crate::gpu::usable_context))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::registry::lookup;

    #[test]
    fn frontend_strings_parse_like_mxnet() {
        let zeros = lookup("_zeros").unwrap();
        let p = Params::new(zeros.info(), &["shape", "ctx", "dtype"], &["(4, 4)", "cpu(3)", "int64"]).unwrap();
        assert_eq!(p.shape("shape").unwrap(), Some(vec![4, 4]));
        assert_eq!(p.ctx("ctx").unwrap(), Some(Context::cpu(3)));
        assert_eq!(p.dtype("dtype").unwrap(), Some(DType::Int64));
        assert!(Params::new(zeros.info(), &["bogus"], &["1"]).unwrap_err().message().contains("no parameter 'bogus'"));
        let p = Params::new(zeros.info(), &["shape", "ctx"], &["(2,)", "tpu(0)"]).unwrap();
        assert_eq!(p.shape("shape").unwrap(), Some(vec![2]));
        assert!(p.ctx("ctx").is_err());
        let s = Params::new(lookup("_mul_scalar").unwrap().info(), &["scalar", "is_int"], &["4.0", "False"]).unwrap();
        assert_eq!(s.f64("scalar").unwrap(), Some(4.0));
        assert_eq!(s.bool("is_int").unwrap(), Some(false));
        let sum = Params::new(lookup("sum").unwrap().info(), &["axis", "keepdims"], &["(0, -1)", "True"]).unwrap();
        assert_eq!(sum.axes("axis").unwrap(), Some(vec![0, -1]));
        let bad = Params::new(lookup("sum").unwrap().info(), &["axis"], &["(a)"]).unwrap();
        assert!(bad.axes("axis").unwrap_err().message().contains("axis='(a)'"));
    }

    #[test]
    fn tuples_are_read_strictly_as_mxnet_reads_them() {
        let ok: &[(&str, &[i64])] = &[
            ("(2,3)", &[2, 3]),
            ("(2, 3)", &[2, 3]),
            ("[2,3]", &[2, 3]),
            ("[2,3)", &[2, 3]),
            ("(2,)", &[2]),
            ("(2,3,)", &[2, 3]),
            ("( 2 , 3 )", &[2, 3]),
            (" (2,3) ", &[2, 3]),
            ("(2L,3L)", &[2, 3]),
            ("(+2,-3)", &[2, -3]),
            ("()", &[]),
            ("[ ]", &[]),
            ("2", &[2]),
            ("-1", &[-1]),
        ];
        for (text, want) in ok {
            assert_eq!(parse_tuple(text).as_deref(), Some(*want), "{text}");
        }
        for bad in ["(2,,3)", "((2,3))", "(,2)", "(2,3", "2,3", "(2 3)", "(2,3)x", "(2,3),", "(2.0,3)", "(", ")", "(-)", "(2-3)", "(2L ,3)x", "", "x"] {
            assert_eq!(parse_tuple(bad), None, "{bad}");
        }
    }
}
