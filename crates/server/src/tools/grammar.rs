//! The grammar that forces an answer to call tools (`tool_choice: "required"` or a named
//! function): each call's JSON held to the declared function's parameter schema, token by token.

use oxibonsai_engine::Grammar;
use serde_json::{json, Map, Value};

use super::parse::Kinds;
use super::{function_name, ToolCallFormat, ToolChoice, ToolRequest};

/// Where the generation starts relative to a `<think>` block, read off the rendered prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThinkStart {
    /// The model has no `<think>` tags, or the prompt closed an (empty) block already.
    None,
    /// The model may open a block first.
    Optional,
    /// The prompt opened the block: the output starts inside it.
    Inside,
}

/// The grammar of an answer that must call tools (`required` / a named function): an optional
/// reasoning block as the prompt allows, then one call (or, with `parallel`, one or more), each
/// in the template's [`ToolCallFormat`] and held to the declared function's parameters, and
/// nothing after. JSON: `<tool_call>` + `{"name": <declared name>, "arguments": <its
/// parameters>}` + `</tool_call>`. XML: `<tool_call>\n<function=NAME>\n`, each parameter as
/// `<parameter=ARG>\nVALUE\n</parameter>\n` (the required ones, then any optional ones, in
/// declaration order), `</function>\n</tool_call>`.
pub fn forced_call_grammar(
    t: &ToolRequest,
    think: ThinkStart,
    format: ToolCallFormat,
) -> Option<Grammar> {
    let allowed: Vec<&Value> = match &t.choice {
        ToolChoice::Auto => return None,
        ToolChoice::Required => t.tools.iter().collect(),
        ToolChoice::Named(name) => t
            .tools
            .iter()
            .filter(|tool| function_name(tool) == Some(name.as_str()))
            .collect(),
    };
    // The reasoning cannot hold what ends it for the parser: `</think>`, and for the XML format
    // also `<tool_call>` (see `ThinkSplitter::tool_call_ends_reasoning`).
    let (call_rules, think_end) = match format {
        ToolCallFormat::Json => (json_call_rule(&allowed), "<\\/think>"),
        ToolCallFormat::Xml => (xml_call_rules(&allowed), "(<\\/think>|<tool_call>)"),
    };
    let calls = if t.parallel && t.choice == ToolChoice::Required {
        "call (NL? call)*"
    } else {
        "call"
    };
    let start = match think {
        ThinkStart::None => format!("start: NL? {calls} NL?"),
        ThinkStart::Optional => format!("start: (THINK NL?)? NL? {calls} NL?"),
        ThinkStart::Inside => format!("start: THINK_REST NL? {calls} NL?"),
    };
    Some(Grammar::Lark(format!(
        "{start}\n\
         {call_rules}\
         NL: /[ \\n]{{1,3}}/\n\
         THINK: \"<think>\" THINK_BODY \"</think>\"\n\
         THINK_REST: THINK_BODY \"</think>\"\n\
         THINK_BODY: /(?s:.*)/ & ~/(?s:.*){think_end}(?s:.*)/\n"
    )))
}

/// `call`: the JSON form, one schema for the whole `{"name", "arguments"}` object.
fn json_call_rule(allowed: &[&Value]) -> String {
    let mut defs = Map::new();
    let variants: Vec<Value> = allowed
        .iter()
        .enumerate()
        .map(|(i, tool)| {
            let name = function_name(tool).unwrap_or_default();
            let mut params = parameters_of(tool);
            hoist_definitions(&mut params, &format!("tool{i}_"), &mut defs);
            json!({
                "type": "object",
                "properties": {"name": {"const": name}, "arguments": params},
                "required": ["name", "arguments"],
                "additionalProperties": false,
            })
        })
        .collect();
    let mut schema = json!({"anyOf": variants});
    if !defs.is_empty() {
        schema["$defs"] = Value::Object(defs);
    }
    schema["x-guidance"] = whitespace();
    format!("call: \"<tool_call>\" NL? %json {schema} NL? \"</tool_call>\"\n")
}

