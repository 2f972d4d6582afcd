//! Stop strings over streamed text, against hand-written streams and a `str::find` oracle.

use oxibonsai_engine::sampling::StopStrings;
use proptest::prelude::*;

fn stops(list: &[&str]) -> StopStrings {
    StopStrings::new(list.iter().map(|s| s.to_string()).collect())
}

/// Each push's output and stop flag, then what `finish` flushes.
fn run(stop: &mut StopStrings, pushes: &[&str]) -> (Vec<(String, bool)>, String) {
    let outputs = pushes.iter().map(|p| stop.push(p)).collect();
    (outputs, stop.finish())
}

fn out(text: &str, stopped: bool) -> (String, bool) {
    (text.to_string(), stopped)
}

#[test]
fn a_stop_string_split_across_many_pushes() {
    let mut s = stops(&["</s>"]);
    let (outputs, rest) = run(&mut s, &["Hello <", "/", "s", "> more", " and more"]);
    assert_eq!(
        outputs,
        vec![
            out("Hello ", false),
            out("", false),
            out("", false),
            out("", true),
            out("", true),
        ]
    );
    assert_eq!(rest, "");
    assert_eq!(s.matched(), Some("</s>"));
    assert!(s.stopped());
}

#[test]
fn a_partial_prefix_that_is_no_stop_is_released() {
    let mut s = stops(&["###"]);
    let (outputs, rest) = run(&mut s, &["a#", "#b", "##", "c"]);
    assert_eq!(
        outputs,
        vec![
            out("a", false),
            out("##b", false),
            out("", false),
            out("##c", false)
        ]
    );
    assert_eq!(rest, "");
    // At the end of the stream a held prefix is plain text.
    let mut s = stops(&["###"]);
    assert_eq!(s.push("end##"), out("end", false));
    assert_eq!(s.finish(), "##");
    assert_eq!(s.matched(), None);
}

#[test]
fn text_before_the_stop_in_the_same_push_is_emitted() {
    let mut s = stops(&["STOP"]);
    assert_eq!(s.push("abc STOP def"), out("abc ", true));
    assert_eq!(s.push("more"), out("", true));
    assert_eq!(s.finish(), "");
}

#[test]
fn overlapping_stop_strings_cut_at_the_earliest() {
    // "bc" starts before "abcd" would complete.
    let mut s = stops(&["abcd", "bc"]);
    let (outputs, _) = run(&mut s, &["xa", "b", "ce"]);
    assert_eq!(
        outputs,
        vec![out("x", false), out("", false), out("a", true)]
    );
    assert_eq!(s.matched(), Some("bc"));

    // Two stops sharing a prefix: the hold covers both until one completes.
    let mut s = stops(&["abc", "abd"]);
    let (outputs, _) = run(&mut s, &["zab", "d!"]);
    assert_eq!(outputs, vec![out("z", false), out("", true)]);
    assert_eq!(s.matched(), Some("abd"));

    // A stop overlapping itself: the held prefix slides along "aaab".
    let mut s = stops(&["aab"]);
    let (outputs, _) = run(&mut s, &["a", "a", "a", "b"]);
    assert_eq!(
        outputs,
        vec![
            out("", false),
            out("", false),
            out("a", false),
            out("", true)
        ]
    );

    // The earliest start wins, even over a stop that completes first.
    let mut s = stops(&["cd", "abcdef"]);
    assert_eq!(s.push("xxabcdef"), out("xx", true));
    assert_eq!(s.matched(), Some("abcdef"));
}

#[test]
fn a_completed_stop_inside_a_possible_longer_one_waits() {
    // "cd" is complete, but "abcd" may still become "abcdef", which starts earlier.
    let mut s = stops(&["cd", "abcdef"]);
    assert_eq!(s.push("xxabcd"), out("xx", false));
    assert_eq!(s.push("ef"), out("", true));
    assert_eq!(s.matched(), Some("abcdef"));

    let mut s = stops(&["cd", "abcdef"]);
    assert_eq!(s.push("xxabcd"), out("xx", false));
    assert_eq!(s.push("eX"), out("ab", true));
    assert_eq!(s.matched(), Some("cd"));

    // The stream ends while waiting: finish settles on "cd".
    let mut s = stops(&["cd", "abcdef"]);
    assert_eq!(s.push("xxabcd"), out("xx", false));
    assert!(!s.stopped());
    assert_eq!(s.finish(), "ab");
    assert!(s.stopped());
    assert_eq!(s.matched(), Some("cd"));
}

