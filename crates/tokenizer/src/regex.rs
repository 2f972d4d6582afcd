//! The regexes llama.cpp hands to `std::regex` (ECMAScript, leftmost-first alternation, greedy
//! quantifiers), for the pre-tokenizers it has no hand-written splitter for.
//!
//! llama.cpp does not give `std::regex` the text itself: when a pattern names a Unicode category
//! (`\p{L}`, `\p{N}`, `\p{P}`, `\p{M}`, `\p{S}` and the letter sub-categories, which all mean
//! "letter") every non-ASCII code point is first collapsed to one stand-in unit per category
//! (whitespace to U+000B) and each `\p{X}` becomes "that stand-in or the ASCII members of X".
//! Other patterns run over the code points with non-ASCII whitespace turned into U+000B. Both
//! rewrites change what some patterns mean (`\p{Lu}` matches a lower-case `é`), so they are
//! reproduced here, not "fixed". The matcher is a backtracking one over those units; a repeated
//! single-unit item (the common case) is matched as a counted run, so long runs cost no stack.

use std::ops::Range;

use crate::unicode::{Cp, LETTER, MARK, NUMBER, PUNCTUATION, SYMBOL, WHITESPACE};

/// Stand-in units of the collapsed text (llama.cpp's `k_ucat_cpt`).
const COLLAPSED_OTHER: u32 = 0xD0;
const COLLAPSED: [(u8, u32); 5] = [
    (NUMBER, 0xD1),
    (LETTER, 0xD2),
    (PUNCTUATION, 0xD3),
    (MARK, 0xD4),
    (SYMBOL, 0xD5),
];

/// A compiled pattern and how its input is prepared.
#[derive(Debug)]
pub(crate) struct Regex {
    node: Node,
    collapsed: bool,
}

#[derive(Clone, Debug)]
enum Node {
    /// One unit satisfying every (class, expected) test.
    Unit(Vec<(Class, bool)>),
    Seq(Vec<Node>),
    Alt(Vec<Node>),
    Repeat {
        node: Box<Node>,
        min: usize,
        max: usize,
    },
    Look {
        node: Box<Node>,
        negate: bool,
    },
    End,
    WordBoundary(bool),
}

#[derive(Clone, Debug)]
struct Class {
    negated: bool,
    items: Vec<Item>,
}

#[derive(Clone, Copy, Debug)]
enum Item {
    Range(u32, u32),
    Space(bool),
    Digit(bool),
    Word(bool),
    /// A `\p{…}` category bit (collapsed patterns only).
    Category(u8),
}

impl Item {
    fn test(self, u: u32) -> bool {
        match self {
            Item::Range(lo, hi) => lo <= u && u <= hi,
            Item::Space(want) => is_space(u) == want,
            Item::Digit(want) => (0x30..=0x39).contains(&u) == want,
            Item::Word(want) => is_word(u) == want,
            Item::Category(bit) => {
                COLLAPSED.iter().any(|&(b, unit)| b == bit && unit == u)
                    || (u < 128 && ascii_category(u as u8) == bit)
            }
        }
    }
}

fn is_space(u: u32) -> bool {
    matches!(u, 9..=13 | 32)
}

fn is_word(u: u32) -> bool {
    u < 128 && ((u as u8).is_ascii_alphanumeric() || u == 0x5F)
}

/// The category llama.cpp's collapsed patterns give an ASCII unit (`k_ucat_map`).
fn ascii_category(b: u8) -> u8 {
    match b {
        b'0'..=b'9' => NUMBER,
        b'A'..=b'Z' | b'a'..=b'z' => LETTER,
        b'!'..=b'#' | b'%'..=b'*' | b','..=b'/' | b':' | b';' | b'?' | b'@' | b'['..=b']' => {
            PUNCTUATION
        }
        b'_' | b'{' | b'}' => PUNCTUATION,
        b'$' | b'+' | b'<'..=b'>' | b'^' | b'`' | b'|' | b'~' => SYMBOL,
        _ => 0,
    }
}

