//! A small Rust lexer: enough to match braces and find `fn` items while skipping comments,
//! string, byte-string, raw-string and character literals, and lifetimes.
//!
//! It is deliberately not a parser. Tokens are identifiers (keywords included), the `->`
//! arrow, and single punctuation characters; numbers and literals are dropped because the
//! item finder never needs them. Unterminated literals or comments end the token stream
//! instead of failing: tidy must survive a half-written file.

/// One token kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Tok {
    /// An identifier or keyword (raw identifiers lose their `r#`).
    Ident(String),
    /// `->`, kept whole so its `>` is not taken for a closing angle bracket.
    Arrow,
    /// Any other single punctuation character.
    Punct(char),
}

/// A token and the 1-based line it starts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Token {
    pub(crate) tok: Tok,
    pub(crate) line: usize,
}

/// Splits `source` into tokens.
pub(crate) fn tokenize(source: &str) -> Vec<Token> {
    let mut lexer = Lexer {
        chars: source.chars().collect(),
        at: 0,
        line: 1,
        tokens: Vec::new(),
    };
    lexer.run();
    lexer.tokens
}

struct Lexer {
    chars: Vec<char>,
    at: usize,
    line: usize,
    tokens: Vec<Token>,
}

impl Lexer {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.at + ahead).copied()
    }

    /// Moves past one character, counting newlines.
    fn bump(&mut self) {
        if self.peek(0) == Some('\n') {
            self.line += 1;
        }
        self.at += 1;
    }

    fn push(&mut self, tok: Tok, line: usize) {
        self.tokens.push(Token { tok, line });
    }

    fn run(&mut self) {
        while let Some(c) = self.peek(0) {
            let line = self.line;
            match (c, self.peek(1)) {
                (c, _) if c.is_whitespace() => self.bump(),
                ('/', Some('/')) => self.skip_line_comment(),
                ('/', Some('*')) => self.skip_block_comment(),
                ('"', _) => self.skip_string(),
                ('\'', _) => self.skip_quote(),
                ('-', Some('>')) => {
                    self.at += 2;
                    self.push(Tok::Arrow, line);
                }
                (c, _) if c.is_alphabetic() || c == '_' => self.word(),
                (c, _) if c.is_ascii_digit() => self.skip_word_chars(),
                (c, _) => {
                    self.bump();
                    self.push(Tok::Punct(c), line);
                }
            }
        }
    }

    fn skip_line_comment(&mut self) {
        while self.peek(0).is_some_and(|c| c != '\n') {
            self.bump();
        }
    }

    /// Skips a block comment; Rust block comments nest.
    fn skip_block_comment(&mut self) {
        let mut depth = 0usize;
        while let Some(c) = self.peek(0) {
            match (c, self.peek(1)) {
                ('/', Some('*')) => {
                    depth += 1;
                    self.at += 2;
                }
                ('*', Some('/')) => {
                    self.at += 2;
                    depth -= 1;
                    if depth == 0 {
                        return;
                    }
                }
                _ => self.bump(),
            }
        }
    }

    /// Skips a `"..."` literal starting at the opening quote, honouring backslash escapes.
    fn skip_string(&mut self) {
        self.bump();
        while let Some(c) = self.peek(0) {
            self.bump();
            match c {
                '\\' => self.bump(),
                '"' => return,
                _ => {}
            }
        }
    }

    /// Skips a raw string starting at its `#`s or opening quote: `#"..."#` with any number of
    /// hashes, matched on the way out.
    fn skip_raw_string(&mut self) {
        let mut hashes = 0;
        while self.peek(0) == Some('#') {
            hashes += 1;
            self.at += 1;
        }
        self.bump();
        while let Some(c) = self.peek(0) {
            self.bump();
            if c == '"' && (0..hashes).all(|ahead| self.peek(ahead) == Some('#')) {
                self.at += hashes;
                return;
            }
        }
    }

    /// At a `'`: a character literal (`'x'`, `'\n'`, `'\u{1F600}'`) or a lifetime (`'a`).
    fn skip_quote(&mut self) {
        match (self.peek(1), self.peek(2)) {
            (Some('\\'), _) => {
                self.at += 2;
                self.bump();
                while self.peek(0).is_some_and(|c| c != '\'' && c != '\n') {
                    self.bump();
                }
                self.at += 1;
            }
            (Some(_), Some('\'')) => {
                self.bump();
                self.bump();
                self.at += 1;
            }
            _ => {
                self.at += 1;
                self.skip_word_chars();
            }
        }
    }

    fn skip_word_chars(&mut self) {
        while self
            .peek(0)
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            self.at += 1;
        }
    }

    /// At an identifier start: a literal with a prefix (`b"`, `br#"`, `c"`, `b'`, `r"`), a raw
    /// identifier (`r#fn`), or a plain identifier.
    fn word(&mut self) {
        let line = self.line;
        let prefix_len = match (self.peek(0), self.peek(1)) {
            (Some('b' | 'c'), Some('r')) => 2,
            (Some('b' | 'c' | 'r'), _) => 1,
            _ => 0,
        };
        if prefix_len > 0 {
            let raw = self.peek(prefix_len - 1) == Some('r');
            let after = self.peek(prefix_len);
            if raw && matches!(after, Some('"' | '#')) && self.raw_string_follows(prefix_len) {
                self.at += prefix_len;
                self.skip_raw_string();
                return;
            }
            if !raw && after == Some('"') {
                self.at += prefix_len;
                self.skip_string();
                return;
            }
            if prefix_len == 1 && self.peek(0) == Some('b') && after == Some('\'') {
                self.at += 1;
                self.skip_quote();
                return;
            }
            if prefix_len == 1 && raw && after == Some('#') {
                // A raw identifier: `r#` then the identifier itself.
                self.at += 2;
            }
        }
        let start = self.at;
        self.skip_word_chars();
        let text: String = self.chars[start..self.at].iter().collect();
        self.push(Tok::Ident(text), line);
    }

    /// Whether the characters after a raw prefix are hashes followed by a quote.
    fn raw_string_follows(&self, prefix_len: usize) -> bool {
        let mut ahead = prefix_len;
        while self.peek(ahead) == Some('#') {
            ahead += 1;
        }
        self.peek(ahead) == Some('"')
    }
}

