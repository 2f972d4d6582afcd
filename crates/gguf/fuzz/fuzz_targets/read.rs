//! Any byte string: the reader must return (valid or a typed error), never panic, and its two
//! entry points must agree.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oxibonsai_gguf::{validate_bytes, GgufFile};

fuzz_target!(|data: &[u8]| {
    let errors = validate_bytes(data);
    match GgufFile::from_bytes(data.to_vec()) {
        Ok(file) => {
            assert!(errors.is_empty());
            for t in file.tensors() {
                assert_eq!(file.tensor_data(t).len() as u64, t.n_bytes);
            }
        }
        Err(error) => assert_eq!(error.to_string(), errors[0].to_string()),
    }
});
