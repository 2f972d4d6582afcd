//! Parsing the header: magic, version, counts, key/value pairs and tensor infos.
//!
//! Nothing here allocates by a count read from the file before that count is proven to fit: each
//! count is bounded by the bytes left divided by the smallest encoding of one element, and growing
//! collections are only pushed to after an element has been parsed. Errors carry what was being read
//! and where, built lazily so the happy path formats nothing.

use crate::error::GgufError;
use crate::metadata::Metadata;
use crate::value::{type_id, Array, Value};

pub(crate) const MAGIC: &[u8; 4] = b"GGUF";

/// Deepest array nesting accepted: real files nest at most once, and recursion must stay bounded.
pub(crate) const MAX_ARRAY_DEPTH: u32 = 8;

/// The smallest encodings, for bounding counts before anything is allocated.
const MIN_KV_BYTES: u64 = 8 + 4 + 1; // empty key, type, one-byte value
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 8 + 4 + 8; // empty name, n_dims, one dim, type, offset
const MIN_STRING_BYTES: u64 = 8;
const MIN_ARRAY_BYTES: u64 = 4 + 8;

/// A tensor info as read, before its type and extent are checked.
#[derive(Debug)]
pub(crate) struct RawTensor {
    pub name: String,
    pub dims: Vec<u64>,
    pub type_id: u32,
    pub offset: u64,
}

pub(crate) struct Header {
    pub version: u32,
    pub metadata: Metadata,
    pub tensors: Vec<RawTensor>,
    /// Where the tensor infos end, before alignment padding.
    pub end: u64,
}

/// Parses the header. `Err` is a structural error (parsing cannot go on); `Ok` carries the
/// problems found that did not stop parsing (duplicate keys).
pub(crate) fn parse(bytes: &[u8]) -> Result<(Header, Vec<GgufError>), GgufError> {
    let mut cur = Cursor { bytes, pos: 0 };
    let magic = cur.take(4, || "the magic".into())?;
    if magic != MAGIC {
        let mut found = [0u8; 4];
        found.copy_from_slice(magic);
        return Err(GgufError::BadMagic { found });
    }
    let version = cur.u32(|| "the version".into())?;
    if version != 2 && version != 3 {
        return Err(GgufError::UnsupportedVersion { found: version });
    }
    let tensor_count = cur.u64(|| "the tensor count".into())?;
    let kv_count = cur.u64(|| "the key/value count".into())?;
    let max = cur.remaining() / MIN_TENSOR_INFO_BYTES;
    if tensor_count > max {
        return Err(GgufError::TensorCountTooLarge {
            count: tensor_count,
            max,
        });
    }
    let max = cur.remaining() / MIN_KV_BYTES;
    if kv_count > max {
        return Err(GgufError::KvCountTooLarge {
            count: kv_count,
            max,
        });
    }

    let mut entries = Vec::new();
    for index in 0..kv_count {
        let at = cur.pos();
        let key = cur.string(|| format!("key #{index}"))?;
        let key = std::str::from_utf8(key)
            .map_err(|_| GgufError::InvalidKeyUtf8 { index, at })?
            .to_owned();
        let value_type = cur.u32(|| format!("the value type of key '{key}'"))?;
        let value = cur.value(&key, value_type)?;
        entries.push((key, value));
    }
    let (metadata, problems) = Metadata::with_duplicates(entries);

    let mut tensors = Vec::new();
    for index in 0..tensor_count {
        let at = cur.pos();
        let name = cur.string(|| format!("the name of tensor #{index}"))?;
        let name = std::str::from_utf8(name)
            .map_err(|_| GgufError::InvalidTensorNameUtf8 { index, at })?
            .to_owned();
        let n_dims = cur.u32(|| format!("the dimension count of tensor '{name}'"))?;
        if !(1..=4).contains(&n_dims) {
            return Err(GgufError::BadDimCount {
                tensor: name,
                n_dims,
            });
        }
        let mut dims = Vec::with_capacity(n_dims as usize); // at most 4
        for d in 0..n_dims {
            dims.push(cur.u64(|| format!("dimension {d} of tensor '{name}'"))?);
        }
        let type_id = cur.u32(|| format!("the type of tensor '{name}'"))?;
        let offset = cur.u64(|| format!("the data offset of tensor '{name}'"))?;
        tensors.push(RawTensor {
            name,
            dims,
            type_id,
            offset,
        });
    }
    let header = Header {
        version,
        metadata,
        tensors,
        end: cur.pos(),
    };
    Ok((header, problems))
}

