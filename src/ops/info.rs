//! What an operator reports about itself to the frontends' code generators.

/// One argument of an op as MXNet reports it: name, type string (MXNet's format, parsed by
/// the frontends' code generators) and description.
pub struct ArgInfo {
    /// The argument's name, e.g. `scalar`.
    pub name: &'static str,
    /// MXNet's type string, e.g. `double, optional, default=1` or `NDArray-or-Symbol`.
    pub type_info: &'static str,
    /// What the argument means.
    pub description: &'static str,
}

/// The metadata of one op.
pub struct OpInfo {
    /// The canonical name (what `MXSymbolGetAtomicSymbolInfo` reports).
    pub name: &'static str,
    /// Other names of the same op.
    pub aliases: &'static [&'static str],
    /// A one-sentence description.
    pub description: &'static str,
    /// Inputs (type `NDArray...`) and parameters, in MXNet's order.
    pub args: &'static [ArgInfo],
    /// The parameter giving the number of inputs of a variadic op, or "".
    pub key_var_num_args: &'static str,
}

impl OpInfo {
    /// Whether an argument is an array input rather than a parameter (the frontends' rule).
    pub fn is_input(arg: &ArgInfo) -> bool {
        ["NDArray", "Symbol", "ndarray-or-symbol"].iter().any(|p| arg.type_info.starts_with(p))
    }
}