#[cfg(test)]
mod tests {
    use super::{Tok, tokenize};

    /// The tokens of `source` rendered compactly: identifiers as-is, punctuation as itself.
    fn check(source: &str, expected: &str) {
        let rendered: Vec<String> = tokenize(source)
            .into_iter()
            .map(|token| match token.tok {
                Tok::Ident(name) => name,
                Tok::Arrow => "->".to_string(),
                Tok::Punct(c) => c.to_string(),
            })
            .collect();
        assert_eq!(rendered.join(" "), expected, "source: {source:?}");
    }

    #[test]
    fn comments_and_strings_hide_their_braces() {
        check("fn a() { /* { */ }", "fn a ( ) { }");
        check("fn a() { /* /* { */ { */ }", "fn a ( ) { }");
        check("fn a() { // {\n}", "fn a ( ) { }");
        check(r#"fn a() { "{\"}" }"#, "fn a ( ) { }");
        check(r##"fn a() { r#"{ "# }"##, "fn a ( ) { }");
        check(r#"fn a() { br"{" ; b"\"{" ; c"{" }"#, "fn a ( ) { ; ; }");
    }

    #[test]
    fn char_literals_and_lifetimes() {
        check(
            "fn a<'b>(x: &'b u8) { '{'; '\\''; b'}'; '\\u{7B}' }",
            "fn a < > ( x : & u8 ) { ; ; ; }",
        );
        check("fn a() -> u8 { 1 }", "fn a ( ) -> u8 { }");
        check("let r#fn = 0x1F;", "let fn = ;");
    }

    #[test]
    fn lines_are_counted_through_skipped_text() {
        let tokens = tokenize("/* a\nb */ \"c\nd\" r#\"e\nf\"# x");
        assert_eq!(tokens.len(), 1);
        assert_eq!(tokens[0].line, 4);
    }

    #[test]
    fn unterminated_literals_end_quietly() {
        check("fn a() { \"open", "fn a ( ) {");
        check("fn a() { /* open", "fn a ( ) {");
    }
}
