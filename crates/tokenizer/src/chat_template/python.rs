//! The Python side of Jinja that chat templates lean on: `str` methods, `str()` of values when
//! printed, and Jinja2's type tests.
//!
//! minijinja-contrib's pycompat callback supplies most `str`/`dict` methods; the ones whose
//! Rust-flavoured behaviour differs from Python's on real inputs are replaced here: Python's
//! whitespace set (it adds U+001C..U+001F to Unicode's), `split()` without a separator, character
//! (not byte) offsets in `find`, `count('')` (which loops forever in pycompat), Python's `title`
//! and `splitlines` rules, and the missing `rsplit`, `removeprefix`, `removesuffix`, `index`.

use std::fmt::Write as _;

use minijinja::value::{from_args, Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, State, Value};

use super::python_json::float_repr;

/// The unknown-method callback: Python-exact methods first, then pycompat's.
pub(crate) fn call_method(
    state: &State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    if let Some(text) = value.as_str().filter(|_| value.kind() == ValueKind::String) {
        if let Some(result) = string_method(text, method, args) {
            return result;
        }
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

/// Python's `str.isspace()` set: Unicode White_Space plus the four information separators.
pub(crate) fn is_python_whitespace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

fn value_error(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, message.into())
}

fn string_method(text: &str, method: &str, args: &[Value]) -> Option<Result<Value, Error>> {
    let result = match method {
        "strip" => strip(text, args, true, true),
        "lstrip" => strip(text, args, true, false),
        "rstrip" => strip(text, args, false, true),
        "split" => split(text, args, false),
        "rsplit" => split(text, args, true),
        "find" => find(text, args, false).map(Value::from),
        "rfind" => find(text, args, true).map(Value::from),
        "index" | "rindex" => find(text, args, method == "rindex").and_then(|at| {
            if at < 0 {
                Err(value_error("substring not found"))
            } else {
                Ok(Value::from(at))
            }
        }),
        "count" => count(text, args),
        "title" => from_args::<()>(args).map(|()| Value::from(title(text))),
        "splitlines" => splitlines(text, args),
        "removeprefix" => from_args::<(&str,)>(args)
            .map(|(prefix,)| Value::from(text.strip_prefix(prefix).unwrap_or(text))),
        "removesuffix" => from_args::<(&str,)>(args)
            .map(|(suffix,)| Value::from(text.strip_suffix(suffix).unwrap_or(text))),
        _ => return None,
    };
    Some(result)
}

/// `strip([chars])`: `None` or no argument means Python's whitespace.
fn strip(text: &str, args: &[Value], left: bool, right: bool) -> Result<Value, Error> {
    let (chars,): (Option<&str>,) = from_args(args)?;
    let set: Vec<char> = chars.map(|c| c.chars().collect()).unwrap_or_default();
    let strip_char = |c: char| match chars {
        Some(_) => set.contains(&c),
        None => is_python_whitespace(c),
    };
    let mut rest = text;
    if left {
        rest = rest.trim_start_matches(strip_char);
    }
    if right {
        rest = rest.trim_end_matches(strip_char);
    }
    Ok(Value::from(rest))
}

/// `split(sep=None, maxsplit=-1)` and `rsplit`, positional or keyword.
fn split(text: &str, args: &[Value], from_right: bool) -> Result<Value, Error> {
    let (sep, maxsplit, kwargs): (Option<Value>, Option<Value>, Kwargs) = from_args(args)?;
    let sep = match (sep, kwargs.get::<Option<Value>>("sep")?) {
        (Some(_), Some(_)) => return Err(value_error("split() got multiple values for 'sep'")),
        (a, b) => a.or(b).filter(|v| !v.is_none()),
    };
    let maxsplit = match (maxsplit, kwargs.get::<Option<i64>>("maxsplit")?) {
        (Some(_), Some(_)) => {
            return Err(value_error("split() got multiple values for 'maxsplit'"))
        }
        (Some(v), None) => Some(i64::try_from(v)?),
        (None, b) => b,
    };
    kwargs.assert_all_used()?;
    // A negative maxsplit means no limit.
    let limit = maxsplit.and_then(|n| usize::try_from(n).ok());
    let parts: Vec<&str> = match sep {
        None => split_whitespace(text, limit, from_right),
        Some(sep) => {
            let sep = sep.as_str().ok_or_else(|| {
                value_error(format!(
                    "split(): separator must be a string, not {}",
                    sep.kind()
                ))
            })?;
            if sep.is_empty() {
                return Err(value_error("empty separator"));
            }
            match (limit, from_right) {
                (None, _) => text.split(sep).collect(),
                (Some(n), false) => text.splitn(n + 1, sep).collect(),
                (Some(n), true) => {
                    let mut parts: Vec<&str> = text.rsplitn(n + 1, sep).collect();
                    parts.reverse();
                    parts
                }
            }
        }
    };
    Ok(Value::from_iter(parts))
}

/// Python's separator-less split: runs of whitespace separate, ends are trimmed, and once the
/// limit is reached the remainder is kept whole, trimmed only on the side the split came from.
fn split_whitespace(text: &str, limit: Option<usize>, from_right: bool) -> Vec<&str> {
    let mut parts = Vec::new();
    if from_right {
        let mut rest = text.trim_end_matches(is_python_whitespace);
        while !rest.is_empty() {
            if limit.is_some_and(|n| parts.len() == n) {
                parts.push(rest);
                break;
            }
            match rest.rfind(is_python_whitespace) {
                Some(at) => {
                    let ws_len = rest[at..].chars().next().map_or(1, char::len_utf8);
                    parts.push(&rest[at + ws_len..]);
                    rest = rest[..at].trim_end_matches(is_python_whitespace);
                }
                None => {
                    parts.push(rest);
                    break;
                }
            }
        }
        parts.reverse();
    } else {
        let mut rest = text.trim_start_matches(is_python_whitespace);
        while !rest.is_empty() {
            if limit.is_some_and(|n| parts.len() == n) {
                parts.push(rest);
                break;
            }
            match rest.find(is_python_whitespace) {
                Some(at) => {
                    parts.push(&rest[..at]);
                    rest = rest[at..].trim_start_matches(is_python_whitespace);
                }
                None => {
                    parts.push(rest);
                    break;
                }
            }
        }
    }
    parts
}

/// Resolves Python's optional `start`/`end` slice bounds (character positions, negative from
/// the end, clamped) to a byte range of `text`, or `None` when start lies past end.
fn char_range(text: &str, start: Option<i64>, end: Option<i64>) -> Option<(usize, usize, usize)> {
    let n_chars = text.chars().count() as i64;
    let clamp = |i: i64| {
        if i < 0 {
            (i + n_chars).max(0)
        } else {
            i.min(n_chars)
        }
    };
    let start = clamp(start.unwrap_or(0));
    let end = clamp(end.unwrap_or(n_chars));
    if start > end {
        return None;
    }
    let byte_at = |char_index: i64| {
        text.char_indices()
            .nth(char_index as usize)
            .map_or(text.len(), |(b, _)| b)
    };
    Some((byte_at(start), byte_at(end), start as usize))
}

/// `find(sub[, start[, end]])` / `rfind`: a character index, -1 when absent.
fn find(text: &str, args: &[Value], from_right: bool) -> Result<i64, Error> {
    let (sub, start, end): (&str, Option<i64>, Option<i64>) = from_args(args)?;
    let Some((lo, hi, char_lo)) = char_range(text, start, end) else {
        return Ok(-1);
    };
    let window = &text[lo..hi];
    let found = if from_right {
        window.rfind(sub)
    } else {
        window.find(sub)
    };
    Ok(match found {
        Some(byte) => (char_lo + window[..byte].chars().count()) as i64,
        None => -1,
    })
}

/// `count(sub[, start[, end]])`: non-overlapping occurrences; the empty string occurs once more
/// than there are characters.
fn count(text: &str, args: &[Value]) -> Result<Value, Error> {
    let (sub, start, end): (&str, Option<i64>, Option<i64>) = from_args(args)?;
    let Some((lo, hi, _)) = char_range(text, start, end) else {
        return Ok(Value::from(0));
    };
    let window = &text[lo..hi];
    let n = if sub.is_empty() {
        window.chars().count() + 1
    } else {
        window.matches(sub).count()
    };
    Ok(Value::from(n))
}

/// Python's `str.title()`: a cased character after an uncased one starts a word, so digits and
/// apostrophes start words too (`"they're 1st"` → `"They'Re 1St"`).
fn title(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut previous_cased = false;
    for c in text.chars() {
        let cased = c.is_lowercase() || c.is_uppercase();
        if previous_cased {
            out.extend(c.to_lowercase());
        } else {
            out.extend(c.to_uppercase());
        }
        previous_cased = cased;
    }
    out
}

/// Python's line boundaries: `\n`, `\r`, `\r\n`, `\v`, `\f`, U+001C..U+001E, U+0085, U+2028, U+2029.
fn splitlines(text: &str, args: &[Value]) -> Result<Value, Error> {
    let (keepends,): (Option<bool>,) = from_args(args)?;
    let keepends = keepends.unwrap_or(false);
    let is_break = |c: char| {
        matches!(
            c,
            '\n' | '\r'
                | '\u{0b}'
                | '\u{0c}'
                | '\u{1c}'
                | '\u{1d}'
                | '\u{1e}'
                | '\u{85}'
                | '\u{2028}'
                | '\u{2029}'
        )
    };
    let mut lines = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(is_break) {
        let break_char = rest[at..].chars().next().unwrap_or('\n');
        let mut break_len = break_char.len_utf8();
        if break_char == '\r' && rest[at + 1..].starts_with('\n') {
            break_len += 1;
        }
        let line_end = if keepends { at + break_len } else { at };
        lines.push(Value::from(&rest[..line_end]));
        rest = &rest[at + break_len..];
    }
    if !rest.is_empty() {
        lines.push(Value::from(rest));
    }
    Ok(Value::from(lines))
}

/// Python's `str(value)`, which is what Jinja2 writes for `{{ value }}`: `None`, `True`, `1e-05`,
/// and lists / dicts in their `repr` form (`['a', 1]`, `{'k': None}`).
pub(crate) fn python_str(out: &mut String, value: &Value) {
    match value.kind() {
        ValueKind::String => out.push_str(value.as_str().unwrap_or_default()),
        _ => python_repr(out, value),
    }
}

/// Jinja2's `string` filter: Python's `str(value)` (`True`, `2.5e-07`, `['a']`), where
/// MiniJinja's own would write its text form (`true`, `2.5e-7`, `["a"]`).
pub(crate) fn string_filter(value: &Value) -> Value {
    if value.kind() == ValueKind::String {
        return value.clone();
    }
    let mut text = String::new();
    python_str(&mut text, value);
    Value::from(text)
}

/// Python's `repr(value)` for the value kinds a chat template handles.
fn python_repr(out: &mut String, value: &Value) {
    match value.kind() {
        ValueKind::Undefined => {}
        ValueKind::String => string_repr(out, value.as_str().unwrap_or_default()),
        ValueKind::Number if !value.is_integer() => match f64::try_from(value.clone()) {
            Ok(x) => out.push_str(&float_repr(x)),
            Err(_) => {
                let _ = write!(out, "{value}");
            }
        },
        ValueKind::Seq => {
            out.push('[');
            if let Ok(items) = value.try_iter() {
                for (i, item) in items.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    python_repr(out, &item);
                }
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            if let Ok(keys) = value.try_iter() {
                for (i, key) in keys.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    python_repr(out, &key);
                    out.push_str(": ");
                    let item = value.get_item(&key).unwrap_or_default();
                    python_repr(out, &item);
                }
            }
            out.push('}');
        }
        // None, booleans, integers and objects print as MiniJinja shows them (`None`, `True`).
        _ => {
            let _ = write!(out, "{value}");
        }
    }
}

