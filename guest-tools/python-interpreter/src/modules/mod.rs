//! The modules the guest provides itself, where monty has none: `random` (seeded and deterministic),
//! `copy`, `string` and `hashlib`. All are pure: they compute on the values they are given.
//!
//! A module is a host-backed object of monty's (an instance of a host-defined class,
//! told apart by its uuid): [`crate::imports`] rewrites `import random` into
//! `random = __import__('random')`, the VM asks for `__import__` by name ([`builtin`]), and then:
//! - `random.randint(1, 6)` pauses the VM as a method call on the module object ([`call_method`]);
//! - `random.randint` read as a value pauses as an attribute lookup ([`attr`]), answered with an external
//!   function named `random.randint` that [`call_function`] serves;
//! - `random.Random(42)` and `hashlib.md5(b)` return further host objects (a generator, a hash) whose
//!   methods route the same way, by the object's uuid.
//!
//! Values cross as copies ([`crate::value::Py`]), so nothing here can change a program's list in place:
//! `random.shuffle` says so and names the alternative, and `copy.copy` refuses a container whose shared
//! mutable contents it could not share.
//!
//! The objects live for one run: the guest is instantiated afresh for every program, and [`reset`]
//! clears them anyway.

mod copy;
mod hashlib;
mod random;
mod string;

use crate::value::Py;
use monty_types::{ExcType, ExtFunctionResult, MontyException, MontyObject, MontyUuid, NameLookupResult};
use std::cell::RefCell;

/// The guest's modules and the names each exports.
pub const GUEST_MODULES: &[(&str, &[&str])] =
    &[("random", random::EXPORTS), ("copy", copy::EXPORTS), ("string", string::EXPORTS), ("hashlib", hashlib::EXPORTS)];

/// The names `module` exports, if it is one of the guest's.
pub fn exports(module: &str) -> Option<&'static [&'static str]> {
    GUEST_MODULES.iter().find(|(name, _)| *name == module).map(|(_, exports)| *exports)
}

/// A Python exception raised into the program.
pub type PyResult<T> = Result<T, MontyException>;

pub fn exception(exc_type: ExcType, message: impl Into<String>) -> MontyException {
    MontyException::new(exc_type, Some(message.into()))
}

pub fn type_error(message: impl Into<String>) -> MontyException {
    exception(ExcType::TypeError, message)
}

pub fn value_error(message: impl Into<String>) -> MontyException {
    exception(ExcType::ValueError, message)
}

/// One object a run created. Its index in [`OBJECTS`] is its uuid's low bits.
enum Object {
    Module(&'static str),
    Random(Box<random::Generator>),
    Hash(Box<hashlib::Hash>),
}

thread_local! {
    static OBJECTS: RefCell<Vec<Object>> = const { RefCell::new(Vec::new()) };
}

/// Forgets every object of a previous run.
pub fn reset() {
    OBJECTS.with(|o| o.borrow_mut().clear());
    random::reset();
}

/// uuids of the guest's objects and classes: a fixed prefix, then a kind and an index.
const UUID_PREFIX: u128 = 0x6167_656e_7472_7400 << 64; // "agentrt\0"
const CLASS_TAG: u128 = 1 << 48;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Class {
    Module = 1,
    Random = 2,
    Hash = 3,
}

impl Class {
    fn name(self) -> &'static str {
        match self {
            Class::Module => "module",
            Class::Random => "Random",
            Class::Hash => "HASH",
        }
    }

    fn uuid(self) -> MontyUuid {
        MontyUuid::from_u128(UUID_PREFIX | CLASS_TAG | self as u128)
    }

    /// The class as a type object the program can hold: a class defined by the host.
    fn class_type(self) -> MontyObject {
        MontyObject::class_type(self.name(), self.uuid(), true, false, [])
    }
}

/// What a uuid names, if it is one of ours.
enum Target {
    Object(usize),
    Class(Class),
}

fn decode(id: MontyUuid) -> Option<Target> {
    let raw = u128::from_be_bytes(*id.as_bytes());
    if raw & (u128::MAX << 64) != UUID_PREFIX {
        return None;
    }
    let low = raw & u128::from(u64::MAX);
    if low & CLASS_TAG != 0 {
        return match low & 0xff {
            1 => Some(Target::Class(Class::Module)),
            2 => Some(Target::Class(Class::Random)),
            3 => Some(Target::Class(Class::Hash)),
            _ => None,
        };
    }
    Some(Target::Object(low as usize))
}

/// Registers `object` and returns it as the value the program holds.
fn new_object(object: Object) -> Py {
    let class = match &object {
        Object::Module(_) => Class::Module,
        Object::Random(_) => Class::Random,
        Object::Hash(_) => Class::Hash,
    };
    let index = OBJECTS.with(|o| {
        let mut objects = o.borrow_mut();
        objects.push(object);
        objects.len() - 1
    });
    instance(class, index, Vec::new())
}