impl Class {
    fn test(&self, u: u32) -> bool {
        self.items.iter().any(|item| item.test(u)) != self.negated
    }
}

fn unit_ok(tests: &[(Class, bool)], u: u32) -> bool {
    tests.iter().all(|(class, want)| class.test(u) == *want)
}

/// Why a pattern could not be compiled.
#[derive(Debug)]
pub(crate) struct RegexError(pub String);

impl Regex {
    /// Compiles one of llama.cpp's pattern strings.
    pub(crate) fn new(pattern: &str) -> Result<Regex, RegexError> {
        let collapsed = CATEGORY_NAMES
            .iter()
            .any(|(name, _)| pattern.contains(name));
        if collapsed && !pattern.is_ascii() {
            return Err(RegexError(
                "a pattern naming a Unicode category must be ASCII (as in llama.cpp)".into(),
            ));
        }
        let chars: Vec<char> = pattern.chars().collect();
        let mut parser = Parser {
            s: &chars,
            at: 0,
            collapsed,
        };
        let node = parser.alternation()?;
        if parser.at != chars.len() {
            return Err(RegexError(format!("unexpected ')' at {}", parser.at)));
        }
        Ok(Regex {
            node: simplify(node),
            collapsed,
        })
    }

    /// The units this pattern runs over, one per code point of `cps`.
    pub(crate) fn prepare(&self, cps: &[Cp], out: &mut Vec<u32>) {
        out.clear();
        out.extend(cps.iter().map(|&Cp { c, class }| {
            let code = c as u32;
            if code < 128 {
                code
            } else if class & WHITESPACE != 0 {
                0x0B
            } else if !self.collapsed {
                code
            } else {
                COLLAPSED
                    .iter()
                    .find(|&&(bit, _)| class & bit != 0)
                    .map_or(COLLAPSED_OTHER, |&(_, unit)| unit)
            }
        }));
    }

    /// Splits `units[piece]` the way `std::regex_iterator` walks it in llama.cpp: each match and
    /// each gap between matches is a piece (empty matches give empty pieces, as there).
    pub(crate) fn split(&self, units: &[u32], piece: Range<usize>, out: &mut Vec<usize>) {
        let s = &units[..piece.end];
        let mut gap_start = piece.start;
        let mut pos = piece.start;
        let mut previous_empty = false;
        loop {
            let mut found = None;
            if previous_empty {
                if pos >= piece.end {
                    break;
                }
                if let Some(end) = self.match_at(s, piece.start, pos, true) {
                    found = Some((pos, end));
                } else {
                    pos += 1;
                }
            }
            if found.is_none() {
                found = (pos..=piece.end)
                    .find_map(|p| self.match_at(s, piece.start, p, false).map(|end| (p, end)));
            }
            let Some((start, end)) = found else { break };
            if start > gap_start {
                out.push(start - gap_start);
            }
            out.push(end - start);
            gap_start = end;
            previous_empty = end == start;
            pos = end;
        }
        if piece.end > gap_start {
            out.push(piece.end - gap_start);
        }
    }

    fn match_at(&self, s: &[u32], begin: usize, p: usize, not_null: bool) -> Option<usize> {
        let m = Matcher { s, begin };
        m.node(&self.node, p, &mut |end| {
            (!not_null || end > p).then_some(end)
        })
    }
}

struct Matcher<'a> {
    s: &'a [u32],
    begin: usize,
}

type Cont<'c> = dyn FnMut(usize) -> Option<usize> + 'c;

