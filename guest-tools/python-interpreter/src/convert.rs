//! Python values ([`Py`]) to JSON and back, for plug-in tools whose arguments and results
//! cross the boundary as JSON.

use crate::value::Py;
use serde_json::Value;

/// A Python value as JSON, or why it has no JSON form (a function, a set, a dict with non-str keys).
pub fn to_json(value: &Py) -> Result<Value, String> {
    Ok(match value {
        Py::None => Value::Null,
        Py::Bool(b) => Value::Bool(*b),
        Py::Int(i) => Value::from(*i),
        Py::Float(f) => serde_json::Number::from_f64(*f).map(Value::Number).ok_or_else(|| format!("{f} has no JSON form"))?,
        Py::String(s) => Value::String(s.clone()),
        Py::List(items) | Py::Tuple(items) => Value::Array(items.iter().map(to_json).collect::<Result<_, _>>()?),
        Py::Dict(pairs) => {
            let mut map = serde_json::Map::new();
            for (key, item) in pairs {
                let Py::String(key) = key else {
                    return Err(format!("dict keys passed to tools must be str, not {}", key.type_name()));
                };
                map.insert(key.clone(), to_json(item)?);
            }
            Value::Object(map)
        }
        other => return Err(format!("a {} cannot be passed to a tool", other.type_name())),
    })
}

/// A JSON value as the Python value a program would expect.
pub fn from_json(value: Value) -> Py {
    match value {
        Value::Null => Py::None,
        Value::Bool(b) => Py::Bool(b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Py::Int(i),
            None => Py::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Py::String(s),
        Value::Array(items) => Py::List(items.into_iter().map(from_json).collect()),
        Value::Object(map) => Py::dict(map.into_iter().map(|(k, v)| (Py::String(k), from_json(v))).collect::<Vec<_>>()),
    }
}

/// A `{"key": value}` dict with string keys, for tool records.
pub fn record(fields: Vec<(&str, Py)>) -> Py {
    Py::dict(fields.into_iter().map(|(k, v)| (Py::String(k.to_string()), v)).collect::<Vec<_>>())
}
