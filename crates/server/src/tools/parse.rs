//! Tool calling, the response side: reads `<tool_call>…</tool_call>` blocks out of the answer
//! text as it streams, into OpenAI's `tool_calls`. A block's body comes in one of two styles
//! ([`ToolCallStyle`]): JSON, `{"name": …, "arguments": {…}}` (Qwen2.5 / Qwen3 / Hermes), whose
//! `arguments` are the model's own JSON text byte for byte; or XML, `<function=NAME>` with
//! `<parameter=ARG>` values (Qwen3-Coder / Qwen3.5, see [`xml`]), whose `arguments` JSON is built
//! from the values as they come. One incremental parser serves both the streamed and the whole
//! answer (the whole answer is one push), so a streamed call and a non-streamed one are the same
//! by construction: the call is announced (index, name) as soon as its name is complete, and its
//! `arguments` follow in fragments as they are generated.

mod xml;

pub use xml::{Kinds, ParameterKinds};
use xml::{Step, XmlArguments};

/// How the model writes a call inside `<tool_call>…</tool_call>`.
#[derive(Debug, Clone)]
pub enum ToolCallStyle {
    /// `{"name": …, "arguments": {…}}`.
    Json,
    /// `<function=NAME>` `<parameter=ARG>`…; values are typed by the declared parameters.
    Xml(ParameterKinds),
}

/// What the answer text turned into, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolEvent {
    Content(String),
    /// A call begins: `index` counts the answer's calls from 0.
    CallStart {
        index: usize,
        name: String,
    },
    /// More of call `index`'s `arguments` string.
    Arguments {
        index: usize,
        fragment: String,
    },
}

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Ordinary answer text.
    Text,
    /// After `<tool_call>`, before the arguments value: `{"name": "…", "arguments": `.
    Header,
    /// Inside the arguments value.
    Arguments(ValueScan),
    /// Inside an XML call's parameters (the scan is `ToolCallParser::xml`).
    XmlArguments,
    /// After the value, until `</tool_call>`.
    Tail,
    /// A block that is not in the expected order: held whole until `</tool_call>`.
    Opaque,
    /// A call beyond the first when parallel calls are off: dropped until `</tool_call>`.
    Skip,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct ValueScan {
    started: bool,
    /// The value is a JSON string holding the arguments (some models quote them).
    quoted: bool,
    depth: u32,
    in_string: bool,
    escape: bool,
}

#[derive(Debug)]
pub struct ToolCallParser {
    style: ToolCallStyle,
    parallel: bool,
    state: State,
    /// Text received and not yet classified.
    pending: String,
    /// Whitespace at the end of content, held until more content follows (dropped before a
    /// call and at the end, so `content` is not a lone newline).
    held_ws: String,
    /// The whitespace held when a block opened: dropped if the block is a call, given back if
    /// it turns out to be text.
    block_ws: String,
    /// Calls announced so far.
    calls: usize,
    /// The quoted form of the current call's arguments, decoded once complete.
    quoted: String,
    /// The current XML call's arguments scan.
    xml: Option<XmlArguments>,
    dropped: usize,
}

impl ToolCallParser {
    pub fn new(style: ToolCallStyle, parallel: bool) -> ToolCallParser {
        ToolCallParser {
            style,
            parallel,
            state: State::Text,
            pending: String::new(),
            held_ws: String::new(),
            block_ws: String::new(),
            calls: 0,
            quoted: String::new(),
            xml: None,
            dropped: 0,
        }
    }

    /// Calls announced so far (complete or not).
    #[cfg(test)]
    pub fn calls(&self) -> usize {
        self.calls
    }

    /// Calls the model made past the first with `parallel_tool_calls: false` (not returned).
    pub fn dropped(&self) -> usize {
        self.dropped
    }

    pub fn push(&mut self, text: &str) -> Vec<ToolEvent> {
        self.pending.push_str(text);
        let mut out = Vec::new();
        loop {
            let before = (self.state, self.pending.len());
            match self.state {
                State::Text => self.text(&mut out),
                State::Header => self.header(&mut out),
                State::Arguments(scan) => self.arguments(scan, &mut out),
                State::XmlArguments => self.xml_arguments(&mut out),
                State::Tail | State::Skip => self.until_close(),
                State::Opaque => self.opaque(&mut out),
            }
            if (self.state, self.pending.len()) == before {
                return merge(out);
            }
        }
    }

