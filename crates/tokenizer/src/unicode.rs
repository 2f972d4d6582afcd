//! Character classes the pre-tokenizers test, and GPT-2's byte-level alphabet.
//!
//! llama.cpp classifies code points with tables generated from Python's `regex` module: `\p{L}`,
//! `\p{N}`, `\p{P}` are the Unicode general categories and `\s` is the `White_Space` property.
//! The same definitions come here from `unicode-general-category` plus the (tiny, frozen)
//! `White_Space` list, so the splitters see exactly the classes the reference's regexes do.

use unicode_general_category::{get_general_category, GeneralCategory as Gc};

/// `\p{L}`
pub(crate) const LETTER: u8 = 1;
/// `\p{N}`
pub(crate) const NUMBER: u8 = 2;
/// `\p{P}`
pub(crate) const PUNCTUATION: u8 = 4;
/// `\s`
pub(crate) const WHITESPACE: u8 = 8;
/// `\p{M}`
pub(crate) const MARK: u8 = 16;
/// `\p{S}`
pub(crate) const SYMBOL: u8 = 32;

/// One code point and its class bits.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cp {
    pub c: char,
    pub class: u8,
}

/// The code points of `text` with their classes.
pub(crate) fn classify(text: &str, out: &mut Vec<Cp>) {
    out.clear();
    out.extend(text.chars().map(|c| Cp {
        c,
        class: class_of(c),
    }));
}

/// The class bits of one code point.
#[inline]
pub(crate) fn class_of(c: char) -> u8 {
    if c.is_ascii() {
        return ASCII_CLASS[c as usize];
    }
    let category = match get_general_category(c) {
        Gc::UppercaseLetter
        | Gc::LowercaseLetter
        | Gc::TitlecaseLetter
        | Gc::ModifierLetter
        | Gc::OtherLetter => LETTER,
        Gc::DecimalNumber | Gc::LetterNumber | Gc::OtherNumber => NUMBER,
        Gc::ConnectorPunctuation
        | Gc::DashPunctuation
        | Gc::OpenPunctuation
        | Gc::ClosePunctuation
        | Gc::InitialPunctuation
        | Gc::FinalPunctuation
        | Gc::OtherPunctuation => PUNCTUATION,
        Gc::NonspacingMark | Gc::SpacingMark | Gc::EnclosingMark => MARK,
        Gc::MathSymbol | Gc::CurrencySymbol | Gc::ModifierSymbol | Gc::OtherSymbol => SYMBOL,
        _ => 0,
    };
    category
        | if is_non_ascii_white_space(c) {
            WHITESPACE
        } else {
            0
        }
}

/// The first code point of `c`'s canonical decomposition (llama.cpp's per-code-point NFD).
pub(crate) fn nfd_base(c: char) -> char {
    let code = c as u32;
    // Nothing below U+00C0 decomposes.
    if code < 0xC0 {
        return c;
    }
    let ranges = crate::nfd_table::NFD_RANGES;
    let after = ranges.partition_point(|&(first, _, _)| first <= code);
    match after.checked_sub(1).map(|i| ranges[i]) {
        Some((first, last, base)) if first <= code && code <= last => {
            char::from_u32(base).unwrap_or(c)
        }
        _ => c,
    }
}

/// Unicode's `White_Space` above U+007F (unchanged since Unicode 6.0).
fn is_non_ascii_white_space(c: char) -> bool {
    matches!(
        c,
        '\u{85}' | '\u{A0}' | '\u{1680}' | '\u{2000}'
            ..='\u{200A}' | '\u{2028}' | '\u{2029}' | '\u{202F}' | '\u{205F}' | '\u{3000}'
    )
}

const ASCII_CLASS: [u8; 128] = {
    let mut table = [0u8; 128];
    let mut i = 0;
    while i < 128 {
        let b = i as u8;
        table[i] = if b.is_ascii_alphabetic() {
            LETTER
        } else if b.is_ascii_digit() {
            NUMBER
        } else if matches!(b, b'\t' | b'\n' | 0x0B | 0x0C | b'\r' | b' ') {
            WHITESPACE
        } else if matches!(
            b,
            b'!' | b'"'
                | b'#'
                | b'%'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b','
                | b'-'
                | b'.'
                | b'/'
                | b':'
                | b';'
                | b'?'
                | b'@'
                | b'['
                | b'\\'
                | b']'
                | b'_'
                | b'{'
                | b'}'
        ) {
            PUNCTUATION
        } else if matches!(
            b,
            b'$' | b'+' | b'<' | b'=' | b'>' | b'^' | b'`' | b'|' | b'~'
        ) {
            SYMBOL
        } else {
            0
        };
        i += 1;
    }
    table
};

