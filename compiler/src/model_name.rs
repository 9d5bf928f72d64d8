//! The model name (`--name`, nnc-build's `.name()`): the prefix of the exported symbols
//! and of the header's macros, so it must make valid C and C++ identifiers.

/// C (through C23) and C++ (through C++23) keywords, and the alternative operator
/// spellings: a header declaring `int32_t for_infer(...)` compiles, but a model named
/// `for` would also make `NNC_FOR_...` macros and, in bindings, a keyword-named module.
const KEYWORDS: &[&str] = &[
    "alignas",
    "alignof",
    "and",
    "and_eq",
    "asm",
    "atomic_cancel",
    "atomic_commit",
    "atomic_noexcept",
    "auto",
    "bitand",
    "bitor",
    "bool",
    "break",
    "case",
    "catch",
    "char",
    "char8_t",
    "char16_t",
    "char32_t",
    "class",
    "compl",
    "concept",
    "const",
    "consteval",
    "constexpr",
    "constinit",
    "const_cast",
    "continue",
    "co_await",
    "co_return",
    "co_yield",
    "decltype",
    "default",
    "delete",
    "do",
    "double",
    "dynamic_cast",
    "else",
    "enum",
    "explicit",
    "export",
    "extern",
    "false",
    "float",
    "for",
    "friend",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "mutable",
    "namespace",
    "new",
    "noexcept",
    "not",
    "not_eq",
    "nullptr",
    "operator",
    "or",
    "or_eq",
    "private",
    "protected",
    "public",
    "reflexpr",
    "register",
    "reinterpret_cast",
    "requires",
    "restrict",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "static_assert",
    "static_cast",
    "struct",
    "switch",
    "synchronized",
    "template",
    "this",
    "thread_local",
    "throw",
    "true",
    "try",
    "typedef",
    "typeid",
    "typeof",
    "typeof_unqual",
    "typename",
    "union",
    "unsigned",
    "using",
    "virtual",
    "void",
    "volatile",
    "wchar_t",
    "while",
    "xor",
    "xor_eq",
    "_Alignas",
    "_Alignof",
    "_Atomic",
    "_BitInt",
    "_Bool",
    "_Complex",
    "_Decimal128",
    "_Decimal32",
    "_Decimal64",
    "_Generic",
    "_Imaginary",
    "_Noreturn",
    "_Static_assert",
    "_Thread_local",
];

/// Checks a non-empty model name: a C identifier (ASCII letters, digits and `_`, not
/// starting with a digit), not a C or C++ keyword, and not `nnc` (whose
/// `nnc_model_info` function would clash with nnc.h's type of that name).
pub fn check_model_name(name: &str) -> Result<(), String> {
    let why = if name.is_empty() {
        "is empty"
    } else if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        "holds a character other than a letter, digit or '_'"
    } else if name.starts_with(|c: char| c.is_ascii_digit()) {
        "starts with a digit"
    } else if KEYWORDS.contains(&name) {
        "is a C or C++ keyword"
    } else if name == "nnc" {
        "is reserved (nnc.h declares nnc_model_info)"
    } else {
        return Ok(());
    };
    Err(format!(
        "model name '{name}' {why}; it must be a C identifier (letters, digits and _, not starting with a digit)"
    ))
}

#[cfg(test)]
mod tests {
    use super::check_model_name;

    #[test]
    fn c_identifiers_pass() {
        for ok in ["m", "resnet18", "_x", "Model_2", "nnc2", "forward"] {
            assert_eq!(check_model_name(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn everything_else_is_refused_with_the_reason() {
        for (bad, why) in [
            ("9x", "starts with a digit"),
            ("a-b", "other than a letter"),
            ("a b", "other than a letter"),
            ("é", "other than a letter"),
            ("", "is empty"),
            ("int", "keyword"),
            ("class", "keyword"),
            ("_Bool", "keyword"),
            ("nnc", "reserved"),
        ] {
            let e = check_model_name(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
