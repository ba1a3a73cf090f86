//! Rule `function-length`: a ratchet on function length (STYLE.md §9, TigerBeetle's 70-line
//! limit). A function not listed in [`LENGTHS_FILE`] may be at most [`FN_LINES_MAX`] lines; a
//! listed one may not grow past its recorded length.
//!
//! Length is counted from the line of the `fn` keyword to the line of the closing brace,
//! inclusive. Functions are named by file and by their enclosing `mod`, `impl` type, `trait`
//! and `fn` names: `crates/pool/src/lib.rs::Pool::sync`. Two functions with the same name in
//! one file (say `fmt` in two trait impls for one type) share one entry, whose limit applies
//! to each of them; that is a known, small blind spot of naming by path instead of by span.
//!
//! `--update-lengths` rewrites the list with the current length of every function over the
//! limit. Run it to record shrinking (which tightens the ratchet) or, deliberately and in
//! review, to grandfather a long function.

use std::collections::BTreeMap;

use crate::lexer::{Tok, Token, tokenize};
use crate::{Rule, TidyError, Tree, Violation};

/// The longest a function not in the allow-list may be, in lines.
pub const FN_LINES_MAX: usize = 70;

/// The allow-list, relative to the workspace root.
pub const LENGTHS_FILE: &str = "xtask/function-lengths.txt";

const LENGTHS_HEADER: &str = "\
# Function-length ratchet (STYLE.md section 9), read by `cargo run -p xtask -- tidy` and by
# `cargo test -p xtask`. Functions not listed here may be at most 70 lines; each listed
# function may not grow past the length recorded here. Regenerate with
# `cargo run -p xtask -- tidy --update-lengths` (it records every function over 70 lines).
# Format: <path>::<qualified function name> <lines>
";

/// Reports every function longer than its limit: its recorded length in [`LENGTHS_FILE`] if
/// listed there, else [`FN_LINES_MAX`].
///
/// # Errors
/// [`TidyError::Io`] when a file cannot be read; [`TidyError::LengthsFile`] when the
/// allow-list is malformed. A missing allow-list is an empty one.
pub fn check_function_lengths(tree: &Tree) -> Result<Vec<Violation>, TidyError> {
    let allowed = match tree.read(LENGTHS_FILE)? {
        Some(text) => parse_lengths(&text)?,
        None => BTreeMap::new(),
    };
    let mut found = Vec::new();
    tree.for_each_text(&["rs"], |path, text| {
        for function in functions(text) {
            let key = format!("{path}::{}", function.name);
            let lines = function.lines();
            let recorded = allowed.get(&key).copied();
            let limit = recorded.map_or(FN_LINES_MAX, |recorded| recorded.max(FN_LINES_MAX));
            if lines > limit {
                let message = match recorded {
                    Some(_) => format!(
                        "fn `{}` is {lines} lines; {LENGTHS_FILE} records {limit} and a \
                         listed function may not grow",
                        function.name
                    ),
                    None => format!(
                        "fn `{}` is {lines} lines; new functions may be at most {limit}",
                        function.name
                    ),
                };
                found.push(Violation::new(
                    path,
                    function.line_start,
                    Rule::FunctionLength,
                    message,
                ));
            }
        }
    })?;
    Ok(found)
}

/// Rewrites [`LENGTHS_FILE`] under the tree's root with the current length of every function
/// longer than [`FN_LINES_MAX`] and returns how many it recorded.
///
/// # Errors
/// [`TidyError::Io`] when a source file cannot be read or the list cannot be written.
pub fn update_function_lengths(tree: &Tree) -> Result<usize, TidyError> {
    let mut long: BTreeMap<String, usize> = BTreeMap::new();
    tree.for_each_text(&["rs"], |path, text| {
        for function in functions(text) {
            let lines = function.lines();
            if lines > FN_LINES_MAX {
                let entry = long
                    .entry(format!("{path}::{}", function.name))
                    .or_insert(0);
                *entry = (*entry).max(lines);
            }
        }
    })?;
    let mut text = LENGTHS_HEADER.to_string();
    for (key, lines) in &long {
        text.push_str(&format!("{key} {lines}\n"));
    }
    let path = tree.root().join(LENGTHS_FILE);
    std::fs::write(&path, text).map_err(|source| TidyError::Io { path, source })?;
    Ok(long.len())
}

/// Parses the allow-list: `key lines` per line; blank lines and `#` comments are skipped.
fn parse_lengths(text: &str) -> Result<BTreeMap<String, usize>, TidyError> {
    let mut allowed = BTreeMap::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let malformed = |detail: &str| TidyError::LengthsFile {
            line: index + 1,
            detail: format!("{detail}; expected `<path>::<fn> <lines>`, got `{line}`"),
        };
        let mut fields = line.split_whitespace();
        let (Some(key), Some(lines), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err(malformed("wrong number of fields"));
        };
        if !key.contains("::") {
            return Err(malformed("the key has no `::`"));
        }
        let lines: usize = lines
            .parse()
            .map_err(|_| malformed("the length is not a number"))?;
        if allowed.insert(key.to_string(), lines).is_some() {
            return Err(malformed("duplicate entry"));
        }
    }
    Ok(allowed)
}

