//! The GGUF container: a validating reader over a memory map with zero-copy tensor views, and a
//! writer. It asks `oxibonsai-formats` for block geometry (elements and bytes per block) and decodes
//! no tensor data itself.
//!
//! Opening a file validates all of it up front: header, every count against the bytes left (so no
//! allocation is sized by an untrusted number), UTF-8, duplicate keys and tensor names, each
//! tensor's type, shape, alignment and extent, and the one layout behind type id 42 for this file.
//! [`validate_bytes`] reports every problem instead of the first, for `oxibonsai validate`.

mod error;
mod file;
mod header;
mod metadata;
mod tensor;
mod value;
mod writer;

pub use error::GgufError;
pub use file::{validate_bytes, validate_file, GgufFile, ALIGNMENT_KEY, DEFAULT_ALIGNMENT};
pub use metadata::Metadata;
pub use tensor::TensorInfo;
pub use value::{type_id, Array, Value};
pub use writer::{GgufWriter, WRITE_VERSION};