impl Matcher<'_> {
    fn node(&self, node: &Node, p: usize, k: &mut Cont<'_>) -> Option<usize> {
        match node {
            Node::Unit(tests) => {
                if p < self.s.len() && unit_ok(tests, self.s[p]) {
                    k(p + 1)
                } else {
                    None
                }
            }
            Node::Seq(nodes) => self.seq(nodes, p, k),
            Node::Alt(options) => options.iter().find_map(|o| self.node(o, p, k)),
            Node::Repeat { node, min, max } => {
                if let Node::Unit(tests) = &**node {
                    let limit = self.s.len().min(p.saturating_add(*max));
                    let mut n = 0;
                    while p + n < limit && unit_ok(tests, self.s[p + n]) {
                        n += 1;
                    }
                    if n < *min {
                        return None;
                    }
                    (*min..=n).rev().find_map(|count| k(p + count))
                } else {
                    self.repeat(node, *min, *max, 0, p, k)
                }
            }
            Node::Look { node, negate } => {
                let found = self.node(node, p, &mut |q| Some(q)).is_some();
                if found != *negate {
                    k(p)
                } else {
                    None
                }
            }
            Node::End => (p == self.s.len()).then(|| k(p)).flatten(),
            Node::WordBoundary(want) => {
                let before = p > self.begin && is_word(self.s[p - 1]);
                let after = p < self.s.len() && is_word(self.s[p]);
                ((before != after) == *want).then(|| k(p)).flatten()
            }
        }
    }

    fn seq(&self, nodes: &[Node], p: usize, k: &mut Cont<'_>) -> Option<usize> {
        match nodes {
            [] => k(p),
            [only] => self.node(only, p, k),
            [first, rest @ ..] => self.node(first, p, &mut |q| self.seq(rest, q, k)),
        }
    }

    fn repeat(
        &self,
        node: &Node,
        min: usize,
        max: usize,
        done: usize,
        p: usize,
        k: &mut Cont<'_>,
    ) -> Option<usize> {
        if done < max {
            // ECMAScript: an iteration that matches empty ends the loop.
            let more = self.node(node, p, &mut |q| {
                if q == p && done >= min {
                    None
                } else {
                    self.repeat(node, min, max, done + 1, q, k)
                }
            });
            if more.is_some() {
                return more;
            }
        }
        if done >= min {
            k(p)
        } else {
            None
        }
    }
}

/// `\p{…}` names and the category llama.cpp maps each to (`k_ucat_enum`).
const CATEGORY_NAMES: &[(&str, u8)] = &[
    ("\\p{N}", NUMBER),
    ("\\p{L}", LETTER),
    ("\\p{P}", PUNCTUATION),
    ("\\p{M}", MARK),
    ("\\p{S}", SYMBOL),
    ("\\p{Lu}", LETTER),
    ("\\p{Ll}", LETTER),
    ("\\p{Lt}", LETTER),
    ("\\p{Lm}", LETTER),
    ("\\p{Lo}", LETTER),
];

struct Parser<'a> {
    s: &'a [char],
    at: usize,
    collapsed: bool,
}

