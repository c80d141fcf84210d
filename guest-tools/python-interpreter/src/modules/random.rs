//! `random`: CPython's Mersenne Twister and its algorithms, so a seeded generator gives the numbers
//! CPython gives (`random.seed(42)` then `randint`, `random`, `choice`, `sample`, `choices`, … match
//! CPython 3.11 draw for draw; the float distributions match up to the last bit of `log`/`cos`).
//!
//! Deterministic: nothing is seeded from the clock or the OS. The module's functions start every run
//! as if `random.seed(0)` had been called, and `Random()` / `seed()` / `seed(None)` mean seed 0 too.
//!
//! Not provided: `shuffle` (it must reorder the program's list in place, and values reach the guest as
//! copies: it raises and names `random.sample(x, len(x))` instead), `getstate`/`setstate`,
//! `SystemRandom`, and the rarer distributions.

use super::{bind, exception, new_object, type_error, value_error, Object, PyResult};
use crate::value::Py;
use monty_types::ExcType;
use num_bigint::{BigInt, BigUint, Sign};
use sha2::Digest;
use std::cell::RefCell;

/// Declares the methods of a `Random` instance ([`METHODS`]) and the module's exports ([`EXPORTS`]):
/// `Random`, and the same functions, which [`call_module`] runs on the module's hidden instance.
macro_rules! methods_and_exports {
    ($($name:literal),* $(,)?) => {
        /// The methods of a `Random` instance.
        pub const METHODS: &[&str] = &[$($name),*];
        /// What `random` exports: the `Random` class and a function per method.
        pub const EXPORTS: &[&str] = &["Random", $($name),*];
    };
}

methods_and_exports![
    "seed",
    "random",
    "uniform",
    "triangular",
    "randint",
    "randrange",
    "getrandbits",
    "randbytes",
    "choice",
    "choices",
    "sample",
    "shuffle",
    "gauss",
    "normalvariate",
    "lognormvariate",
    "expovariate",
];

/// The seed the module's functions and unseeded generators start from.
const DEFAULT_SEED: u32 = 0;

thread_local! {
    /// The generator behind the module's functions (CPython's hidden `random._inst`).
    static MODULE: RefCell<Option<Generator>> = const { RefCell::new(None) };
}

pub fn reset() {
    MODULE.with(|m| *m.borrow_mut() = None);
}

/// `random.randint(…)` and the other module functions.
pub fn call_module(function: &str, args: &[Py], kwargs: &[(Py, Py)]) -> PyResult<Py> {
    if function == "Random" {
        return construct(args, kwargs);
    }
    MODULE.with(|m| {
        let mut module = m.borrow_mut();
        let generator = module.get_or_insert_with(|| Generator::from_key(&[DEFAULT_SEED]));
        call_method(generator, function, args, kwargs)
    })
}

/// `random.Random(x=None)`.
pub fn construct(args: &[Py], kwargs: &[(Py, Py)]) -> PyResult<Py> {
    let [x] = bind("Random", &["x"], 0, 1, args, kwargs)?;
    let mut generator = Generator::from_key(&[DEFAULT_SEED]);
    generator.seed(x.as_ref().unwrap_or(&Py::None), 2)?;
    Ok(new_object(Object::Random(Box::new(generator))))
}

