//! llama.cpp's GBNF translated to llguidance's Lark dialect, which has every GBNF construct:
//! rules, alternatives, groups, `* + ?`, `{m,n}` repetition, literals, character classes, `.`,
//! and token references (`<|im_end|>`, `<[1234]>`).
//!
//! GBNF is read the way llama.cpp's `grammar-parser` reads it: a rule is `name ::= body`; inside
//! a body a newline ends the rule except after `::=`, after `|` and inside parentheses; `#` starts
//! a comment; a rule defined twice keeps its last body; `root` is the start rule. Literals and
//! classes become Lark strings and `/[…]/` regexes of one character each, so no lexeme can
//! swallow more than the GBNF element it came from.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::ConstraintError;

/// Translates a GBNF grammar into Lark (start rule `start`, standing for GBNF's `root`).
pub fn gbnf_to_lark(source: &str) -> Result<String, ConstraintError> {
    let mut parser = Parser {
        chars: source.chars().collect(),
        pos: 0,
    };
    // Name -> (line of definition, Lark body); names referenced -> first line.
    let mut rules: BTreeMap<String, (usize, String)> = BTreeMap::new();
    let mut references: BTreeMap<String, usize> = BTreeMap::new();
    loop {
        parser.skip_space(true);
        if parser.at_end() {
            break;
        }
        let line = parser.line();
        let name = parser.name()?;
        parser.skip_space(false);
        if !parser.eat_str("::=") {
            return Err(parser.error(format!("expected '::=' after the rule name '{name}'")));
        }
        parser.skip_space(true);
        let body = parser.alternatives(false, &mut references)?;
        parser.skip_space(false);
        if !parser.at_end() && !parser.eat('\n') && !parser.eat_str("\r\n") {
            return Err(parser.error(format!(
                "unexpected '{}' in the rule '{name}'",
                parser.peek().unwrap_or(' ')
            )));
        }
        rules.insert(name, (line, body));
    }
    if !rules.contains_key("root") {
        return Err(ConstraintError::InvalidGbnf {
            line: Some(1),
            reason: "no 'root' rule (the start rule of a GBNF grammar)".to_owned(),
        });
    }
    if let Some((name, line)) = references
        .iter()
        .find(|(name, _)| !rules.contains_key(*name))
    {
        return Err(ConstraintError::InvalidGbnf {
            line: Some(*line),
            reason: format!("the rule '{name}' is used but never defined"),
        });
    }
    let mut lark = format!("start: {}\n", rule_name("root"));
    for (name, (_, body)) in &rules {
        let _ = writeln!(lark, "{}: {body}", rule_name(name));
    }
    Ok(lark)
}

/// GBNF names may hold capitals (Lark terminals) and `_`: `_` becomes `__` and a capital `_` +
/// its lower case — one-to-one, so two GBNF names never meet — behind a `g_` prefix.
fn rule_name(name: &str) -> String {
    let mut out = String::from("g_");
    for c in name.chars() {
        match c {
            '_' => out.push_str("__"),
            'A'..='Z' => {
                out.push('_');
                out.push(c.to_ascii_lowercase());
            }
            _ => out.push(c),
        }
    }
    out
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
}