    /// The answer is over: what is still held is flushed. A block cut off before its name was
    /// complete stays text; a call cut off inside its arguments keeps what was announced.
    pub fn finish(&mut self) -> Vec<ToolEvent> {
        let mut out = Vec::new();
        let rest = std::mem::take(&mut self.pending);
        match self.state {
            State::Text => self.content(&rest, &mut out),
            State::Header | State::Opaque => {
                self.held_ws = std::mem::take(&mut self.block_ws);
                self.content(&format!("{OPEN}{rest}"), &mut out)
            }
            State::Arguments(_) | State::XmlArguments | State::Tail | State::Skip => {}
        }
        self.held_ws.clear();
        self.state = State::Text;
        merge(out)
    }

    fn content(&mut self, text: &str, out: &mut Vec<ToolEvent>) {
        let body = text.trim_end();
        if body.is_empty() {
            self.held_ws.push_str(text);
            return;
        }
        let mut s = std::mem::take(&mut self.held_ws);
        s.push_str(body);
        out.push(ToolEvent::Content(s));
        self.held_ws.push_str(&text[body.len()..]);
    }

    fn text(&mut self, out: &mut Vec<ToolEvent>) {
        if let Some(at) = self.pending.find(OPEN) {
            let before = self.pending[..at].to_owned();
            self.content(&before, out);
            self.block_ws = std::mem::take(&mut self.held_ws);
            self.pending.drain(..at + OPEN.len());
            self.state = State::Header;
            return;
        }
        // Keep back a tail that may be the start of `<tool_call>`.
        let keep = partial_suffix(&self.pending, OPEN);
        let cut = self.pending.len() - keep;
        if cut > 0 {
            let done: String = self.pending.drain(..cut).collect();
            self.content(&done, out);
        }
    }

    fn header(&mut self, out: &mut Vec<ToolEvent>) {
        let header = match self.style {
            ToolCallStyle::Json => scan_header(&self.pending),
            ToolCallStyle::Xml(_) => xml::scan_function_open(&self.pending),
        };
        match header {
            Header::NeedMore => {}
            Header::NoMatch => self.state = State::Opaque,
            Header::Complete { name, consumed } => {
                self.pending.drain(..consumed);
                if self.calls > 0 && !self.parallel {
                    self.dropped += 1;
                    self.state = State::Skip;
                    return;
                }
                self.state = match self.style {
                    ToolCallStyle::Json => State::Arguments(ValueScan::default()),
                    ToolCallStyle::Xml(_) => {
                        self.xml = Some(XmlArguments::new(&name));
                        State::XmlArguments
                    }
                };
                out.push(ToolEvent::CallStart {
                    index: self.calls,
                    name,
                });
                self.calls += 1;
                self.quoted.clear();
            }
        }
    }

    fn xml_arguments(&mut self, out: &mut Vec<ToolEvent>) {
        let (Some(scan), ToolCallStyle::Xml(kinds)) = (self.xml.as_mut(), &self.style) else {
            self.state = State::Tail;
            return;
        };
        let mut fragment = String::new();
        let step = scan.step(&mut self.pending, kinds, &mut fragment);
        if !fragment.is_empty() {
            out.push(ToolEvent::Arguments {
                index: self.calls - 1,
                fragment,
            });
        }
        if step == Step::Done {
            self.xml = None;
            self.state = State::Tail;
        }
    }

    fn arguments(&mut self, mut scan: ValueScan, out: &mut Vec<ToolEvent>) {
        let index = self.calls - 1;
        let mut used = 0;
        let mut fragment = String::new();
        let mut done = false;
        for (i, c) in self.pending.char_indices() {
            used = i + c.len_utf8();
            if !scan.started {
                if c.is_whitespace() {
                    continue;
                }
                scan.started = true;
                scan.quoted = c == '"';
            }
            if scan.quoted {
                self.quoted.push(c);
            } else {
                fragment.push(c);
            }
            if scan.in_string {
                if scan.escape {
                    scan.escape = false;
                } else if c == '\\' {
                    scan.escape = true;
                } else if c == '"' {
                    scan.in_string = false;
                    if scan.quoted {
                        done = true;
                    }
                }
            } else {
                match c {
                    '"' => scan.in_string = true,
                    '{' | '[' => scan.depth += 1,
                    '}' | ']' if scan.depth == 0 => {
                        // The delimiter after a bare scalar, not part of it.
                        fragment.pop();
                        done = true;
                    }
                    '}' | ']' => {
                        scan.depth -= 1;
                        done = scan.depth == 0;
                    }
                    _ if scan.depth == 0
                        && !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+')) =>
                    {
                        fragment.pop();
                        done = true;
                    }
                    _ => {}
                }
            }
            if done {
                break;
            }
        }
        if !done {
            used = self.pending.len();
        }
        self.pending.drain(..used);
        if scan.quoted && done {
            let decoded = serde_json::from_str::<String>(&self.quoted)
                .unwrap_or_else(|_| std::mem::take(&mut self.quoted));
            fragment.push_str(&decoded);
        }
        if !fragment.is_empty() {
            out.push(ToolEvent::Arguments { index, fragment });
        }
        self.state = if done {
            State::Tail
        } else {
            State::Arguments(scan)
        };
    }

