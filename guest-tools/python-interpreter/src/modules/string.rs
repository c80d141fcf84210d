//! `string`: CPython's constants (its functions and `Template`/`Formatter` are not provided).

pub const EXPORTS: &[&str] =
    &["ascii_letters", "ascii_lowercase", "ascii_uppercase", "digits", "hexdigits", "octdigits", "punctuation", "printable", "whitespace"];

/// The value of the constant `name`.
pub fn constant(name: &str) -> Option<&'static str> {
    Some(match name {
        "ascii_letters" => "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "ascii_lowercase" => "abcdefghijklmnopqrstuvwxyz",
        "ascii_uppercase" => "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "digits" => "0123456789",
        "hexdigits" => "0123456789abcdefABCDEF",
        "octdigits" => "01234567",
        "punctuation" => r##"!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~"##,
        "printable" => concat!("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", r##"!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~"##, " \t\n\r\x0b\x0c"),
        "whitespace" => " \t\n\r\x0b\x0c",
        _ => return None,
    })
}