pub fn call_method(g: &mut Generator, method: &str, args: &[Py], kwargs: &[(Py, Py)]) -> PyResult<Py> {
    match method {
        "seed" => {
            let [a, version] = bind("seed", &["a", "version"], 0, 2, args, kwargs)?;
            let version = match version {
                None => 2,
                Some(v) => int(&v)?,
            };
            g.seed(a.as_ref().unwrap_or(&Py::None), version)?;
            Ok(Py::None)
        }
        "random" => {
            bind::<0>("random", &[], 0, 0, args, kwargs)?;
            Ok(Py::Float(g.random()))
        }
        "uniform" => {
            let [a, b] = bind("uniform", &["a", "b"], 2, 2, args, kwargs)?;
            let (a, b) = (float(&a.unwrap())?, float(&b.unwrap())?);
            Ok(Py::Float(a + (b - a) * g.random()))
        }
        "triangular" => {
            let [low, high, mode] = bind("triangular", &["low", "high", "mode"], 0, 3, args, kwargs)?;
            let mut low = low.map_or(Ok(0.0), |v| float(&v))?;
            let mut high = high.map_or(Ok(1.0), |v| float(&v))?;
            let mode = match mode {
                None | Some(Py::None) => None,
                Some(v) => Some(float(&v)?),
            };
            let mut u = g.random();
            let mut c = match mode {
                None => 0.5,
                Some(_) if high == low => return Ok(Py::Float(low)),
                Some(mode) => (mode - low) / (high - low),
            };
            if u > c {
                u = 1.0 - u;
                c = 1.0 - c;
                std::mem::swap(&mut low, &mut high);
            }
            Ok(Py::Float(low + (high - low) * (u * c).sqrt()))
        }
        "randint" => {
            let [a, b] = bind("randint", &["a", "b"], 2, 2, args, kwargs)?;
            let (a, b) = (int(&a.unwrap())?, int(&b.unwrap())?);
            g.randrange(a, Some(b + 1), 1).map(int_object)
        }
        "randrange" => {
            let [start, stop, step] = bind("randrange", &["start", "stop", "step"], 1, 3, args, kwargs)?;
            let start = int(&start.unwrap())?;
            let stop = match stop {
                None | Some(Py::None) => None,
                Some(v) => Some(int(&v)?),
            };
            let step = match step {
                None => 1,
                Some(_) if stop.is_none() => return Err(type_error("Missing a non-None stop argument")),
                Some(v) => int(&v)?,
            };
            g.randrange(start, stop, step).map(int_object)
        }
        "getrandbits" => {
            let [k] = bind("getrandbits", &["k"], 1, 1, args, kwargs)?;
            let k = int(&k.unwrap())?;
            if k < 0 {
                return Err(value_error("number of bits must be non-negative"));
            }
            let words = g.getrandbits(u64::try_from(k).map_err(|_| overflow())?);
            Ok(words_object(words))
        }
        "randbytes" => {
            let [n] = bind("randbytes", &["n"], 1, 1, args, kwargs)?;
            let n = int(&n.unwrap())?;
            if n < 0 {
                return Err(value_error("negative argument not allowed"));
            }
            let n = usize::try_from(n).map_err(|_| overflow())?;
            let words = g.getrandbits(n as u64 * 8);
            Ok(Py::Bytes(words.iter().flat_map(|w| w.to_le_bytes()).take(n).collect()))
        }
        "choice" => {
            let [seq] = bind("choice", &["seq"], 1, 1, args, kwargs)?;
            let seq = Population::new("choice", seq.as_ref().unwrap())?;
            if seq.len() == 0 {
                return Err(exception(ExcType::IndexError, "Cannot choose from an empty sequence"));
            }
            Ok(seq.get(g.randbelow(seq.len() as u128) as usize))
        }
        "choices" => {
            let [population, weights, cum_weights, k] = bind("choices", &["population", "weights", "cum_weights", "k"], 1, 2, args, kwargs)?;
            let population = Population::new("choices", population.as_ref().unwrap())?;
            let k = k.map_or(Ok(1), |v| int(&v))?;
            g.choices(&population, weights, cum_weights, k)
        }
        "sample" => {
            let [population, k, counts] = bind("sample", &["population", "k", "counts"], 2, 2, args, kwargs)?;
            let population = Population::new("sample", population.as_ref().unwrap())?;
            let k = int(&k.unwrap())?;
            g.sample(&population, k, counts)
        }
        "shuffle" => Err(exception(
            ExcType::NotImplementedError,
            "random.shuffle() cannot reorder a list in place in this sandbox (values reach the random module as \
             copies); write `x = random.sample(x, len(x))` instead",
        )),
        "gauss" => {
            let [mu, sigma] = bind("gauss", &["mu", "sigma"], 0, 2, args, kwargs)?;
            let (mu, sigma) = (mu.map_or(Ok(0.0), |v| float(&v))?, sigma.map_or(Ok(1.0), |v| float(&v))?);
            let z = match g.gauss_next.take() {
                Some(z) => z,
                None => {
                    let x2pi = g.random() * std::f64::consts::TAU;
                    let g2rad = (-2.0 * (1.0 - g.random()).ln()).sqrt();
                    g.gauss_next = Some(x2pi.sin() * g2rad);
                    x2pi.cos() * g2rad
                }
            };
            Ok(Py::Float(mu + z * sigma))
        }
        "normalvariate" | "lognormvariate" => {
            let [mu, sigma] = bind(method, &["mu", "sigma"], if method == "normalvariate" { 0 } else { 2 }, 2, args, kwargs)?;
            let (mu, sigma) = (mu.map_or(Ok(0.0), |v| float(&v))?, sigma.map_or(Ok(1.0), |v| float(&v))?);
            let magic = 4.0 * (-0.5f64).exp() / 2.0f64.sqrt();
            let z = loop {
                let u1 = g.random();
                let u2 = 1.0 - g.random();
                let z = magic * (u1 - 0.5) / u2;
                if z * z / 4.0 <= -u2.ln() {
                    break z;
                }
            };
            let normal = mu + z * sigma;
            Ok(Py::Float(if method == "normalvariate" { normal } else { normal.exp() }))
        }
        "expovariate" => {
            let [lambd] = bind("expovariate", &["lambd"], 1, 1, args, kwargs)?;
            let lambd = float(&lambd.unwrap())?;
            if lambd == 0.0 {
                return Err(exception(ExcType::ZeroDivisionError, "float division by zero"));
            }
            Ok(Py::Float(-(1.0 - g.random()).ln() / lambd))
        }
        _ => Err(exception(ExcType::AttributeError, format!("'Random' object has no attribute '{method}'"))),
    }
}

