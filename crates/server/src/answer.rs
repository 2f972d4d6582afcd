//! A chat answer's text turned into OpenAI's message parts as it streams: `reasoning_content`
//! (Qwen3's `<think>` block), `content`, and `tool_calls`. Streaming sends each delta as it comes;
//! a non-streamed answer is the same deltas folded into one message, so both give the same result.

use oxibonsai_tokenizer::reasoning::ThinkSplitter;
use serde_json::{json, Map, Value};

#[cfg(test)]
use crate::tools::parse::{ParameterKinds, ToolCallStyle};
use crate::tools::parse::{ToolCallParser, ToolEvent};
use crate::tools::{ThinkStart, ToolCallFormat};

/// Where the answer starts relative to a `<think>` block, read off the rendered prompt (for a
/// vocabulary that `thinks`, i.e. has the tags): the splitter for the answer, and what a forcing
/// grammar of tool calls must allow first. `tools`: the call format when the request has tools
/// (the XML format's calls may end a reasoning block left open, as llama.cpp reads them).
pub fn answer_start(
    prompt_text: &str,
    thinks: bool,
    tools: Option<ToolCallFormat>,
) -> (Option<ThinkSplitter>, ThinkStart) {
    let opened = prompt_text.trim_end();
    let (splitter, think) = if !thinks {
        (None, ThinkStart::None)
    } else if opened.ends_with("<think>") {
        (Some(ThinkSplitter::thinking()), ThinkStart::Inside)
    } else if opened.ends_with("</think>") {
        (Some(ThinkSplitter::default()), ThinkStart::None)
    } else {
        (Some(ThinkSplitter::default()), ThinkStart::Optional)
    };
    match tools {
        Some(ToolCallFormat::Xml) => (splitter.map(ThinkSplitter::tool_call_ends_reasoning), think),
        _ => (splitter, think),
    }
}

pub struct AnswerSplitter {
    think: Option<ThinkSplitter>,
    tools: Option<ToolCallParser>,
    /// Each call's id, by index.
    ids: Vec<String>,
    new_id: fn() -> String,
}

impl AnswerSplitter {
    pub fn new(
        think: Option<ThinkSplitter>,
        tools: Option<ToolCallParser>,
        new_id: fn() -> String,
    ) -> AnswerSplitter {
        AnswerSplitter {
            think,
            tools,
            ids: Vec::new(),
            new_id,
        }
    }

    /// Whether the answer called a tool (then `finish_reason` is `tool_calls`).
    pub fn called(&self) -> bool {
        !self.ids.is_empty()
    }

