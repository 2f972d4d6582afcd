//! Reasoning in generated text: Qwen3 and similar models write `<think>…</think>` before the
//! answer. [`ThinkSplitter`] separates the two as text streams in (the server returns them as
//! `reasoning_content` and `content`; `chat` dims or hides the reasoning).

/// Splits generated text into reasoning (`<think>…</think>`, as Qwen3 writes it) and content,
/// incrementally: a tag cut over two pieces is held back until it is complete.
#[derive(Debug, Default, Clone)]
pub struct ThinkSplitter {
    state: ThinkState,
    pending: String,
    /// `<tool_call>` also ends the reasoning (and starts the content), as llama.cpp reads
    /// Qwen3.5 / Qwen3-Coder answers: a model may call a tool without closing its block.
    tool_call_ends: bool,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
enum ThinkState {
    /// Nothing but whitespace seen: a `<think>` here opens reasoning.
    #[default]
    Start,
    Thinking,
    /// Just after `</think>`: the blank lines the model writes are dropped.
    AfterThink,
    Content,
}

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";
const TOOL_CALL: &str = "<tool_call>";

impl ThinkSplitter {
    /// A splitter for a prompt that already opened the reasoning (templates that end the
    /// generation prompt with `<think>`).
    pub fn thinking() -> ThinkSplitter {
        ThinkSplitter {
            state: ThinkState::Thinking,
            pending: String::new(),
            tool_call_ends: false,
        }
    }

    /// The same splitter, where a `<tool_call>` inside the reasoning ends it: the call is
    /// content (for templates whose tool calls are read as llama.cpp's qwen3-coder parser does).
    pub fn tool_call_ends_reasoning(mut self) -> ThinkSplitter {
        self.tool_call_ends = true;
        self
    }

    /// Adds generated text; returns (reasoning, content) released by it.
    pub fn push(&mut self, text: &str) -> (String, String) {
        self.pending.push_str(text);
        let (mut reasoning, mut content) = (String::new(), String::new());
        loop {
            match self.state {
                ThinkState::Start => {
                    let trimmed = self.pending.trim_start();
                    if let Some(rest) = trimmed.strip_prefix(OPEN) {
                        self.pending = rest.to_owned();
                        self.state = ThinkState::Thinking;
                    } else if OPEN.starts_with(trimmed) {
                        // Could still become `<think>` (or is only whitespace so far).
                        break;
                    } else {
                        self.state = ThinkState::Content;
                    }
                }
                ThinkState::Thinking => match self.pending.find(CLOSE) {
                    Some(at) if !self.tool_call_ended_before(at) => {
                        reasoning.push_str(&self.pending[..at]);
                        self.pending = self.pending[at + CLOSE.len()..].to_owned();
                        self.state = ThinkState::AfterThink;
                    }
                    _ if self.tool_call_ended_before(self.pending.len()) => {
                        let at = self.pending.find(TOOL_CALL).unwrap_or(0);
                        reasoning.push_str(&self.pending[..at]);
                        self.pending.drain(..at);
                        self.state = ThinkState::Content;
                    }
                    _ => {
                        let mut keep = partial_suffix(&self.pending, CLOSE);
                        if self.tool_call_ends {
                            keep = keep.max(partial_suffix(&self.pending, TOOL_CALL));
                        }
                        let cut = self.pending.len() - keep;
                        reasoning.push_str(&self.pending[..cut]);
                        self.pending.drain(..cut);
                        break;
                    }
                },
                ThinkState::AfterThink => {
                    let trimmed = self.pending.trim_start();
                    if trimmed.is_empty() {
                        self.pending.clear();
                        break;
                    }
                    self.pending = trimmed.to_owned();
                    self.state = ThinkState::Content;
                }
                ThinkState::Content => {
                    content.push_str(&self.pending);
                    self.pending.clear();
                    break;
                }
            }
        }
        (reasoning, content)
    }

    /// Whether a `<tool_call>` that ends the reasoning starts before byte `end` of the pending
    /// text.
    fn tool_call_ended_before(&self, end: usize) -> bool {
        self.tool_call_ends && self.pending.find(TOOL_CALL).is_some_and(|at| at < end)
    }

    /// The end of the generation: whatever is held back is released where it belongs.
    pub fn finish(&mut self) -> (String, String) {
        let rest = std::mem::take(&mut self.pending);
        match self.state {
            ThinkState::Thinking => (rest, String::new()),
            ThinkState::AfterThink => (String::new(), String::new()),
            _ => (String::new(), rest),
        }
    }
}

/// Length of the longest suffix of `text` that is a proper prefix of `tag`.
fn partial_suffix(text: &str, tag: &str) -> usize {
    (1..tag.len())
        .rev()
        .find(|&n| {
            text.len() >= n
                && text.is_char_boundary(text.len() - n)
                && tag.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_all(pieces: &[&str], mut s: ThinkSplitter) -> (String, String) {
        let (mut r, mut c) = (String::new(), String::new());
        for p in pieces {
            let (a, b) = s.push(p);
            r += &a;
            c += &b;
        }
        let (a, b) = s.finish();
        (r + &a, c + &b)
    }

    #[test]
    fn reasoning_is_separated_whatever_the_cut() {
        let text = "<think>\nLet me see: 2+2.\n</think>\n\nThe answer is 4.";
        for cut in 0..=text.len() {
            if !text.is_char_boundary(cut) {
                continue;
            }
            let (r, c) = split_all(&[&text[..cut], &text[cut..]], ThinkSplitter::default());
            assert_eq!(r, "\nLet me see: 2+2.\n", "cut {cut}");
            assert_eq!(c, "The answer is 4.", "cut {cut}");
        }
        // Char by char.
        let chars: Vec<String> = text.chars().map(String::from).collect();
        let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(
            split_all(&pieces, ThinkSplitter::default()),
            ("\nLet me see: 2+2.\n".into(), "The answer is 4.".into())
        );
    }

    #[test]
    fn text_without_tags_is_content_and_an_open_prompt_starts_in_reasoning() {
        assert_eq!(
            split_all(
                &["Hello", " <think> is text here"],
                ThinkSplitter::default()
            ),
            (String::new(), "Hello <think> is text here".into())
        );
        assert_eq!(
            split_all(&["<thi", "nk"], ThinkSplitter::default()),
            (String::new(), "<think".into())
        );
        // A call inside the reasoning ends it where llama.cpp's qwen3-coder parser does.
        let call = "ponder <tool_call>\n<function=f>\n</function>\n</tool_call>";
        for cut in 0..=call.len() {
            let got = split_all(
                &[&call[..cut], &call[cut..]],
                ThinkSplitter::thinking().tool_call_ends_reasoning(),
            );
            assert_eq!(got, ("ponder ".into(), call[7..].into()), "cut {cut}");
        }
        assert_eq!(
            split_all(&[call], ThinkSplitter::thinking()),
            (call.into(), String::new())
        );
        assert_eq!(
            split_all(&["ponder</th", "ink>done"], ThinkSplitter::thinking()),
            ("ponder".into(), "done".into())
        );
        assert_eq!(
            split_all(&["unfinished </thi"], ThinkSplitter::thinking()),
            ("unfinished </thi".into(), String::new())
        );
    }
}