#[derive(Clone)]
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn pos(&self) -> u64 {
        self.pos as u64
    }

    fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: impl FnOnce() -> String) -> Result<&'a [u8], GgufError> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                what: what(),
                at: self.pos(),
                needed: n,
                available: self.remaining(),
            });
        }
        let start = self.pos;
        // n <= remaining, which is a usize.
        self.pos += n as usize;
        Ok(&self.bytes[start..self.pos])
    }

    fn array<const N: usize>(
        &mut self,
        what: impl FnOnce() -> String,
    ) -> Result<[u8; N], GgufError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N as u64, what)?);
        Ok(out)
    }

    fn u32(&mut self, what: impl FnOnce() -> String) -> Result<u32, GgufError> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: impl FnOnce() -> String) -> Result<u64, GgufError> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A length-prefixed byte string (not yet checked as UTF-8).
    fn string(&mut self, what: impl Fn() -> String) -> Result<&'a [u8], GgufError> {
        let len = self.u64(|| format!("the length of {}", what()))?;
        if len > self.remaining() {
            return Err(GgufError::StringTooLong {
                what: what(),
                at: self.pos() - 8,
                len,
                available: self.remaining(),
            });
        }
        self.take(len, what)
    }

    fn utf8(&mut self, key: &str) -> Result<String, GgufError> {
        let at = self.pos();
        let raw = self.string(|| format!("a string value of key '{key}'"))?;
        match std::str::from_utf8(raw) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(GgufError::InvalidStringUtf8 {
                key: key.to_owned(),
                at,
            }),
        }
    }

    fn value(&mut self, key: &str, value_type: u32) -> Result<Value, GgufError> {
        let what = || format!("the value of key '{key}'");
        Ok(match value_type {
            type_id::U8 => Value::U8(u8::from_le_bytes(self.array(what)?)),
            type_id::I8 => Value::I8(i8::from_le_bytes(self.array(what)?)),
            type_id::U16 => Value::U16(u16::from_le_bytes(self.array(what)?)),
            type_id::I16 => Value::I16(i16::from_le_bytes(self.array(what)?)),
            type_id::U32 => Value::U32(u32::from_le_bytes(self.array(what)?)),
            type_id::I32 => Value::I32(i32::from_le_bytes(self.array(what)?)),
            type_id::F32 => Value::F32(f32::from_le_bytes(self.array(what)?)),
            type_id::U64 => Value::U64(u64::from_le_bytes(self.array(what)?)),
            type_id::I64 => Value::I64(i64::from_le_bytes(self.array(what)?)),
            type_id::F64 => Value::F64(f64::from_le_bytes(self.array(what)?)),
            type_id::BOOL => {
                let at = self.pos();
                let [byte] = self.array(what)?;
                Value::Bool(bool_byte(key, byte, at)?)
            }
            type_id::STRING => Value::String(self.utf8(key)?),
            type_id::ARRAY => Value::Array(self.array_value(key, 1)?),
            other => {
                return Err(GgufError::UnknownValueType {
                    key: key.to_owned(),
                    type_id: other,
                    at: self.pos() - 4,
                })
            }
        })
    }

    fn array_value(&mut self, key: &str, depth: u32) -> Result<Array, GgufError> {
        let at = self.pos();
        if depth > MAX_ARRAY_DEPTH {
            return Err(GgufError::NestingTooDeep {
                key: key.to_owned(),
                max_depth: MAX_ARRAY_DEPTH,
                at,
            });
        }
        let elem_type = self.u32(|| format!("the element type of the array of key '{key}'"))?;
        let min_bytes = match elem_type {
            type_id::U8 | type_id::I8 | type_id::BOOL => 1,
            type_id::U16 | type_id::I16 => 2,
            type_id::U32 | type_id::I32 | type_id::F32 => 4,
            type_id::U64 | type_id::I64 | type_id::F64 => 8,
            type_id::STRING => MIN_STRING_BYTES,
            type_id::ARRAY => MIN_ARRAY_BYTES,
            other => {
                return Err(GgufError::UnknownValueType {
                    key: key.to_owned(),
                    type_id: other,
                    at,
                })
            }
        };
        let count = self.u64(|| format!("the element count of the array of key '{key}'"))?;
        let max = self.remaining() / min_bytes;
        if count > max {
            return Err(GgufError::ArrayCountTooLarge {
                key: key.to_owned(),
                count,
                max,
            });
        }
        let what = || format!("the elements of the array of key '{key}'");
        // For fixed-size elements the count is now proven: count * size <= remaining bytes, and each
        // vector below allocates exactly that many bytes.
        macro_rules! fixed {
            ($variant:ident, $t:ty) => {{
                const SIZE: usize = std::mem::size_of::<$t>();
                let raw = self.take(count * SIZE as u64, what)?;
                Array::$variant(
                    raw.chunks_exact(SIZE)
                        .map(|c| <$t>::from_le_bytes(c.try_into().expect("chunk of SIZE bytes")))
                        .collect(),
                )
            }};
        }
        Ok(match elem_type {
            type_id::U8 => Array::U8(self.take(count, what)?.to_vec()),
            type_id::I8 => fixed!(I8, i8),
            type_id::U16 => fixed!(U16, u16),
            type_id::I16 => fixed!(I16, i16),
            type_id::U32 => fixed!(U32, u32),
            type_id::I32 => fixed!(I32, i32),
            type_id::F32 => fixed!(F32, f32),
            type_id::U64 => fixed!(U64, u64),
            type_id::I64 => fixed!(I64, i64),
            type_id::F64 => fixed!(F64, f64),
            type_id::BOOL => {
                let start = self.pos();
                let raw = self.take(count, what)?;
                Array::Bool(
                    raw.iter()
                        .enumerate()
                        .map(|(i, &b)| bool_byte(key, b, start + i as u64))
                        .collect::<Result<_, _>>()?,
                )
            }
            type_id::STRING => {
                // A `String` takes 24 bytes in memory against 8 in the file: walk the lengths first,
                // so the vector is sized by strings proven to be present, exactly once.
                let mut probe = self.clone();
                for _ in 0..count {
                    probe.string(|| format!("a string of the array of key '{key}'"))?;
                }
                let mut strings = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    strings.push(self.utf8(key)?);
                }
                Array::String(strings)
            }
            _ => {
                // Nested arrays are rare and small; grow as elements are parsed.
                let mut arrays = Vec::new();
                for _ in 0..count {
                    arrays.push(self.array_value(key, depth + 1)?);
                }
                Array::Array(arrays)
            }
        })
    }
}

fn bool_byte(key: &str, byte: u8, at: u64) -> Result<bool, GgufError> {
    match byte {
        0 => Ok(false),
        1 => Ok(true),
        found => Err(GgufError::InvalidBool {
            key: key.to_owned(),
            found,
            at,
        }),
    }
}