    /// The deltas for the next piece of text (`last`: the answer is over, flush what is held).
    pub fn push(&mut self, text: &str, last: bool) -> Vec<Value> {
        let (reasoning, content) = match self.think.as_mut() {
            Some(s) => {
                let (mut r, mut c) = s.push(text);
                if last {
                    let (r2, c2) = s.finish();
                    r.push_str(&r2);
                    c.push_str(&c2);
                }
                (r, c)
            }
            None => (String::new(), text.to_owned()),
        };
        let mut out = Vec::new();
        if !reasoning.is_empty() {
            out.push(json!({"reasoning_content": reasoning}));
        }
        let Some(parser) = self.tools.as_mut() else {
            if !content.is_empty() {
                out.push(json!({"content": content}));
            }
            return out;
        };
        let mut events = parser.push(&content);
        if last {
            events.extend(parser.finish());
            if parser.dropped() > 0 {
                tracing::warn!(
                    dropped = parser.dropped(),
                    "parallel_tool_calls is false: calls after the first were not returned"
                );
            }
        }
        for e in events {
            out.push(match e {
                ToolEvent::Content(c) => json!({"content": c}),
                ToolEvent::CallStart { index, name } => {
                    let id = (self.new_id)();
                    self.ids.push(id.clone());
                    json!({"tool_calls": [{
                        "index": index, "id": id, "type": "function",
                        "function": {"name": name, "arguments": ""},
                    }]})
                }
                ToolEvent::Arguments { index, fragment } => {
                    json!({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
                }
            });
        }
        out
    }
}

/// Deltas folded into one assistant message, as a client accumulating a stream would.
pub fn fold(deltas: &[Value]) -> Value {
    let mut reasoning = String::new();
    let mut content = String::new();
    let mut calls: Vec<Value> = Vec::new();
    for d in deltas {
        if let Some(r) = d.get("reasoning_content").and_then(Value::as_str) {
            reasoning.push_str(r);
        }
        if let Some(c) = d.get("content").and_then(Value::as_str) {
            content.push_str(c);
        }
        for call in d
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = call.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
            let fragment = call
                .get("function")
                .and_then(|f| f.get("arguments"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            if index == calls.len() {
                let mut first = call.clone();
                if let Some(obj) = first.as_object_mut() {
                    obj.shift_remove("index");
                }
                calls.push(first);
            } else if let Some(args) = calls
                .get_mut(index)
                .and_then(|c| c.get_mut("function"))
                .and_then(|f| f.get_mut("arguments"))
            {
                *args = Value::String(format!("{}{fragment}", args.as_str().unwrap_or_default()));
            }
        }
    }
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    message.insert(
        "content".into(),
        if content.is_empty() && !calls.is_empty() {
            Value::Null
        } else {
            Value::String(content)
        },
    );
    if !reasoning.is_empty() {
        message.insert("reasoning_content".into(), Value::String(reasoning));
    }
    if !calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    Value::Object(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed_id() -> String {
        "call_x".to_owned()
    }

    #[test]
    fn streamed_deltas_fold_into_the_whole_answer() {
        let text = "<think>\nweather?\n</think>\n\n<tool_call>\n{\"name\": \"w\", \"arguments\": {\"c\": \"P\"}}\n</tool_call>";
        let mut whole = AnswerSplitter::new(
            Some(ThinkSplitter::default()),
            Some(ToolCallParser::new(ToolCallStyle::Json, true)),
            fixed_id,
        );
        let one = fold(&whole.push(text, true));
        assert!(whole.called());
        let mut piecewise = AnswerSplitter::new(
            Some(ThinkSplitter::default()),
            Some(ToolCallParser::new(ToolCallStyle::Json, true)),
            fixed_id,
        );
        let mut deltas = Vec::new();
        let chars: Vec<char> = text.chars().collect();
        for (i, c) in chars.iter().enumerate() {
            deltas.extend(piecewise.push(&c.to_string(), i + 1 == chars.len()));
        }
        assert_eq!(fold(&deltas), one);
        assert_eq!(one["reasoning_content"], "\nweather?\n");
        assert_eq!(one["content"], Value::Null);
        assert_eq!(
            one["tool_calls"],
            json!([{"id": "call_x", "type": "function", "function": {"name": "w", "arguments": "{\"c\": \"P\"}"}}])
        );
    }

    #[test]
    fn an_xml_call_ends_a_reasoning_block_the_prompt_opened() {
        let text = "weather?\n<tool_call>\n<function=w>\n<parameter=c>\nP\n</parameter>\n</function>\n</tool_call>";
        let prompt = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n";
        let splitter = || {
            let (think, start) = answer_start(prompt, true, Some(ToolCallFormat::Xml));
            assert_eq!(start, ThinkStart::Inside);
            let parser = ToolCallParser::new(ToolCallStyle::Xml(ParameterKinds::default()), true);
            AnswerSplitter::new(think, Some(parser), fixed_id)
        };
        let one = fold(&splitter().push(text, true));
        let mut piecewise = splitter();
        let mut deltas = Vec::new();
        let chars: Vec<char> = text.chars().collect();
        for (i, c) in chars.iter().enumerate() {
            deltas.extend(piecewise.push(&c.to_string(), i + 1 == chars.len()));
        }
        assert_eq!(fold(&deltas), one);
        assert_eq!(one["reasoning_content"], "weather?\n");
        assert_eq!(one["content"], Value::Null);
        assert_eq!(
            one["tool_calls"],
            json!([{"id": "call_x", "type": "function", "function": {"name": "w", "arguments": "{\"c\":\"P\"}"}}])
        );
        // With the JSON format the same text stays reasoning: the block was never closed.
        let (think, _) = answer_start(prompt, true, Some(ToolCallFormat::Json));
        let mut json_style = AnswerSplitter::new(
            think,
            Some(ToolCallParser::new(ToolCallStyle::Json, true)),
            fixed_id,
        );
        assert_eq!(
            fold(&json_style.push(text, true))["reasoning_content"],
            text
        );
    }
}
