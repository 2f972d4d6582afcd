//! The XML call body of Qwen3-Coder / Qwen3.5 templates, after `<tool_call>`:
//! `<function=NAME>` then `<parameter=ARG>\nVALUE\n</parameter>` per argument, then
//! `</function>`. Values are raw text; the OpenAI `arguments` JSON is built from them as
//! llama.cpp's qwen3-coder parser does: compact (`{"a":1,"b":"x"}`), a parameter the schema
//! declares as string-only kept as a string, any other value written as JSON when it parses as
//! JSON of a type the schema allows (a string otherwise). String values stream as they are
//! generated; typed ones are released when their `</parameter>` arrives.

use std::collections::HashMap;

use serde_json::Value;

use super::{partial_suffix, Header};

const FUNCTION_OPEN: &str = "<function=";
const FUNCTION_CLOSE: &str = "</function>";
const PARAMETER_OPEN: &str = "<parameter=";
const PARAMETER_CLOSE: &str = "</parameter>";
const CALL_CLOSE: &str = "</tool_call>";
/// Names longer than this are not a call (the block is held whole and given back as text).
const MAX_NAME: usize = 256;

/// The JSON types a parameter's schema allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Kinds {
    string: bool,
    /// Anything but a string (object, array, number, boolean, null) with no finer detail: the
    /// parser only needs to know whether a parsed value of a given kind is allowed.
    object: bool,
    array: bool,
    number: bool,
    boolean: bool,
    null: bool,
}

impl Kinds {
    const ANY: Kinds = Kinds {
        string: true,
        object: true,
        array: true,
        number: true,
        boolean: true,
        null: true,
    };

    /// The types a JSON schema allows, from `type`, `enum`, `const` and `anyOf` / `oneOf`;
    /// anything it does not say (no type, a `$ref`) allows every type.
    pub fn of_schema(schema: &Value) -> Kinds {
        let mut k = Kinds::default();
        if let Some(t) = schema.get("type") {
            let names: Vec<&str> = match t {
                Value::String(s) => vec![s.as_str()],
                Value::Array(list) => list.iter().filter_map(Value::as_str).collect(),
                _ => return Kinds::ANY,
            };
            for name in names {
                match name {
                    "string" => k.string = true,
                    "object" => k.object = true,
                    "array" => k.array = true,
                    "number" | "integer" => k.number = true,
                    "boolean" => k.boolean = true,
                    "null" => k.null = true,
                    _ => return Kinds::ANY,
                }
            }
            return k;
        }
        let values: Option<Vec<&Value>> = match (schema.get("enum"), schema.get("const")) {
            (Some(Value::Array(list)), _) => Some(list.iter().collect()),
            (_, Some(c)) => Some(vec![c]),
            _ => None,
        };
        if let Some(values) = values {
            for v in values {
                k.add_kind_of(v);
            }
            return k;
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(Value::Array(list)) = schema.get(key) {
                for sub in list {
                    let s = Kinds::of_schema(sub);
                    k = Kinds {
                        string: k.string | s.string,
                        object: k.object | s.object,
                        array: k.array | s.array,
                        number: k.number | s.number,
                        boolean: k.boolean | s.boolean,
                        null: k.null | s.null,
                    };
                }
                return k;
            }
        }
        Kinds::ANY
    }

    fn add_kind_of(&mut self, v: &Value) {
        match v {
            Value::String(_) => self.string = true,
            Value::Object(_) => self.object = true,
            Value::Array(_) => self.array = true,
            Value::Number(_) => self.number = true,
            Value::Bool(_) => self.boolean = true,
            Value::Null => self.null = true,
        }
    }

    fn allows(&self, v: &Value) -> bool {
        match v {
            Value::String(_) => self.string,
            Value::Object(_) => self.object,
            Value::Array(_) => self.array,
            Value::Number(_) => self.number,
            Value::Bool(_) => self.boolean,
            Value::Null => self.null,
        }
    }