/// `call` and one rule per allowed function: the XML form. A string-only parameter is free text
/// (an enum: one of its values; `maxLength` / `minLength` bound it) that cannot hold
/// `</parameter>`; any other parameter is JSON held to its schema (with the parameters'
/// `$defs`), which the parser reads back as typed JSON.
fn xml_call_rules(allowed: &[&Value]) -> String {
    let mut rules = String::new();
    let mut alternatives = Vec::new();
    for (i, tool) in allowed.iter().enumerate() {
        let name = function_name(tool).unwrap_or_default();
        let params = parameters_of(tool);
        let definitions: Vec<(&str, &Value)> = ["$defs", "definitions"]
            .into_iter()
            .filter_map(|k| params.get(k).map(|d| (k, d)))
            .collect();
        let required: Vec<&str> = params
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut body = Vec::new();
        let properties = params.get("properties").and_then(Value::as_object);
        for pass_required in [true, false] {
            for (p, (arg, schema)) in properties.into_iter().flatten().enumerate() {
                if required.contains(&arg.as_str()) != pass_required {
                    continue;
                }
                let open = lark_literal(&format!("<parameter={arg}>\n"));
                let item = xml_parameter(
                    &format!("tool{i}_arg{p}"),
                    &open,
                    schema,
                    &definitions,
                    &mut rules,
                );
                body.push(if pass_required {
                    item
                } else {
                    format!("{item}?")
                });
            }
        }
        rules.push_str(&format!(
            "tool{i}: {} {} \"</function>\\n</tool_call>\"\n",
            lark_literal(&format!("<tool_call>\n<function={name}>\n")),
            body.join(" ")
        ));
        alternatives.push(format!("tool{i}"));
    }
    rules.push_str(&format!("call: {}\n", alternatives.join(" | ")));
    rules
}

/// The rule (JSON values) or terminal (text) of one parameter, `open` + value +
/// `\n</parameter>\n`, added to `rules`; returns its name. Text is one terminal from the open
/// tag to the close tag, so the lexer never has to guess where free text ends.
fn xml_parameter(
    name: &str,
    open: &str,
    schema: &Value,
    definitions: &[(&str, &Value)],
    rules: &mut String,
) -> String {
    const CLOSE: &str = "\"\\n</parameter>\\n\"";
    if !Kinds::of_schema(schema).string_only() {
        let mut schema = schema.clone();
        if let Some(obj) = schema.as_object_mut() {
            for (key, defs) in definitions {
                obj.insert((*key).to_owned(), (*defs).clone());
            }
            obj.insert("x-guidance".into(), whitespace());
        }
        rules.push_str(&format!("{name}: {open} %json {schema} {CLOSE}\n"));
        return name.to_owned();
    }
    let terminal = name.to_uppercase();
    let fixed = match (schema.get("enum"), schema.get("const")) {
        (Some(Value::Array(values)), _) => Some(values.iter().collect::<Vec<_>>()),
        (_, Some(value)) => Some(vec![value]),
        _ => None,
    };
    let value = match fixed {
        Some(values) => {
            let literals: Vec<String> = values
                .into_iter()
                .filter_map(Value::as_str)
                .map(lark_literal)
                .collect();
            format!("({})", literals.join(" | "))
        }
        None => {
            let bound = |key: &str| schema.get(key).and_then(Value::as_u64);
            let repeat = match (bound("minLength"), bound("maxLength")) {
                (None, None) => "*".to_owned(),
                (min, None) => format!("{{{},}}", min.unwrap_or(0)),
                (min, Some(max)) => format!("{{{},{max}}}", min.unwrap_or(0)),
            };
            rules.push_str(&format!(
                "{terminal}_TEXT: /(?s:.{repeat})/ & ~/(?s:.*)<\\/parameter>(?s:.*)/\n"
            ));
            format!("{terminal}_TEXT")
        }
    };
    rules.push_str(&format!("{terminal}: {open} {value} {CLOSE}\n"));
    terminal
}

/// A Lark string literal (JSON's escapes are Lark's).
fn lark_literal(text: &str) -> String {
    Value::String(text.to_owned()).to_string()
}