/// Python's string `repr`: single quotes unless the text holds a `'` and no `"`; backslash
/// escapes for the quote, `\\`, `\t`, `\n`, `\r` and the other C0/C1 controls. (Python also escapes
/// a few non-printable Unicode categories beyond the controls; chat content rarely holds them.)
fn string_repr(out: &mut String, text: &str) {
    let quote = if text.contains('\'') && !text.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || (0x7f..0xa0).contains(&(c as u32)) => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// Jinja2's `sequence` test: anything with a length and item access, strings and dicts included
/// (and Jinja's lenient undefined).
pub(crate) fn is_sequence(value: &Value) -> bool {
    matches!(
        value.kind(),
        ValueKind::String | ValueKind::Seq | ValueKind::Map | ValueKind::Undefined
    )
}

/// Jinja2's `iterable` test: strings, lists, dicts, iterators and undefined; never `none`.
pub(crate) fn is_iterable(value: &Value) -> bool {
    match value.kind() {
        ValueKind::None | ValueKind::Bool | ValueKind::Number => false,
        ValueKind::Undefined | ValueKind::String | ValueKind::Seq | ValueKind::Map => true,
        _ => value.try_iter().is_ok(),
    }
}

/// Jinja2's `number` test is `isinstance(value, numbers.Number)`, and Python's bool is an int.
pub(crate) fn is_number(value: &Value) -> bool {
    matches!(value.kind(), ValueKind::Number | ValueKind::Bool)
}
