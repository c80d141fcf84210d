// The text-tools example plug-in in JavaScript (componentize-js). Build: ../build.sh js
//
// componentize-js binds each exported interface to an exported object named after it (camelCase), with
// one method per WIT function (kebab-case becomes camelCase). WIT `s64` is a BigInt (a list of them
// arrives as a BigInt64Array), `option<T>` is T or undefined, a record is a plain object with camelCase
// fields. A function returning `result<T, E>` returns T for `ok` and throws for `err`: an object with a
// `payload` (ComponentError below), a plain value such as a string, or an Error, whose message build.sh
// makes the payload. An Error from any other function traps the instance, and the host shows the model
// the tool's name and the end of the plug-in's stderr, where the Error's message is.

// `err(payload)` of a `result` function: componentize-js takes a thrown value's own `payload` as the error
// (for a plain Error build.sh gives it its message as one).
class ComponentError extends Error {
  constructor(payload) {
    super(String(payload));
    this.payload = payload;
  }
}

const WORD = /[A-Za-z0-9']+/g;
const INTEGER = /-?\d+/;

// Offsets the way Python and Rust count them (characters), not UTF-16 code units.
const chars = (s) => [...s].length;

export const metadata = {
  describe() {
    return [
      { name: "word-count", description: "-> int: the number of words in text" },
      { name: "words", description: "-> [{word, start, end}]: every word with its position" },
      { name: "first-integer", description: "-> int or None: the first integer in text" },
      { name: "shift", description: "-> [int]: delta added to every number" },
      { name: "repeat", description: "-> str: text repeated (times from 0 to 100)" },
      { name: "explode", description: "always fails (a demonstration)" },
    ];
  },

  // No call changes module state, so the host may reuse one instance for many calls.
  stateless() {
    return true;
  },
};

export const text = {
  wordCount(text) {
    return (text.match(WORD) ?? []).length;
  },

  words(text) {
    return [...text.matchAll(WORD)].map((m) => {
      const start = chars(text.slice(0, m.index));
      return { word: m[0], start, end: start + chars(m[0]) };
    });
  },

  firstInteger(text) {
    const match = text.match(INTEGER);
    return match ? BigInt(match[0]) : undefined;
  },

  // componentize-js 0.23.0 hands over a negative s64 argument as its unsigned value (-10 arrives as
  // 2n ** 64n - 10n); BigInt.asIntN gives the number back. The list's elements arrive right.
  shift(numbers, delta) {
    const d = BigInt.asIntN(64, delta);
    return Array.from(numbers, (n) => n + d);
  },

  repeat(text, times) {
    if (times < 0 || times > 100) {
      // A tool error the model's program can catch (RuntimeError), not a trap.
      throw new ComponentError(`times must be from 0 to 100, got ${times}`);
    }
    return text.repeat(times);
  },

  explode(message) {
    throw new Error(message);
  },
};
