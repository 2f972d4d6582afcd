//! Which pre-tokenizer a `tokenizer.json` uses, recognised as the reference converter does: the
//! ids of a fixed check text, as the Hugging Face tokenizer itself produces them, are hashed and
//! looked up in a table of known vocabularies.

use std::path::Path;

use sha2::{Digest, Sha256};

use super::error::ConvertError;

/// The reference converter's check text: it exercises whitespace runs, emoji sequences, digit
/// groups, scripts and contractions, where pre-tokenizers differ.
const CHECK_TEXT: &str = "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u{200d}🌫️ (multiple emojis concatenated) ✅ 🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ ------======= нещо на Български ''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL";

/// sha256 of `str(ids)` of the check text → `tokenizer.ggml.pre`, for the pre-tokenizers the
/// engine implements (hashes from the reference converter's table; where it lists one hash
/// twice, its later entry wins, as there).
#[rustfmt::skip]
const PRE_HASHES: &[(&str, &str)] = &[
    ("0ef9807a4087ebef797fc749390439009c3b9eda9ad1a097abbe738f486c01e5", "llama-bpe"),
    ("9d032fcbd5501f4a38150912590928bfb36091efb5df11b8e2124b0390e3fb1e", "falcon3"),
    ("a6b57017d60e6edb4d88ecc2845188e0eb333a70357e45dcc9b53964a73bbae6", "falcon-h1"),
    ("60476e1243776c4fb1b993dbd7a5f15ac22f83c80afdf425fa5ae01c8d44ef86", "falcon-h1"),
    ("3eda48b4c4dc7de733d1a8b3e3b4a85243dbbf704da2ee9d42c6beced8897896", "falcon-h1"),
    ("48f8e02c0359c0bbdd82f26909171fac1c18a457bb47573ed1fe3bbb2c1cfd4b", "falcon-h1"),
    ("0e9433cbbb161f89e264eb32e8e64bfe69e834973ffca5d41d3948a604a3e2a3", "pixtral"),
    ("f6791d196f87ce6b56a7d234be618e0d58f8cda3549416635b2bebcd22cd95c4", "midm-2.0"),
    ("169bf0296a13c4d9b7672313f749eb36501d931022de052aad6e36f2bf34dd51", "lfm2"),
    ("a8594e3edff7c29c003940395316294b2c623e09894deebbc65f33f1515df79e", "dbrx"),
    ("c136ed14d01c2745d4f60a9596ae66800e2b61fa45643e72436041855ad4089d", "smaug-bpe"),
    ("e636dc30a262dcc0d8c323492e32ae2b70728f4df7dfe9737d9f920a282b8aea", "qwen2"),
    ("d4540891389ea895b53b399da6ac824becc30f2fba0e9ddbb98f92e55ca0e97c", "qwen2"),
    ("b3f499bb4255f8ca19fccd664443283318f2fd2414d5e0b040fbdd0cc195d6c5", "deepseek-r1-qwen"),
    ("d4c8f286ea6b520b3d495c4455483cfa2302c0cfcd4be05d781b6a8a0a7cdaf1", "megrez"),
    ("32d85c31273f8019248f2559fed492d929ea28b17e51d81d3bb36fff23ca72b3", "stablelm2"),
    ("7e57df22b1fe23a7b1e1c7f3dc4e3f96d43a4eb0836d0c6bdc3436d7b2f1c664", "hunyuan"),
    ("855059429035d75a914d1eda9f10a876752e281a054a7a3d421ef0533e5b6249", "smollm"),
    ("35d91631860c815f952d711435f48d356ebac988362536bed955d43bfa436e34", "starcoder"),
    ("6221ad2852e85ce96f791f476e0b390cf9b474c9e3d1362f53a24a06dc8220ff", "refact"),
    ("9c2227e4dd922002fb81bde4fc02b0483ca4f12911410dee2255e4987644e3f8", "command-r"),
    ("7b3e7548e4308f52a76e8229e4e6cc831195d0d1df43aed21ac6c93da05fec5f", "codeshell"),
    ("4e2b24cc4770243d65a2c9ec19770a72f08cffc161adbb73fcbb6b7dd45a0aae", "exaone"),
    ("1431a23e583c97432bc230bff598d103ddb5a1f89960c8f1d1051aaa944d0b35", "minerva-7b"),
    ("3ce83efda5659b07b1ad37ca97ca5797ea4285d9b9ab0dc679e4a720c9da7454", "gpt-2"),
    ("fcace8b9cac38ce847670c970cd5892031a753a1ef381abd1d9af00f713da085", "phi-2"),
    ("b6dc8df998e1cfbdc4eac8243701a65afe638679230920b50d6f17d81c098166", "olmo"),
    ("b53802fb28e26d645c3a310b34bfe07da813026ec7c7716883404d5e0f8b1901", "jais"),
    ("ad851be1dba641f2e3711822f816db2c265f788b37c63b4e1aeacb9ee92de8eb", "gigachat"),
    ("1994ffd01900cfb37395608534236ecd63f2bd5995d6cb1004dda1af50240f15", "trillion"),
    ("b0a6b1c0bd5998ebd9df08611efde34a4ff03faed45ae09c43e6b31ebd4b94cf", "a.x-4.0"),
    ("2085e1638f6c377a0aa4ead21b27bb4cb941bf800df86ed391011769c1758dfb", "exaone4"),
    ("a1e163ecab2e718a4c829d1148b6e86824ec36163bb71941c3dca9cd5ac25756", "mellum"),
    ("53e325976a6e142379c19b09afcae354f2f496f147afa8f9e189a33fe4e3024e", "granite-docling"),
];

