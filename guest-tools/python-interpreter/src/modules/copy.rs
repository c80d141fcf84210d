//! `copy`: `deepcopy` and `copy` of built-in values.
//!
//! A value reaches the guest as a copy already ([`Py`]), and goes back as a fresh one, so
//! a deep copy of built-in values (lists, dicts, sets, tuples, numbers, strings, bytes, dates) is exactly
//! the round trip. What the round trip cannot do is refused, loudly: copying a class instance (it would
//! come back as the same object), a structure that contains itself, or a value with no boundary form
//! (an iterator, a `range`); and a shallow `copy` of a container holding mutable values, which must share
//! them. One difference is not detectable and is documented instead: two references to one inner list
//! become two separate lists in a deep copy (CPython's `deepcopy` keeps them one).

use super::{bind, type_error, PyResult};
use crate::value::Py;
use monty_types::unstable::{self, MontyNode};

pub const EXPORTS: &[&str] = &["copy", "deepcopy"];

pub fn call(function: &str, args: &[Py], kwargs: &[(Py, Py)]) -> PyResult<Py> {
    match function {
        "deepcopy" => {
            let [x, memo] = bind("deepcopy", &["x", "memo"], 1, 2, args, kwargs)?;
            if !matches!(memo, None | Some(Py::None)) {
                return Err(type_error("deepcopy() in the sandbox takes no memo dict"));
            }
            let x = x.unwrap_or(Py::None);
            check(&x, "deepcopy")?;
            Ok(x)
        }
        _ => {
            let [x] = bind("copy", &["x"], 1, 1, args, kwargs)?;
            let x = x.unwrap_or(Py::None);
            check(&x, "copy")?;
            if let Some(items) = children(&x) {
                if let Some(inner) = items.into_iter().find(|item| !immutable(item)) {
                    return Err(type_error(format!(
                        "copy.copy() of a {} holding a {} cannot share it in the sandbox; use x.copy(), list(x) \
                         or dict(x) for a shallow copy, or copy.deepcopy(x)",
                        x.type_name(),
                        inner.type_name()
                    )));
                }
            }
            Ok(x)
        }
    }
}

/// Refuses a value the round trip would not copy faithfully.
fn check(value: &Py, function: &str) -> PyResult<()> {
    match value {
        Py::ClassInstance(_) => Err(type_error(format!(
            "copy.{function}() in the sandbox copies built-in values (list, dict, set, tuple, str, numbers, bytes, \
             dates), not a {} instance",
            value.type_name()
        ))),
        Py::Cycle(..) => Err(type_error(format!("copy.{function}() in the sandbox cannot copy a structure that contains itself"))),
        Py::Repr(repr) => Err(type_error(format!("copy.{function}() in the sandbox cannot copy {repr}: convert it to a list first"))),
        Py::Path(_) => Err(type_error(format!("copy.{function}() in the sandbox cannot copy a {}", value.type_name()))),
        Py::Other(object) if matches!(unstable::root_node(object), MontyNode::FileHandle(_)) => {
            Err(type_error(format!("copy.{function}() in the sandbox cannot copy a {}", value.type_name())))
        }
        _ => match children(value) {
            Some(items) => items.into_iter().try_for_each(|item| check(item, function)),
            None => Ok(()),
        },
    }
}

/// The values a container holds (keys and values for a dict); `None` for a value that holds none.
fn children(value: &Py) -> Option<Vec<&Py>> {
    match value {
        Py::List(items) | Py::Tuple(items) | Py::Set(items) | Py::FrozenSet(items) | Py::NamedTuple { values: items, .. } => Some(items.iter().collect()),
        Py::Dict(pairs) => Some(pairs.iter().flat_map(|(k, v)| [k, v]).collect()),
        _ => None,
    }
}

/// Whether a value and everything in it is immutable, so a copy of it is as good as itself.
fn immutable(value: &Py) -> bool {
    match value {
        Py::List(_) | Py::Dict(_) | Py::Set(_) | Py::ClassInstance(_) => false,
        _ => children(value).is_none_or(|items| items.into_iter().all(immutable)),
    }
}