impl Parser<'_> {
    fn peek(&self) -> Option<char> {
        self.s.get(self.at).copied()
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn error<T>(&self, what: &str) -> Result<T, RegexError> {
        Err(RegexError(format!("{what} at position {}", self.at)))
    }

    fn alternation(&mut self) -> Result<Node, RegexError> {
        let mut options = vec![self.sequence()?];
        while self.eat('|') {
            options.push(self.sequence()?);
        }
        Ok(if options.len() == 1 {
            options.pop().unwrap_or(Node::Seq(Vec::new()))
        } else {
            Node::Alt(options)
        })
    }

    fn sequence(&mut self) -> Result<Node, RegexError> {
        let mut nodes = Vec::new();
        while let Some(c) = self.peek() {
            if c == '|' || c == ')' {
                break;
            }
            let atom = self.atom()?;
            nodes.push(self.quantifier(atom)?);
        }
        Ok(Node::Seq(nodes))
    }

    fn quantifier(&mut self, atom: Node) -> Result<Node, RegexError> {
        let (min, max) = match self.peek() {
            Some('*') => (0, usize::MAX),
            Some('+') => (1, usize::MAX),
            Some('?') => (0, 1),
            Some('{') => {
                let save = self.at;
                self.at += 1;
                let Some(min) = self.number() else {
                    self.at = save;
                    return Ok(atom);
                };
                let max = if self.eat(',') {
                    self.number().unwrap_or(usize::MAX)
                } else {
                    min
                };
                if !self.eat('}') {
                    return self.error("unterminated {n,m}");
                }
                self.at -= 1;
                (min, max)
            }
            _ => return Ok(atom),
        };
        self.at += 1;
        if self.eat('?') {
            return self.error("lazy quantifiers are not used by llama.cpp's patterns");
        }
        Ok(Node::Repeat {
            node: Box::new(atom),
            min,
            max,
        })
    }

    fn number(&mut self) -> Option<usize> {
        let start = self.at;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.at += 1;
        }
        let text: String = self.s[start..self.at].iter().collect();
        text.parse().ok()
    }

    fn atom(&mut self) -> Result<Node, RegexError> {
        let Some(c) = self.peek() else {
            return self.error("unexpected end");
        };
        self.at += 1;
        match c {
            '(' => {
                let look = if self.eat('?') {
                    if self.eat(':') {
                        None
                    } else if self.eat('=') {
                        Some(false)
                    } else if self.eat('!') {
                        Some(true)
                    } else {
                        return self.error("unsupported group kind");
                    }
                } else {
                    None
                };
                let inner = self.alternation()?;
                if !self.eat(')') {
                    return self.error("missing ')'");
                }
                Ok(match look {
                    Some(negate) => Node::Look {
                        node: Box::new(inner),
                        negate,
                    },
                    None => inner,
                })
            }
            '[' => Ok(Node::Unit(vec![(self.class()?, true)])),
            '.' => Ok(Node::Unit(vec![(
                Class {
                    negated: true,
                    items: vec![
                        Item::Range(10, 10),
                        Item::Range(13, 13),
                        Item::Range(0x2028, 0x2029),
                    ],
                },
                true,
            )])),
            '$' => Ok(Node::End),
            '\\' => match self.peek() {
                Some('b') => {
                    self.at += 1;
                    Ok(Node::WordBoundary(true))
                }
                Some('B') => {
                    self.at += 1;
                    Ok(Node::WordBoundary(false))
                }
                _ => {
                    let item = self.escape()?;
                    Ok(Node::Unit(vec![(
                        Class {
                            negated: false,
                            items: vec![item],
                        },
                        true,
                    )]))
                }
            },
            c => Ok(literal(c as u32)),
        }
    }

    /// After a backslash: one class item.
    fn escape(&mut self) -> Result<Item, RegexError> {
        let Some(c) = self.peek() else {
            return self.error("trailing backslash");
        };
        self.at += 1;
        Ok(match c {
            's' => Item::Space(true),
            'S' => Item::Space(false),
            'd' => Item::Digit(true),
            'D' => Item::Digit(false),
            'w' => Item::Word(true),
            'W' => Item::Word(false),
            'r' => single(13),
            'n' => single(10),
            't' => single(9),
            'f' => single(12),
            'v' => single(11),
            '0' => single(0),
            'p' => {
                let start = self.at - 2;
                let Some(close) = self.s[self.at..].iter().position(|&c| c == '}') else {
                    return self.error("unterminated \\p{");
                };
                let name: String = self.s[start..self.at + close + 1].iter().collect();
                self.at += close + 1;
                match CATEGORY_NAMES.iter().find(|(n, _)| *n == name) {
                    Some(&(_, bit)) if self.collapsed => Item::Category(bit),
                    _ => return self.error(&format!("unsupported category {name}")),
                }
            }
            c => single(c as u32),
        })
    }

    fn class(&mut self) -> Result<Class, RegexError> {
        let negated = self.eat('^');
        let mut items = Vec::new();
        loop {
            let Some(c) = self.peek() else {
                return self.error("unterminated [");
            };
            self.at += 1;
            let item = match c {
                ']' => break,
                '\\' => self.escape()?,
                c => single(c as u32),
            };
            // A range `a-b` (a `-` before `]` is literal).
            if let Item::Range(lo, _) = item {
                if self.peek() == Some('-') && self.s.get(self.at + 1).is_some_and(|&c| c != ']') {
                    self.at += 1;
                    let hi = match self.peek() {
                        Some('\\') => {
                            self.at += 1;
                            self.escape()?
                        }
                        Some(c) => {
                            self.at += 1;
                            single(c as u32)
                        }
                        None => return self.error("unterminated range"),
                    };
                    let Item::Range(hi, _) = hi else {
                        return self.error("a class escape cannot end a range");
                    };
                    if hi < lo {
                        return self.error("range out of order");
                    }
                    items.push(Item::Range(lo, hi));
                    continue;
                }
            }
            items.push(item);
        }
        Ok(Class { negated, items })
    }
}

