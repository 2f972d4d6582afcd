//! Python's `json.dumps` over template values, and Python's `repr` of a float.
//!
//! transformers replaces Jinja's `tojson` with `json.dumps(x, ensure_ascii=False, indent=None,
//! separators=None, sort_keys=False)`: `", "` / `": "` separators, non-ASCII kept, no HTML
//! escaping, keys in insertion order. Models are trained on exactly those bytes (tool schemas in
//! the system prompt, tool-call arguments), so the filter reproduces them rather than MiniJinja's
//! compact, HTML-safe form.

use std::fmt::Write as _;

use minijinja::value::{from_args, Kwargs, Rest, ValueKind};
use minijinja::{Error, ErrorKind, Value};

/// Deeper nesting than this is refused instead of risking the stack. JSON parsed by serde_json
/// cannot reach it (serde_json stops at 128 levels); only a pathological template could.
const MAX_DEPTH: usize = 256;

/// The keyword arguments of `json.dumps` that the transformers filter exposes.
#[derive(Debug, Clone)]
pub(crate) struct DumpOptions {
    pub ensure_ascii: bool,
    /// The string repeated per nesting level; `None` keeps everything on one line.
    pub indent: Option<String>,
    pub item_separator: String,
    pub key_separator: String,
    pub sort_keys: bool,
}

impl Default for DumpOptions {
    fn default() -> Self {
        DumpOptions {
            ensure_ascii: false,
            indent: None,
            item_separator: ", ".into(),
            key_separator: ": ".into(),
            sort_keys: false,
        }
    }
}

/// The `tojson` filter with transformers' signature:
/// `tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`, positional or
/// keyword.
pub(crate) fn tojson_filter(value: &Value, args: Rest<Value>) -> Result<Value, Error> {
    let (positional, kwargs): (&[Value], Kwargs) = from_args(&args)?;
    if positional.len() > 4 {
        return Err(Error::new(
            ErrorKind::TooManyArguments,
            format!(
                "tojson() takes at most 4 arguments after the value, {} given",
                positional.len()
            ),
        ));
    }
    let nth = |i: usize| positional.get(i).cloned();
    let (ensure_ascii, indent, separators, sort_keys) = (nth(0), nth(1), nth(2), nth(3));
    let ensure_ascii = merge_argument("ensure_ascii", ensure_ascii, &kwargs)?;
    let indent = merge_argument("indent", indent, &kwargs)?;
    let separators = merge_argument("separators", separators, &kwargs)?;
    let sort_keys = merge_argument("sort_keys", sort_keys, &kwargs)?;
    kwargs.assert_all_used()?;

    let mut options = DumpOptions {
        ensure_ascii: ensure_ascii.is_some_and(|v| v.is_true()),
        sort_keys: sort_keys.is_some_and(|v| v.is_true()),
        ..DumpOptions::default()
    };
    if let Some(indent) = indent.filter(|v| !v.is_none()) {
        options.indent = Some(indent_string(&indent)?);
        // json.dumps drops the space after "," when indenting, as the newline separates items.
        options.item_separator = ",".into();
    }
    if let Some(separators) = separators.filter(|v| !v.is_none()) {
        let (item, key) = separator_pair(&separators)?;
        options.item_separator = item;
        options.key_separator = key;
    }
    dumps(value, &options).map(Value::from)
}

/// Python rejects an argument given both by position and by name; so does this.
fn merge_argument(
    name: &str,
    positional: Option<Value>,
    kwargs: &Kwargs,
) -> Result<Option<Value>, Error> {
    let named: Option<Value> = kwargs.get(name)?;
    match (positional, named) {
        (Some(_), Some(_)) => Err(Error::new(
            ErrorKind::TooManyArguments,
            format!("tojson() got multiple values for argument '{name}'"),
        )),
        (p, n) => Ok(p.or(n)),
    }
}

/// `indent` is a count of spaces (negative counts as zero, as `' ' * n` does) or a string.
fn indent_string(indent: &Value) -> Result<String, Error> {
    if let Some(text) = indent.as_str() {
        return Ok(text.to_owned());
    }
    if indent.kind() == ValueKind::Bool {
        return Ok(if indent.is_true() {
            " ".into()
        } else {
            String::new()
        });
    }
    if indent.is_integer() {
        let count = indent.as_i64().ok_or_else(|| {
            Error::new(ErrorKind::InvalidOperation, "tojson: indent is too large")
        })?;
        let count = usize::try_from(count).unwrap_or(0);
        if count > 1024 {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: indent {count} is unreasonably large"),
            ));
        }
        return Ok(" ".repeat(count));
    }
    Err(Error::new(
        ErrorKind::InvalidOperation,
        format!(
            "tojson: indent must be an integer or a string, not {}",
            indent.kind()
        ),
    ))
}

