//! The operator registry: every name the frontends may look up (canonical names and aliases),
//! the metadata each op reports (`catalog`), and which of them libkvstore can run (`kernel`).

use super::catalog::CATALOG;
use super::info::OpInfo;
use super::kernel::Kernel;
use crate::error::Result;
use once_cell::sync::Lazy;
use std::collections::HashMap;

/// A registered op: its position in the catalog (stable for the process, used as handle).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpRef(usize);

impl OpRef {
    /// The op's metadata.
    pub fn info(self) -> &'static OpInfo {
        &CATALOG[self.0]
    }

    /// What computes the op, or `None` if libkvstore only registers its name.
    pub fn kernel(self) -> Option<Kernel> {
        Kernel::for_op(self.info().name)
    }

    /// The catalog index, for handle encoding.
    pub fn index(self) -> usize {
        self.0
    }

    /// The op at catalog index `i`.
    pub fn from_index(i: usize) -> Option<OpRef> {
        (i < CATALOG.len()).then_some(OpRef(i))
    }
}

static BY_NAME: Lazy<HashMap<&'static str, OpRef>> = Lazy::new(|| {
    let mut map = HashMap::new();
    for (i, op) in CATALOG.iter().enumerate() {
        map.insert(op.name, OpRef(i));
        for alias in op.aliases {
            map.insert(*alias, OpRef(i));
        }
    }
    map
});

static ALL_NAMES: Lazy<Vec<&'static str>> = Lazy::new(|| {
    let mut names: Vec<&'static str> = BY_NAME.keys().copied().collect();
    names.sort_unstable();
    names
});

/// The op registered as `name` (canonical or alias).
pub fn lookup(name: &str) -> Result<OpRef> {
    BY_NAME
        .get(name)
        .copied()
        .ok_or_else(|| crate::Error::new(format!("operator {name} is not registered in libkvstore")))
}

/// Every registered name, aliases included, sorted.
pub fn all_names() -> &'static [&'static str] {
    &ALL_NAMES
}

/// Every op once, in catalog order.
pub fn all_ops() -> impl Iterator<Item = OpRef> {
    (0..CATALOG.len()).map(OpRef)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_resolve_to_their_op_and_metadata_keeps_mxnet_arg_order() {
        let plus = lookup("_plus").unwrap();
        assert_eq!(plus, lookup("elemwise_add").unwrap());
        assert_eq!(plus.info().name, "elemwise_add");
        let mul = lookup("_mul_scalar").unwrap().info();
        let names: Vec<&str> = mul.args.iter().map(|a| a.name).collect();
        assert_eq!(names, ["data", "scalar", "is_int"]);
        assert!(OpInfo::is_input(&mul.args[0]) && !OpInfo::is_input(&mul.args[1]));
        assert!(lookup("no_such_op").unwrap_err().message().contains("no_such_op"));
        assert!(all_names().contains(&"_np_all") && all_names().windows(2).all(|w| w[0] < w[1]));
        assert!(lookup("cast").unwrap().kernel().is_some());
        assert!(lookup("sgd_update").unwrap().kernel().is_none());
    }
}