#[test]
fn multi_byte_characters() {
    let mut s = stops(&["停止"]);
    let (outputs, _) = run(&mut s, &["前进停", "止后"]);
    assert_eq!(outputs, vec![out("前进", false), out("", true)]);

    // "è" and "é" share their first byte; "è" is no prefix of "é!" and is emitted at once.
    let mut s = stops(&["é!"]);
    assert_eq!(s.push("xè"), out("xè", false));
    assert_eq!(s.push("yé"), out("y", false));
    assert_eq!(s.push("é!"), out("é", true));

    let mut s = stops(&["🛑 end"]);
    let (outputs, rest) = run(&mut s, &["go 🛑", " e", "nd!"]);
    assert_eq!(
        outputs,
        vec![out("go ", false), out("", false), out("", true)]
    );
    assert_eq!(rest, "");
}

#[test]
fn no_stop_strings_pass_everything_through() {
    let mut s = StopStrings::new(Vec::new());
    assert_eq!(s.push("any text"), out("any text", false));
    assert_eq!(s.finish(), "");
}

/// Characters chosen so that random stops often overlap the text and each other, in 1–4 bytes.
const ALPHABET: &[char] = &['a', 'b', ' ', 'é', '€', '𝄞'];

/// The first `size` letters of the alphabet: small sizes make stops overlap each other often.
fn text_from(indices: &[usize], size: usize) -> String {
    indices.iter().map(|&i| ALPHABET[i % size]).collect()
}

proptest! {
    #[test]
    fn output_is_the_text_cut_before_the_first_stop(
        text in prop::collection::vec(0usize..ALPHABET.len(), 0..16),
        stop_list in prop::collection::vec(prop::collection::vec(0usize..ALPHABET.len(), 1..5), 0..4),
        cuts in prop::collection::vec(0usize..61, 0..8),
        size in 2usize..=ALPHABET.len(),
        planted in proptest::option::of((0usize..4, 0usize..61)),
    ) {
        let mut text = text_from(&text, size);
        let stop_list: Vec<String> = stop_list.iter().map(|s| text_from(s, size)).collect();
        // Plant a whole stop string somewhere, so that matches (and stops nested in longer
        // ones) are common rather than left to chance.
        if let Some((which, at)) = planted {
            if !stop_list.is_empty() {
                let boundaries: Vec<usize> = text.char_indices().map(|(i, _)| i).chain([text.len()]).collect();
                text.insert_str(boundaries[at % boundaries.len()], &stop_list[which % stop_list.len()]);
            }
        }

        // The oracle: the earliest occurrence of any stop string.
        let first = stop_list.iter().filter_map(|stop| text.find(stop.as_str())).min();
        let expected = first.map_or(text.as_str(), |at| &text[..at]);

        // Split the text into pushes at random character positions.
        let boundaries: Vec<usize> = text.char_indices().map(|(i, _)| i).chain([text.len()]).collect();
        let mut splits: Vec<usize> = cuts.iter().map(|&c| boundaries[c % boundaries.len()]).collect();
        splits.push(0);
        splits.push(text.len());
        splits.sort_unstable();
        splits.dedup();

        let mut stop = StopStrings::new(stop_list.clone());
        let mut emitted = String::new();
        let mut stopped = false;
        for pair in splits.windows(2) {
            let (piece, now_stopped) = stop.push(&text[pair[0]..pair[1]]);
            // Output is never taken back: everything emitted so far is a prefix of the answer.
            emitted.push_str(&piece);
            prop_assert!(expected.starts_with(&emitted), "{:?} is no prefix of {:?}", emitted, expected);
            prop_assert!(!stopped || piece.is_empty());
            stopped |= now_stopped;
            prop_assert_eq!(stopped, stop.stopped());
        }
        // A push reports a stop only if the text has one; `finish` may settle a waiting one.
        prop_assert!(!stopped || first.is_some());
        emitted.push_str(&stop.finish());
        prop_assert_eq!(&emitted, expected);
        prop_assert_eq!(stop.stopped(), first.is_some());
        if let Some(at) = first {
            let matched = stop.matched().unwrap();
            prop_assert!(text[at..].starts_with(matched));
        }
    }
}