/// A function item found in a source file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Function {
    /// Enclosing `mod`/`impl`/`trait`/`fn` names and the function's own, joined by `::`.
    pub(crate) name: String,
    /// Line of the `fn` keyword.
    pub(crate) line_start: usize,
    /// Line of the closing brace.
    pub(crate) line_end: usize,
}

impl Function {
    /// Length in lines, both ends included.
    pub(crate) fn lines(&self) -> usize {
        self.line_end - self.line_start + 1
    }
}

/// What the next `{` at signature level opens.
enum Pending {
    None,
    /// `fn name`, seen on this line.
    Function(String, usize),
    /// `mod name`, `trait Name`, or `impl ... Type`.
    Scope(String),
}

/// An open brace: named scopes contribute to qualified names; functions also record where
/// they started.
struct Open {
    name: Option<String>,
    fn_line_start: Option<usize>,
}

/// Finds every `fn` item with a body in `source`. Declarations without a body (`fn f();` in
/// traits and extern blocks) and `fn(...)` pointer types are not functions here.
pub(crate) fn functions(source: &str) -> Vec<Function> {
    let tokens = tokenize(source);
    let mut found = Vec::new();
    let mut stack: Vec<Open> = Vec::new();
    let mut pending = Pending::None;
    // Parentheses and brackets opened since the pending item's keyword: a `{` or `;` inside
    // them (array lengths, const generics) belongs to a type, not to the item.
    let mut nesting = 0usize;
    for (index, token) in tokens.iter().enumerate() {
        let next_ident = match tokens.get(index + 1).map(|next| &next.tok) {
            Some(Tok::Ident(name)) => Some(name.clone()),
            _ => None,
        };
        match &token.tok {
            Tok::Ident(word) if matches!(pending, Pending::None) => {
                pending = item_start(word, next_ident, &tokens[index + 1..], token.line);
                nesting = 0;
            }
            Tok::Punct('(' | '[') => nesting += 1,
            Tok::Punct(')' | ']') => nesting = nesting.saturating_sub(1),
            Tok::Punct(';') if nesting == 0 => pending = Pending::None,
            Tok::Punct('{') => {
                let opened = if nesting == 0 {
                    std::mem::replace(&mut pending, Pending::None)
                } else {
                    Pending::None
                };
                stack.push(match opened {
                    Pending::None => Open {
                        name: None,
                        fn_line_start: None,
                    },
                    Pending::Function(name, line) => Open {
                        name: Some(name),
                        fn_line_start: Some(line),
                    },
                    Pending::Scope(name) => Open {
                        name: Some(name),
                        fn_line_start: None,
                    },
                });
            }
            Tok::Punct('}') => close(&mut stack, token.line, &mut found),
            _ => {}
        }
    }
    found
}

/// Pops the innermost brace; if it was a function body, records the function.
fn close(stack: &mut Vec<Open>, line: usize, found: &mut Vec<Function>) {
    let name = qualified_name(stack);
    if let Some(Open {
        fn_line_start: Some(line_start),
        ..
    }) = stack.pop()
    {
        found.push(Function {
            name,
            line_start,
            line_end: line,
        });
    }
}

/// The names of the open named scopes, outermost first, joined by `::`.
fn qualified_name(stack: &[Open]) -> String {
    let names: Vec<&str> = stack
        .iter()
        .filter_map(|open| open.name.as_deref())
        .collect();
    names.join("::")
}

/// What an identifier starts, if it is an item keyword followed by what that item needs.
fn item_start(word: &str, next_ident: Option<String>, rest: &[Token], line: usize) -> Pending {
    match (word, next_ident) {
        ("fn", Some(name)) => Pending::Function(name, line),
        ("mod" | "trait", Some(name)) => Pending::Scope(name),
        ("impl", _) => Pending::Scope(impl_type_name(rest)),
        _ => Pending::None,
    }
}

/// The type an `impl` block is for: the last identifier of the self type, found after any
/// `for` (trait impls) and outside angle brackets. `rest` starts just after `impl`.
fn impl_type_name(rest: &[Token]) -> String {
    let mut angle = 0usize;
    let mut nesting = 0usize;
    let mut name: Option<&str> = None;
    for token in rest {
        let outside = angle == 0 && nesting == 0;
        match &token.tok {
            Tok::Punct('<') => angle += 1,
            Tok::Punct('>') => angle = angle.saturating_sub(1),
            Tok::Punct('(' | '[') => nesting += 1,
            Tok::Punct(')' | ']') => nesting = nesting.saturating_sub(1),
            Tok::Punct('{' | ';') if outside => break,
            Tok::Ident(word) if outside && word == "where" => break,
            Tok::Ident(word) if outside && word == "for" => name = None,
            Tok::Ident(word) if outside && !matches!(word.as_str(), "dyn" | "mut" | "unsafe") => {
                name = Some(word);
            }
            _ => {}
        }
    }
    name.unwrap_or("impl").to_string()
}

