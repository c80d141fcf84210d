// The `{{name}}` plug-in tool for agentrt, in JavaScript (componentize-js). Build: ./build.sh
//
// componentize-js binds each exported interface to an exported object named after it (`tools` for
// yours, `metadata` for the host's questions about it), one method per WIT function (kebab-case becomes
// camelCase). A `result<T, E>` function returns T, or throws for an error the model's program can catch:
// an object with a `payload` (ComponentError below) is that payload, an Error its message (build.sh
// sees to it). In a function without a `result` an exception traps the instance and fails the call,
// and the model sees the tool's name and the end of stderr, where the Error's message is.
//
// WIT types in JavaScript: string, bool and 32-bit integers are themselves; s64 and u64 are BigInt (a
// negative s64 argument arrives as its unsigned value, -1 as 2n ** 64n - 1n: `BigInt.asIntN(64, x)` gives
// it back); a list of numbers arrives as a typed array (list<u32> a Uint32Array) and may go back as a
// plain Array; option<T> is T or undefined; a record is an object with camelCase fields.

/** `err(payload)` of a `result` function. */
class ComponentError extends Error {
  constructor(payload) {
    super(String(payload));
    this.payload = payload;
  }
}

export const metadata = {
  // One line per function, by its WIT name (kebab-case). The model reads it after the tool's name and
  // parameters, as in "- hello(name) -> str: a greeting for name (not empty)".
  describe() {
    return [{ name: "hello", description: "-> str: a greeting for name (not empty)" }];
  },

  // No call depends on an earlier one, so the host may reuse one instance for many calls. Return false
  // once a call keeps state that a later call reads: each call then gets a fresh instance.
  stateless() {
    return true;
  },
};

export const tools = {
  hello(name) {
    if (!name.trim()) {
      throw new ComponentError("name must not be empty");
    }
    return `Hello, ${name}!`;
  },
};