/// Python's `a // b`.
fn floor_div(a: i128, b: i128) -> i128 {
    let q = a / b;
    if a % b != 0 && ((a < 0) != (b < 0)) {
        q - 1
    } else {
        q
    }
}

fn overflow() -> monty_types::MontyException {
    exception(ExcType::OverflowError, "Python int too large for the sandbox's random")
}

/// An int argument (a bool counts), as CPython's `operator.index` takes it.
fn int(value: &Py) -> PyResult<i128> {
    match value {
        Py::Int(i) => Ok(i128::from(*i)),
        Py::Bool(b) => Ok(i128::from(*b)),
        Py::BigInt(b) => i128::try_from(b).map_err(|_| overflow()),
        other => Err(type_error(format!("'{}' object cannot be interpreted as an integer", other.type_name()))),
    }
}

fn float(value: &Py) -> PyResult<f64> {
    match value {
        Py::Float(f) => Ok(*f),
        Py::Int(i) => Ok(*i as f64),
        Py::Bool(b) => Ok(f64::from(u8::from(*b))),
        Py::BigInt(b) => Ok(b.to_string().parse().unwrap_or(f64::NAN)),
        other => Err(type_error(format!("must be real number, not {}", other.type_name()))),
    }
}

fn int_object(i: i128) -> Py {
    match i64::try_from(i) {
        Ok(i) => Py::Int(i),
        Err(_) => Py::BigInt(BigInt::from(i)),
    }
}

/// A non-negative int from little-endian 32-bit words.
fn words_object(words: Vec<u32>) -> Py {
    let value = BigUint::new(words);
    match i64::try_from(&value) {
        Ok(i) => Py::Int(i),
        Err(_) => Py::BigInt(BigInt::from_biguint(Sign::Plus, value)),
    }
}

