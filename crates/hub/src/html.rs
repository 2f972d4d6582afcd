//! A streaming reader of the anchors in a PEP 503 project page. It keeps one tag and one anchor
//! text at a time, so a page of any length is read in bounded memory; it understands only what the
//! simple API uses (`<a href=…>text</a>`, entities, comments) and skips everything else.

use std::io::{BufRead, ErrorKind};

/// A tag longer than this is not from a simple-API page.
const MAX_TAG_BYTES: usize = 64 * 1024;
/// Anchor texts are file names; longer ones are cut (the file name then comes from the URL).
const MAX_TEXT_BYTES: usize = 4096;

/// One `<a>` element: its `href` and text, entities decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Anchor {
    pub href: String,
    pub text: String,
}

/// Calls `on_anchor` for each anchor with an `href`, in page order.
pub(crate) fn for_each_anchor(
    mut page: impl BufRead,
    mut on_anchor: impl FnMut(Anchor),
) -> std::io::Result<()> {
    let mut tag = Vec::new();
    let mut text = Vec::new();
    let mut open_href: Option<String> = None;
    loop {
        // Text up to the next tag: kept (capped) inside an anchor, skipped elsewhere.
        let sink = open_href.is_some().then_some(&mut text);
        if !skip_past(&mut page, sink, MAX_TEXT_BYTES)? {
            return Ok(()); // end of page
        }
        tag.clear();
        if !read_tag(&mut page, &mut tag)? {
            return Ok(()); // a tag cut by the end of the page is ignored
        }
        match tag_name(&tag).as_str() {
            "a" => {
                open_href = attribute(&tag, "href");
                text.clear();
            }
            "/a" => {
                if let Some(href) = open_href.take() {
                    on_anchor(Anchor {
                        href,
                        text: decode_entities(String::from_utf8_lossy(&text).trim()),
                    });
                }
            }
            _ => {}
        }
    }
}

/// Consumes bytes through the next `<`, appending those before it to `sink` up to `cap` bytes (the
/// rest is dropped). Returns whether a `<` was found before the end of the page.
fn skip_past(
    page: &mut impl BufRead,
    mut sink: Option<&mut Vec<u8>>,
    cap: usize,
) -> std::io::Result<bool> {
    loop {
        let available = match page.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(false);
        }
        let found = available.iter().position(|&b| b == b'<');
        let body = &available[..found.unwrap_or(available.len())];
        if let Some(sink) = sink.as_deref_mut() {
            let room = cap.saturating_sub(sink.len());
            sink.extend_from_slice(&body[..body.len().min(room)]);
        }
        let used = found.map_or(available.len(), |i| i + 1);
        page.consume(used);
        if found.is_some() {
            return Ok(true);
        }
    }
}

/// Reads a tag's inside (after `<`, up to the closing `>`, which is consumed) into `tag`, honouring
/// quoted attribute values. A comment is consumed whole and leaves `tag` as `!--`. Returns false
/// when the page ends first.
fn read_tag(page: &mut impl BufRead, tag: &mut Vec<u8>) -> std::io::Result<bool> {
    let mut quote: Option<u8> = None;
    // In a comment: how many `-` were just seen (a `>` after two closes it).
    let mut comment_dashes: Option<usize> = None;
    loop {
        let available = match page.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(false);
        }
        let mut closed_at = None;
        for (i, &b) in available.iter().enumerate() {
            if let Some(dashes) = comment_dashes.as_mut() {
                match b {
                    b'-' => *dashes += 1,
                    b'>' if *dashes >= 2 => {
                        closed_at = Some(i);
                        break;
                    }
                    _ => *dashes = 0,
                }
                continue;
            }
            match quote {
                Some(q) if b == q => quote = None,
                Some(_) => {}
                None if b == b'"' || b == b'\'' => quote = Some(b),
                None if b == b'>' => {
                    closed_at = Some(i);
                    break;
                }
                None => {}
            }
            if tag.len() >= MAX_TAG_BYTES {
                return Err(std::io::Error::new(
                    ErrorKind::InvalidData,
                    format!("a tag runs past {MAX_TAG_BYTES} bytes"),
                ));
            }
            tag.push(b);
            if tag.as_slice() == b"!--" {
                comment_dashes = Some(0);
            }
        }
        let used = closed_at.map_or(available.len(), |i| i + 1);
        page.consume(used);
        if closed_at.is_some() {
            return Ok(true);
        }
    }
}

fn tag_name(tag: &[u8]) -> String {
    let end = tag
        .iter()
        .position(|b| b.is_ascii_whitespace() || *b == b'>')
        .unwrap_or(tag.len());
    let name = tag[..end].strip_suffix(b"/").unwrap_or(&tag[..end]);
    String::from_utf8_lossy(name).to_ascii_lowercase()
}

