//! The error type of the safe core. Every failure is a message for `MXGetLastError()`.

use std::fmt;

/// An error of the safe core: a human-readable cause, prefixed later with the C call's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    message: String,
}

/// The core's result type.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        Error { message: message.into() }
    }

    /// Memory ran out while making `what`.
    pub fn out_of_memory(what: &str) -> Self {
        Error { message: format!("out of host memory making {what}") }
    }

    /// The message, without the call name.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// Returns early with an [`Error`] built from a format string.
#[macro_export]
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err($crate::error::Error::new(format!($($arg)*)))
    };
}

/// Returns early with an [`Error`] unless the condition holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($arg:tt)*) => {{
        let holds: bool = $cond;
        if !holds {
            $crate::bail!($($arg)*);
        }
    }};
}