/// A sequence to draw from: a list, tuple, str, bytes or range (as CPython's `Sequence`).
enum Population<'a> {
    Items(&'a [Py]),
    Chars(Vec<char>),
    Bytes(&'a [u8]),
    Range { start: i64, step: i64, len: usize },
}

impl<'a> Population<'a> {
    fn new(function: &str, value: &'a Py) -> PyResult<Self> {
        Ok(match value {
            Py::List(items) | Py::Tuple(items) | Py::NamedTuple { values: items, .. } => Population::Items(items),
            Py::String(s) => Population::Chars(s.chars().collect()),
            Py::Bytes(b) => Population::Bytes(b),
            Py::Repr(repr) if repr.starts_with("range(") => {
                parse_range(repr).ok_or_else(|| exception(ExcType::OverflowError, format!("{repr} is too large for the sandbox's random")))?
            }
            other => {
                return Err(type_error(format!(
                    "random.{function}() needs a sequence (list, tuple, str, bytes or range), not {}{}",
                    other.type_name(),
                    if matches!(other, Py::Dict(_) | Py::Set(_) | Py::FrozenSet(_)) { "; for dicts or sets, use sorted(d)" } else { "" }
                )))
            }
        })
    }

    fn len(&self) -> usize {
        match self {
            Population::Items(items) => items.len(),
            Population::Chars(chars) => chars.len(),
            Population::Bytes(bytes) => bytes.len(),
            Population::Range { len, .. } => *len,
        }
    }

    fn get(&self, i: usize) -> Py {
        match self {
            Population::Items(items) => items[i].clone(),
            Population::Chars(chars) => Py::String(chars[i].to_string()),
            Population::Bytes(bytes) => Py::Int(i64::from(bytes[i])),
            Population::Range { start, step, .. } => int_object(i128::from(*start) + i128::from(*step) * i as i128),
        }
    }
}

/// `range(a, b)` or `range(a, b, s)`, monty's repr of a range (ranges cross as their repr).
fn parse_range(repr: &str) -> Option<Population<'static>> {
    let inner = repr.strip_prefix("range(")?.strip_suffix(')')?;
    let parts: Vec<i64> = inner.split(", ").map(|p| p.parse().ok()).collect::<Option<_>>()?;
    let (start, stop, step) = match parts[..] {
        [start, stop] => (start, stop, 1),
        [start, stop, step] if step != 0 => (start, stop, step),
        _ => return None,
    };
    let (start128, stop128, step128) = (i128::from(start), i128::from(stop), i128::from(step));
    let len = if step > 0 { (stop128 - start128 + step128 - 1).div_euclid(step128) } else { (start128 - stop128 - step128 - 1).div_euclid(-step128) }.max(0);
    Some(Population::Range { start, step, len: usize::try_from(len).ok()? })
}

/// MT19937, as CPython's `_randommodule.c`.
pub struct Generator {
    mt: [u32; 624],
    index: usize,
    gauss_next: Option<f64>,
}

impl Generator {
    fn from_key(key: &[u32]) -> Self {
        let mut g = Generator { mt: [0; 624], index: 624, gauss_next: None };
        g.init_by_array(key);
        g
    }

    fn init_genrand(&mut self, s: u32) {
        self.mt[0] = s;
        for i in 1..624 {
            let prev = self.mt[i - 1];
            self.mt[i] = 1_812_433_253u32.wrapping_mul(prev ^ (prev >> 30)).wrapping_add(i as u32);
        }
        self.index = 624;
    }

    fn init_by_array(&mut self, key: &[u32]) {
        const N: usize = 624;
        self.init_genrand(19_650_218);
        let (mut i, mut j) = (1usize, 0usize);
        for _ in 0..N.max(key.len()) {
            let prev = self.mt[i - 1];
            self.mt[i] = (self.mt[i] ^ (prev ^ (prev >> 30)).wrapping_mul(1_664_525)).wrapping_add(key[j]).wrapping_add(j as u32);
            i += 1;
            j += 1;
            if i >= N {
                self.mt[0] = self.mt[N - 1];
                i = 1;
            }
            if j >= key.len() {
                j = 0;
            }
        }
        for _ in 0..N - 1 {
            let prev = self.mt[i - 1];
            self.mt[i] = (self.mt[i] ^ (prev ^ (prev >> 30)).wrapping_mul(1_566_083_941)).wrapping_sub(i as u32);
            i += 1;
            if i >= N {
                self.mt[0] = self.mt[N - 1];
                i = 1;
            }
        }
        self.mt[0] = 0x8000_0000;
        self.index = N;
    }