    /// Only a string: the value is taken as text, whatever it looks like.
    pub fn string_only(&self) -> bool {
        *self
            == Kinds {
                string: true,
                ..Kinds::default()
            }
    }
}

/// Each declared function's parameters and the types their schemas allow.
#[derive(Debug, Clone, Default)]
pub struct ParameterKinds {
    functions: HashMap<String, HashMap<String, Kinds>>,
}

impl ParameterKinds {
    /// From the request's `tools` (`{"type": "function", "function": {name, parameters}}`).
    pub fn of_tools(tools: &[Value]) -> ParameterKinds {
        let mut functions = HashMap::new();
        for tool in tools {
            let Some(function) = tool.get("function") else {
                continue;
            };
            let Some(name) = function.get("name").and_then(Value::as_str) else {
                continue;
            };
            let params = function
                .get("parameters")
                .and_then(|p| p.get("properties"))
                .and_then(Value::as_object)
                .map(|props| {
                    props
                        .iter()
                        .map(|(k, schema)| (k.clone(), Kinds::of_schema(schema)))
                        .collect()
                })
                .unwrap_or_default();
            functions.insert(name.to_owned(), params);
        }
        ParameterKinds { functions }
    }

    /// A parameter the tools do not declare may be anything.
    fn get(&self, function: &str, parameter: &str) -> Kinds {
        self.functions
            .get(function)
            .and_then(|p| p.get(parameter))
            .copied()
            .unwrap_or(Kinds::ANY)
    }
}

/// Matches `ws <function=NAME>` at the start of `s` (NAME: no `<`, `>` or line break).
pub(super) fn scan_function_open(s: &str) -> Header {
    let body = s.trim_start();
    let skipped = s.len() - body.len();
    let n = FUNCTION_OPEN.len().min(body.len());
    if body.as_bytes()[..n] != FUNCTION_OPEN.as_bytes()[..n] {
        return Header::NoMatch;
    }
    if n < FUNCTION_OPEN.len() {
        return Header::NeedMore;
    }
    let rest = &body[n..];
    match rest.find(['>', '<', '\n', '\r']) {
        Some(end) if rest.as_bytes()[end] == b'>' && (1..=MAX_NAME).contains(&end) => {
            Header::Complete {
                name: rest[..end].trim().to_owned(),
                consumed: skipped + n + end + 1,
            }
        }
        Some(_) => Header::NoMatch,
        None if rest.len() > MAX_NAME => Header::NoMatch,
        None => Header::NeedMore,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Between parameters: `<parameter=…>`, `</function>` or whitespace next.
    Between,
    /// Just after `<parameter=NAME>`: the one line break that starts the value is skipped.
    ValueStart,
    /// Inside a string value, released as it comes.
    StringValue,
    /// Inside a value whose type is decided once it is complete.
    TypedValue,
}

/// What a step of the body did.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// Consumed what it could; the rest needs more text.
    NeedMore,
    /// The arguments are complete (`</function>`, or text that is not a parameter): the
    /// fragment ends the JSON object; `</tool_call>` still follows.
    Done,
}

/// The arguments of one XML call, read incrementally into the JSON text of `arguments`.
#[derive(Debug)]
pub(super) struct XmlArguments {
    function: String,
    phase: Phase,
    kinds: Kinds,
    n_args: usize,
    /// A typed value so far.
    value: String,
}

impl XmlArguments {
    pub(super) fn new(function: &str) -> XmlArguments {
        XmlArguments {
            function: function.to_owned(),
            phase: Phase::Between,
            kinds: Kinds::ANY,
            n_args: 0,
            value: String::new(),
        }
    }