fn instance(class: Class, index: usize, attrs: Vec<(MontyObject, MontyObject)>) -> Py {
    Py::ClassInstance(MontyObject::class_instance(class.class_type(), MontyUuid::from_u128(UUID_PREFIX | index as u128), attrs))
}

/// The object of module `name`, one per run. `string`'s constants travel with it as attributes, so
/// reading them does not pause the VM.
fn module_object(name: &'static str) -> Py {
    let existing = OBJECTS.with(|o| o.borrow().iter().position(|object| matches!(object, Object::Module(m) if *m == name)));
    let index = existing.unwrap_or_else(|| {
        OBJECTS.with(|o| {
            let mut objects = o.borrow_mut();
            objects.push(Object::Module(name));
            objects.len() - 1
        })
    });
    let attrs = match name {
        "string" => string::EXPORTS.iter().map(|c| (MontyObject::string(*c), MontyObject::string(string::constant(c).unwrap_or_default()))).collect(),
        _ => Vec::new(),
    };
    instance(Class::Module, index, attrs)
}

/// The type object of one of our classes (`random.Random`), so `isinstance` and calling it work.
fn class_object(class: Class) -> Py {
    Py::Other(class.class_type())
}

/// An external function the program can hold and call later: a module function (`random.randint`) or a
/// method bound to object `index` (`Random.randint#3`).
fn function(name: String) -> Py {
    Py::Function { name, docstring: None }
}

/// The guest's builtin the VM may ask for by name: `__import__`, what rewritten imports call.
pub fn builtin(name: &str) -> Option<Py> {
    (name == "__import__").then(|| function(name.to_string()))
}

/// Whether an external function called `name` is one of ours rather than a tool.
pub fn is_guest_function(name: &str) -> bool {
    name == "__import__" || name.split_once('.').is_some_and(|(owner, _)| exports(owner).is_some() || owner == "Random" || owner == "HASH")
}

/// `__import__(name)`: the guest's module object, or the ImportError CPython would raise here.
fn import(args: &[Py], kwargs: &[(Py, Py)]) -> PyResult<Py> {
    let [Some(Py::String(name))] = bind("__import__", &["name"], 1, 1, args, kwargs)? else {
        return Err(type_error("__import__() argument 1 must be str"));
    };
    match GUEST_MODULES.iter().find(|(module, _)| *module == name) {
        Some((module, _)) => Ok(module_object(module)),
        None => Err(exception(
            ExcType::ModuleNotFoundError,
            format!(
                "`__import__('{name}')` is not allowed: __import__ serves only {}; write an import statement",
                GUEST_MODULES.iter().map(|(m, _)| *m).collect::<Vec<_>>().join(", ")
            ),
        )),
    }
}

/// Calls the external function `name` (a module function or a bound method, see [`function`]).
pub fn call_function(name: &str, args: &[Py], kwargs: &[(Py, Py)]) -> ExtFunctionResult {
    let result = if name == "__import__" {
        import(args, kwargs)
    } else if let Some((method, index)) = name.split_once('#').and_then(|(qualified, index)| Some((qualified.split_once('.')?.1, index.parse::<usize>().ok()?)))
    {
        call_object(index, method, args, kwargs)
    } else {
        match name.split_once('.') {
            Some((module, function)) => call_module(module, function, args, kwargs),
            None => Err(exception(ExcType::NameError, format!("name '{name}' is not defined"))),
        }
    };
    into_result(result)
}

/// A method call on one of our objects or classes, routed by uuid.
pub fn call_method(id: MontyUuid, method: &str, args: &[Py], kwargs: &[(Py, Py)]) -> ExtFunctionResult {
    let result = match decode(id) {
        Some(Target::Object(index)) => call_object(index, method, args, kwargs),
        Some(Target::Class(Class::Random)) if method == "__call__" => random::construct(args, kwargs),
        Some(Target::Class(class)) => Err(type_error(format!("cannot call '{}.{method}' in the sandbox", class.name()))),
        None => Err(type_error(format!("no host object for the method call `{method}`"))),
    };
    into_result(result)
}

fn into_result(result: PyResult<Py>) -> ExtFunctionResult {
    match result {
        Ok(value) => ExtFunctionResult::Return(value.into_monty()),
        Err(exc) => ExtFunctionResult::Error(exc),
    }
}

