//! Random programs in the interpreter's Python subset: mostly well-formed (names are defined before
//! use, blocks are indented, loops end), with hostile statements mixed in at a low rate: runaway loops,
//! huge allocations, deep nesting and recursion, floods of output and of tool calls, the wiki and
//! plug-in tools called with odd arguments, and attempts to reach outside the sandbox.

use crate::rng::Rng;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ty {
    Int,
    Float,
    Str,
    List,
    Dict,
    Bool,
}

const TYPES: [Ty; 6] = [Ty::Int, Ty::Float, Ty::Str, Ty::List, Ty::Dict, Ty::Bool];

/// Builds one program from `rng`.
pub fn generate(rng: &mut Rng) -> String {
    let mut gen = Gen { rng, lines: Vec::new(), indent: 0, vars: Vec::new(), funcs: Vec::new(), names: 0, loops: 0, in_func: false, imports: Vec::new() };
    gen.program();
    let mut text = gen.lines.join("\n");
    text.push('\n');
    text
}

/// One statement that a hostile program would write, on its own (also used by the mutator as material
/// to splice in).
pub fn hostile(rng: &mut Rng) -> String {
    let d = *rng.pick(&[2usize, 10, 100, 1_000, 10_000, 100_000]);
    let n = *rng.pick(&["10", "100", "10**5", "10**6", "10**7", "10**9", "10**18"]);
    match rng.below(60) {
        0 => "x = 'x' * 10**9".into(),
        1 => format!("x = 'ab' * ({n})"),
        2 => format!("x = [0] * ({n})"),
        3 => format!("x = [[1] * 1000 for _ in range({n})]"),
        4 => "n = 10 ** (10 ** 7)".into(),
        5 => "while True:\n    pass".into(),
        6 => "i = 0\nwhile True:\n    i += 1".into(),
        7 => "s = 'a'\nwhile True:\n    s = s + s".into(),
        8 => "l = []\nwhile True:\n    l.append(len(l))".into(),
        9 => "def f(n):\n    return f(n + 1)\nf(0)".into(),
        10 => "def f():\n    return g()\ndef g():\n    return f()\nf()".into(),
        11 => format!("print('y' * ({n}))"),
        12 => format!("for i in range({n}):\n    print(i, 'spam spam spam')"),
        13 => format!("print({}1{})", "(".repeat(d), ")".repeat(d)),
        14 => format!("x = {}{}", "[".repeat(d), "]".repeat(d)),
        15 => format!("x = {}1", "1 + ".repeat(d)),
        16 => {
            let depth = d.min(1_000);
            let mut s = String::new();
            for level in 0..depth {
                s.push_str(&"    ".repeat(level));
                s.push_str("if True:\n");
            }
            s.push_str(&"    ".repeat(depth));
            s.push_str("print('deep')");
            s
        }
        17 => format!("x = eval('1+' * {d} + '1')"),
        18 => format!("x = sorted(range({n}))"),
        19 => format!("x = {{i: i for i in range({n})}}"),
        20 => "x = str(10 ** 100000)".into(),
        21 => "x = f'{1:>1000000000}'".into(),
        22 => "x = '{:>999999999}'.format(1)".into(),
        23 => "x = ().__class__.__bases__[0].__subclasses__()".into(),
        24 => "__import__('os').system('id')".into(),
        25 => "print(open('/etc/passwd').read())".into(),
        26 => "import os\nos.system('ls /')".into(),
        27 => "import sys\nsys.setrecursionlimit(10**9)".into(),
        28 => "print(globals())".into(),
        29 => "x = input()".into(),
        30 => "exit(3)".into(),
        31 => "raise SystemExit(1)".into(),
        32 => "import time\ntime.sleep(100)".into(),
        33 => format!("x = 1\n{}", "x = x + 1\n".repeat(d.min(20_000))),
        34 => format!("{} = 1", "a".repeat(d)),
        35 => format!("x = '{}'", "z".repeat(d * 10)),
        36 => "import re\nprint(re.match('(a+)+$', 'a' * 40 + 'b'))".into(),
        37 => format!("import json\nx = json.loads('[' * {d} + ']' * {d})"),
        38 => "import hashlib\nprint(hashlib.sha256(('x' * 10**8).encode()).hexdigest())".into(),
        39 => "import copy\nl = []\nl.append(l)\nx = copy.deepcopy(l)".into(),
        40 => "l = []\nl.append(l)\nprint(l)".into(),
        41 => "d = {}\nd['d'] = d\nprint(d)".into(),
        42 => "x = [1]\nfor i in range(40):\n    x = [x, x]\nprint(len(str(x)))".into(),
        43 => "x = 2 ** 2 ** 2 ** 2 ** 2".into(),
        44 => "import math\nx = math.factorial(10**6)".into(),
        45 => "x = pow(3, 10**9, 7)\ny = pow(3, 10**9)".into(),
        46 => "x = 1 << 10**9".into(),
        47 => "x = int('9' * 10**6)".into(),
        48 => format!("for i in range({n}):\n    search_pages('Paris')"),
        49 => format!("for i in range({n}):\n    try:\n        read_section('x' * i)\n    except Exception:\n        pass"),
        50 => "x = 'a\0b'\nprint(x)".into(),
        51 => "exec('while True: pass')".into(),
        52 => "import random\nx = [random.random() for _ in range(10**7)]".into(),
        53 => "class A:\n    def __init__(self):\n        self.a = A()\nA()".into(),
        54 => "def gen():\n    while True:\n        yield 1\nx = list(gen())".into(),
        55 => "x = [lambda: i for i in range(10**6)]".into(),
        56 => "print(*range(10**6))".into(),
        57 => "s = set()\nwhile True:\n    s.add(len(s))".into(),
        58 => format!("x = {}", vec!["{'k': "; d.min(5_000)].concat() + "1" + &"}".repeat(d.min(5_000))),
        _ => format!("t = {}1{}", "(".repeat(d), ",)".repeat(d)),
    }
}

