//! `hashlib`: MD5 and the SHA-1 and SHA-2 digests (RustCrypto), as CPython's hash objects.

use super::{bind, exception, type_error, value_error, PyResult};
use crate::value::Py;
use monty_types::ExcType;
use sha2::Digest;

pub const EXPORTS: &[&str] = &["md5", "sha1", "sha224", "sha256", "sha384", "sha512", "new"];

/// The methods of a hash object.
pub const METHODS: &[&str] = &["update", "digest", "hexdigest", "copy"];

#[derive(Clone)]
pub enum Hash {
    Md5(md5::Md5),
    Sha1(sha1::Sha1),
    Sha224(sha2::Sha224),
    Sha256(sha2::Sha256),
    Sha384(sha2::Sha384),
    Sha512(sha2::Sha512),
}

/// What a method call on a hash gives back: a value, or a new hash object (`copy()`).
pub enum Outcome {
    Value(Py),
    Copy(Hash),
}

/// `hashlib.md5(data)`, `hashlib.new("sha256", data)`, …: a new hash object.
pub fn call(function: &str, args: &[Py], kwargs: &[(Py, Py)]) -> PyResult<Hash> {
    let (name, data) = if function == "new" {
        let [name, data, _] = bind("new", &["name", "data", "usedforsecurity"], 1, 2, args, kwargs)?;
        let Some(Py::String(name)) = name else {
            return Err(type_error("new() argument 'name' must be str"));
        };
        (name.to_lowercase(), data)
    } else {
        let [data, _, string] = bind(function, &["data", "usedforsecurity", "string"], 0, 1, args, kwargs)?;
        (function.to_string(), data.or(string))
    };
    let mut hash = match name.as_str() {
        "md5" => Hash::Md5(md5::Md5::new()),
        "sha1" => Hash::Sha1(sha1::Sha1::new()),
        "sha224" => Hash::Sha224(sha2::Sha224::new()),
        "sha256" => Hash::Sha256(sha2::Sha256::new()),
        "sha384" => Hash::Sha384(sha2::Sha384::new()),
        "sha512" => Hash::Sha512(sha2::Sha512::new()),
        _ => return Err(value_error(format!("unsupported hash type {name}"))),
    };
    if let Some(data) = data {
        hash.update(&data)?;
    }
    Ok(hash)
}

impl Hash {
    fn name(&self) -> &'static str {
        match self {
            Hash::Md5(_) => "md5",
            Hash::Sha1(_) => "sha1",
            Hash::Sha224(_) => "sha224",
            Hash::Sha256(_) => "sha256",
            Hash::Sha384(_) => "sha384",
            Hash::Sha512(_) => "sha512",
        }
    }

    fn update(&mut self, data: &Py) -> PyResult<()> {
        let bytes = match data {
            Py::Bytes(bytes) => bytes,
            Py::String(_) => return Err(type_error("Strings must be encoded before hashing")),
            other => return Err(type_error(format!("object supporting the buffer API required, not {}", other.type_name()))),
        };
        match self {
            Hash::Md5(h) => h.update(bytes),
            Hash::Sha1(h) => h.update(bytes),
            Hash::Sha224(h) => h.update(bytes),
            Hash::Sha256(h) => h.update(bytes),
            Hash::Sha384(h) => h.update(bytes),
            Hash::Sha512(h) => h.update(bytes),
        }
        Ok(())
    }

    fn digest(&self) -> Vec<u8> {
        match self.clone() {
            Hash::Md5(h) => h.finalize().to_vec(),
            Hash::Sha1(h) => h.finalize().to_vec(),
            Hash::Sha224(h) => h.finalize().to_vec(),
            Hash::Sha256(h) => h.finalize().to_vec(),
            Hash::Sha384(h) => h.finalize().to_vec(),
            Hash::Sha512(h) => h.finalize().to_vec(),
        }
    }

    /// The data attributes: `name`, `digest_size`, `block_size`.
    pub fn attr(&self, name: &str) -> Option<Py> {
        Some(match name {
            "name" => Py::String(self.name().to_string()),
            "digest_size" => Py::Int(self.digest().len() as i64),
            "block_size" => Py::Int(match self {
                Hash::Sha384(_) | Hash::Sha512(_) => 128,
                _ => 64,
            }),
            _ => return None,
        })
    }

    pub fn call_method(&mut self, method: &str, args: &[Py], kwargs: &[(Py, Py)]) -> PyResult<Outcome> {
        let value = match method {
            "update" => {
                let [data] = bind("update", &["data"], 1, 1, args, kwargs)?;
                self.update(&data.unwrap_or(Py::None))?;
                Py::None
            }
            "digest" => {
                bind::<0>("digest", &[], 0, 0, args, kwargs)?;
                Py::Bytes(self.digest())
            }
            "hexdigest" => {
                bind::<0>("hexdigest", &[], 0, 0, args, kwargs)?;
                Py::String(self.digest().iter().map(|b| format!("{b:02x}")).collect())
            }
            "copy" => {
                bind::<0>("copy", &[], 0, 0, args, kwargs)?;
                return Ok(Outcome::Copy(self.clone()));
            }
            _ => return Err(exception(ExcType::AttributeError, format!("'_hashlib.HASH' object has no attribute '{method}'"))),
        };
        Ok(Outcome::Value(value))
    }
}