    fn until_close(&mut self) {
        if let Some(at) = self.pending.find(CLOSE) {
            self.pending.drain(..at + CLOSE.len());
            self.state = State::Text;
        } else {
            let keep = partial_suffix(&self.pending, CLOSE);
            let cut = self.pending.len() - keep;
            self.pending.drain(..cut);
        }
    }

    /// A block in another key order (or not JSON): whole, once closed.
    fn opaque(&mut self, out: &mut Vec<ToolEvent>) {
        let Some(at) = self.pending.find(CLOSE) else {
            return;
        };
        let body: String = self.pending.drain(..at + CLOSE.len()).collect();
        let body = &body[..at];
        self.state = State::Text;
        let parsed = serde_json::from_str::<serde_json::Value>(body.trim())
            .ok()
            .and_then(|v| {
                let name = v.get("name")?.as_str()?.to_owned();
                let arguments = match v.get("arguments") {
                    None | Some(serde_json::Value::Null) => "{}".to_owned(),
                    Some(serde_json::Value::String(s)) => s.clone(),
                    Some(a) => a.to_string(),
                };
                Some((name, arguments))
            });
        match parsed {
            Some(_) if self.calls > 0 && !self.parallel => self.dropped += 1,
            Some((name, fragment)) => {
                out.push(ToolEvent::CallStart {
                    index: self.calls,
                    name,
                });
                out.push(ToolEvent::Arguments {
                    index: self.calls,
                    fragment,
                });
                self.calls += 1;
            }
            None => {
                self.held_ws = std::mem::take(&mut self.block_ws);
                self.content(&format!("{OPEN}{body}{CLOSE}"), out)
            }
        }
    }
}

/// Adjacent events of one kind (and index) joined, so one push gives one delta per kind.
fn merge(events: Vec<ToolEvent>) -> Vec<ToolEvent> {
    let mut out: Vec<ToolEvent> = Vec::with_capacity(events.len());
    for e in events {
        match (out.last_mut(), e) {
            (Some(ToolEvent::Content(a)), ToolEvent::Content(b)) => a.push_str(&b),
            (
                Some(ToolEvent::Arguments { index: i, fragment }),
                ToolEvent::Arguments {
                    index: j,
                    fragment: f,
                },
            ) if *i == j => fragment.push_str(&f),
            (_, e) => out.push(e),
        }
    }
    out
}