    /// Reads from the start of `pending` (removing what it used), appending `arguments` text
    /// to `fragment`.
    pub(super) fn step(
        &mut self,
        pending: &mut String,
        params: &ParameterKinds,
        fragment: &mut String,
    ) -> Step {
        loop {
            match self.phase {
                Phase::Between => {
                    let body = pending.trim_start();
                    let skipped = pending.len() - body.len();
                    if let Some(rest) = body.strip_prefix(PARAMETER_OPEN) {
                        let Some(end) = rest.find('>') else {
                            if rest.contains(['<', '\n']) || rest.len() > MAX_NAME {
                                return self.close(pending, 0, fragment);
                            }
                            return Step::NeedMore;
                        };
                        let name = rest[..end].trim();
                        if name.is_empty() || name.contains(['<', '\n']) {
                            return self.close(pending, 0, fragment);
                        }
                        fragment.push(if self.n_args == 0 { '{' } else { ',' });
                        fragment.push_str(&Value::String(name.to_owned()).to_string());
                        fragment.push(':');
                        self.n_args += 1;
                        self.kinds = params.get(&self.function, name);
                        pending.drain(..skipped + PARAMETER_OPEN.len() + end + 1);
                        self.phase = Phase::ValueStart;
                        continue;
                    }
                    if let Some(at) = [FUNCTION_CLOSE, CALL_CLOSE]
                        .iter()
                        .find(|tag| body.starts_with(*tag))
                        .map(|tag| skipped + if *tag == FUNCTION_CLOSE { tag.len() } else { 0 })
                    {
                        return self.close(pending, at, fragment);
                    }
                    let could_be = [PARAMETER_OPEN, FUNCTION_CLOSE, CALL_CLOSE]
                        .iter()
                        .any(|tag| tag.starts_with(body));
                    if could_be {
                        return Step::NeedMore;
                    }
                    // Not a parameter: the arguments end here and the rest is dropped.
                    return self.close(pending, 0, fragment);
                }
                Phase::ValueStart => {
                    if pending.is_empty() {
                        return Step::NeedMore;
                    }
                    if pending.starts_with('\n') {
                        pending.drain(..1);
                    } else if pending == "\r" {
                        return Step::NeedMore;
                    } else if pending.starts_with("\r\n") {
                        pending.drain(..2);
                    }
                    if self.kinds.string_only() {
                        fragment.push('"');
                        self.phase = Phase::StringValue;
                    } else {
                        self.value.clear();
                        self.phase = Phase::TypedValue;
                    }
                }
                Phase::StringValue | Phase::TypedValue => {
                    let (text, complete) = value_text(pending);
                    if self.phase == Phase::StringValue {
                        escape_into(fragment, &text);
                    } else {
                        self.value.push_str(&text);
                    }
                    if !complete {
                        return Step::NeedMore;
                    }
                    if self.phase == Phase::StringValue {
                        fragment.push('"');
                    } else {
                        let value = std::mem::take(&mut self.value);
                        fragment.push_str(&typed(&value, self.kinds));
                    }
                    self.phase = Phase::Between;
                }
            }
        }
    }

    /// Ends the arguments object (dropping `drop` bytes of `pending`).
    fn close(&mut self, pending: &mut String, drop: usize, fragment: &mut String) -> Step {
        pending.drain(..drop);
        fragment.push_str(if self.n_args == 0 { "{}" } else { "}" });
        Step::Done
    }
}

/// Takes the value text at the start of `pending` up to `</parameter>` (without the one line
/// break before it): the text that is certainly value, and whether the close was reached. A tail
/// that may be the start of `\n</parameter>` is left in `pending`.
fn value_text(pending: &mut String) -> (String, bool) {
    if let Some(at) = pending.find(PARAMETER_CLOSE) {
        let mut end = at;
        if pending[..end].ends_with('\n') {
            end -= 1;
            if pending[..end].ends_with('\r') {
                end -= 1;
            }
        }
        let text = pending[..end].to_owned();
        pending.drain(..at + PARAMETER_CLOSE.len());
        return (text, true);
    }
    let keep = partial_suffix(pending, "\r\n</parameter>")
        .max(partial_suffix(pending, "\n</parameter>"))
        .max(partial_suffix(pending, PARAMETER_CLOSE));
    let cut = pending.len() - keep;
    (pending.drain(..cut).collect(), false)
}

