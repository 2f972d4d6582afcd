//! Streaming detokenization: the chunks concatenate to the whole decoding, each chunk is whole
//! characters, and a character split over tokens is held until it completes.

mod support;

use oxibonsai_testkit::hex_bytes;
use oxibonsai_tokenizer::Tokenizer;
use proptest::prelude::*;

/// Feeds `ids` one at a time; returns the chunks (the last one from `finish`).
fn stream(tokenizer: &Tokenizer, ids: &[u32], special: bool) -> Vec<String> {
    let mut decoder = tokenizer.stream_decoder(special);
    let mut chunks: Vec<String> = ids
        .iter()
        .map(|&id| decoder.push(id).expect("valid id").to_owned())
        .collect();
    chunks.push(decoder.finish().to_owned());
    chunks
}

/// The token whose piece is exactly the one byte `b`.
fn byte_token(tokenizer: &Tokenizer, b: u8) -> u32 {
    (0..tokenizer.vocab_size() as u32)
        .find(|&id| tokenizer.token_to_piece(id, false).unwrap() == [b])
        .unwrap_or_else(|| panic!("no token for byte {b:#04x}"))
}

#[test]
fn golden_cases_stream_to_the_reference_bytes() {
    let mut held_back = 0;
    for (tokenizer, cases) in [
        (support::qwen3(), support::qwen3_cases()),
        (support::smollm2(), support::smollm2_cases()),
    ] {
        for case in &cases {
            let expected = String::from_utf8(hex_bytes(&case.detokenized_hex))
                .expect("the golden texts are valid UTF-8");
            let chunks = stream(tokenizer, &case.ids, case.parse_special);
            assert_eq!(chunks.concat(), expected, "{:?}", case.text);
            // A token that only starts a character yields nothing until the character completes.
            held_back += case
                .ids
                .iter()
                .zip(&chunks)
                .filter(|&(&id, chunk)| {
                    chunk.is_empty()
                        && !tokenizer
                            .token_to_piece(id, case.parse_special)
                            .unwrap()
                            .is_empty()
                })
                .count();
        }
    }
    assert!(
        held_back > 20,
        "the emoji/CJK cases split characters over tokens ({held_back})"
    );
}

#[test]
fn a_character_split_over_three_tokens_comes_out_whole() {
    let tokenizer = support::qwen3();
    let euro = "€".as_bytes();
    let ids: Vec<u32> = euro.iter().map(|&b| byte_token(tokenizer, b)).collect();
    let mut decoder = tokenizer.stream_decoder(false);
    assert_eq!(decoder.push(ids[0]).unwrap(), "");
    assert_eq!(decoder.push(ids[1]).unwrap(), "");
    assert_eq!(decoder.pending_bytes(), &euro[..2]);
    assert_eq!(decoder.push(ids[2]).unwrap(), "€");
    assert_eq!(decoder.finish(), "");
}

#[test]
fn invalid_bytes_become_replacement_characters_as_soon_as_they_are_certain() {
    let tokenizer = support::qwen3();
    let [lead, cont, x, ff] = [0xE2, 0x82, b'x', 0xFF].map(|b| byte_token(tokenizer, b));
    let mut decoder = tokenizer.stream_decoder(false);
    // 0xFF can never start a character: replaced at once.
    assert_eq!(decoder.push(ff).unwrap(), "\u{FFFD}");
    // A lead byte then a byte that cannot continue it: the lead is replaced, the x kept.
    assert_eq!(decoder.push(lead).unwrap(), "");
    assert_eq!(decoder.push(x).unwrap(), "\u{FFFD}x");
    // A character cut off by the end of the stream: one replacement, at finish.
    assert_eq!(decoder.push(lead).unwrap(), "");
    assert_eq!(decoder.push(cont).unwrap(), "");
    assert_eq!(decoder.finish(), "\u{FFFD}");
    // All of it is what a lossy decoding of the bytes gives.
    let bytes = tokenizer
        .decode_bytes(&[ff, lead, x, lead, cont], false)
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&bytes), "\u{FFFD}\u{FFFD}x\u{FFFD}");
}

#[test]
fn control_tokens_stream_only_when_special() {
    let tokenizer = support::qwen3();
    let im_end = tokenizer.token_id("<|im_end|>").unwrap();
    assert_eq!(stream(tokenizer, &[im_end], false).concat(), "");
    assert_eq!(stream(tokenizer, &[im_end], true).concat(), "<|im_end|>");
}

/// Ids that stress the decoder: every token whose piece is one byte (lone lead and continuation
/// bytes), tokens holding parts of emoji, control/user-defined tokens, and any id at all.
fn id_strategy() -> impl Strategy<Value = u32> {
    static POOL: std::sync::OnceLock<Vec<u32>> = std::sync::OnceLock::new();
    let tokenizer = support::qwen3();
    let pool = POOL.get_or_init(|| {
        let mut pool: Vec<u32> = (0..tokenizer.vocab_size() as u32)
            .filter(|&id| tokenizer.token_to_piece(id, true).unwrap().len() == 1)
            .collect();
        // Pieces that end inside a character (parts of emoji, CJK).
        pool.extend((0..tokenizer.vocab_size() as u32).filter(|&id| {
            let piece = tokenizer.token_to_piece(id, true).unwrap();
            piece.len() > 1 && std::str::from_utf8(piece).is_err()
        }));
        pool.extend([151_643, 151_645, 151_667, 151_900]);
        pool
    });
    prop_oneof![
        3 => prop::sample::select(pool.clone()),
        1 => 0..tokenizer.vocab_size() as u32,
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn chunks_concatenate_to_the_lossy_decoding(
        ids in prop::collection::vec(id_strategy(), 0..24),
        special in any::<bool>(),
    ) {
        let tokenizer = support::qwen3();
        let all = String::from_utf8_lossy(&tokenizer.decode_bytes(&ids, special).unwrap()).into_owned();
        let mut decoder = tokenizer.stream_decoder(special);
        let mut emitted = String::new();
        for (n, &id) in ids.iter().enumerate() {
            emitted.push_str(decoder.push(id).unwrap());
            // Never ahead of the truth: what is out equals the lossy decoding of the bytes so
            // far less the held ones, and the held bytes are the start of one character.
            let so_far = tokenizer.decode_bytes(&ids[..=n], special).unwrap();
            let held = decoder.pending_bytes();
            prop_assert!(held.len() < 4);
            if let Err(e) = std::str::from_utf8(held) {
                prop_assert!(e.error_len().is_none() && e.valid_up_to() == 0);
            } else {
                prop_assert!(held.is_empty());
            }
            prop_assert_eq!(
                &emitted,
                &String::from_utf8_lossy(&so_far[..so_far.len() - held.len()])
            );
        }
        emitted.push_str(decoder.finish());
        prop_assert_eq!(emitted, all);
    }
}