fn separator_pair(separators: &Value) -> Result<(String, String), Error> {
    let wrong = || {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("tojson: separators must be a pair of strings, found {separators}"),
        )
    };
    if separators.kind() != ValueKind::Seq || separators.len() != Some(2) {
        return Err(wrong());
    }
    let item = separators.get_item(&Value::from(0))?;
    let key = separators.get_item(&Value::from(1))?;
    match (item.as_str(), key.as_str()) {
        (Some(item), Some(key)) => Ok((item.to_owned(), key.to_owned())),
        _ => Err(wrong()),
    }
}

/// `json.dumps(value, **options)`.
pub(crate) fn dumps(value: &Value, options: &DumpOptions) -> Result<String, Error> {
    let mut out = String::new();
    write_value(&mut out, value, options, 0)?;
    Ok(out)
}

fn not_serializable(value: &Value) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!(
            "tojson: a value of type {} is not JSON serializable",
            value.kind()
        ),
    )
}

fn write_value(
    out: &mut String,
    value: &Value,
    options: &DumpOptions,
    depth: usize,
) -> Result<(), Error> {
    if depth > MAX_DEPTH {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("tojson: nesting deeper than {MAX_DEPTH} levels"),
        ));
    }
    match value.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => write_number(out, value),
        ValueKind::String => write_string(out, value.as_str().unwrap_or_default(), options),
        // Jinja's filters hand lazy iterators where Python has generators, which json.dumps
        // refuses; writing them as arrays is the useful reading of such a template.
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            write_container(out, '[', ']', &items, options, depth, |out, item, depth| {
                write_value(out, item, options, depth)
            })?;
        }
        ValueKind::Map => {
            let mut entries = Vec::new();
            for key in value.try_iter()? {
                let item = value.get_item(&key)?;
                entries.push((key, item));
            }
            if options.sort_keys {
                sort_entries(&mut entries)?;
            }
            write_container(
                out,
                '{',
                '}',
                &entries,
                options,
                depth,
                |out, (key, item), depth| {
                    write_string(out, &key_string(key)?, options);
                    out.push_str(&options.key_separator);
                    write_value(out, item, options, depth)
                },
            )?;
        }
        ValueKind::Undefined | ValueKind::Bytes | ValueKind::Plain | ValueKind::Invalid => {
            return Err(not_serializable(value))
        }
        // ValueKind is non-exhaustive: a kind added later is refused rather than guessed at.
        _ => return Err(not_serializable(value)),
    }
    Ok(())
}

/// Writes `open item sep item … close`, one item a line when indenting.
fn write_container<T>(
    out: &mut String,
    open: char,
    close: char,
    items: &[T],
    options: &DumpOptions,
    depth: usize,
    mut write_item: impl FnMut(&mut String, &T, usize) -> Result<(), Error>,
) -> Result<(), Error> {
    out.push(open);
    if items.is_empty() {
        out.push(close);
        return Ok(());
    }
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(&options.item_separator);
        }
        if let Some(indent) = &options.indent {
            newline_indent(out, indent, depth + 1);
        }
        write_item(out, item, depth + 1)?;
    }
    if let Some(indent) = &options.indent {
        newline_indent(out, indent, depth);
    }
    out.push(close);
    Ok(())
}

fn newline_indent(out: &mut String, indent: &str, level: usize) {
    out.push('\n');
    for _ in 0..level {
        out.push_str(indent);
    }
}

/// Python accepts str, int, float, bool and None keys and writes them as strings.
fn key_string(key: &Value) -> Result<String, Error> {
    match key.kind() {
        ValueKind::String => Ok(key.as_str().unwrap_or_default().to_owned()),
        ValueKind::None => Ok("null".into()),
        ValueKind::Bool => Ok(if key.is_true() { "true" } else { "false" }.into()),
        ValueKind::Number => {
            let mut text = String::new();
            write_number(&mut text, key);
            Ok(text)
        }
        _ => Err(Error::new(
            ErrorKind::InvalidOperation,
            format!(
                "tojson: keys must be str, int, float, bool or None, not {}",
                key.kind()
            ),
        )),
    }
}

