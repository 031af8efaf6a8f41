//! Keys as the caller named them, and the test-only controls every sum honours.

/// A key as the caller named it: MXNet keeps int and string keys apart.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub(super) enum Key {
    Int(i32),
    Str(String),
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Key::Int(k) => write!(f, "{k}"),
            Key::Str(k) => write!(f, "{k}"),
        }
    }
}

/// A test-only negative control (documented in docs/environment.md): drops the last source of every
/// sum of two or more, so comparisons against pure MXNet must fail.
pub(super) fn drop_source_for_test() -> bool {
    static DROP: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *DROP.get_or_init(|| std::env::var("KVSTORE_HOSTED_TEST_DROP_SOURCE").is_ok_and(|v| v == "1"))
}

/// A test-only failure (documented in docs/environment.md): `KVSTORE_HOSTED_TEST_FAIL_SUM`
/// = `error` makes libkvstore's work on every pushed value fail, `panic` makes it panic, so
/// that the tests see the failure reach the host's waiters. `None` when not set.
pub(super) fn sum_failure_for_test() -> Option<fn() -> crate::Result<()>> {
    static FAIL: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    match FAIL.get_or_init(|| std::env::var("KVSTORE_HOSTED_TEST_FAIL_SUM").ok()).as_deref() {
        Some("error") => Some(|| crate::bail!("KVSTORE_HOSTED_TEST_FAIL_SUM=error")),
        Some("panic") => Some(|| panic!("KVSTORE_HOSTED_TEST_FAIL_SUM=panic")),
        _ => None,
    }
}

/// Runs `f` with `keys` as libkvstore's own key list (one kind: the hosted store checked).
pub(super) fn with_native_keys<R>(keys: &[Key], f: impl FnOnce(crate::store::Keys) -> R) -> R {
    if matches!(keys.first(), Some(Key::Str(_))) {
        let names: Vec<&str> = keys
            .iter()
            .map(|k| match k {
                Key::Str(s) => s.as_str(),
                Key::Int(_) => "",
            })
            .collect();
        f(crate::store::Keys::Str(&names))
    } else {
        let ints: Vec<i32> = keys
            .iter()
            .map(|k| match k {
                Key::Int(i) => *i,
                Key::Str(_) => i32::MIN,
            })
            .collect();
        f(crate::store::Keys::Int(&ints))
    }
}