/// GPT-2's reversible byte-to-character map: printable Latin-1 bytes stand for themselves, the
/// other 68 bytes are shifted to U+0100.. in byte order, so every byte has a visible character.
pub(crate) const BYTE_TO_CHAR: [char; 256] = {
    let mut table = ['\0'; 256];
    let mut shifted = 0u32;
    let mut b = 0usize;
    while b < 256 {
        let printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        let code = if printable {
            b as u32
        } else {
            shifted += 1;
            0xFF + shifted
        };
        table[b] = match char::from_u32(code) {
            Some(c) => c,
            None => '\0',
        };
        b += 1;
    }
    table
};

/// The inverse of [`BYTE_TO_CHAR`]; `None` for characters outside the byte-level alphabet.
#[inline]
pub(crate) fn char_to_byte(c: char) -> Option<u8> {
    let code = c as u32;
    let byte = match code {
        0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF => code,
        0x100..=0x143 => CHAR_TO_BYTE_SHIFTED[(code - 0x100) as usize] as u32,
        _ => return None,
    };
    Some(byte as u8)
}

/// The bytes that [`BYTE_TO_CHAR`] shifted, indexed by their character minus U+0100.
const CHAR_TO_BYTE_SHIFTED: [u8; 68] = {
    let mut table = [0u8; 68];
    let mut n = 0;
    let mut b = 0usize;
    while b < 256 {
        let printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        if !printable {
            table[n] = b as u8;
            n += 1;
        }
        b += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_map_round_trips_every_byte() {
        let mut seen = std::collections::HashSet::new();
        for b in 0..=255u8 {
            let c = BYTE_TO_CHAR[b as usize];
            assert!(seen.insert(c), "byte {b} maps to a character already used");
            assert_eq!(char_to_byte(c), Some(b));
        }
        // Anchors from GPT-2's table: space is Ġ, newline Ċ, tab ĉ, 0xAD is Ń.
        assert_eq!(BYTE_TO_CHAR[b' ' as usize], 'Ġ');
        assert_eq!(BYTE_TO_CHAR[b'\n' as usize], 'Ċ');
        assert_eq!(BYTE_TO_CHAR[b'\t' as usize], 'ĉ');
        assert_eq!(BYTE_TO_CHAR[0xAD], 'Ń');
        assert_eq!(char_to_byte('中'), None);
        assert_eq!(char_to_byte(' '), None);
    }

    #[test]
    fn nfd_base_strips_to_the_base_letter() {
        assert_eq!(nfd_base('é'), 'e');
        assert_eq!(nfd_base('Å'), 'A');
        assert_eq!(nfd_base('a'), 'a');
        assert_eq!(nfd_base('中'), '中');
    }

    #[test]
    fn classes_follow_unicode_categories() {
        assert_eq!(class_of('a'), LETTER);
        assert_eq!(class_of('中'), LETTER);
        assert_eq!(class_of('ª'), LETTER);
        assert_eq!(class_of('7'), NUMBER);
        assert_eq!(class_of('²'), NUMBER);
        assert_eq!(class_of('Ⅻ'), NUMBER);
        assert_eq!(class_of('٣'), NUMBER);
        assert_eq!(class_of('_'), PUNCTUATION);
        assert_eq!(class_of('、'), PUNCTUATION);
        assert_eq!(class_of('$'), SYMBOL);
        assert_eq!(class_of('`'), SYMBOL);
        assert_eq!(class_of('€'), SYMBOL);
        assert_eq!(class_of('\u{301}'), MARK);
        assert_eq!(class_of('\u{200B}'), 0);
        assert_eq!(class_of('\u{1C}'), 0);
        assert_eq!(class_of('\u{0B}'), WHITESPACE);
        assert_eq!(class_of('\u{85}'), WHITESPACE);
        assert_eq!(class_of('\u{A0}'), WHITESPACE);
        assert_eq!(class_of('\u{3000}'), WHITESPACE);
    }
}
