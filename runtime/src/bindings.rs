//! Host bindings generated from `wit/agentrt-tools.wit`.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "tool-code",
    imports: { default: async | trappable },
    exports: { default: async },
});