#[cfg(test)]
mod tests {
    use super::{FN_LINES_MAX, LENGTHS_FILE, functions, parse_lengths};
    use crate::{Rule, TidyError, fixture};
    use crate::{check_function_lengths, update_function_lengths};

    /// `source`'s functions as `name start-end`.
    fn check(source: &str, expected: &[&str]) {
        let found: Vec<String> = functions(source)
            .iter()
            .map(|f| format!("{} {}-{}", f.name, f.line_start, f.line_end))
            .collect();
        assert_eq!(found, expected, "source:\n{source}");
    }

    /// A function named `name` that is `lines` lines long.
    fn long_fn(name: &str, lines: usize) -> String {
        let mut text = format!("fn {name}() {{\n");
        for _ in 2..lines {
            text.push_str("    step();\n");
        }
        text.push_str("}\n");
        text
    }

    #[test]
    fn finds_functions_with_spans() {
        check("fn a() {\n}\n\nfn b() -> u8 { 1 }\n", &["a 1-2", "b 4-4"]);
        check(
            "pub(crate) async unsafe fn a<T: Fn() -> u8>(x: [u8; 4]) where T: Copy {\n}",
            &["a 1-2"],
        );
        check(
            "fn outer() {\n    fn inner() {}\n    let c = |x| { x };\n}\n",
            &["outer::inner 2-2", "outer 1-4"],
        );
    }

    #[test]
    fn qualifies_by_module_impl_and_trait() {
        let source = "mod m {\n  struct S { f: fn(u8) }\n\
                      impl<T> Into<T> for m::S<T> where T: X {\n\
                      fn a(&self) {}\n  }\n  trait Q { fn d(); fn e() {} }\n}\n\
                      impl fmt::Display for &mut Foo { fn fmt() {} }\n";
        check(source, &["m::S::a 4-4", "m::Q::e 6-6", "Foo::fmt 8-8"]);
    }

    #[test]
    fn declarations_pointers_and_literals_are_not_functions() {
        check(
            "extern \"C\" { fn f(x: u8); }\ntype F = fn(u8) -> u8;\n",
            &[],
        );
        check(
            "const S: &str = \"fn a() {\";\nfn b() { let c = '}'; }\n",
            &["b 2-2"],
        );
        check("mod tests;\nfn a() {}\n", &["a 2-2"]);
    }

    #[test]
    fn the_allow_list_parses_and_rejects_malformed_lines() {
        let parsed = parse_lengths("# comment\n\ncrates/a/src/lib.rs::f 90\n").expect("parses");
        assert_eq!(parsed.get("crates/a/src/lib.rs::f"), Some(&90));
        for bad in [
            "a.rs::f",
            "a.rs::f ninety",
            "a.rs 90",
            "a.rs::f 9 9",
            "a::f 1\na::f 2",
        ] {
            let error = parse_lengths(bad).expect_err(bad);
            assert!(
                matches!(error, TidyError::LengthsFile { .. }),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn new_long_functions_fail_and_listed_ones_may_not_grow() {
        let source = format!(
            "//! Doc.\n{}{}{}",
            long_fn("short", FN_LINES_MAX),
            long_fn("new_long", FN_LINES_MAX + 1),
            long_fn("listed", 90)
        );
        let list = "src/lib.rs::listed 85\n";
        let (_dir, tree) = fixture::tree(&[("src/lib.rs", &source), (LENGTHS_FILE, list)]);
        let found = check_function_lengths(&tree).expect("check runs");
        let report: Vec<_> = found.iter().map(|v| (v.line, v.rule)).collect();
        let listed_line = 2 + FN_LINES_MAX + FN_LINES_MAX + 1;
        assert_eq!(
            report,
            [
                (2 + FN_LINES_MAX, Rule::FunctionLength),
                (listed_line, Rule::FunctionLength)
            ]
        );
        assert!(
            found[0].message.contains("new_long` is 71 lines"),
            "{}",
            found[0].message
        );
        assert!(
            found[1].message.contains("records 85"),
            "{}",
            found[1].message
        );
    }

    #[test]
    fn update_records_current_long_functions_and_then_passes() {
        let source = format!("//! Doc.\n{}{}", long_fn("short", 10), long_fn("long", 80));
        let (_dir, tree) = fixture::tree(&[("src/lib.rs", &source), ("xtask/Cargo.toml", "")]);
        assert_eq!(check_function_lengths(&tree).expect("check runs").len(), 1);
        assert_eq!(update_function_lengths(&tree).expect("update runs"), 1);
        let written = tree
            .read(LENGTHS_FILE)
            .expect("read")
            .expect("list written");
        assert!(written.ends_with("\nsrc/lib.rs::long 80\n"), "{written}");
        assert_eq!(check_function_lengths(&tree).expect("check runs"), []);
    }
}