impl Parser {
    fn at_end(&self) -> bool {
        self.pos >= self.chars.len()
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn eat_str(&mut self, s: &str) -> bool {
        let n = s.chars().count();
        if self.chars.len() >= self.pos + n
            && s.chars()
                .eq(self.chars[self.pos..self.pos + n].iter().copied())
        {
            self.pos += n;
            true
        } else {
            false
        }
    }

    fn line(&self) -> usize {
        1 + self.chars[..self.pos.min(self.chars.len())]
            .iter()
            .filter(|&&c| c == '\n')
            .count()
    }

    fn error(&self, reason: String) -> ConstraintError {
        ConstraintError::InvalidGbnf {
            line: Some(self.line()),
            reason,
        }
    }

    /// Spaces, tabs and comments; newlines too when `newlines` (where a rule cannot end).
    fn skip_space(&mut self, newlines: bool) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => self.pos += 1,
                '#' => {
                    while self.peek().is_some_and(|c| c != '\n') {
                        self.pos += 1;
                    }
                }
                '\r' | '\n' if newlines => self.pos += 1,
                _ => break,
            }
        }
    }

    fn name(&mut self) -> Result<String, ConstraintError> {
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            self.pos += 1;
        }
        if start == self.pos {
            return Err(self.error(format!(
                "expected a rule name, found '{}'",
                self.peek().unwrap_or(' ')
            )));
        }
        Ok(self.chars[start..self.pos].iter().collect())
    }

    /// `seq | seq | …`; `nested` inside parentheses, where newlines do not end the rule.
    fn alternatives(
        &mut self,
        nested: bool,
        references: &mut BTreeMap<String, usize>,
    ) -> Result<String, ConstraintError> {
        let mut out = self.sequence(nested, references)?;
        while self.eat('|') {
            self.skip_space(true);
            out.push_str(" | ");
            out.push_str(&self.sequence(nested, references)?);
        }
        Ok(out)
    }

    fn sequence(
        &mut self,
        nested: bool,
        references: &mut BTreeMap<String, usize>,
    ) -> Result<String, ConstraintError> {
        let mut items: Vec<String> = Vec::new();
        loop {
            self.skip_space(nested);
            let Some(c) = self.peek() else { break };
            let item = match c {
                '"' => {
                    self.pos += 1;
                    self.literal()?
                }
                '[' => {
                    self.pos += 1;
                    self.class()?
                }
                '.' => {
                    self.pos += 1;
                    r"/(?s:.)/".to_owned()
                }
                '(' => {
                    self.pos += 1;
                    self.skip_space(true);
                    let inner = self.alternatives(true, references)?;
                    self.skip_space(true);
                    if !self.eat(')') {
                        return Err(self.error("expected ')'".to_owned()));
                    }
                    format!("({inner})")
                }
                '<' => self.token_reference()?,
                c if c.is_ascii_alphanumeric() || c == '-' || c == '_' => {
                    let line = self.line();
                    let name = self.name()?;
                    references.entry(name.clone()).or_insert(line);
                    rule_name(&name)
                }
                '*' | '+' | '?' | '{' => {
                    return Err(self.error(format!("'{c}' does not follow anything to repeat")))
                }
                _ => break,
            };
            self.skip_space(nested);
            items.push(self.repetition(item)?);
        }
        Ok(if items.is_empty() {
            "\"\"".to_owned()
        } else {
            items.join(" ")
        })
    }

    /// A postfix `* + ?` or `{m}`, `{m,}`, `{m,n}` applied to `item`, which is one Lark atom
    /// (a string, a regex, a name, a token or a parenthesised group).
    fn repetition(&mut self, item: String) -> Result<String, ConstraintError> {
        let Some(c) = self.peek() else {
            return Ok(item);
        };
        match c {
            '*' | '+' | '?' => {
                self.pos += 1;
                Ok(format!("{item}{c}"))
            }
            '{' => {
                self.pos += 1;
                self.skip_space(false);
                let min = self.number()?;
                self.skip_space(false);
                let max = if self.eat(',') {
                    self.skip_space(false);
                    if self.peek() == Some('}') {
                        None
                    } else {
                        Some(self.number()?)
                    }
                } else {
                    Some(min)
                };
                self.skip_space(false);
                if !self.eat('}') {
                    return Err(self.error("expected '}' closing a repetition".to_owned()));
                }
                match max {
                    Some(max) if max < min => Err(self.error(format!(
                        "repetition {{{min},{max}}}: the maximum is below the minimum"
                    ))),
                    // Lark has no zero-length range: nothing at all is the empty string.
                    Some(0) => Ok("\"\"".to_owned()),
                    Some(max) => Ok(format!("{item}{{{min},{max}}}")),
                    None => Ok(format!("{item}{{{min},}}")),
                }
            }
            _ => Ok(item),
        }
    }

    fn number(&mut self) -> Result<u32, ConstraintError> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        let digits: String = self.chars[start..self.pos].iter().collect();
        // Lark reads the bounds as i32.
        digits
            .parse::<u32>()
            .ok()
            .filter(|&n| n <= i32::MAX as u32)
            .ok_or_else(|| self.error(format!("expected a repetition count, found '{digits}'")))
    }

    /// One character of a literal or class, after any escape; `None` at the closing `end`.
    fn char_or_escape(&mut self, end: char) -> Result<Option<char>, ConstraintError> {
        let Some(c) = self.peek() else {
            return Err(self.error(format!("missing closing '{end}'")));
        };
        self.pos += 1;
        if c == end {
            return Ok(None);
        }
        if c != '\\' {
            return Ok(Some(c));
        }
        let Some(e) = self.peek() else {
            return Err(self.error("an escape '\\' ends the grammar".to_owned()));
        };
        self.pos += 1;
        let hex = |parser: &mut Parser, digits: usize| -> Result<char, ConstraintError> {
            let text: String = parser
                .chars
                .get(parser.pos..parser.pos + digits)
                .unwrap_or_default()
                .iter()
                .collect();
            let value = (text.len() == digits)
                .then(|| u32::from_str_radix(&text, 16).ok())
                .flatten()
                .and_then(char::from_u32)
                .ok_or_else(|| {
                    parser.error(format!(
                        "'\\{e}' needs {digits} hex digits of a Unicode scalar, found '{text}'"
                    ))
                })?;
            parser.pos += digits;
            Ok(value)
        };
        Ok(Some(match e {
            'x' => hex(self, 2)?,
            'u' => hex(self, 4)?,
            'U' => hex(self, 8)?,
            't' => '\t',
            'r' => '\r',
            'n' => '\n',
            '\\' | '"' | '[' | ']' => e,
            other => return Err(self.error(format!("unknown escape '\\{other}'"))),
        }))
    }

    fn literal(&mut self) -> Result<String, ConstraintError> {
        let mut out = String::from("\"");
        while let Some(c) = self.char_or_escape('"')? {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if (c as u32) < 0x20 || c == '\x7f' => {
                    let _ = write!(out, "\\u{:04x}", c as u32);
                }
                c => out.push(c),
            }
        }
        out.push('"');
        Ok(out)
    }

    /// `[…]` / `[^…]` as a one-character regex, every character written `\x{…}` so nothing in
    /// it needs regex escaping.
    fn class(&mut self) -> Result<String, ConstraintError> {
        let mut out = String::from("/[");
        if self.eat('^') {
            out.push('^');
        }
        let mut empty = true;
        while let Some(first) = self.char_or_escape(']')? {
            empty = false;
            let _ = write!(out, "\\x{{{:x}}}", first as u32);
            if self.peek() == Some('-') && self.chars.get(self.pos + 1) != Some(&']') {
                self.pos += 1;
                let Some(last) = self.char_or_escape(']')? else {
                    return Err(self.error("a range in a class has no end".to_owned()));
                };
                if last < first {
                    return Err(self.error(format!("the range '{first}-{last}' is reversed")));
                }
                let _ = write!(out, "-\\x{{{:x}}}", last as u32);
            }
        }
        if empty {
            return Err(self.error("an empty character class '[]' matches nothing".to_owned()));
        }
        out.push_str("]/");
        Ok(out)
    }

    /// `<|im_end|>` or `<[1234]>`: Lark reads the same syntax.
    fn token_reference(&mut self) -> Result<String, ConstraintError> {
        let start = self.pos;
        while let Some(c) = self.peek() {
            self.pos += 1;
            if c == '>' {
                let text: String = self.chars[start..self.pos].iter().collect();
                if text.len() > 2 && !text[1..text.len() - 1].contains(['<', ' ', '\t', '\n']) {
                    return Ok(text);
                }
                break;
            }
        }
        self.pos = start;
        Err(self.error("expected a token reference like <|im_end|> or <[1234]>".to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn translates_every_construct() {
        let lark = gbnf_to_lark(
            "root ::= item (\",\" item){0,3} # a list\n\
             item ::= [a-z_] \"\\x41\\n\" | Big-Name? | .+\n\
             Big-Name ::= [^0-9\\]]* <|im_end|>\n",
        )
        .unwrap();
        assert_eq!(
            lark,
            "start: g_root\n\
             g__big-_name: /[^\\x{30}-\\x{39}\\x{5d}]/* <|im_end|>\n\
             g_item: /[\\x{61}-\\x{7a}\\x{5f}]/ \"A\\u000a\" | g__big-_name? | /(?s:.)/+\n\
             g_root: g_item (\",\" g_item){0,3}\n"
        );
    }

    #[test]
    fn names_do_not_collide() {
        assert_ne!(rule_name("a_b"), rule_name("a-b"));
        assert_ne!(rule_name("aB"), rule_name("a_b"));
        assert_ne!(rule_name("A"), rule_name("_a"));
    }

    #[test]
    fn bad_grammars_name_the_line_and_the_problem() {
        let cases = [
            (
                "root ::= \"a\" missing\n",
                1,
                "'missing' is used but never defined",
            ),
            ("item ::= \"a\"\n", 1, "no 'root' rule"),
            ("root ::= \"a\"\n\nx ::= [z-a]\n", 3, "reversed"),
            ("root ::= (\"a\"\n", 2, "expected ')'"),
            ("root := \"a\"\n", 1, "expected '::='"),
            ("root ::= \"a\\q\"\n", 1, "unknown escape"),
            ("root ::= \"a\"{3,1}\n", 1, "below the minimum"),
        ];
        for (source, line, needle) in cases {
            match gbnf_to_lark(source) {
                Err(ConstraintError::InvalidGbnf { line: l, reason }) => {
                    assert_eq!(l, Some(line), "{source:?}: {reason}");
                    assert!(reason.contains(needle), "{source:?}: {reason}");
                }
                other => panic!("{source:?}: {other:?}"),
            }
        }
    }
}