/// `sort_keys` compares the keys themselves, as Python does: all strings or all numbers.
fn sort_entries(entries: &mut [(Value, Value)]) -> Result<(), Error> {
    let all = |kind| entries.iter().all(|(key, _)| key.kind() == kind);
    if all(ValueKind::String) || all(ValueKind::Number) {
        entries.sort_by(|(a, _), (b, _)| a.cmp(b));
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::InvalidOperation,
            "tojson: sort_keys needs keys that are all strings or all numbers",
        ))
    }
}

fn write_number(out: &mut String, value: &Value) {
    if value.is_integer() {
        let _ = write!(out, "{value}");
        return;
    }
    match f64::try_from(value.clone()) {
        // json.dumps writes the non-finite values as JavaScript literals.
        Ok(x) if x.is_nan() => out.push_str("NaN"),
        Ok(x) if x.is_infinite() => out.push_str(if x > 0.0 { "Infinity" } else { "-Infinity" }),
        Ok(x) => out.push_str(&float_repr(x)),
        Err(_) => {
            let _ = write!(out, "{value}");
        }
    }
}

/// A JSON string literal the way `json.dumps` escapes it.
fn write_string(out: &mut String, text: &str, options: &DumpOptions) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => push_u_escape(out, c as u32),
            // With ensure_ascii everything outside printable ASCII is escaped, DEL included.
            c if options.ensure_ascii && !(' '..='~').contains(&c) => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    push_u_escape(out, u32::from(*unit));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn push_u_escape(out: &mut String, unit: u32) {
    let _ = write!(out, "\\u{unit:04x}");
}

/// Python's `repr(float)`: the shortest digits that read back to the same value, written in
/// positional notation for exponents -4..16 (always with a fractional part, `18.0`) and in
/// scientific notation with a signed two-digit exponent otherwise (`1e-05`, `1.5e+16`).
pub(crate) fn float_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    // Rust's `{:e}` gives the same shortest round-trip digits; only the layout differs.
    let scientific = format!("{:e}", x.abs());
    let (mantissa, exponent) = scientific
        .split_once('e')
        .unwrap_or((scientific.as_str(), "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let mut out = String::new();
    if x.is_sign_negative() {
        out.push('-');
    }
    if (-4..16).contains(&exponent) {
        if exponent < 0 {
            out.push_str("0.");
            for _ in 0..(-exponent - 1) {
                out.push('0');
            }
            out.push_str(&digits);
        } else {
            let integer_len = exponent as usize + 1;
            if digits.len() <= integer_len {
                out.push_str(&digits);
                for _ in digits.len()..integer_len {
                    out.push('0');
                }
                out.push_str(".0");
            } else {
                out.push_str(&digits[..integer_len]);
                out.push('.');
                out.push_str(&digits[integer_len..]);
            }
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let sign = if exponent < 0 { '-' } else { '+' };
        let _ = write!(out, "e{sign}{:02}", exponent.abs());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Python's repr is a shortest round-trip form: it must read back to the same float.
        #[test]
        fn float_repr_reads_back(bits in any::<u64>()) {
            let x = f64::from_bits(bits);
            prop_assume!(x.is_finite());
            let text = float_repr(x);
            prop_assert_eq!(text.parse::<f64>().unwrap().to_bits(), x.to_bits(), "{}", text);
            prop_assert!(text.contains('.') || text.contains('e'), "{}", text);
        }

        /// Any string survives json.dumps and a JSON parser, with or without ensure_ascii.
        #[test]
        fn strings_round_trip_through_a_json_parser(text in any::<String>(), ascii in any::<bool>()) {
            let options = DumpOptions { ensure_ascii: ascii, ..DumpOptions::default() };
            let dumped = dumps(&Value::from(text.as_str()), &options).unwrap();
            if ascii {
                prop_assert!(dumped.bytes().all(|b| (0x20..0x7f).contains(&b)), "{}", dumped);
            }
            let back: String = serde_json::from_str(&dumped).unwrap();
            prop_assert_eq!(back, text);
        }
    }

    #[test]
    fn float_repr_matches_python() {
        // Expected strings from python3: repr(x) for each x.
        let cases: &[(f64, &str)] = &[
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (18.0, "18.0"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (0.1, "0.1"),
            (1.5, "1.5"),
            (-2.75, "-2.75"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.2345e16, "1.2345e+16"),
            (123456789.125, "123456789.125"),
            (1e100, "1e+100"),
            (1.5e-7, "1.5e-07"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (0.30000000000000004, "0.30000000000000004"),
            (2.5e-5, "2.5e-05"),
            (9999999999999998.0, "9999999999999998.0"),
        ];
        for &(x, expected) in cases {
            assert_eq!(float_repr(x), expected, "repr({x:?})");
        }
    }
}
