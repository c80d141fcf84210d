//! The interpreter guest's own modules (`random`, `copy`, `string`, `hashlib`), `eval` and `exec`: each
//! program's stdout is compared with what CPython 3.11 printed for the same program, and what the sandbox
//! cannot do is refused with a typed error that says so.

use agentrt_runtime::{FixtureTools, ProgramError, RunReport, Sandbox, SandboxConfig};
use std::sync::Arc;

async fn sandbox() -> Sandbox {
    Sandbox::new(SandboxConfig::default(), Arc::new(FixtureTools::default())).await.expect("sandbox")
}

fn stdout(report: RunReport) -> String {
    assert!(report.is_ok(), "{:?}", report.result);
    report.stdout
}

/// A seeded generator gives CPython's numbers, draw for draw, whichever way it is imported and seeded.
const RANDOM_PROGRAM: &str = r#"import random
from random import Random, randint
r = Random(2024)
print(r.random(), r.randint(1, 6), r.randrange(0, 100, 7), r.randrange(50, 0, -3), r.getrandbits(70))
print(r.choice('hello'), r.choice(range(100, 200, 3)), r.sample(range(1000000), 3), r.sample('abcdefgh', 4))
print(r.choices([1, 2, 3], weights=[1, 0, 5], k=4), r.uniform(1, 3), r.gauss(5, 2), r.randbytes(4))
for seed in [-7, 2**70, 'hello', b'bytes', 3.5]:
    r.seed(seed)
    print(r.randint(0, 10**12), end=' ')
print()
random.seed(7)
print(random.random(), randint(1, 100), isinstance(r, random.Random))
"#;
const RANDOM_CPYTHON: &str = "0.47009071843107064 6 63 23 864917991403118685124\n\
l 148 [559080, 257075, 667049] ['h', 'c', 'd', 'e']\n\
[3, 3, 3, 3] 2.038701445976974 4.065442288026955 b'\\x84p\\xd54'\n\
434439589175 538653608399 924937422573 675902253708 383557411580 \n\
0.32383276483316237 20 True\n";

const OTHER_PROGRAM: &str = r#"import copy, hashlib, string
from string import ascii_lowercase as low
a = [[1, 2], {'k': (3, [4])}]
b = copy.deepcopy(a)
b[0].append(9)
b[1]['k'][1].append(5)
print(a, b, copy.copy([1, 'x', (2, 3)]))
print(low, string.digits, string.punctuation)
h = hashlib.sha1(b'a')
h2 = h.copy()
h.update(b'b')
print(hashlib.md5(b'Hello world').hexdigest(), h.hexdigest(), h2.hexdigest(), h.name, h.digest_size)
print(hashlib.new('sha256', b'abc').hexdigest())
print(eval('2 ** 3 * 4 + 5'), eval(' 7 // 2'), eval('x + y', {'x': 1}, {'y': 2}))
"#;
const OTHER_CPYTHON: &str = "[[1, 2], {'k': (3, [4])}] [[1, 2, 9], {'k': (3, [4, 5])}] [1, 'x', (2, 3)]\n\
abcdefghijklmnopqrstuvwxyz 0123456789 !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~\n\
3e25960a79dbc69b674cd4ec67a72c62 da23614e02469a0d7c7bd1bdab5c9c474b1904dc 86f7e437faa5a7fce15d1ddcb9eaeaea377667b8 sha1 20\n\
ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\n\
37 3 3\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guest_modules_print_what_cpython_prints() {
    let sandbox = sandbox().await;
    assert_eq!(stdout(sandbox.run(RANDOM_PROGRAM).await), RANDOM_CPYTHON);
    assert_eq!(stdout(sandbox.run(OTHER_PROGRAM).await), OTHER_CPYTHON);
}