/// An argument a tool should refuse (or survive): empty, huge, wrong type, unknown id, odd unicode.
pub fn odd_argument(rng: &mut Rng) -> String {
    rng.pick(&[
        "''",
        "' '",
        "'x' * 10**6",
        "'x' * 10**5",
        "'q ' * 10**4",
        "'\\x00'",
        "'\\udcff'",
        "'🦀 ünïcödé'",
        "'no-such-page'",
        "'paris:'",
        "':'",
        "'paris:summary:extra'",
        "'../../etc/passwd'",
        "None",
        "0",
        "-1",
        "3.5",
        "[]",
        "{}",
        "True",
        "['paris']",
        "{'page_id': 'paris'}",
        "10**30",
        "float('nan')",
        "search_pages",
        "print",
    ])
    .to_string()
}

fn good_query(rng: &mut Rng) -> &'static str {
    rng.pick::<&str>(&["'capital of France'", "'Super Bowl 50'", "'oxygen'", "'Who discovered oxygen?'", "'Denver Broncos'", "'Paris'", "'a'"])
}

fn good_page(rng: &mut Rng) -> &'static str {
    rng.pick::<&str>(&["'paris'", "'denver_broncos'", "'oxygen'"])
}

fn good_section(rng: &mut Rng) -> &'static str {
    rng.pick::<&str>(&["'paris:summary'", "'paris:history'", "'oxygen:discovery'", "'denver_broncos:super-bowl-50'"])
}

/// A call of a wiki or plug-in tool (or of a name no tool has), as an expression.
pub fn tool_call(rng: &mut Rng) -> String {
    let odd = rng.percent(40);
    let arg = |rng: &mut Rng, good: fn(&mut Rng) -> &'static str| if odd && rng.percent(70) { odd_argument(rng) } else { good(rng).to_string() };
    match rng.below(10) {
        0 | 1 => {
            let q = arg(rng, good_query);
            match rng.below(6) {
                0 => format!("search_pages({q})"),
                1 => format!("search_pages({q}, {})", rng.pick(&["-1", "0", "1", "5", "100", "10**9", "2**32", "10**30", "'five'", "None", "2.5"])),
                2 => format!("search_pages(query={q}, k={})", rng.pick(&["1", "3", "0", "-5"])),
                3 => format!("search_pages({q}, bogus=1)"),
                4 => "search_pages()".to_string(),
                _ => format!("search_pages({q}, 3, 4, 5)"),
            }
        }
        2 | 3 => {
            let p = arg(rng, good_page);
            match rng.below(4) {
                0 => "view_sections()".to_string(),
                1 => format!("view_sections(page_id={p})"),
                _ => format!("view_sections({p})"),
            }
        }
        4 | 5 => {
            let s = arg(rng, good_section);
            match rng.below(4) {
                0 => format!("read_section({s}, {s})"),
                1 => format!("read_section(section_id={s})"),
                _ => format!("read_section({s})"),
            }
        }
        6 => format!("word_count({})", arg(rng, good_query)),
        7 => format!("summarize({})", arg(rng, good_query)),
        8 => format!("top_words({}, n={})", arg(rng, good_query), rng.pick(&["0", "1", "5", "100", "101", "-1", "10**12", "'x'", "None"])),
        _ => format!("{}({})", rng.pick(&["delete_everything", "search", "read_page", "Search_Pages", "__import__", "view_section"]), arg(rng, good_query)),
    }
}