    fn next_u32(&mut self) -> u32 {
        const N: usize = 624;
        const M: usize = 397;
        const MAG01: [u32; 2] = [0, 0x9908_b0df];
        if self.index >= N {
            for kk in 0..N {
                let y = (self.mt[kk] & 0x8000_0000) | (self.mt[(kk + 1) % N] & 0x7fff_ffff);
                self.mt[kk] = self.mt[(kk + M) % N] ^ (y >> 1) ^ MAG01[(y & 1) as usize];
            }
            self.index = 0;
        }
        let mut y = self.mt[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// `random()`: 53 random bits as a float in [0, 1).
    fn random(&mut self) -> f64 {
        let a = self.next_u32() >> 5;
        let b = self.next_u32() >> 6;
        (f64::from(a) * 67_108_864.0 + f64::from(b)) * (1.0 / 9_007_199_254_740_992.0)
    }

    /// `getrandbits(k)` as little-endian 32-bit words.
    fn getrandbits(&mut self, k: u64) -> Vec<u32> {
        if k == 0 {
            return vec![0];
        }
        if k <= 32 {
            return vec![self.next_u32() >> (32 - k)];
        }
        let mut remaining = k;
        let mut words = Vec::with_capacity(k.div_ceil(32) as usize);
        while remaining > 0 {
            let mut r = self.next_u32();
            if remaining < 32 {
                r >>= 32 - remaining;
            }
            words.push(r);
            remaining = remaining.saturating_sub(32);
        }
        words
    }

    /// `_randbelow(n)` for n > 0: rejection sampling on `n.bit_length()` bits.
    fn randbelow(&mut self, n: u128) -> u128 {
        let k = u64::from(128 - n.leading_zeros());
        loop {
            let r = self.getrandbits(k).iter().rev().fold(0u128, |acc, w| (acc << 32) | u128::from(*w));
            if r < n {
                return r;
            }
        }
    }

    fn randrange(&mut self, start: i128, stop: Option<i128>, step: i128) -> PyResult<i128> {
        let Some(stop) = stop else {
            if start > 0 {
                return Ok(self.randbelow(start as u128) as i128);
            }
            return Err(value_error("empty range for randrange()"));
        };
        let width = stop - start;
        if step == 1 {
            if width > 0 {
                return Ok(start + self.randbelow(width as u128) as i128);
            }
            return Err(value_error(format!("empty range for randrange() ({start}, {stop}, {width})")));
        }
        let n = match step {
            0 => return Err(value_error("zero step for randrange()")),
            s if s > 0 => floor_div(width + s - 1, s),
            s => floor_div(width + s + 1, s),
        };
        if n <= 0 {
            return Err(value_error("empty range for randrange()"));
        }
        Ok(start + step * self.randbelow(n as u128) as i128)
    }

    /// `seed(a, version)`: ints use all their bits, str and bytes (version 2) their bytes and SHA-512.
    fn seed(&mut self, a: &Py, version: i128) -> PyResult<()> {
        let key_bytes: Vec<u8> = match a {
            Py::None => vec![DEFAULT_SEED as u8],
            Py::Int(_) | Py::Bool(_) | Py::BigInt(_) => {
                let n = match a {
                    Py::Int(i) => BigInt::from(*i),
                    Py::Bool(b) => BigInt::from(u8::from(*b)),
                    Py::BigInt(b) => b.clone(),
                    _ => unreachable!(),
                };
                n.magnitude().to_bytes_le()
            }
            Py::Float(f) => {
                if f.is_nan() {
                    return Err(value_error("cannot seed from NaN in the sandbox"));
                }
                // CPython seeds from `(size_t)hash(a)`.
                (hash_float(*f) as u64).to_le_bytes().to_vec()
            }
            Py::String(_) | Py::Bytes(_) => {
                let bytes = match a {
                    Py::String(s) => s.as_bytes().to_vec(),
                    Py::Bytes(b) => b.clone(),
                    _ => unreachable!(),
                };
                if version == 1 {
                    // CPython's version 1 (reproduces Python 2's seeds): a str hash of the latin-1 text.
                    let chars: Vec<u32> = match a {
                        Py::String(s) => s.chars().map(u32::from).collect(),
                        _ => bytes.iter().map(|b| u32::from(*b)).collect(),
                    };
                    let mut x: u64 = chars.first().map_or(0, |c| u64::from(*c) << 7);
                    for c in &chars {
                        x = 1_000_003u64.wrapping_mul(x) ^ u64::from(*c);
                    }
                    x ^= chars.len() as u64;
                    x.to_le_bytes().to_vec()
                } else {
                    // int.from_bytes(a + sha512(a).digest()), big-endian; as little-endian bytes.
                    let mut big_endian = bytes.clone();
                    big_endian.extend_from_slice(&sha2::Sha512::digest(&bytes));
                    big_endian.reverse();
                    big_endian
                }
            }
            other => {
                return Err(type_error(format!("The only supported seed types are: None,\nint, float, str, bytes, and bytearray. Got {}", other.type_name())))
            }
        };
        let mut key: Vec<u32> = key_bytes
            .chunks(4)
            .map(|c| {
                let mut w = [0u8; 4];
                w[..c.len()].copy_from_slice(c);
                u32::from_le_bytes(w)
            })
            .collect();
        while key.len() > 1 && key.last() == Some(&0) {
            key.pop();
        }
        if key.is_empty() {
            key.push(0);
        }
        self.init_by_array(&key);
        self.gauss_next = None;
        Ok(())
    }

    fn sample(&mut self, population: &Population, k: i128, counts: Option<Py>) -> PyResult<Py> {
        let n = population.len();
        if let Some(counts) = counts.filter(|c| !matches!(c, Py::None)) {
            let counts = match &counts {
                Py::List(items) | Py::Tuple(items) => items,
                other => return Err(type_error(format!("'{}' object is not iterable", other.type_name()))),
            };
            let mut cumulative = Vec::with_capacity(counts.len());
            let mut total: i128 = 0;
            for count in counts {
                total += match count {
                    Py::Int(_) | Py::Bool(_) | Py::BigInt(_) => int(count)?,
                    _ => return Err(type_error("Counts must be integers")),
                };
                cumulative.push(total);
            }
            if cumulative.len() != n {
                return Err(value_error("The number of counts does not match the population"));
            }
            cumulative.pop();
            if total <= 0 {
                return Err(value_error("Total of counts must be greater than zero"));
            }
            let total = i64::try_from(total).map_err(|_| overflow())?;
            let selections = self.sample(&Population::Range { start: 0, step: 1, len: total as usize }, k, None)?;
            let Py::List(selections) = selections else { unreachable!() };
            return Ok(Py::List(
                selections
                    .iter()
                    .map(|s| {
                        let s = int(s).unwrap_or(0);
                        population.get(cumulative.partition_point(|c| *c <= s))
                    })
                    .collect(),
            ));
        }
        if k < 0 || k > n as i128 {
            return Err(value_error("Sample larger than population or is negative"));
        }
        let k = k as usize;
        let mut setsize = 21usize;
        if k > 5 {
            setsize += 4usize.pow(((k * 3) as f64).log(4.0).ceil() as u32);
        }
        let mut result = Vec::with_capacity(k);
        if n <= setsize {
            let mut pool: Vec<usize> = (0..n).collect();
            for i in 0..k {
                let j = self.randbelow((n - i) as u128) as usize;
                result.push(population.get(pool[j]));
                pool[j] = pool[n - i - 1];
            }
        } else {
            let mut selected = std::collections::HashSet::with_capacity(k);
            for _ in 0..k {
                let mut j = self.randbelow(n as u128) as usize;
                while selected.contains(&j) {
                    j = self.randbelow(n as u128) as usize;
                }
                selected.insert(j);
                result.push(population.get(j));
            }
        }
        Ok(Py::List(result))
    }

    fn choices(&mut self, population: &Population, weights: Option<Py>, cum_weights: Option<Py>, k: i128) -> PyResult<Py> {
        let n = population.len();
        let k = usize::try_from(k.max(0)).map_err(|_| overflow())?;
        let weights = weights.filter(|w| !matches!(w, Py::None));
        let cum_weights = cum_weights.filter(|w| !matches!(w, Py::None));
        let cumulative: Vec<f64> = match (weights, cum_weights) {
            (None, None) => {
                let n = n as f64;
                return (0..k)
                    .map(|_| {
                        let i = (self.random() * n).floor() as usize;
                        if i < population.len() {
                            Ok(population.get(i))
                        } else {
                            Err(exception(ExcType::IndexError, "list index out of range"))
                        }
                    })
                    .collect::<PyResult<_>>()
                    .map(Py::List);
            }
            (Some(_), Some(_)) => return Err(type_error("Cannot specify both weights and cumulative weights")),
            (Some(weights), None) => {
                let mut total = Number::Int(0);
                numbers(&weights)?
                    .into_iter()
                    .map(|w| {
                        total = total.add(w);
                        total.as_f64()
                    })
                    .collect()
            }
            (None, Some(cum)) => numbers(&cum)?.into_iter().map(|w| w.as_f64()).collect(),
        };
        if cumulative.len() != n {
            return Err(value_error("The number of weights does not match the population"));
        }
        let total = cumulative.last().copied().unwrap_or(0.0);
        if total <= 0.0 {
            return Err(value_error("Total of weights must be greater than zero"));
        }
        if !total.is_finite() {
            return Err(value_error("Total of weights must be finite"));
        }
        let hi = n.saturating_sub(1);
        Ok(Py::List(
            (0..k)
                .map(|_| {
                    let x = self.random() * total;
                    population.get(cumulative[..hi].partition_point(|c| *c <= x))
                })
                .collect(),
        ))
    }
}

/// An int or a float, added as Python adds them (exact while both are ints).
#[derive(Clone, Copy)]
enum Number {
    Int(i128),
    Float(f64),
}

impl Number {
    fn add(self, other: Number) -> Number {
        match (self, other) {
            (Number::Int(a), Number::Int(b)) => Number::Int(a + b),
            (a, b) => Number::Float(a.as_f64() + b.as_f64()),
        }
    }

    fn as_f64(self) -> f64 {
        match self {
            Number::Int(i) => i as f64,
            Number::Float(f) => f,
        }
    }
}

fn numbers(value: &Py) -> PyResult<Vec<Number>> {
    let items = match value {
        Py::List(items) | Py::Tuple(items) => items,
        other => return Err(type_error(format!("'{}' object is not iterable", other.type_name()))),
    };
    items
        .iter()
        .map(|item| match item {
            Py::Float(f) => Ok(Number::Float(*f)),
            other => int(other).map(Number::Int).map_err(|_| type_error(format!("unsupported operand type(s) for +: 'int' and '{}'", other.type_name()))),
        })
        .collect()
}

/// CPython's `hash(float)` (`_Py_HashDouble`), which `seed(float)` uses.
fn hash_float(v: f64) -> i64 {
    const BITS: u32 = 61;
    const MODULUS: u64 = (1 << BITS) - 1;
    if v.is_infinite() {
        return if v > 0.0 { 314_159 } else { -314_159 };
    }
    let (mut m, mut e) = frexp(v);
    let sign: i64 = if m < 0.0 {
        m = -m;
        -1
    } else {
        1
    };
    let mut x: u64 = 0;
    while m != 0.0 {
        x = ((x << 28) & MODULUS) | (x >> (BITS - 28));
        m *= 268_435_456.0;
        e -= 28;
        let y = m as u64;
        m -= y as f64;
        x += y;
        if x >= MODULUS {
            x -= MODULUS;
        }
    }
    let e = if e >= 0 { e as u32 % BITS } else { BITS - 1 - ((-1 - e) as u32 % BITS) };
    x = ((x << e) & MODULUS) | (x >> (BITS - e));
    let h = x as i64 * sign;
    if h == -1 {
        -2
    } else {
        h
    }
}

/// `frexp`: v = m * 2**e with 0.5 <= |m| < 1 (m = 0 for v = 0).
fn frexp(v: f64) -> (f64, i32) {
    if v == 0.0 || !v.is_finite() {
        return (v, 0);
    }
    let bits = v.to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i32;
    if exponent == 0 {
        // Subnormal: scale into the normal range first.
        let (m, e) = frexp(v * f64::powi(2.0, 64));
        return (m, e - 64);
    }
    let m = f64::from_bits((bits & !(0x7ff << 52)) | (1022 << 52));
    (m, exponent - 1022)
}
