//! Cutting streamed text at the first stop string, without ever emitting part of one.

/// Watches decoded text for stop strings.
///
/// Text that could still become a stop string (a suffix that is a prefix of one) is held back
/// until it is known either way, so what [`StopStrings::push`] returns never needs taking back.
/// Text arrives as `&str`, whole characters only, and since the first byte of a stop string
/// starts a character, every cut falls on a character boundary.
#[derive(Debug, Clone, Default)]
pub struct StopStrings {
    stops: Vec<String>,
    held: String,
    matched: Option<usize>,
}

impl StopStrings {
    /// Empty strings are dropped: they would match before any text at all.
    pub fn new(stops: Vec<String>) -> Self {
        StopStrings {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            held: String::new(),
            matched: None,
        }
    }

    /// Feeds newly decoded text. Returns the text safe to emit now and whether a stop string was
    /// found; on a match the text before it is returned, and every later push returns nothing.
    ///
    /// The cut is always before the *earliest-starting* occurrence of any stop string, however
    /// the text was split into pushes. So when a stop string has completed but an earlier
    /// position could still start a longer one (stops `"cd"` and `"abcdef"`, text `"abcd"` so
    /// far), the answer waits for more text; [`StopStrings::finish`] settles it at the end.
    pub fn push(&mut self, text: &str) -> (String, bool) {
        let mut out = String::new();
        let stopped = self.push_into(text, &mut out);
        (out, stopped)
    }

    /// [`Self::push`] appending the safe text to `out`, so a generation loop can reuse one buffer
    /// instead of allocating a string per token.
    pub fn push_into(&mut self, text: &str, out: &mut String) -> bool {
        if self.matched.is_some() {
            return true;
        }
        self.held.push_str(text);

        // Nothing emitted so far is the start of an occurrence (such a suffix would have been
        // held), so the earliest occurrence in `held` is the earliest in the whole stream.
        let complete = self.earliest_match();
        let pending = self.held.len() - self.longest_pending_prefix();
        match complete {
            Some((at, i)) if at <= pending => {
                self.matched = Some(i);
                out.push_str(&self.held[..at]);
                self.held.clear();
                true
            }
            _ => {
                out.push_str(&self.held[..pending]);
                self.held.drain(..pending);
                false
            }
        }
    }

    /// Ends the stream: returns the held text before any stop string (then [`Self::stopped`]
    /// tells whether one was found while waiting), or all of it.
    pub fn finish(&mut self) -> String {
        if self.matched.is_none() {
            if let Some((at, i)) = self.earliest_match() {
                self.matched = Some(i);
                self.held.truncate(at);
            }
        }
        std::mem::take(&mut self.held)
    }

    /// Whether a stop string has been found.
    pub fn stopped(&self) -> bool {
        self.matched.is_some()
    }

    /// The stop string that ended the stream, if any.
    pub fn matched(&self) -> Option<&str> {
        self.matched
            .and_then(|i| self.stops.get(i))
            .map(String::as_str)
    }

    /// Byte offset in `held` and index of the earliest-starting complete stop string.
    fn earliest_match(&self) -> Option<(usize, usize)> {
        self.stops
            .iter()
            .enumerate()
            .filter_map(|(i, stop)| self.held.find(stop.as_str()).map(|at| (at, i)))
            .min()
    }

    /// Byte length of the longest suffix of `held` that is a proper prefix of some stop string.
    fn longest_pending_prefix(&self) -> usize {
        let held = self.held.as_bytes();
        self.stops
            .iter()
            .filter_map(|stop| {
                let stop = stop.as_bytes();
                let longest = (stop.len() - 1).min(held.len());
                (1..=longest)
                    .rev()
                    .find(|&len| held.ends_with(&stop[..len]))
            })
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::StopStrings;

    #[test]
    fn held_suffix_starts_on_a_char_boundary() {
        // "é" is 0xC3 0xA9; the stop "é!" shares its first two bytes with the held text.
        let mut stops = StopStrings::new(vec!["é!".into()]);
        assert_eq!(stops.push("café"), ("caf".to_string(), false));
        assert_eq!(stops.push("?"), ("é?".to_string(), false));
        assert_eq!(stops.finish(), "");
    }

    #[test]
    fn empty_stop_strings_are_ignored() {
        let mut stops = StopStrings::new(vec![String::new()]);
        assert_eq!(stops.push("abc"), ("abc".to_string(), false));
        assert!(!stops.stopped());
    }
}