fn call_object(index: usize, method: &str, args: &[Py], kwargs: &[(Py, Py)]) -> PyResult<Py> {
    let module = OBJECTS.with(|o| match o.borrow().get(index) {
        Some(Object::Module(module)) => Some(Some(*module)),
        Some(_) => Some(None),
        None => None,
    });
    match module {
        None => Err(type_error(format!("no host object for the method call `{method}`"))),
        Some(Some(module)) => call_module(module, method, args, kwargs),
        Some(None) => {
            // A generator or a hash: borrowed for the call; the call may create objects, so they are
            // registered after the borrow ends.
            let (result, created) = OBJECTS.with(|o| match o.borrow_mut().get_mut(index) {
                Some(Object::Random(generator)) => (random::call_method(generator, method, args, kwargs), None),
                Some(Object::Hash(hash)) => match hash.call_method(method, args, kwargs) {
                    Ok(hashlib::Outcome::Value(value)) => (Ok(value), None),
                    Ok(hashlib::Outcome::Copy(copy)) => (Ok(Py::None), Some(Object::Hash(Box::new(copy)))),
                    Err(exc) => (Err(exc), None),
                },
                _ => (Err(type_error(format!("no host object for the method call `{method}`"))), None),
            });
            match created {
                Some(object) => Ok(new_object(object)),
                None => result,
            }
        }
    }
}

fn call_module(module: &str, function: &str, args: &[Py], kwargs: &[(Py, Py)]) -> PyResult<Py> {
    if !exports(module).is_some_and(|e| e.contains(&function)) {
        return Err(no_attribute(module, function));
    }
    match module {
        "random" => random::call_module(function, args, kwargs),
        "copy" => copy::call(function, args, kwargs),
        "hashlib" => hashlib::call(function, args, kwargs).map(|hash| new_object(Object::Hash(Box::new(hash)))),
        // The string module's names are constants.
        _ => Err(type_error("'str' object is not callable")),
    }
}

fn no_attribute(module: &str, name: &str) -> MontyException {
    let provided = exports(module).map(|e| e.join(", ")).unwrap_or_default();
    exception(ExcType::AttributeError, format!("module '{module}' has no attribute '{name}' (the sandbox's {module} has: {provided})"))
}

/// An attribute read on one of our objects that is not among its eager attributes (`random.randint`
/// as a value, `h.digest_size`, a name the module does not have).
pub fn attr(id: MontyUuid, name: &str) -> NameLookupResult {
    let found = match decode(id) {
        Some(Target::Object(index)) => OBJECTS.with(|o| match o.borrow().get(index) {
            Some(Object::Module(module)) => Some(module_attr(module, name)),
            Some(Object::Random(_)) => random::METHODS.contains(&name).then(|| Ok(function(format!("Random.{name}#{index}")))),
            Some(Object::Hash(hash)) => {
                hash.attr(name).map(Ok).or_else(|| hashlib::METHODS.contains(&name).then(|| Ok(function(format!("HASH.{name}#{index}")))))
            }
            None => None,
        }),
        _ => None,
    };
    match found {
        Some(Ok(value)) => NameLookupResult::Value(value.into_monty()),
        Some(Err(exc)) => NameLookupResult::Error(exc),
        None => NameLookupResult::Undefined,
    }
}

fn module_attr(module: &'static str, name: &str) -> PyResult<Py> {
    if !exports(module).is_some_and(|e| e.contains(&name)) {
        return Err(no_attribute(module, name));
    }
    Ok(match (module, name) {
        ("random", "Random") => class_object(Class::Random),
        ("string", constant) => Py::String(string::constant(constant).unwrap_or_default().to_string()),
        _ => function(format!("{module}.{name}")),
    })
}

/// Binds positional and keyword arguments to `params`, the first `required` of them required and at
/// most `positional` given by position; CPython's wording for the mistakes.
pub fn bind<const N: usize>(
    function: &str,
    params: &[&str; N],
    required: usize,
    positional: usize,
    args: &[Py],
    kwargs: &[(Py, Py)],
) -> PyResult<[Option<Py>; N]> {
    if args.len() > positional {
        return Err(type_error(format!(
            "{function}() takes {} positional argument{} but {} were given",
            if positional == required { positional.to_string() } else { format!("from {required} to {positional}") },
            if positional == 1 { "" } else { "s" },
            args.len()
        )));
    }
    let mut bound: [Option<Py>; N] = std::array::from_fn(|i| args.get(i).cloned());
    for (key, value) in kwargs {
        let Py::String(key) = key else {
            return Err(type_error("keywords must be strings"));
        };
        let Some(index) = params.iter().position(|p| p == key) else {
            return Err(type_error(format!("{function}() got an unexpected keyword argument '{key}'")));
        };
        if bound[index].is_some() {
            return Err(type_error(format!("{function}() got multiple values for argument '{key}'")));
        }
        bound[index] = Some(value.clone());
    }
    if let Some(missing) = (0..required).find(|&i| bound[i].is_none()) {
        return Err(type_error(format!("{function}() missing 1 required positional argument: '{}'", params[missing])));
    }
    Ok(bound)
}