/// Encodes the check text with the Hugging Face tokenizer itself (as the reference does through
/// `transformers`, special tokens added by the post-processor included) and looks up the hash.
pub fn pre_tokenizer_name(tokenizer_path: &Path) -> Result<&'static str, ConvertError> {
    let hash = check_hash(tokenizer_path)?;
    PRE_HASHES
        .iter()
        .rev()
        .find(|(h, _)| *h == hash)
        .map(|&(_, name)| name)
        .ok_or(ConvertError::UnknownPreTokenizer { hash })
}

fn check_hash(tokenizer_path: &Path) -> Result<String, ConvertError> {
    let tokenizer = tokenizers::Tokenizer::from_file(tokenizer_path).map_err(|e| {
        ConvertError::TokenizerLoad {
            reason: e.to_string(),
        }
    })?;
    let encoding = tokenizer
        .encode(CHECK_TEXT, true)
        .map_err(|e| ConvertError::TokenizerLoad {
            reason: e.to_string(),
        })?;
    // Python's `str(list)`: "[1, 2, 3]".
    let ids: Vec<String> = encoding.get_ids().iter().map(u32::to_string).collect();
    let text = format!("[{}]", ids.join(", "));
    let digest = Sha256::digest(text.as_bytes());
    Ok(digest.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every hash is a sha256 in hex, and every name one the engine's tokenizer accepts (a typo
    /// would turn a known vocabulary into a file the engine refuses).
    #[test]
    fn every_pre_tokenizer_in_the_table_is_one_the_engine_runs() {
        use std::borrow::Cow;
        for &(hash, name) in PRE_HASHES {
            assert!(
                hash.len() == 64
                    && hash
                        .bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
                "{hash}"
            );
            let tokens = vec!["a".to_owned(), "b".to_owned(), "ab".to_owned()];
            let merges = vec!["a b".to_owned()];
            let spec = oxibonsai_tokenizer::VocabSpec {
                model: Cow::Borrowed("gpt2"),
                pre: Some(Cow::Borrowed(name)),
                tokens: Cow::Owned(tokens),
                token_types: None,
                merges: Some(Cow::Owned(merges)),
                special: Default::default(),
                add_bos: Some(false),
                add_eos: Some(false),
                extra: Default::default(),
            };
            let built = oxibonsai_tokenizer::Tokenizer::from_spec(spec);
            assert!(built.is_ok(), "{name}: {:?}", built.err());
        }
    }
}
