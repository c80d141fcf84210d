//! [`Py`]: a Python value the guest owns and matches on, for the tools and the guest's modules.
//!
//! monty hands values across as an arena (a `MontyObject`, read through an `ObjectRef`, and the
//! arguments of a paused call as `CallArgs`). The guest reads each value once into this tree and builds
//! the arena back from it ([`Py::into_monty`]); what it never looks inside (a date, a type, an
//! exception, a class instance) travels unchanged.
//!
//! A tree cannot share: an object referenced twice in one value becomes two copies, as it did before
//! monty kept sharing at the boundary. monty bounds the depth of what it hands over (deeper values cross
//! as the repr `<deeply nested>`), so reading recursively is safe.

use monty_types::unstable::{self, MontyNode};
use monty_types::{CallArgs, MontyObject, ObjectRef};
use num_bigint::BigInt;

#[derive(Clone, Debug)]
pub enum Py {
    None,
    Bool(bool),
    Int(i64),
    BigInt(BigInt),
    Float(f64),
    String(String),
    Bytes(Vec<u8>),
    List(Vec<Py>),
    Tuple(Vec<Py>),
    Set(Vec<Py>),
    FrozenSet(Vec<Py>),
    /// `(key, value)` pairs in insertion order.
    Dict(Vec<(Py, Py)>),
    NamedTuple {
        type_name: String,
        field_names: Vec<String>,
        values: Vec<Py>,
    },
    /// A host function the program calls back by name (a tool, a guest module's function).
    Function {
        name: String,
        docstring: Option<String>,
    },
    /// An instance of a class, the program's or the guest's, as monty handed it over.
    ClassInstance(MontyObject),
    /// What has no boundary form but its repr (an iterator, a `range`, a too deeply nested value).
    Repr(String),
    /// A reference back to an enclosing container, as its placeholder (`[...]`).
    Cycle(String),
    /// A `pathlib.Path`.
    Path(String),
    /// Anything else (a date, a type, an exception, a file, a module, a complex), unchanged.
    Other(MontyObject),
}

impl Py {
    /// Reads a value monty handed over.
    pub fn from_ref(value: ObjectRef<'_>) -> Py {
        let items = |ids: &[unstable::NodeId]| ids.iter().map(|id| Py::from_ref(unstable::child(value, *id))).collect();
        match unstable::node(value) {
            MontyNode::None => Py::None,
            MontyNode::Bool(b) => Py::Bool(*b),
            MontyNode::Int(i) => Py::Int(*i),
            MontyNode::BigInt(b) => Py::BigInt(b.clone()),
            MontyNode::Float(f) => Py::Float(*f),
            MontyNode::String(s) => Py::String(s.clone()),
            MontyNode::Bytes(b) => Py::Bytes(b.clone()),
            MontyNode::List(ids) => Py::List(items(ids)),
            MontyNode::Tuple(ids) => Py::Tuple(items(ids)),
            MontyNode::Set(ids) => Py::Set(items(ids)),
            MontyNode::FrozenSet(ids) => Py::FrozenSet(items(ids)),
            MontyNode::Dict(pairs) => {
                Py::Dict(pairs.iter().map(|(k, v)| (Py::from_ref(unstable::child(value, *k)), Py::from_ref(unstable::child(value, *v)))).collect())
            }
            MontyNode::NamedTuple { type_name, field_names, values } => {
                Py::NamedTuple { type_name: type_name.clone(), field_names: field_names.clone(), values: items(values) }
            }
            MontyNode::Function { name, docstring } => Py::Function { name: name.clone(), docstring: docstring.clone() },
            MontyNode::ClassInstance { .. } => Py::ClassInstance(value.to_owned()),
            MontyNode::Repr(s) => Py::Repr(s.clone()),
            MontyNode::Cycle(s) => Py::Cycle(s.clone()),
            MontyNode::Path(p) => Py::Path(p.clone()),
            _ => Py::Other(value.to_owned()),
        }
    }

    /// Reads a value monty handed over, owned.
    pub fn from_monty(value: &MontyObject) -> Py {
        Py::from_ref(value.as_ref())
    }

    /// The positional and keyword arguments of a paused call.
    pub fn from_call_args(args: &CallArgs) -> (Vec<Py>, Vec<(Py, Py)>) {
        (args.args().map(Py::from_ref).collect(), args.kwargs().map(|(k, v)| (Py::from_ref(k), Py::from_ref(v))).collect())
    }

    /// The value as monty takes it back.
    pub fn into_monty(self) -> MontyObject {
        let all = |items: Vec<Py>| items.into_iter().map(Py::into_monty);
        match self {
            Py::None => MontyObject::none(),
            Py::Bool(b) => MontyObject::bool(b),
            Py::Int(i) => MontyObject::int(i),
            Py::BigInt(b) => MontyObject::bigint(b),
            Py::Float(f) => MontyObject::float(f),
            Py::String(s) => MontyObject::string(s),
            Py::Bytes(b) => MontyObject::bytes(b),
            Py::List(items) => MontyObject::list(all(items)),
            Py::Tuple(items) => MontyObject::tuple(all(items)),
            Py::Set(items) => MontyObject::set(all(items)),
            Py::FrozenSet(items) => MontyObject::frozenset(all(items)),
            Py::Dict(pairs) => MontyObject::dict(pairs.into_iter().map(|(k, v)| (k.into_monty(), v.into_monty()))),
            Py::NamedTuple { type_name, field_names, values } => MontyObject::named_tuple(type_name, field_names, all(values)),
            Py::Function { name, docstring } => MontyObject::function(name, docstring),
            Py::ClassInstance(object) | Py::Other(object) => object,
            Py::Repr(s) => MontyObject::repr(s),
            Py::Cycle(s) => MontyObject::cycle(s),
            Py::Path(p) => MontyObject::path(p),
        }
    }

    /// A dict from `(key, value)` pairs.
    pub fn dict(pairs: Vec<(Py, Py)>) -> Py {
        Py::Dict(pairs)
    }

    /// The Python type name, e.g. `"list"`; an instance reports its class's name.
    pub fn type_name(&self) -> &str {
        match self {
            Py::None => "NoneType",
            Py::Bool(_) => "bool",
            Py::Int(_) | Py::BigInt(_) => "int",
            Py::Float(_) => "float",
            Py::String(_) => "str",
            Py::Bytes(_) => "bytes",
            Py::List(_) => "list",
            Py::Tuple(_) => "tuple",
            Py::Set(_) => "set",
            Py::FrozenSet(_) => "frozenset",
            Py::Dict(_) => "dict",
            Py::NamedTuple { .. } => "namedtuple",
            Py::Function { .. } => "function",
            Py::ClassInstance(object) | Py::Other(object) => object.type_name(),
            Py::Repr(_) => "repr",
            Py::Cycle(_) => "cycle",
            Py::Path(_) => "PosixPath",
        }
    }

    /// The Python `repr()`; a value known only by its repr is that repr.
    pub fn py_repr(&self) -> String {
        match self {
            Py::Repr(s) | Py::Cycle(s) => s.clone(),
            other => other.clone().into_monty().py_repr(),
        }
    }
}

impl From<Py> for MontyObject {
    fn from(value: Py) -> MontyObject {
        value.into_monty()
    }
}
