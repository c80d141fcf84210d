//! Bytes handed to the runner as a guest component (`agentrt exec script.wasm` reads the file with
//! `Sandbox::load_guest`): random bytes, a wasm header over random sections, and byte mutations of
//! real components (the example plug-in; in the long run, now and then, the interpreter itself). Each
//! must be refused with a `SandboxError`, or, if it still loads, run a program under the limits like
//! any guest. Mutations of the example plug-in are also loaded as a plug-in (`agentrt exec prog.py
//! --tool x.wasm`, a sandbox built with it), and when that succeeds a program calls its tools.

use crate::rng::Rng;

/// What a wasm case is made from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum WasmOrigin {
    Random,
    Sections,
    MutatedPlugin,
    /// The example plug-in, mutated, loaded as a plug-in (`agentrt exec prog.py --tool x.wasm`).
    MutatedPluginAsTool,
    MutatedInterpreter,
}

impl WasmOrigin {
    pub fn name(self) -> &'static str {
        match self {
            WasmOrigin::Random => "wasm-random",
            WasmOrigin::Sections => "wasm-sections",
            WasmOrigin::MutatedPlugin => "wasm-mutated-plugin",
            WasmOrigin::MutatedPluginAsTool => "wasm-mutated-plugin-as-tool",
            WasmOrigin::MutatedInterpreter => "wasm-mutated-interpreter",
        }
    }
}

const COMPONENT_HEADER: &[u8] = b"\0asm\x0d\x00\x01\x00";
const MODULE_HEADER: &[u8] = b"\0asm\x01\x00\x00\x00";

fn leb(mut n: u64, out: &mut Vec<u8>) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn random_bytes(rng: &mut Rng, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.byte()).collect()
}

/// Random bytes, with or without a wasm header.
pub fn random(rng: &mut Rng) -> Vec<u8> {
    let n = *rng.pick(&[0usize, 1, 4, 8, 9, 16, 100, 1_000, 10_000]);
    let mut bytes = match rng.below(4) {
        0 => Vec::new(),
        1 => b"\0asm".to_vec(),
        2 => COMPONENT_HEADER.to_vec(),
        _ => MODULE_HEADER.to_vec(),
    };
    bytes.extend(random_bytes(rng, n));
    bytes
}

/// A component or module header followed by sections of random ids and contents, their lengths
/// sometimes lying (longer than what follows, or huge).
pub fn sections(rng: &mut Rng) -> Vec<u8> {
    let mut bytes = if rng.percent(80) { COMPONENT_HEADER.to_vec() } else { MODULE_HEADER.to_vec() };
    for _ in 0..rng.between(0, 8) {
        bytes.push(rng.below(16) as u8);
        let n = rng.between(0, 64);
        let body = random_bytes(rng, n);
        let declared = match rng.below(5) {
            0 => body.len() as u64 + rng.between(1, 100) as u64,
            1 => u32::MAX as u64,
            2 => rng.below(body.len() + 1) as u64,
            _ => body.len() as u64,
        };
        leb(declared, &mut bytes);
        bytes.extend(body);
    }
    bytes
}

/// `original` with 1 to 16 byte mutations.
pub fn mutated(rng: &mut Rng, original: &[u8]) -> Vec<u8> {
    let mut bytes = original.to_vec();
    for _ in 0..*rng.pick(&[1usize, 1, 2, 4, 16]) {
        if bytes.is_empty() {
            bytes.push(rng.byte());
        }
        let i = rng.below(bytes.len());
        match rng.below(7) {
            0 => bytes[i] ^= 1 << rng.below(8),
            1 => bytes[i] = rng.byte(),
            2 => {
                let end = (i + rng.between(1, 256)).min(bytes.len());
                bytes.drain(i..end);
            }
            3 => {
                let n = rng.between(1, 32);
                let extra = random_bytes(rng, n);
                bytes.splice(i..i, extra);
            }
            4 => bytes.truncate(i),
            5 => {
                let end = (i + rng.between(1, 256)).min(bytes.len());
                let copy = bytes[i..end].to_vec();
                bytes.splice(i..i, copy);
            }
            _ => {
                // A LEB128 length or index made huge.
                let end = (i + 5).min(bytes.len());
                for b in &mut bytes[i..end] {
                    *b = 0xff;
                }
            }
        }
    }
    bytes
}