fn single(u: u32) -> Item {
    Item::Range(u, u)
}

fn literal(u: u32) -> Node {
    Node::Unit(vec![(
        Class {
            negated: false,
            items: vec![single(u)],
        },
        true,
    )])
}

/// Flattens one-element sequences and turns `(?=X)Y` / `(?!X)Y` over single units into one
/// unit with both tests (`((?=[\p{L}])([^a-z]))*` becomes a countable run).
fn simplify(node: Node) -> Node {
    match node {
        Node::Seq(nodes) => {
            let mut out: Vec<Node> = Vec::with_capacity(nodes.len());
            for node in nodes.into_iter().map(simplify) {
                if let (Some(Node::Look { node: look, negate }), Node::Unit(tests)) =
                    (out.last(), &node)
                {
                    if let Node::Unit(look_tests) = &**look {
                        if look_tests.len() == 1 {
                            let (class, want) = look_tests[0].clone();
                            let mut merged = tests.clone();
                            merged.push((class, want != *negate));
                            out.pop();
                            out.push(Node::Unit(merged));
                            continue;
                        }
                    }
                }
                out.push(node);
            }
            if out.len() == 1 {
                out.pop().unwrap_or(Node::Seq(Vec::new()))
            } else {
                Node::Seq(out)
            }
        }
        Node::Alt(options) => Node::Alt(options.into_iter().map(simplify).collect()),
        Node::Repeat { node, min, max } => Node::Repeat {
            node: Box::new(simplify(*node)),
            min,
            max,
        },
        Node::Look { node, negate } => Node::Look {
            node: Box::new(simplify(*node)),
            negate,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unicode::classify;

    fn pieces(pattern: &str, text: &str) -> Vec<String> {
        let regex = Regex::new(pattern).unwrap();
        let mut cps = Vec::new();
        classify(text, &mut cps);
        let mut units = Vec::new();
        regex.prepare(&cps, &mut units);
        let mut lens = Vec::new();
        regex.split(&units, 0..units.len(), &mut lens);
        let chars: Vec<char> = text.chars().collect();
        let mut at = 0;
        lens.iter()
            .map(|&n| {
                at += n;
                chars[at - n..at].iter().collect()
            })
            .collect()
    }

    #[test]
    fn alternation_is_leftmost_first_and_quantifiers_greedy() {
        assert_eq!(pieces("a|ab", "ab"), ["a", "b"]);
        assert_eq!(pieces("ab|a", "ab"), ["ab"]);
        assert_eq!(pieces("\\s+(?!\\S)|\\s+", "a   b"), ["a", "  ", " ", "b"]);
        assert_eq!(pieces("\\p{N}{1,3}", "12345"), ["123", "45"]);
    }

    #[test]
    fn collapsed_categories_behave_like_llama_cpp() {
        // `\p{Lu}` is "any letter" after the collapse, so é matches it.
        assert_eq!(pieces("[\\p{Lu}]+", "éA b"), ["éA", " ", "b"]);
        // Non-ASCII whitespace is \s in both modes.
        assert_eq!(pieces("\\s+", "a\u{3000}b"), ["a", "\u{3000}", "b"]);
        assert_eq!(pieces("[一-龥]+", "ab中文c"), ["ab", "中文", "c"]);
    }

    #[test]
    fn empty_matches_split_like_regex_iterator() {
        assert_eq!(
            pieces("(?=(\\d{3})+(?!\\d))", "1234567"),
            ["1", "", "234", "", "567"]
        );
    }

    #[test]
    fn lookahead_classes_fuse_into_runs() {
        let text = "HelloWorld ABC";
        assert_eq!(
            pieces(
                "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+",
                text
            ),
            ["Hello", "World", " ABC"]
        );
    }
}