/// eval() and exec() run in the caller's namespace, as CPython's do.
#[tokio::test]
async fn eval_and_exec_see_the_callers_variables() {
    let program = "x = 1\nexec('y = x + 1')\nprint(eval('x + y'), eval('[i * x for i in range(3)]'))\n\
                   def f(a):\n    return eval('a * x')\nprint(f(5))\n";
    assert_eq!(stdout(sandbox().await.run(program).await), "3 [0, 1, 2]\n5\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unseeded_random_is_the_same_in_every_run() {
    let sandbox = sandbox().await;
    let program = "import random\nprint(random.random(), random.Random().randint(1, 10**9))\n";
    // As if `random.seed(0)`: CPython's `random.seed(0); random.random()` is 0.8444218515250481.
    let first = stdout(sandbox.run(program).await);
    assert!(first.starts_with("0.8444218515250481 "), "{first}");
    assert_eq!(stdout(sandbox.run(program).await), first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imports_of_guest_modules_keep_line_numbers() {
    let sandbox = sandbox().await;
    let program = "from random import (\n    randint,\n    choice,\n)\nx = randint(1, 6)\nimport copy; y = 1\n1 / 0\n";
    match sandbox.run(program).await.result {
        Err(ProgramError::Exception { type_name, traceback, .. }) => {
            assert_eq!(type_name, "ZeroDivisionError");
            assert!(traceback.contains("line 7"), "{traceback}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_guest_modules_cannot_do_is_refused_and_says_why() {
    let sandbox = sandbox().await;
    let exception = |report: RunReport| match report.result {
        Err(ProgramError::Exception { type_name, message, .. }) => format!("{type_name}: {message}"),
        other => panic!("{other:?}"),
    };
    let shuffle = exception(sandbox.run("import random\nx = [1, 2, 3]\nrandom.shuffle(x)\n").await);
    assert!(shuffle.starts_with("NotImplementedError") && shuffle.contains("random.sample(x, len(x))"), "{shuffle}");
    let instance = exception(sandbox.run("import copy\nclass P:\n    pass\ncopy.deepcopy(P())\n").await);
    assert!(instance.starts_with("TypeError") && instance.contains("not a P instance"), "{instance}");
    let shared = exception(sandbox.run("import copy\ncopy.copy([[1]])\n").await);
    assert!(shared.starts_with("TypeError") && shared.contains("x.copy()"), "{shared}");
    // As in CPython, eval() takes an expression, not a statement; uncaught, it is a syntax error at the
    // eval() call, whose message names eval's source as CPython's does.
    match sandbox.run("x = 0\neval('x = 1')\n").await.result {
        Err(ProgramError::Syntax { message, line, .. }) => assert!(message.ends_with("(<string>, line 1)") && line == 2, "{message} (line {line})"),
        other => panic!("{other:?}"),
    }
    // An import in exec()'s source is checked as the program's own are.
    match sandbox.run("exec('import socket')\n").await.result {
        Err(ProgramError::Forbidden { message }) => assert!(message.contains("`import socket` is not allowed"), "{message}"),
        other => panic!("{other:?}"),
    }

    // Names a module does not have fail as CPython's do, listing what the sandbox's module has; and
    // `__import__` serves only the guest's modules.
    for (program, expected) in [
        ("from random import getstate\n", "cannot import name 'getstate' from 'random' (the sandbox's random has: Random, seed"),
        ("import os.path\n", "`import os.path` is not allowed"),
        ("__import__('os')\n", "`__import__('os')` is not allowed"),
        ("import random.sub\n", "No module named 'random.sub'"),
    ] {
        match sandbox.run(program).await.result {
            Err(ProgramError::Forbidden { message }) => assert!(message.contains(expected), "{program}: {message}"),
            other => panic!("{program}: {other:?}"),
        }
    }
    let attribute = exception(sandbox.run("import string\nstring.capwords('a b')\n").await);
    assert!(attribute.starts_with("AttributeError") && attribute.contains("the sandbox's string has"), "{attribute}");
}

/// `from typing import *` and `from collections import *` (a habit of code models) bind what CPython's
/// would, for the names the program uses; line numbers do not move.
#[tokio::test]
async fn wildcard_imports_of_monty_modules_bind_what_the_program_uses() {
    let program = "from typing import *\nfrom collections import *\nfrom math import *\n\
                   def mode(xs: List[int]) -> Optional[int]:\n    return Counter(xs).most_common(1)[0][0] if xs else None\n\
                   print(mode([3, 1, 3]), mode([]), floor(pi))\nfrom itertools import *\nraise ValueError(str(list(islice(count(), 2))))";
    let report = sandbox().await.run(program).await;
    assert_eq!(report.stdout, "3 None 3\n");
    match report.result {
        Err(ProgramError::Exception { type_name, traceback, .. }) => {
            assert_eq!(type_name, "ValueError");
            assert!(traceback.contains("line 8") && traceback.contains("[0, 1]"), "{traceback}");
        }
        other => panic!("expected the ValueError of line 8, got {other:?}"),
    }
}