/// The decoded value of attribute `wanted` (case-insensitive) in a tag's inside.
fn attribute(tag: &[u8], wanted: &str) -> Option<String> {
    let text = String::from_utf8_lossy(tag);
    let mut rest = text.trim_start_matches(|c: char| !c.is_whitespace()); // skip the tag name
    loop {
        rest = rest.trim_start_matches(|c: char| c.is_whitespace() || c == '/');
        if rest.is_empty() {
            return None;
        }
        let name_end = rest
            .find(|c: char| c.is_whitespace() || c == '=' || c == '/')
            .unwrap_or(rest.len());
        let name = &rest[..name_end];
        rest = rest[name_end..].trim_start();
        let value = if let Some(after) = rest.strip_prefix('=') {
            let after = after.trim_start();
            let (value, remaining) = match after.chars().next() {
                Some(q @ ('"' | '\'')) => {
                    let inner = &after[1..];
                    let end = inner.find(q).unwrap_or(inner.len());
                    (&inner[..end], inner.get(end + 1..).unwrap_or(""))
                }
                _ => {
                    let end = after.find(char::is_whitespace).unwrap_or(after.len());
                    (&after[..end], &after[end..])
                }
            };
            rest = remaining;
            Some(value)
        } else {
            None
        };
        if name.eq_ignore_ascii_case(wanted) {
            return Some(decode_entities(value.unwrap_or("")));
        }
    }
}

/// Decodes the character references a simple-API page uses; unknown ones stay as written.
pub(crate) fn decode_entities(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find('&') {
        out.push_str(&rest[..start]);
        rest = &rest[start..];
        let decoded = rest.find(';').filter(|&end| end <= 12).and_then(|end| {
            let entity = &rest[1..end];
            let c = match entity {
                "amp" => Some('&'),
                "lt" => Some('<'),
                "gt" => Some('>'),
                "quot" => Some('"'),
                "apos" => Some('\''),
                _ => {
                    let code = if let Some(hex) = entity
                        .strip_prefix("#x")
                        .or_else(|| entity.strip_prefix("#X"))
                    {
                        u32::from_str_radix(hex, 16).ok()
                    } else {
                        entity.strip_prefix('#').and_then(|d| d.parse().ok())
                    };
                    code.and_then(char::from_u32)
                }
            };
            c.map(|c| (c, end + 1))
        });
        match decoded {
            Some((c, len)) => {
                out.push(c);
                rest = &rest[len..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anchors(page: &str) -> Vec<Anchor> {
        let mut found = Vec::new();
        // A tiny buffer makes every element straddle buffer boundaries.
        let reader = std::io::BufReader::with_capacity(3, page.as_bytes());
        for_each_anchor(reader, |a| found.push(a)).unwrap();
        found
    }

    fn anchor(href: &str, text: &str) -> Anchor {
        Anchor {
            href: href.into(),
            text: text.into(),
        }
    }

    #[test]
    fn reads_a_pypi_page() {
        let page = r#"<!DOCTYPE html>
<html><head><meta name="pypi:repository-version" content="1.1"><title>Links for x</title></head>
<body><h1>Links for x</h1>
<a href="https://files.example/p/x-0.1.tar.gz#sha256=ab" data-requires-python="&gt;=3.9">x-0.1.tar.gz</a><br/>
<a href="../../p/x-0.1-py3-none-any.whl#sha256=cd" data-yanked="">x-0.1-py3-none-any.whl</a><br/>
</body></html>"#;
        assert_eq!(
            anchors(page),
            [
                anchor(
                    "https://files.example/p/x-0.1.tar.gz#sha256=ab",
                    "x-0.1.tar.gz"
                ),
                anchor(
                    "../../p/x-0.1-py3-none-any.whl#sha256=cd",
                    "x-0.1-py3-none-any.whl"
                ),
            ]
        );
    }

    #[test]
    fn handles_quotes_entities_comments_and_case() {
        let page = "<!-- <a href='no'>commented</a> -> still comment --><A class=x HREF='a?b=1&amp;c=&#x32;' >\
                    f&#39;1 &unknown; &amp;</A><a name=top>no href</a><a href=bare>b</a>\
                    <a title=\"x > y\" href=\"q\">t</a>";
        assert_eq!(
            anchors(page),
            [
                anchor("a?b=1&c=2", "f'1 &unknown; &"),
                anchor("bare", "b"),
                anchor("q", "t")
            ]
        );
    }

    #[test]
    fn truncated_pages_end_cleanly() {
        assert_eq!(anchors("<a href=\"x\">unfinished"), []);
        assert_eq!(anchors("<a href=\"x"), []);
        assert_eq!(anchors(""), []);
    }

    #[test]
    fn oversized_tags_are_an_error() {
        let page = format!("<a href=\"{}\">x</a>", "y".repeat(MAX_TAG_BYTES));
        let err = for_each_anchor(page.as_bytes(), |_| {}).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidData);
    }

    /// Escapes text the way an index writes attribute values and anchor texts.
    fn escape(text: &str) -> String {
        text.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
            .replace('\'', "&#39;")
    }

    proptest::proptest! {
        #[test]
        fn escaped_anchors_read_back(
            links in proptest::collection::vec(("[ -~]{1,40}", "[!-~][ -~]{0,38}[!-~]|[!-~]"), 0..20),
            noise in "[ -~\n]{0,30}",
        ) {
            let mut page = String::from("<html><body>");
            for (href, text) in &links {
                page.push_str(&format!(
                    "{}<a data-x='1' href=\"{}\">{}</a><br/>\n",
                    escape(&noise), escape(href), escape(text)
                ));
            }
            let expected: Vec<Anchor> = links.iter().map(|(h, t)| anchor(h, t)).collect();
            proptest::prop_assert_eq!(anchors(&page), expected);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..2000)) {
            let _ = for_each_anchor(&bytes[..], |_| {});
        }
    }

    #[test]
    fn decodes_entities() {
        assert_eq!(decode_entities("a&lt;b&gt;&quot;&#65;&#x42;&"), "a<b>\"AB&");
        assert_eq!(decode_entities("&#xD800;&;"), "&#xD800;&;");
    }
}
