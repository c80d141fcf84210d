//! What a guest may reach through WASI: nothing but the two output streams the host bounds.

use crate::output::CappedOutput;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder};

/// WASI for a guest: stdout and stderr captured and bounded; no stdin, no preopened directories, no
/// environment, no arguments, no network addresses and no name lookups (wasmtime-wasi's defaults,
/// which we rely on and do not loosen).
pub fn no_authority_wasi(stdout: &CappedOutput, stderr: &CappedOutput) -> WasiCtx {
    WasiCtxBuilder::new().stdout(stdout.clone()).stderr(stderr.clone()).allow_tcp(false).allow_udp(false).build()
}