fn parameters_of(tool: &Value) -> Value {
    tool.get("function")
        .and_then(|f| f.get("parameters"))
        .filter(|p| p.is_object())
        .cloned()
        .unwrap_or_else(|| json!({"type": "object"}))
}

fn whitespace() -> Value {
    json!({"whitespace_pattern": oxibonsai_engine::constraint::JSON_WHITESPACE})
}

/// Moves a parameters schema's `$defs` / `definitions` to the root of the call schema under
/// `prefix`-ed names and rewrites its `$ref`s to match, so references still resolve once the
/// schema is nested inside the call object.
fn hoist_definitions(schema: &mut Value, prefix: &str, defs: &mut Map<String, Value>) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    let mut moved = Vec::new();
    for key in ["$defs", "definitions"] {
        if let Some(Value::Object(d)) = obj.remove(key) {
            moved.push((key, d));
        }
    }
    rewrite_refs(schema, prefix);
    for (_, d) in moved {
        for (name, mut def) in d {
            rewrite_refs(&mut def, prefix);
            defs.insert(format!("{prefix}{name}"), def);
        }
    }
}

fn rewrite_refs(v: &mut Value, prefix: &str) {
    match v {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                if key == "$ref" {
                    if let Value::String(r) = value {
                        for root in ["#/$defs/", "#/definitions/"] {
                            if let Some(name) = r.strip_prefix(root) {
                                *r = format!("#/$defs/{prefix}{name}");
                                break;
                            }
                        }
                        if r == "#" {
                            // A recursive reference to the parameters themselves cannot be kept.
                            *value = json!({"type": "object"});
                        }
                    }
                } else {
                    rewrite_refs(value, prefix);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| rewrite_refs(i, prefix)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definitions_move_to_the_root_and_references_follow() {
        let mut params = json!({
            "type": "object",
            "properties": {"p": {"$ref": "#/$defs/Point"}, "q": {"$ref": "#/definitions/Q"}},
            "$defs": {"Point": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Point"}}}},
            "definitions": {"Q": {"type": "integer"}},
        });
        let mut defs = Map::new();
        hoist_definitions(&mut params, "tool3_", &mut defs);
        assert_eq!(params["properties"]["p"]["$ref"], "#/$defs/tool3_Point");
        assert_eq!(params["properties"]["q"]["$ref"], "#/$defs/tool3_Q");
        assert!(params.get("$defs").is_none() && params.get("definitions").is_none());
        assert_eq!(
            defs["tool3_Point"]["properties"]["next"]["$ref"],
            "#/$defs/tool3_Point"
        );
        assert_eq!(defs["tool3_Q"], json!({"type": "integer"}));
    }
}

/// The forcing grammar, in both call formats, against the full Qwen3 vocabulary (where
/// `<tool_call>` is one token), with random logits standing in for a model: whatever is sampled,
/// the answer parses into calls
/// to declared tools whose arguments validate against their schemas. Also prints the mask's cost
/// per token (never asserted).
#[cfg(test)]
mod grammar_tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use oxibonsai_engine::sampling::{Sampler, SamplingParams};
    use oxibonsai_engine::{Constraint, ConstraintVocab};
    use oxibonsai_gguf::GgufFile;
    use oxibonsai_tokenizer::Tokenizer;
    use serde_json::{json, Value};

    use super::*;
    use crate::tools::parse::ToolEvent;

    fn tools() -> Vec<Value> {
        vec![
            json!({"type": "function", "function": {"name": "get_weather", "parameters": {
                "type": "object", "properties": {
                    "city": {"type": "string", "maxLength": 12},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                "required": ["city", "unit"], "additionalProperties": false}}}),
            json!({"type": "function", "function": {"name": "plot", "parameters": {
                "type": "object", "$defs": {"P": {"type": "object", "properties": {
                    "x": {"type": "integer", "minimum": -9, "maximum": 9}},
                    "required": ["x"], "additionalProperties": false}},
                "properties": {"points": {"type": "array", "items": {"$ref": "#/$defs/P"},
                    "minItems": 1, "maxItems": 3}},
                "required": ["points"], "additionalProperties": false}}}),
            json!({"type": "function", "function": {"name": "now"}}),
        ]
    }

    /// Random logits standing in for a model (one xorshift stream across every answer), nudged
    /// the way a model that knows the format would be.
    struct FakeModel<'t> {
        tokenizer: &'t Tokenizer,
        tool_call: u32,
        state: u64,
    }

    impl FakeModel<'_> {
        fn logits(&mut self, logits: &mut [f32], tokens: &[u32], step: usize, think: ThinkStart) {
            let state = &mut self.state;
            for l in logits.iter_mut() {
                *state ^= *state << 13;
                *state ^= *state >> 7;
                *state ^= *state << 17;
                *l = (*state >> 40) as f32 / (1u64 << 24) as f32 * 10.0 - 5.0;
            }
            let tokenizer = self.tokenizer;
            // A model that knows the format prefers `<tool_call>` as one token, and a thinking
            // model closes its block soon.
            let between_calls = tokens.last().is_none_or(|&last| {
                let piece = tokenizer.token_to_piece(last, false).unwrap_or_default();
                let piece = String::from_utf8_lossy(piece);
                piece.contains("</tool_call>") || piece.trim().is_empty()
            });
            if between_calls {
                logits[self.tool_call as usize] += 12.0;
            }
            if step > 20 && think == ThinkStart::Inside {
                if let Some(end) = tokenizer.token_id("</think>") {
                    logits[end as usize] += 12.0;
                }
            }
            // With parallel calls allowed, a model stops calling by choosing to end.
            if step > 150 {
                for &eog in tokenizer.eog_ids() {
                    logits[eog as usize] += 12.0;
                }
            }
        }
    }

    /// Samples an answer under `constraint` until an end token: the tokens, and whether it
    /// ended within 600. Each mask's time goes into `times`.
    fn sample_answer(
        model: &mut FakeModel<'_>,
        constraint: &mut Constraint,
        sampler: &mut Sampler,
        think: ThinkStart,
        times: &mut Vec<Duration>,
    ) -> (Vec<u32>, bool) {
        let tokenizer = model.tokenizer;
        let mut logits = vec![0.0f32; tokenizer.vocab_size()];
        let mut tokens = Vec::new();
        for step in 0..600 {
            model.logits(&mut logits, &tokens, step, think);
            let t = Instant::now();
            constraint.mask(&mut logits).expect("mask");
            times.push(t.elapsed());
            let token = sampler.sample(&logits).expect("sample");
            if tokenizer.is_eog(token) {
                return (tokens, true);
            }
            constraint.accept(token).expect("accept");
            tokens.push(token);
        }
        (tokens, false)
    }

    /// The calls (name, arguments text) in an answer; any text outside them fails the test.
    fn parse_calls(content: &str, format: ToolCallFormat, what: &str) -> Vec<(String, String)> {
        let request = ToolRequest {
            tools: tools(),
            choice: ToolChoice::Auto,
            parallel: true,
        };
        let mut parser = request.parser(format);
        let mut events = parser.push(content);
        events.extend(parser.finish());
        let mut calls: Vec<(String, String)> = Vec::new();
        for e in events {
            match e {
                ToolEvent::Content(c) => panic!("text {c:?} outside calls: {what}"),
                ToolEvent::CallStart { name, .. } => calls.push((name, String::new())),
                ToolEvent::Arguments { index, fragment } => calls[index].1.push_str(&fragment),
            }
        }
        calls
    }

    /// Each call is to a declared tool (the named one, if one is), with arguments valid against
    /// its schema.
    fn check_call(name: &str, arguments: &str, choice: &ToolChoice, what: &str) {
        if let ToolChoice::Named(n) = choice {
            assert_eq!(name, n, "{what}");
        }
        let tool = tools()
            .into_iter()
            .find(|t| function_name(t) == Some(name))
            .unwrap_or_else(|| panic!("undeclared tool {name}: {what}"));
        let schema = tool["function"]
            .get("parameters")
            .cloned()
            .unwrap_or(json!({"type": "object"}));
        let args: Value = serde_json::from_str(arguments)
            .unwrap_or_else(|e| panic!("arguments {arguments:?}: {e}: {what}"));
        let validator = jsonschema::validator_for(&schema).expect("schema");
        assert!(validator.is_valid(&args), "{args} invalid: {what}");
    }

    #[test]
    fn forced_calls_are_valid_whatever_is_sampled() {
        let file = GgufFile::open(oxibonsai_testkit::golden(
            "tokenizer/qwen3/qwen3-vocab.gguf",
        ))
        .expect("the Qwen3 vocabulary");
        let tokenizer = Arc::new(Tokenizer::from_gguf(&file).expect("tokenizer"));
        let vocab = ConstraintVocab::new(Arc::clone(&tokenizer)).expect("vocabulary");
        let n_vocab = tokenizer.vocab_size();
        let tool_call = tokenizer
            .token_id("<tool_call>")
            .expect("<tool_call> is a token");
        let mut model = FakeModel {
            tokenizer: &tokenizer,
            tool_call,
            state: 0x9e37_79b9_7f4a_7c15u64,
        };
        let mut times: Vec<Duration> = Vec::new();
        let mut single_token_opens = 0;
        for (case, (choice, parallel, think, format)) in [
            (
                ToolChoice::Required,
                false,
                ThinkStart::None,
                ToolCallFormat::Json,
            ),
            (
                ToolChoice::Required,
                true,
                ThinkStart::None,
                ToolCallFormat::Json,
            ),
            (
                ToolChoice::Named("plot".into()),
                true,
                ThinkStart::None,
                ToolCallFormat::Json,
            ),
            (
                ToolChoice::Required,
                false,
                ThinkStart::Inside,
                ToolCallFormat::Json,
            ),
            (
                ToolChoice::Required,
                true,
                ThinkStart::None,
                ToolCallFormat::Xml,
            ),
            (
                ToolChoice::Named("plot".into()),
                true,
                ThinkStart::None,
                ToolCallFormat::Xml,
            ),
            (
                ToolChoice::Required,
                false,
                ThinkStart::Inside,
                ToolCallFormat::Xml,
            ),
        ]
        .into_iter()
        .enumerate()
        {
            let request = ToolRequest {
                tools: tools(),
                choice: choice.clone(),
                parallel,
            };
            let grammar = forced_call_grammar(&request, think, format).expect("a grammar");
            for seed in 0..3u64 {
                let mut constraint = Constraint::new(&vocab, &grammar).expect("compiles");
                let params = SamplingParams {
                    temperature: 1.0,
                    seed: Some(seed),
                    ..SamplingParams::default()
                };
                let mut sampler = Sampler::new(params, n_vocab).expect("sampler");
                let (tokens, ended) =
                    sample_answer(&mut model, &mut constraint, &mut sampler, think, &mut times);
                let text = tokenizer.decode(&tokens, false).expect("decode");
                let what = format!("case {case}, seed {seed}: {text:?}");
                assert!(ended, "no end in 600 tokens: {what}");
                single_token_opens += tokens.iter().filter(|&&t| t == tool_call).count();
                let content = if think == ThinkStart::Inside {
                    let end = text.find("</think>").expect("the block closes");
                    &text[end + "</think>".len()..]
                } else {
                    &text[..]
                };
                if format == ToolCallFormat::Xml {
                    assert!(content.contains("<function="), "not XML: {what}");
                }
                let calls = parse_calls(content, format, &what);
                assert!(!calls.is_empty(), "no call: {what}");
                if !parallel || matches!(choice, ToolChoice::Named(_)) {
                    assert_eq!(calls.len(), 1, "{what}");
                }
                for (name, arguments) in calls {
                    check_call(&name, &arguments, &choice, &what);
                }
            }
        }
        assert!(
            single_token_opens > 0,
            "the one-token <tool_call> was never allowed"
        );
        times.sort_unstable();
        println!(
            "tool-call grammar mask on {n_vocab} tokens: median {:?}, p95 {:?}, max {:?} over {} steps",
            times[times.len() / 2],
            times[times.len() * 95 / 100],
            times[times.len() - 1],
            times.len()
        );
    }
}
