//! JSON to component values and back, by the types a plug-in's WIT declares. Programs pass plug-ins
//! plain Python values (as JSON); this is where they meet the plug-in's own types.

use serde_json::{Map, Number, Value};
use wasmtime::component::{Type, Val};

/// Kebab-case WIT names as the snake_case names Python programs use.
pub fn snake_case(name: &str) -> String {
    name.replace('-', "_")
}

/// Converts a JSON value to a `Val` of type `ty`, or says why it does not fit.
pub fn to_val(value: &Value, ty: &Type) -> Result<Val, String> {
    let mismatch = || format!("expected {}, got {}", describe(ty), short(value));
    Ok(match ty {
        Type::Bool => Val::Bool(value.as_bool().ok_or_else(mismatch)?),
        Type::S8 => Val::S8(int(value, ty)?),
        Type::U8 => Val::U8(int(value, ty)?),
        Type::S16 => Val::S16(int(value, ty)?),
        Type::U16 => Val::U16(int(value, ty)?),
        Type::S32 => Val::S32(int(value, ty)?),
        Type::U32 => Val::U32(int(value, ty)?),
        Type::S64 => Val::S64(int(value, ty)?),
        Type::U64 => Val::U64(int(value, ty)?),
        Type::Float32 => Val::Float32(value.as_f64().ok_or_else(mismatch)? as f32),
        Type::Float64 => Val::Float64(value.as_f64().ok_or_else(mismatch)?),
        Type::Char => {
            let s = value.as_str().ok_or_else(mismatch)?;
            let mut chars = s.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => Val::Char(c),
                _ => return Err(mismatch()),
            }
        }
        Type::String => Val::String(value.as_str().ok_or_else(mismatch)?.to_string()),
        Type::List(list) => {
            let items = value.as_array().ok_or_else(mismatch)?;
            let elem = list.ty();
            Val::List(items.iter().map(|v| to_val(v, &elem)).collect::<Result<_, _>>()?)
        }
        Type::Record(record) => {
            let object = value.as_object().ok_or_else(mismatch)?;
            let mut fields = Vec::new();
            for field in record.fields() {
                let item = object
                    .get(&snake_case(field.name))
                    .or_else(|| object.get(field.name))
                    .ok_or_else(|| format!("missing field `{}`", snake_case(field.name)))?;
                fields.push((field.name.to_string(), to_val(item, &field.ty)?));
            }
            Val::Record(fields)
        }
        Type::Tuple(tuple) => {
            let items = value.as_array().ok_or_else(mismatch)?;
            let types: Vec<Type> = tuple.types().collect();
            if items.len() != types.len() {
                return Err(mismatch());
            }
            Val::Tuple(items.iter().zip(&types).map(|(v, t)| to_val(v, t)).collect::<Result<_, _>>()?)
        }
        Type::Option(option) => match value {
            Value::Null => Val::Option(None),
            other => Val::Option(Some(Box::new(to_val(other, &option.ty())?))),
        },
        Type::Enum(enum_ty) => {
            let name = value.as_str().ok_or_else(mismatch)?;
            let case = enum_ty.names().find(|n| *n == name || snake_case(n) == name).ok_or_else(mismatch)?;
            Val::Enum(case.to_string())
        }
        Type::Flags(flags) => {
            let names = value.as_array().ok_or_else(mismatch)?;
            let mut set = Vec::new();
            for name in names {
                let name = name.as_str().ok_or_else(mismatch)?;
                let flag = flags.names().find(|n| *n == name || snake_case(n) == name).ok_or_else(mismatch)?;
                set.push(flag.to_string());
            }
            Val::Flags(set)
        }
        Type::Variant(variant) => {
            // A case without payload is its name; a case with one is {"case": payload}.
            let (name, payload) = match value {
                Value::String(name) => (name.as_str(), None),
                Value::Object(map) if map.len() == 1 => {
                    let (k, v) = map.iter().next().expect("one entry");
                    (k.as_str(), Some(v))
                }
                _ => return Err(mismatch()),
            };
            let case = variant.cases().find(|c| c.name == name || snake_case(c.name) == name).ok_or_else(mismatch)?;
            let payload = match (case.ty, payload) {
                (Some(ty), Some(v)) => Some(Box::new(to_val(v, &ty)?)),
                (None, None) => None,
                _ => return Err(mismatch()),
            };
            Val::Variant(case.name.to_string(), payload)
        }
        other => return Err(format!("plug-in parameters of type {} are not supported", describe(other))),
    })
}

/// An integer of the WIT type `ty`; a number out of its range says the range, with the WIT type's name.
fn int<T: TryFrom<i128> + Into<i128> + Bounded>(value: &Value, ty: &Type) -> Result<T, String> {
    let Some(i) = value.as_i64().map(i128::from).or_else(|| value.as_u64().map(i128::from)) else {
        return Err(format!("expected {}, got {}", describe(ty), short(value)));
    };
    T::try_from(i).map_err(|_| {
        let (min, max): (i128, i128) = (T::MIN.into(), T::MAX.into());
        let name = wit_int_name(ty);
        if i < 0 && min == 0 {
            format!("expected a non-negative integer for {name} (got {i})")
        } else {
            format!("expected an integer from {min} to {max} for {name} (got {i})")
        }
    })
}

/// The bounds of an integer type.
trait Bounded: Sized {
    const MIN: Self;
    const MAX: Self;
}

