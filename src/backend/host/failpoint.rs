//! A failure the tests can switch on, to prove that asynchronous failures are reported:
//! `KVSTORE_TEST_FAILPOINT=sum-error:N` makes every host sum into a destination of exactly N
//! elements fail inside its engine op (after the call that scheduled it has returned), and
//! `sum-panic:N` makes it panic there; several are separated by commas. Read once, when the
//! first sum runs; for tests only (`ctests/async_error.c`), never set in production.

use crate::error::Result;
use once_cell::sync::Lazy;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failpoint {
    Off,
    SumError(usize),
    SumPanic(usize),
}

fn parse_all(specs: &str) -> Vec<Failpoint> {
    specs.split(',').map(parse).filter(|f| *f != Failpoint::Off).collect()
}

fn parse(spec: &str) -> Failpoint {
    let Some((what, n)) = spec.split_once(':') else { return Failpoint::Off };
    let Ok(n) = n.trim().parse::<usize>() else { return Failpoint::Off };
    match what.trim() {
        "sum-error" => Failpoint::SumError(n),
        "sum-panic" => Failpoint::SumPanic(n),
        _ => Failpoint::Off,
    }
}

static FAILPOINTS: Lazy<Vec<Failpoint>> =
    Lazy::new(|| std::env::var("KVSTORE_TEST_FAILPOINT").map_or(Vec::new(), |s| parse_all(&s)));

/// Fails (or panics) a sum into `len` elements when a failpoint says so.
pub(super) fn check_sum(len: usize) -> Result<()> {
    for f in FAILPOINTS.iter() {
        match *f {
            Failpoint::SumError(n) if n == len => {
                crate::bail!("failpoint KVSTORE_TEST_FAILPOINT: the host sum of {len} elements failed")
            }
            Failpoint::SumPanic(n) if n == len => {
                panic!("failpoint KVSTORE_TEST_FAILPOINT: the host sum of {len} elements panicked")
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_or_switch_off() {
        assert_eq!(parse("sum-error:7"), Failpoint::SumError(7));
        assert_eq!(parse("sum-panic: 9"), Failpoint::SumPanic(9));
        assert_eq!(parse("sum-error"), Failpoint::Off);
        assert_eq!(parse("copy-error:3"), Failpoint::Off);
        assert_eq!(parse_all("sum-error:7,sum-panic:9"), vec![Failpoint::SumError(7), Failpoint::SumPanic(9)]);
    }
}