/// The length of the longest end of `text` that is a proper start of `marker`.
fn partial_suffix(text: &str, marker: &str) -> usize {
    (1..marker.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && marker.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

enum Header {
    NeedMore,
    NoMatch,
    Complete { name: String, consumed: usize },
}

/// Matches `ws { ws "name" ws : ws "<string>" ws , ws "arguments" ws : ` at the start of `s`.
fn scan_header(s: &str) -> Header {
    let b = s.as_bytes();
    let mut i = 0;
    let skip_ws = |i: &mut usize| {
        while *i < b.len() && matches!(b[*i], b' ' | b'\n' | b'\r' | b'\t') {
            *i += 1;
        }
    };
    // Each literal must match fully, or be cut off by the end of the input.
    let literal = |i: &mut usize, lit: &[u8]| -> Option<bool> {
        let n = lit.len().min(b.len() - *i);
        if b[*i..*i + n] != lit[..n] {
            return Some(false);
        }
        *i += n;
        if n < lit.len() {
            None
        } else {
            Some(true)
        }
    };
    macro_rules! lit {
        ($l:expr) => {
            skip_ws(&mut i);
            match literal(&mut i, $l) {
                Some(true) => {}
                Some(false) => return Header::NoMatch,
                None => return Header::NeedMore,
            }
        };
    }
    lit!(b"{");
    lit!(b"\"name\"");
    lit!(b":");
    skip_ws(&mut i);
    if i == b.len() {
        return Header::NeedMore;
    }
    if b[i] != b'"' {
        return Header::NoMatch;
    }
    let start = i;
    i += 1;
    let mut escape = false;
    loop {
        if i == b.len() {
            return Header::NeedMore;
        }
        match (escape, b[i]) {
            (true, _) => escape = false,
            (false, b'\\') => escape = true,
            (false, b'"') => break,
            _ => {}
        }
        i += 1;
    }
    i += 1;
    let Ok(name) = serde_json::from_str::<String>(&s[start..i]) else {
        return Header::NoMatch;
    };
    lit!(b",");
    lit!(b"\"arguments\"");
    lit!(b":");
    Header::Complete { name, consumed: i }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The events of `text` pushed in pieces of `step` bytes (on character boundaries).
    fn run(text: &str, step: usize, parallel: bool) -> Vec<ToolEvent> {
        run_style(text, step, parallel, ToolCallStyle::Json)
    }

    fn run_style(text: &str, step: usize, parallel: bool, style: ToolCallStyle) -> Vec<ToolEvent> {
        let mut p = ToolCallParser::new(style, parallel);
        let mut events = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            let mut n = step.min(rest.len());
            while !rest.is_char_boundary(n) {
                n += 1;
            }
            events.extend(p.push(&rest[..n]));
            rest = &rest[n..];
        }
        events.extend(p.finish());
        merge(events)
    }

    fn calls(events: &[ToolEvent]) -> (String, Vec<(String, String)>) {
        let mut content = String::new();
        let mut calls: Vec<(String, String)> = Vec::new();
        for e in events {
            match e {
                ToolEvent::Content(c) => content.push_str(c),
                ToolEvent::CallStart { index, name } => {
                    assert_eq!(*index, calls.len());
                    calls.push((name.clone(), String::new()));
                }
                ToolEvent::Arguments { index, fragment } => calls[*index].1.push_str(fragment),
            }
        }
        (content, calls)
    }

    #[test]
    fn calls_come_out_the_same_however_the_text_is_split() {
        let text = "Let me check. \n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris \\\"}\\\" é\", \"days\": [1, {\"x\": 2}]}}\n</tool_call>\n<tool_call>\n{\"name\":\"time\",\"arguments\":{}}\n</tool_call>\n";
        let whole = calls(&run(text, text.len(), true));
        assert_eq!(whole.0, "Let me check.");
        assert_eq!(
            whole.1,
            vec![
                (
                    "get_weather".to_owned(),
                    "{\"city\": \"Paris \\\"}\\\" é\", \"days\": [1, {\"x\": 2}]}".to_owned()
                ),
                ("time".to_owned(), "{}".to_owned()),
            ]
        );
        for step in [1, 2, 3, 5, 7, 11, 64] {
            assert_eq!(calls(&run(text, step, true)), whole, "step {step}");
        }
        // Without parallel calls only the first is kept.
        let single = calls(&run(text, 3, false));
        assert_eq!(single.1, whole.1[..1].to_vec());
    }

    #[test]
    fn arguments_are_announced_before_the_block_closes() {
        let mut p = ToolCallParser::new(ToolCallStyle::Json, true);
        let e = p.push("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1");
        assert_eq!(
            e,
            vec![
                ToolEvent::CallStart {
                    index: 0,
                    name: "f".into()
                },
                ToolEvent::Arguments {
                    index: 0,
                    fragment: "{\"a\": 1".into()
                }
            ]
        );
        assert_eq!(
            p.push("}}</tool_call>"),
            vec![ToolEvent::Arguments {
                index: 0,
                fragment: "}".into()
            }]
        );
        assert_eq!(p.calls(), 1);
    }

    #[test]
    fn text_without_calls_passes_through_and_broken_blocks_stay_text() {
        let plain = "a < b and <tool no call> here";
        assert_eq!(calls(&run(plain, 1, true)), (plain.to_owned(), vec![]));
        let broken = "x <tool_call>not json</tool_call> y";
        assert_eq!(calls(&run(broken, 2, true)).0, broken);
        // Cut off before the name is complete: the text is kept.
        let cut = "hi <tool_call>{\"name\": \"ge";
        assert_eq!(calls(&run(cut, 4, true)), (cut.to_owned(), vec![]));
    }

    #[test]
    fn other_key_orders_and_quoted_arguments_are_read_whole() {
        let text = "<tool_call>{\"arguments\": {\"q\": 1}, \"name\": \"s\"}</tool_call>";
        assert_eq!(
            calls(&run(text, 3, true)).1,
            vec![("s".to_owned(), "{\"q\":1}".to_owned())]
        );
        let quoted = "<tool_call>{\"name\": \"s\", \"arguments\": \"{\\\"q\\\": 1}\"}</tool_call>";
        assert_eq!(
            calls(&run(quoted, 2, true)).1,
            vec![("s".to_owned(), "{\"q\": 1}".to_owned())]
        );
    }
}
