//! Token pieces (`llama_token_to_piece`) and whole-sequence detokenization (`llama_detokenize`).

use crate::error::TokenizerError;
use crate::unicode::char_to_byte;
use crate::vocab::TokenAttr;

/// Appends `llama_token_to_piece(id, special = true)` for one token.
/// `byte_level` is GPT-2's byte-level text (BPE); otherwise `▁` stands for a space.
pub(crate) fn append_piece(
    id: u32,
    text: &str,
    attr: TokenAttr,
    byte_level: bool,
    out: &mut Vec<u8>,
) -> Result<(), TokenizerError> {
    let verbatim = TokenAttr::UNKNOWN
        .with(TokenAttr::CONTROL)
        .with(TokenAttr::USER_DEFINED);
    if attr.intersects(verbatim) {
        out.extend_from_slice(text.as_bytes());
    } else if attr.intersects(TokenAttr::NORMAL) && !byte_level {
        out.extend_from_slice(text.replace('\u{2581}', " ").as_bytes());
    } else if attr.intersects(TokenAttr::NORMAL) {
        for c in text.chars() {
            match char_to_byte(c) {
                Some(b) => out.push(b),
                None => {
                    // llama.cpp's marker for a character outside the byte-level alphabet.
                    let mut utf8 = [0u8; 4];
                    out.extend_from_slice(b"[UNK_BYTE_0x");
                    for b in c.encode_utf8(&mut utf8).bytes() {
                        out.extend_from_slice(format!("{b:02x}").as_bytes());
                    }
                    out.extend_from_slice(text.as_bytes());
                    out.push(b']');
                }
            }
        }
    } else if attr.intersects(TokenAttr::BYTE) {
        out.push(byte_token_value(id, text)?);
    }
    // Unused and undefined tokens have no piece.
    Ok(())
}

/// The byte of a `<0xHH>` token: llama.cpp reads the two characters after `<0x` with `strtol`,
/// so it is as lenient (leading spaces, a sign, fewer digits).
pub(crate) fn byte_token_value(id: u32, text: &str) -> Result<u8, TokenizerError> {
    let bytes = text.as_bytes();
    let Some(digits) = bytes.get(3..bytes.len().min(5)) else {
        return Err(TokenizerError::MalformedByteToken {
            id,
            text: text.to_owned(),
        });
    };
    let mut rest = digits;
    while let [b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r', tail @ ..] = rest {
        rest = tail;
    }
    let negative = rest.first() == Some(&b'-');
    if matches!(rest.first(), Some(b'-' | b'+')) {
        rest = &rest[1..];
    }
    let mut value: i64 = 0;
    for &b in rest {
        match (b as char).to_digit(16) {
            Some(d) => value = value * 16 + i64::from(d),
            None => break,
        }
    }
    if negative {
        value = -value;
    }
    // C's conversion of the long to char keeps the low byte.
    Ok(value as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_tokens_read_like_strtol() {
        assert_eq!(byte_token_value(0, "<0x0A>").unwrap(), 0x0A);
        assert_eq!(byte_token_value(0, "<0xff>").unwrap(), 0xFF);
        assert_eq!(byte_token_value(0, "<0x7>").unwrap(), 0x07);
        assert_eq!(byte_token_value(0, "<0x").unwrap(), 0);
        assert!(matches!(
            byte_token_value(7, "<0"),
            Err(TokenizerError::MalformedByteToken { id: 7, .. })
        ));
    }
}

/// llama.cpp's `clean_up_tokenization_spaces` passes over detokenized bytes, in place as it
/// does them: no space before `? ! . ,`, none around a lone `'`, none before the `'s 'm 're 've`
/// contractions.
pub(crate) fn clean_spaces(text: &mut Vec<u8>) {
    // First pass: " ?", " !", " .", " ,".
    let n = text.len();
    let mut total = usize::from(n > 0);
    for i in 1..n {
        let x = text[i];
        if text[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            total -= 1;
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);

    // Second pass: " ' " loses both spaces.
    let n = text.len();
    let mut total = usize::from(n > 0);
    let mut i = 1;
    while i < n {
        let x = text[i];
        if x == b'\'' && i + 1 < n && text[i - 1] == b' ' && text[i + 1] == b' ' {
            total -= 1;
            i += 1;
            text[i] = 0;
        }
        text[total] = x;
        total += 1;
        i += 1;
    }
    text.truncate(total);

    // Third pass: " 's", " 'm", " 're", " 've".
    let n = text.len();
    let mut total = usize::from(n > 0);
    for i in 1..n {
        let x = text[i];
        if text[i - 1] == b' ' && x == b'\'' && i + 1 < n {
            let x1 = text[i + 1];
            let drop = matches!(x1, b's' | b'm')
                || (i + 2 < n && matches!((x1, text[i + 2]), (b'r', b'e') | (b'v', b'e')));
            if drop {
                total -= 1;
            }
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);
}

#[cfg(test)]
mod clean_tests {
    #[test]
    fn cleaning_follows_llama_cpp() {
        let mut text = b"Hello , world ! It 's a ' quote ' they 're".to_vec();
        super::clean_spaces(&mut text);
        assert_eq!(
            String::from_utf8(text).unwrap(),
            "Hello, world! It's a'quote'they're"
        );
    }
}
