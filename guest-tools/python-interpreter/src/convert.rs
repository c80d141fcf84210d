//! Python values (monty's `MontyObject`) to JSON and back, for plug-in tools whose arguments and results
//! cross the boundary as JSON.

use monty_types::MontyObject;
use serde_json::Value;

/// A Python value as JSON, or why it has no JSON form (a function, a set, a dict with non-str keys).
pub fn to_json(value: &MontyObject) -> Result<Value, String> {
    Ok(match value {
        MontyObject::None => Value::Null,
        MontyObject::Bool(b) => Value::Bool(*b),
        MontyObject::Int(i) => Value::from(*i),
        MontyObject::Float(f) => serde_json::Number::from_f64(*f).map(Value::Number).ok_or_else(|| format!("{f} has no JSON form"))?,
        MontyObject::String(s) => Value::String(s.clone()),
        MontyObject::List(items) | MontyObject::Tuple(items) => Value::Array(items.iter().map(to_json).collect::<Result<_, _>>()?),
        MontyObject::Dict(pairs) => {
            let mut map = serde_json::Map::new();
            for (key, item) in pairs {
                let MontyObject::String(key) = key else {
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
pub fn from_json(value: Value) -> MontyObject {
    match value {
        Value::Null => MontyObject::None,
        Value::Bool(b) => MontyObject::Bool(b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => MontyObject::Int(i),
            None => MontyObject::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => MontyObject::String(s),
        Value::Array(items) => MontyObject::List(items.into_iter().map(from_json).collect()),
        Value::Object(map) => MontyObject::dict(map.into_iter().map(|(k, v)| (MontyObject::String(k), from_json(v))).collect::<Vec<_>>()),
    }
}

/// A `{"key": value}` dict with string keys, for tool records.
pub fn record(fields: Vec<(&str, MontyObject)>) -> MontyObject {
    MontyObject::dict(fields.into_iter().map(|(k, v)| (MontyObject::String(k.to_string()), v)).collect::<Vec<_>>())
}