/// A program that calls the plug-in's tools (`word_count`, `summarize`, `top_words`) with good and
/// odd arguments, catching each failure.
pub fn plugin_program(rng: &mut Rng) -> String {
    let mut lines = Vec::new();
    for _ in 0..rng.between(1, 6) {
        let text = if rng.percent(40) { odd_argument(rng) } else { good_query(rng).to_string() };
        let call = match rng.below(3) {
            0 => format!("word_count({text})"),
            1 => format!("summarize({text})"),
            _ => format!("top_words({text}, n={})", rng.pick(&["0", "1", "5", "100", "101", "-1", "10**12", "'x'", "None"])),
        };
        lines.push(format!("try:\n    print({call})\nexcept Exception as e:\n    print(type(e).__name__, str(e)[:80])"));
    }
    lines.join("\n") + "\n"
}

struct Gen<'r> {
    rng: &'r mut Rng,
    lines: Vec<String>,
    indent: usize,
    vars: Vec<(String, Ty)>,
    /// Functions defined so far, with their number of int parameters; they return an int.
    funcs: Vec<(String, usize)>,
    names: usize,
    loops: usize,
    in_func: bool,
    imports: Vec<&'static str>,
}

impl Gen<'_> {
    fn line(&mut self, text: impl AsRef<str>) {
        for l in text.as_ref().lines() {
            self.lines.push(format!("{}{l}", "    ".repeat(self.indent)));
        }
    }

    fn fresh(&mut self, prefix: &str) -> String {
        self.names += 1;
        format!("{prefix}{}", self.names)
    }

    fn var_of(&mut self, ty: Ty) -> Option<String> {
        let matching: Vec<&String> = self.vars.iter().filter(|(_, t)| *t == ty).map(|(n, _)| n).collect();
        if matching.is_empty() {
            None
        } else {
            Some(matching[self.rng.below(matching.len())].clone())
        }
    }

    fn program(&mut self) {
        if self.rng.percent(30) {
            let module = *self.rng.pick(&["math", "json", "re", "random", "string", "copy", "hashlib", "collections", "itertools", "functools", "typing"]);
            self.line(format!("import {module}"));
            self.imports.push(module);
        }
        if self.rng.percent(2) {
            let forbidden = *self.rng.pick(&["os", "sys", "socket", "subprocess", "pathlib", "shutil", "ctypes", "threading", "asyncio", "pickle"]);
            self.line(format!("import {forbidden}"));
        }
        let statements = self.rng.between(1, 25);
        let hostile_at = if self.rng.percent(20) { Some(self.rng.below(statements)) } else { None };
        // A third of the programs catch each top-level statement's exception, so that what follows a
        // failing statement runs too.
        let resilient = self.rng.percent(35);
        for i in 0..statements {
            if resilient {
                self.line("try:");
                self.indent += 1;
            }
            let before = self.lines.len();
            if hostile_at == Some(i) {
                let h = hostile(self.rng);
                self.line(h);
            }
            self.statement(3);
            if resilient {
                if self.lines.len() == before {
                    self.line("pass");
                }
                self.indent -= 1;
                self.line("except Exception as error:\n    print('error:', type(error).__name__)");
            }
        }
        if self.rng.percent(40) {
            let ty = *self.rng.pick(&TYPES);
            let e = self.expr(ty, 2);
            self.line(e);
        }
    }

    fn block(&mut self, depth: usize, body: impl FnOnce(&mut Self)) {
        self.indent += 1;
        let before = self.lines.len();
        let vars = self.vars.len();
        body(self);
        let n = self.rng.between(0, 3);
        for _ in 0..n {
            self.statement(depth);
        }
        if self.lines.len() == before {
            self.line("pass");
        }
        // Names bound in a block may not exist after it (a branch not taken): mostly forget them.
        if self.rng.percent(90) {
            self.vars.truncate(vars);
        }
        self.indent -= 1;
    }

    fn statement(&mut self, depth: usize) {
        let pick = if depth == 0 { self.rng.below(10) } else { self.rng.below(31) };
        match pick {
            0..=2 => {
                let ty = *self.rng.pick(&TYPES);
                let name = self.fresh(match ty {
                    Ty::Int => "n",
                    Ty::Float => "f",
                    Ty::Str => "s",
                    Ty::List => "l",
                    Ty::Dict => "d",
                    Ty::Bool => "b",
                });
                let e = self.expr(ty, 3);
                self.line(format!("{name} = {e}"));
                self.vars.push((name, ty));
            }
            3 => {
                let ty = *self.rng.pick(&[Ty::Int, Ty::Str, Ty::List, Ty::Float]);
                if let Some(v) = self.var_of(ty) {
                    let op = match ty {
                        Ty::Int => *self.rng.pick(&["+=", "-=", "*=", "//=", "%=", "<<=", "|="]),
                        Ty::Float => *self.rng.pick(&["+=", "*=", "/="]),
                        _ => "+=",
                    };
                    let rhs_ty = if op == "/=" { Ty::Float } else { ty };
                    let e = self.expr(if ty == Ty::Float && op != "/=" { Ty::Int } else { rhs_ty }, 2);
                    self.line(format!("{v} {op} {e}"));
                }
            }
            4 | 5 => {
                let n = self.rng.between(1, 3);
                let args: Vec<String> = (0..n)
                    .map(|_| {
                        let ty = *self.rng.pick(&TYPES);
                        self.expr(ty, 2)
                    })
                    .collect();
                let tail = match self.rng.below(6) {
                    0 => ", sep=', '",
                    1 => ", end=''",
                    _ => "",
                };
                self.line(format!("print({}{tail})", args.join(", ")));
            }
            6 => {
                let t = tool_call(self.rng);
                if self.rng.percent(50) {
                    self.line(format!("try:\n    print({t})\nexcept Exception as e:\n    print(type(e).__name__, str(e)[:80])"));
                } else {
                    let name = self.fresh("r");
                    self.line(format!("{name} = {t}"));
                }
            }
            7 => self.wiki_chain(),
            8 => {
                let ty = *self.rng.pick(&[Ty::List, Ty::Dict]);
                if let Some(v) = self.var_of(ty) {
                    let e = self.any_expr(1);
                    let k = self.expr(Ty::Str, 1);
                    let i = self.expr(Ty::Int, 1);
                    let s = match (ty, self.rng.below(6)) {
                        (Ty::List, 0) => format!("{v}.append({e})"),
                        (Ty::List, 1) => format!("{v}.pop()"),
                        (Ty::List, 2) => format!("{v}.insert({i}, {e})"),
                        (Ty::List, 3) => format!("{v}.extend({v})"),
                        (Ty::List, 4) => format!("{v}[{i}] = {e}"),
                        (Ty::List, _) => format!("{v}.sort()"),
                        (_, 1) => format!("{v}.pop({k}, None)"),
                        (_, 2) => format!("{v}.update({{{k}: {e}}})"),
                        _ => format!("{v}[{k}] = {e}"),
                    };
                    self.line(s);
                }
            }
            9 => {
                let c = self.expr(Ty::Bool, 2);
                let msg = self.expr(Ty::Str, 1);
                self.line(format!("assert {c}, {msg}"));
            }
            10..=12 => {
                let c = self.expr(Ty::Bool, 2);
                self.line(format!("if {c}:"));
                self.block(depth - 1, |_| {});
                if self.rng.percent(30) {
                    let c = self.expr(Ty::Bool, 2);
                    self.line(format!("elif {c}:"));
                    self.block(depth - 1, |_| {});
                }
                if self.rng.percent(40) {
                    self.line("else:");
                    self.block(depth - 1, |_| {});
                }
            }
            13..=15 => {
                let v = self.fresh("i");
                let (header, ty) = match self.rng.below(5) {
                    0 => (format!("for {v} in {}:", self.var_of(Ty::List).unwrap_or_else(|| "[1, 2, 3]".into())), Ty::Int),
                    1 => (format!("for {v} in {}:", self.var_of(Ty::Str).unwrap_or_else(|| "'abc'".into())), Ty::Str),
                    2 => {
                        let d = self.var_of(Ty::Dict).unwrap_or_else(|| "{'a': 1}".into());
                        (format!("for {v}, {v}v in {d}.items():"), Ty::Str)
                    }
                    _ => (format!("for {v} in range({}):", self.rng.pick(&["3", "10", "0", "-2", "100", "1000"])), Ty::Int),
                };
                self.line(header);
                self.vars.push((v, ty));
                self.loops += 1;
                self.block(depth - 1, |_| {});
                self.loops -= 1;
            }
            16 => {
                let v = self.fresh("w");
                let bound = self.rng.pick(&["5", "20", "100", "1000"]);
                self.line(format!("{v} = 0\nwhile {v} < {bound}:"));
                self.loops += 1;
                self.block(depth - 1, |g| g.line(format!("{v} += 1")));
                self.loops -= 1;
                self.vars.push((v, Ty::Int));
            }
            17 => {
                // `while True` that ends by `break` (or, now and then, never).
                let v = self.fresh("c");
                let bound = self.rng.pick(&["3", "50", "10**4"]);
                self.line(format!("{v} = 0\nwhile True:"));
                self.loops += 1;
                let ends = self.rng.percent(85);
                self.block(depth - 1, |g| {
                    g.line(format!("{v} += 1"));
                    if ends {
                        g.line(format!("if {v} > {bound}:\n    break"));
                    }
                });
                self.loops -= 1;
            }
            18 | 19 => self.function(depth),
            20 => {
                let name = self.fresh("rec");
                let n = self.rng.pick(&["0", "5", "30", "200", "900", "2000", "10**5"]);
                let body = match self.rng.below(3) {
                    0 => format!("def {name}(n):\n    if n <= 0:\n        return 0\n    return {name}(n - 1) + 1"),
                    1 => format!("def {name}(n):\n    if n < 2:\n        return n\n    return {name}(n - 1) + {name}(n - 2)"),
                    _ => format!("def {name}(n, acc=[]):\n    acc.append(n)\n    return len(acc) if n <= 0 else {name}(n - 1)"),
                };
                let fib = body.contains("- 2)");
                self.line(body);
                let arg = if fib { self.rng.pick(&["5", "15", "22", "30"]).to_string() } else { n.to_string() };
                self.line(format!("print({name}({arg}))"));
                self.funcs.push((name, 1));
            }
            21 | 22 => {
                self.line("try:");
                self.block(depth - 1, |g| {
                    if g.rng.percent(40) {
                        let e = g
                            .rng
                            .pick(&["ValueError('bad')", "KeyError('k')", "ZeroDivisionError()", "RuntimeError", "Exception('x')", "TypeError(1, 2)"])
                            .to_string();
                        g.line(format!("raise {e}"));
                    }
                });
                let clause = self.rng.pick(&[
                    "except Exception as e:",
                    "except (ValueError, KeyError):",
                    "except ZeroDivisionError:",
                    "except:",
                    "except LookupError as e:",
                ]);
                self.line(*clause);
                self.block(depth - 1, |g| g.line("print('caught')"));
                if self.rng.percent(30) {
                    self.line("finally:");
                    self.block(depth - 1, |g| g.line("print('finally')"));
                }
            }
            23 if self.loops > 0 => {
                let s = *self.rng.pick(&["break", "continue"]);
                self.line(s);
            }
            23 if self.in_func => {
                let e = self.expr(Ty::Int, 2);
                self.line(format!("return {e}"));
            }
            24 => {
                let name = self.fresh("lam");
                let e = self.rng.pick(&["x * 2", "x + 1", "str(x)", "[x] * 3", "x // 0", "-x"]);
                self.line(format!("{name} = lambda x: {e}"));
                let i = self.expr(Ty::Int, 1);
                self.line(format!("print({name}({i}))"));
            }
            25 => {
                let t = tool_call(self.rng);
                let n = self.rng.pick(&["3", "10", "63", "64", "65", "200"]);
                self.line(format!("for _ in range({n}):\n    try:\n        {t}\n    except Exception:\n        pass"));
            }
            // What the interpreter refuses before running anything (a syntax it lacks, a scope error):
            // rare, since it ends the whole program.
            26 if self.rng.percent(15) => {
                let s = self.rng.pick(&[
                    "class Point:\n    def __init__(self, x):\n        self.x = x\nprint(Point(3).x)",
                    "with open('f.txt', 'w') as fh:\n    fh.write('x')",
                    "def g():\n    yield 1\n    yield 2\nprint(list(g()))",
                    "async def a():\n    return 1",
                    "match 3:\n    case 3:\n        print('three')\n    case _:\n        pass",
                    "nonlocal q",
                    "del undefined_name",
                ]);
                self.line(*s);
            }
            26 => {
                let s = self.rng.pick(&[
                    "x: int = 3\nprint(x)",
                    "a, *b = [1, 2, 3]\nprint(a, b)",
                    "print((lambda *a, **k: (a, k))(1, 2, z=3))",
                    "global gg\ngg = 1",
                    "print(undefined_name)",
                    "import math as m\nprint(m.sqrt(-1))",
                    "from json import dumps, loads\nprint(loads(dumps({'a': [1, 2.5, None]})))",
                    "import random\nrandom.seed(7)\nprint(random.randint(1, 6), random.choice('abc'))",
                    "print(sorted([3, 1, 2], key=lambda v: -v, reverse=True))",
                    "print('%s-%d-%.2f' % ('a', 3, 2.5))",
                    "print(divmod(-7, 2), 7 // -2, -7 % 3, 2 ** -1)",
                    "print(int('12', 16), hex(255), bin(5), oct(8), round(2.675, 2))",
                    "x = {1, 2, 3} | {3, 4}\nprint(sorted(x & {2, 3}))",
                    "print(b'abc'.decode(), 'é'.encode())",
                    "print(list(map(str, range(5))), list(filter(None, [0, 1, 2])))",
                    "print(max([]))",
                    "print([1, 2][5])",
                    "print({}['missing'])",
                    "print(None + 1)",
                    "print(1 / 0)",
                    "print(int('abc'))",
                    "print('abc'.missing())",
                    "print(float('inf') - float('inf'))",
                ]);
                self.line(*s);
            }
            27 if self.imports.contains(&"math") => {
                let e = self.expr(Ty::Float, 1);
                let f = self.rng.pick(&["sqrt", "log", "exp", "floor", "ceil", "sin", "isqrt", "factorial"]);
                self.line(format!("print(math.{f}(abs({e})))"));
            }
            27 if self.imports.contains(&"json") => {
                let ty = *self.rng.pick(&TYPES);
                let e = self.expr(ty, 2);
                self.line(format!("print(json.loads(json.dumps({e})))"));
            }
            27 if self.imports.contains(&"re") => {
                let s = self.expr(Ty::Str, 1);
                let p = self.rng.pick(&["'a+'", "'[0-9]+'", "'(x|y)*z'", "'^$'", "'('", "'\\\\w+'"]);
                self.line(format!("print(re.findall({p}, {s}))"));
            }
            28 => {
                let h = hostile(self.rng);
                self.line(h);
            }
            _ => {
                let ty = *self.rng.pick(&TYPES);
                let e = self.expr(ty, 3);
                self.line(format!("print({e})"));
            }
        }
    }

    fn function(&mut self, depth: usize) {
        let name = self.fresh("fn");
        let arity = self.rng.between(0, 3);
        let params: Vec<String> = (0..arity).map(|i| format!("p{i}")).collect();
        self.line(format!("def {name}({}):", params.join(", ")));
        let saved_vars = self.vars.clone();
        let saved_loops = self.loops;
        let was_in_func = self.in_func;
        self.in_func = true;
        self.loops = 0;
        for p in &params {
            self.vars.push((p.clone(), Ty::Int));
        }
        self.block(depth.saturating_sub(1), |g| {
            let n = g.rng.between(0, 2);
            for _ in 0..n {
                g.statement(depth.saturating_sub(1));
            }
            let e = g.expr(Ty::Int, 2);
            g.line(format!("return {e}"));
        });
        self.vars = saved_vars;
        self.loops = saved_loops;
        self.in_func = was_in_func;
        self.funcs.push((name.clone(), arity));
        let args: Vec<String> = (0..arity).map(|_| self.expr(Ty::Int, 1)).collect();
        let v = self.fresh("n");
        self.line(format!("{v} = {name}({})", args.join(", ")));
        self.vars.push((v, Ty::Int));
    }

    /// search, then list a hit's sections, then read one: the shape of the programs models write.
    fn wiki_chain(&mut self) {
        let q = if self.rng.percent(20) { odd_argument(self.rng) } else { good_query(self.rng).to_string() };
        let hits = self.fresh("hits");
        let hit = self.rng.pick(&["0", "1", "-1", "5", "len(HITS) - 1"]).replace("HITS", &hits);
        let section = self.rng.pick(&["0", "1", "-1", "9"]);
        let key = self.rng.pick(&["'page_id'", "'page_id'", "'section_id'", "'title'", "'missing'"]);
        let program = match self.rng.below(4) {
            0 => format!("{hits} = search_pages({q})\nfor h in {hits}:\n    print(h['page_id'], '|', h['title'], h['score'])"),
            1 => format!("{hits} = search_pages({q})\nprint(read_section({hits}[{hit}]['section_id']))"),
            2 => format!(
                "try:\n    {hits} = search_pages({q})\n    secs = view_sections({hits}[{hit}][{key}])\n    print(read_section(secs[{section}]['section_id'])[:200])\nexcept Exception as e:\n    print('failed:', e)"
            ),
            _ => format!("{hits} = search_pages({q})\nsecs = view_sections({hits}[{hit}]['page_id'])\nprint([s['title'] for s in secs])"),
        };
        self.line(program);
    }

    fn leaf(&mut self, ty: Ty) -> String {
        if self.rng.percent(50) {
            if let Some(v) = self.var_of(ty) {
                return v;
            }
        }
        match ty {
            Ty::Int => self.rng.pick(&["0", "1", "2", "-1", "7", "42", "255", "1000", "2**31", "10**18", "2**64", "-3"]).to_string(),
            Ty::Float => self.rng.pick(&["0.0", "1.5", "-2.25", "1e308", "3.14159", "float('inf')", "float('nan')", "1e-300"]).to_string(),
            Ty::Str => self
                .rng
                .pick(&["''", "'abc'", "'Hello, World'", "'é✓ 中文'", "'a\\nb\\tc'", "\"quote's\"", "'x'", "'  padded  '", "'123'", "'3.5'", "'\\\\'"])
                .to_string(),
            Ty::List => self.rng.pick(&["[]", "[1, 2, 3]", "['a', 'b', 'c']", "[3, 1, 2]", "[[1], [2, 3]]", "[None, True, 1.5]"]).to_string(),
            Ty::Dict => self.rng.pick(&["{}", "{'a': 1, 'b': 2}", "{'x': [1, 2], 'y': {'z': None}}", "{1: 'one', 2: 'two'}"]).to_string(),
            Ty::Bool => self.rng.pick(&["True", "False"]).to_string(),
        }
    }

    fn any_expr(&mut self, depth: usize) -> String {
        let ty = *self.rng.pick(&TYPES);
        self.expr(ty, depth)
    }

    fn expr_of(&mut self, types: &[Ty], depth: usize) -> String {
        let ty = *self.rng.pick(types);
        self.expr(ty, depth)
    }

    fn expr(&mut self, ty: Ty, depth: usize) -> String {
        if depth == 0 || self.rng.percent(30) {
            return self.leaf(ty);
        }
        let d = depth - 1;
        match ty {
            Ty::Int => match self.rng.below(16) {
                0..=3 => {
                    let op = *self.rng.pick(&["+", "-", "*", "//", "%", "&", "^", "<<"]);
                    let a = self.expr(Ty::Int, d);
                    let b = if op == "<<" { self.rng.pick(&["1", "8", "64", "100"]).to_string() } else { self.expr(Ty::Int, d) };
                    format!("({a} {op} {b})")
                }
                4 => format!("({} ** {})", self.expr(Ty::Int, d), self.rng.between(0, 40)),
                5 => {
                    let ty = *self.rng.pick(&[Ty::Str, Ty::List, Ty::Dict]);
                    format!("len({})", self.expr(ty, d))
                }
                6 => format!("abs({})", self.expr(Ty::Int, d)),
                7 => format!("{}({}, {})", self.rng.pick(&["min", "max"]), self.expr(Ty::Int, d), self.expr(Ty::Int, d)),
                8 => format!("sum(range({}))", self.rng.pick(&["10", "100", "0", "-5"])),
                9 => format!("int({})", self.expr_of(&[Ty::Str, Ty::Float, Ty::Bool], d)),
                10 => format!("({} if {} else {})", self.expr(Ty::Int, d), self.expr(Ty::Bool, d), self.expr(Ty::Int, d)),
                11 if !self.funcs.is_empty() => {
                    let (name, arity) = self.funcs[self.rng.below(self.funcs.len())].clone();
                    let args: Vec<String> = (0..arity).map(|_| self.expr(Ty::Int, d)).collect();
                    format!("{name}({})", args.join(", "))
                }
                12 => format!("{}.count({})", self.expr(Ty::Str, d), self.expr(Ty::Str, 0)),
                13 => format!("{}[{}]", self.expr(Ty::List, d), self.expr(Ty::Int, 0)),
                14 => format!("{}.get({}, 0)", self.expr(Ty::Dict, d), self.expr(Ty::Str, 0)),
                _ => format!("ord({}[0])", self.expr(Ty::Str, d)),
            },
            Ty::Float => match self.rng.below(4) {
                0 => format!("({} / {})", self.expr(Ty::Int, d), self.expr(Ty::Int, d)),
                1 => format!("float({})", self.expr(Ty::Int, d)),
                2 => format!("({} * {})", self.expr(Ty::Float, d), self.expr(Ty::Float, d)),
                _ => format!("round({}, {})", self.expr(Ty::Float, d), self.rng.between(0, 5)),
            },
            Ty::Str => match self.rng.below(13) {
                0 | 1 => format!("({} + {})", self.expr(Ty::Str, d), self.expr(Ty::Str, d)),
                2 => format!("({} * {})", self.expr(Ty::Str, d), self.rng.pick(&["0", "2", "3", "-1", "100"])),
                3 => format!("str({})", self.any_expr(d)),
                4 => format!("repr({})", self.any_expr(d)),
                5 => format!("{}.{}()", self.expr(Ty::Str, d), self.rng.pick(&["upper", "lower", "strip", "title", "swapcase", "capitalize"])),
                6 => format!("{}[{}:{}]", self.expr(Ty::Str, d), self.expr(Ty::Int, 0), self.expr(Ty::Int, 0)),
                7 => format!("{}[::-1]", self.expr(Ty::Str, d)),
                8 => {
                    // Names and plain literals only: a backslash or a quote inside an f-string's braces is
                    // not Python before 3.12.
                    let n = self.var_of(Ty::Int).unwrap_or_else(|| "42".into());
                    let s = self.var_of(Ty::Str).unwrap_or_else(|| "'abc'".into());
                    format!("f\"{{{n}}}-{{{s}!r}}-{{{n} * 2:>8}}\"")
                }
                9 => format!("' '.join(str(v) for v in {})", self.expr(Ty::List, d)),
                10 => format!("{}.replace({}, {})", self.expr(Ty::Str, d), self.expr(Ty::Str, 0), self.expr(Ty::Str, 0)),
                11 => format!("chr(65 + ({} % 26))", self.expr(Ty::Int, d)),
                _ => format!("'{{}}:{{}}'.format({}, {})", self.expr(Ty::Int, d), self.expr(Ty::Str, d)),
            },
            Ty::List => match self.rng.below(12) {
                0 | 1 => {
                    let n = self.rng.between(0, 4);
                    let items: Vec<String> = (0..n).map(|_| self.expr(Ty::Int, d)).collect();
                    format!("[{}]", items.join(", "))
                }
                2 => format!("list(range({}))", self.rng.pick(&["5", "0", "100", "-1", "10**4"])),
                3 => {
                    let v = self.fresh("v");
                    self.vars.push((v.clone(), Ty::Int));
                    let body = self.expr(Ty::Int, d);
                    let cond = self.expr(Ty::Bool, d);
                    self.vars.pop();
                    format!("[{body} for {v} in range({}) if {cond}]", self.rng.pick(&["5", "20", "100"]))
                }
                4 => format!("sorted({})", self.expr(Ty::List, d)),
                5 => format!("({} + {})", self.expr(Ty::List, d), self.expr(Ty::List, d)),
                6 => format!("{}[{}:{}]", self.expr(Ty::List, d), self.expr(Ty::Int, 0), self.expr(Ty::Int, 0)),
                7 => format!("{}.split({})", self.expr(Ty::Str, d), self.rng.pick(&["", "','", "' '", "''"])),
                8 => format!("list({}.{}())", self.expr(Ty::Dict, d), self.rng.pick(&["keys", "values", "items"])),
                9 => format!("list(zip({}, {}))", self.expr(Ty::List, d), self.expr(Ty::Str, d)),
                10 => format!("list(reversed({}))", self.expr(Ty::List, d)),
                _ => format!("({} * {})", self.expr(Ty::List, d), self.rng.pick(&["0", "2", "3"])),
            },
            Ty::Dict => match self.rng.below(4) {
                0 | 1 => {
                    let n = self.rng.between(0, 3);
                    let items: Vec<String> = (0..n)
                        .map(|_| {
                            let k = self.expr(Ty::Str, 0);
                            let v = self.any_expr(d);
                            format!("{k}: {v}")
                        })
                        .collect();
                    format!("{{{}}}", items.join(", "))
                }
                2 => format!("{{str(i): i * i for i in range({})}}", self.rng.pick(&["3", "10", "0"])),
                _ => format!("dict(zip({}, {}))", self.expr(Ty::Str, d), self.expr(Ty::List, d)),
            },
            Ty::Bool => match self.rng.below(7) {
                0 | 1 => format!("({} {} {})", self.expr(Ty::Int, d), self.rng.pick(&["<", "<=", "==", "!=", ">", ">="]), self.expr(Ty::Int, d)),
                2 => format!("({} in {})", self.expr(Ty::Int, d), self.expr(Ty::List, d)),
                3 => format!("{}.startswith({})", self.expr(Ty::Str, d), self.expr(Ty::Str, 0)),
                4 => format!("(not {})", self.expr(Ty::Bool, d)),
                5 => format!("({} {} {})", self.expr(Ty::Bool, d), self.rng.pick(&["and", "or"]), self.expr(Ty::Bool, d)),
                _ => format!("isinstance({}, {})", self.any_expr(d), self.rng.pick(&["int", "str", "list", "dict", "float", "bool"])),
            },
        }
    }
}