macro_rules! bounded {
    ($($t:ty),*) => {$(impl Bounded for $t { const MIN: Self = <$t>::MIN; const MAX: Self = <$t>::MAX; })*};
}
bounded!(i8, u8, i16, u16, i32, u32, i64, u64);

fn wit_int_name(ty: &Type) -> &'static str {
    match ty {
        Type::S8 => "s8",
        Type::U8 => "u8",
        Type::S16 => "s16",
        Type::U16 => "u16",
        Type::S32 => "s32",
        Type::U32 => "u32",
        Type::S64 => "s64",
        _ => "u64",
    }
}

/// Converts a component value to JSON: records become objects with snake_case keys.
pub fn to_json(val: &Val) -> Value {
    match val {
        Val::Bool(b) => Value::Bool(*b),
        Val::S8(i) => Value::from(*i),
        Val::U8(i) => Value::from(*i),
        Val::S16(i) => Value::from(*i),
        Val::U16(i) => Value::from(*i),
        Val::S32(i) => Value::from(*i),
        Val::U32(i) => Value::from(*i),
        Val::S64(i) => Value::from(*i),
        Val::U64(i) => Value::from(*i),
        Val::Float32(f) => Number::from_f64(f64::from(*f)).map_or(Value::Null, Value::Number),
        Val::Float64(f) => Number::from_f64(*f).map_or(Value::Null, Value::Number),
        Val::Char(c) => Value::String(c.to_string()),
        Val::String(s) => Value::String(s.clone()),
        Val::List(items) | Val::Tuple(items) | Val::FixedLengthList(items) => Value::Array(items.iter().map(to_json).collect()),
        Val::Record(fields) => Value::Object(fields.iter().map(|(k, v)| (snake_case(k), to_json(v))).collect::<Map<_, _>>()),
        Val::Option(None) => Value::Null,
        Val::Option(Some(v)) => to_json(v),
        Val::Enum(name) => Value::String(snake_case(name)),
        Val::Flags(names) => Value::Array(names.iter().map(|n| Value::String(snake_case(n))).collect()),
        Val::Variant(name, None) => Value::String(snake_case(name)),
        Val::Variant(name, Some(v)) => Value::Object(Map::from_iter([(snake_case(name), to_json(v))])),
        Val::Result(Ok(v)) => serde_json::json!({"ok": v.as_deref().map(to_json)}),
        Val::Result(Err(v)) => serde_json::json!({"err": v.as_deref().map(to_json)}),
        Val::Map(pairs) => Value::Array(pairs.iter().map(|(k, v)| Value::Array(vec![to_json(k), to_json(v)])).collect()),
        Val::Resource(_) | Val::Future(_) | Val::Stream(_) | Val::ErrorContext(_) => Value::Null,
    }
}

/// A type's name as a Python programmer would read it.
pub fn describe(ty: &Type) -> String {
    match ty {
        Type::Bool => "bool".into(),
        Type::S8 | Type::U8 | Type::S16 | Type::U16 | Type::S32 | Type::U32 | Type::S64 | Type::U64 => "int".into(),
        Type::Float32 | Type::Float64 => "float".into(),
        Type::Char => "str (one character)".into(),
        Type::String => "str".into(),
        Type::List(l) => format!("list[{}]", describe(&l.ty())),
        Type::Record(_) => "dict".into(),
        Type::Tuple(_) => "list (tuple)".into(),
        Type::Option(o) => format!("{} or None", describe(&o.ty())),
        Type::Enum(e) => format!("one of {}", e.names().map(|n| format!("'{}'", snake_case(n))).collect::<Vec<_>>().join(", ")),
        Type::Flags(_) => "list of flag names".into(),
        Type::Variant(_) => "variant".into(),
        Type::Result(_) => "result".into(),
        _ => "an unsupported type".into(),
    }
}

fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.len() > 60 {
        format!("{}…", &text[..text.char_indices().nth(57).map_or(text.len(), |(i, _)| i)])
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snake_case_replaces_dashes() {
        assert_eq!(snake_case("word-count"), "word_count");
    }

    #[test]
    fn an_integer_out_of_range_says_the_range_and_the_wit_type() {
        assert_eq!(to_val(&serde_json::json!(-3), &Type::U32).unwrap_err(), "expected a non-negative integer for u32 (got -3)");
        assert_eq!(to_val(&serde_json::json!(-1), &Type::U64).unwrap_err(), "expected a non-negative integer for u64 (got -1)");
        assert_eq!(to_val(&serde_json::json!(300), &Type::S8).unwrap_err(), "expected an integer from -128 to 127 for s8 (got 300)");
        assert_eq!(to_val(&serde_json::json!(70000), &Type::U16).unwrap_err(), "expected an integer from 0 to 65535 for u16 (got 70000)");
        assert_eq!(to_val(&serde_json::json!(u64::MAX), &Type::U64).unwrap(), Val::U64(u64::MAX));
        assert_eq!(to_val(&serde_json::json!(-5), &Type::S64).unwrap(), Val::S64(-5));
    }

    #[test]
    fn scalars_round_trip() {
        assert_eq!(to_val(&serde_json::json!(7), &Type::U32).unwrap(), Val::U32(7));
        assert!(to_val(&serde_json::json!("x"), &Type::U32).unwrap_err().contains("expected int"));
        assert!(to_val(&serde_json::json!("x"), &Type::S64).is_err());
        assert_eq!(to_json(&Val::String("a".into())), serde_json::json!("a"));
        assert_eq!(to_json(&Val::Record(vec![("word-count".into(), Val::U32(3))])), serde_json::json!({"word_count": 3}));
    }
}