/// `text` as JSON string content (without quotes); per character, so pieces escape the same as
/// the whole.
fn escape_into(out: &mut String, text: &str) {
    let quoted = Value::String(text.to_owned()).to_string();
    out.push_str(&quoted[1..quoted.len() - 1]);
}

/// A complete non-string-only value: JSON when it parses as a non-string of an allowed type.
fn typed(value: &str, kinds: Kinds) -> String {
    match serde_json::from_str::<Value>(value.trim()) {
        Ok(v) if !v.is_string() && kinds.allows(&v) => v.to_string(),
        _ => Value::String(value.to_owned()).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::{ToolCallParser, ToolCallStyle, ToolEvent};
    use super::*;

    fn tools() -> Vec<Value> {
        vec![
            json!({"type": "function", "function": {"name": "get_weather", "parameters": {
                "type": "object", "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "unit": {"enum": ["celsius", "fahrenheit"]},
                    "where": {"type": "object"},
                    "note": {"type": ["string", "null"]}}}}}),
            json!({"type": "function", "function": {"name": "now"}}),
        ]
    }

    /// Content and (name, arguments) per call, from `pieces` pushed one after another.
    fn parse(pieces: &[&str], parallel: bool) -> (String, Vec<(String, String)>) {
        let style = ToolCallStyle::Xml(ParameterKinds::of_tools(&tools()));
        let mut p = ToolCallParser::new(style, parallel);
        let mut events = Vec::new();
        for piece in pieces {
            events.extend(p.push(piece));
        }
        events.extend(p.finish());
        let mut content = String::new();
        let mut calls: Vec<(String, String)> = Vec::new();
        for e in events {
            match e {
                ToolEvent::Content(c) => content.push_str(&c),
                ToolEvent::CallStart { index, name } => {
                    assert_eq!(index, calls.len());
                    calls.push((name, String::new()));
                }
                ToolEvent::Arguments { index, fragment } => calls[index].1.push_str(&fragment),
            }
        }
        (content, calls)
    }

    /// Every split of `text` in two, and pieces of every length 1..=7, give the whole's result.
    fn same_however_split(text: &str, parallel: bool) -> (String, Vec<(String, String)>) {
        let whole = parse(&[text], parallel);
        for cut in (0..=text.len()).filter(|&c| text.is_char_boundary(c)) {
            assert_eq!(
                parse(&[&text[..cut], &text[cut..]], parallel),
                whole,
                "cut at {cut}"
            );
        }
        for step in 1..=7 {
            let mut pieces = Vec::new();
            let mut rest = text;
            while !rest.is_empty() {
                let mut n = step.min(rest.len());
                while !rest.is_char_boundary(n) {
                    n += 1;
                }
                pieces.push(&rest[..n]);
                rest = &rest[n..];
            }
            assert_eq!(parse(&pieces, parallel), whole, "pieces of {step}");
        }
        whole
    }

    #[test]
    fn xml_calls_become_typed_json_arguments_however_the_text_is_split() {
        let text = "I will check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSão \"Paulo\"\n</parameter>\n\
            <parameter=days>\n3\n</parameter>\n<parameter=unit>\ncelsius\n</parameter>\n\
            <parameter=where>\n{\"lat\": -23.5, \"tags\": [\"a\"]}\n</parameter>\n\
            <parameter=note>\nnull\n</parameter>\n<parameter=extra>\nline one\nline </param two\n</parameter>\n\
            </function>\n</tool_call>\n<tool_call>\n<function=now>\n</function>\n</tool_call>";
        let (content, calls) = same_however_split(text, true);
        assert_eq!(content, "I will check.");
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].0, "get_weather");
        assert_eq!(
            calls[0].1,
            r#"{"city":"São \"Paulo\"","days":3,"unit":"celsius","where":{"lat":-23.5,"tags":["a"]},"note":null,"extra":"line one\nline </param two"}"#
        );
        let parsed: Value = serde_json::from_str(&calls[0].1).expect("arguments are JSON");
        assert_eq!(parsed["extra"], "line one\nline </param two");
        assert_eq!(calls[1], ("now".to_owned(), "{}".to_owned()));
        // Without parallel calls only the first is kept.
        assert_eq!(same_however_split(text, false).1, calls[..1].to_vec());
    }

    #[test]
    fn string_parameters_stay_text_and_typed_ones_fall_back_to_text() {
        let text = "<tool_call>\n<function=get_weather>\n<parameter=city>\n42\n</parameter>\n\
            <parameter=days>\nthree\n</parameter>\n<parameter=note>\n7\n</parameter>\n</function>\n</tool_call>";
        let (content, calls) = same_however_split(text, true);
        assert_eq!(content, "");
        assert_eq!(calls[0].1, r#"{"city":"42","days":"three","note":"7"}"#);
    }

    #[test]
    fn broken_blocks_stay_text_and_cut_off_calls_keep_what_was_announced() {
        let not_a_call = "a <tool_call>\n<func>\n</tool_call> b";
        assert_eq!(
            same_however_split(not_a_call, true),
            (not_a_call.to_owned(), vec![])
        );
        let cut_in_name = "x <tool_call>\n<function=get_wea";
        assert_eq!(
            same_however_split(cut_in_name, true),
            (cut_in_name.to_owned(), vec![])
        );
        let cut_in_value = "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar";
        assert_eq!(
            same_however_split(cut_in_value, true).1,
            vec![("get_weather".to_owned(), r#"{"city":"Par"#.to_owned())]
        );
        // Text where a parameter should be ends the arguments; it is not content.
        let stray = "<tool_call>\n<function=now>\nhello\n</tool_call>\nbye";
        assert_eq!(
            same_however_split(stray, true),
            (
                "\nbye".to_owned(),
                vec![("now".to_owned(), "{}".to_owned())]
            )
        );
    }

    #[test]
    fn schema_types_decide_how_values_are_read() {
        assert!(Kinds::of_schema(&json!({"type": "string", "maxLength": 3})).string_only());
        assert!(Kinds::of_schema(&json!({"enum": ["a", "b"]})).string_only());
        assert!(!Kinds::of_schema(&json!({"type": ["string", "null"]})).string_only());
        assert!(!Kinds::of_schema(&json!({})).string_only());
        assert_eq!(
            typed("42", Kinds::of_schema(&json!({"type": "integer"}))),
            "42"
        );
        assert_eq!(
            typed(
                " {\"a\": [1, true]} ",
                Kinds::of_schema(&json!({"type": "object"}))
            ),
            "{\"a\":[1,true]}"
        );
        // Not JSON, a JSON string, or a type the schema does not allow: kept as text.
        assert_eq!(typed("4 2", Kinds::ANY), "\"4 2\"");
        assert_eq!(typed("\"q\"", Kinds::ANY), "\"\\\"q\\\"\"");
        assert_eq!(
            typed(
                "true",
                Kinds::of_schema(&json!({"type": ["string", "number"]}))
            ),
            "\"true\""
        );
        assert_eq!(
            typed(
                "null",
                Kinds::of_schema(&json!({"anyOf": [{"type": "string"}, {"type": "null"}]}))
            ),
            "null"
        );
    }

    #[test]
    fn function_open_needs_a_whole_name() {
        assert!(matches!(scan_function_open("\n<func"), Header::NeedMore));
        assert!(matches!(
            scan_function_open("\n<function=get_w"),
            Header::NeedMore
        ));
        assert!(matches!(scan_function_open("{\"name\""), Header::NoMatch));
        assert!(matches!(
            scan_function_open("<function=a\nb>"),
            Header::NoMatch
        ));
        match scan_function_open("\n<function=get_weather>\n<parameter") {
            Header::Complete { name, consumed } => {
                assert_eq!(name, "get_weather");
                assert_eq!(consumed, "\n<function=get_weather>".len());
            }
            _ => panic!("a complete name"),
        }
    }
}
