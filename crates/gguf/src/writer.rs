//! Writing GGUF v3 the way ggml does: header, key/value pairs in insertion order, tensor infos,
//! zero padding to the alignment, then each tensor's data padded to the alignment (the last one
//! too). Reading a ggml-written file and writing it back in the same order reproduces it byte for
//! byte.

use std::borrow::Cow;
use std::io::{self, Write};
use std::path::Path;

use oxibonsai_formats::Format;

use crate::error::GgufError;
use crate::file::{alignment_of, GgufFile, ALIGNMENT_KEY};
use crate::header::{MAGIC, MAX_ARRAY_DEPTH};
use crate::value::{Array, Value};

pub const WRITE_VERSION: u32 = 3;

struct PendingTensor<'a> {
    name: String,
    dims: Vec<u64>,
    format: &'static Format,
    data: Cow<'a, [u8]>,
}

/// Builds a GGUF file. Every addition is checked, so what it writes passes [`GgufFile::from_bytes`]
/// (except a file whose id-42 tensors are all too small to tell the two id-42 layouts apart).
#[derive(Default)]
pub struct GgufWriter<'a> {
    metadata: Vec<(String, Value)>,
    tensors: Vec<PendingTensor<'a>>,
}

impl<'a> GgufWriter<'a> {
    pub fn new() -> GgufWriter<'a> {
        GgufWriter::default()
    }

    /// Every key and tensor of `file`, in its order, the data borrowed from it.
    pub fn from_file(file: &'a GgufFile) -> Result<GgufWriter<'a>, GgufError> {
        let mut writer = GgufWriter::new();
        for (key, value) in file.metadata().iter() {
            writer.add_kv(key, value.clone())?;
        }
        for t in file.tensors() {
            writer.add_tensor(&t.name, &t.dims, t.format, file.tensor_data(t))?;
        }
        Ok(writer)
    }

    /// Appends a key. `general.alignment` must be an integer holding a non-zero power of two.
    pub fn add_kv(
        &mut self,
        key: impl Into<String>,
        value: impl Into<Value>,
    ) -> Result<&mut Self, GgufError> {
        let key = key.into();
        let value = value.into();
        if let Some(first) = self.metadata.iter().position(|(k, _)| *k == key) {
            return Err(GgufError::DuplicateKey {
                key,
                first,
                second: self.metadata.len(),
            });
        }
        if key == ALIGNMENT_KEY {
            alignment_of(Some(&value))?;
        }
        if let Value::Array(array) = &value {
            if depth(array) > MAX_ARRAY_DEPTH {
                return Err(GgufError::NestingTooDeep {
                    key,
                    max_depth: MAX_ARRAY_DEPTH,
                    at: 0,
                });
            }
        }
        self.metadata.push((key, value));
        Ok(self)
    }

    /// Appends a tensor: `dims` ne0 first, `data` exactly the bytes its shape needs in `format`.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        dims: &[u64],
        format: &'static Format,
        data: impl Into<Cow<'a, [u8]>>,
    ) -> Result<&mut Self, GgufError> {
        let name = name.into();
        let data = data.into();
        if let Some(first) = self.tensors.iter().position(|t| t.name == name) {
            return Err(GgufError::DuplicateTensor {
                tensor: name,
                first,
                second: self.tensors.len(),
            });
        }
        if !(1..=4).contains(&dims.len()) {
            return Err(GgufError::BadDimCount {
                tensor: name,
                n_dims: dims.len() as u32,
            });
        }
        if dims.contains(&0) {
            return Err(GgufError::ZeroDim {
                tensor: name,
                dims: dims.to_vec(),
            });
        }
        let n_elements = dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .filter(|&n| n <= i64::MAX as u64);
        let Some(n_elements) = n_elements else {
            return Err(GgufError::ElementCountOverflow {
                tensor: name,
                dims: dims.to_vec(),
            });
        };
        if !dims[0].is_multiple_of(format.block_elems as u64) {
            return Err(GgufError::RowNotBlockMultiple {
                tensor: name,
                format: format.name,
                row_len: dims[0],
                block_elems: format.block_elems as u64,
            });
        }
        let Some(expected) = format.bytes_for(n_elements) else {
            return Err(GgufError::ElementCountOverflow {
                tensor: name,
                dims: dims.to_vec(),
            });
        };
        if data.len() as u64 != expected {
            return Err(GgufError::TensorDataLength {
                tensor: name,
                format: format.name,
                expected,
                found: data.len() as u64,
            });
        }
        self.tensors.push(PendingTensor {
            name,
            dims: dims.to_vec(),
            format,
            data,
        });
        Ok(self)
    }

    /// The tensors added so far: name and dims (ne0 first), in order.
    pub fn tensor_shapes(&self) -> impl Iterator<Item = (&str, &[u64])> {
        self.tensors.iter().map(|t| (t.name.as_str(), &t.dims[..]))
    }

    /// `general.alignment` if set, else 32.
    pub fn alignment(&self) -> u64 {
        let value = self
            .metadata
            .iter()
            .find(|(k, _)| k == ALIGNMENT_KEY)
            .map(|(_, v)| v);
        // Checked when the key was added.
        alignment_of(value).unwrap_or(crate::file::DEFAULT_ALIGNMENT)
    }

    /// Writes the file. Fails only on an I/O error, or when an absurd `general.alignment` (near
    /// 2^63) would push offsets past 2^64 — found before anything is written.
    pub fn write_to(&self, mut out: impl Write) -> io::Result<()> {
        let alignment = self.alignment();
        let mut offsets = Vec::with_capacity(self.tensors.len());
        let mut offset = 0u64;
        for t in &self.tensors {
            offsets.push(offset);
            offset = padded(offset.saturating_add(t.data.len() as u64), alignment)?;
        }
        let mut header = Vec::new();
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&WRITE_VERSION.to_le_bytes());
        header.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        header.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            put_str(&mut header, key);
            header.extend_from_slice(&value.type_id().to_le_bytes());
            put_value(&mut header, value);
        }
        for (t, offset) in self.tensors.iter().zip(offsets) {
            put_str(&mut header, &t.name);
            header.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                header.extend_from_slice(&d.to_le_bytes());
            }
            header.extend_from_slice(&t.format.type_id.to_le_bytes());
            header.extend_from_slice(&offset.to_le_bytes());
        }
        let header_len = header.len() as u64;
        let header_padding = padded(header_len, alignment)? - header_len;
        out.write_all(&header)?;
        put_zeros(&mut out, header_padding)?;
        for t in &self.tensors {
            out.write_all(&t.data)?;
            let len = t.data.len() as u64;
            put_zeros(&mut out, padded(len, alignment)? - len)?;
        }
        out.flush()
    }

    /// The file in memory; the error is [`GgufWriter::write_to`]'s.
    pub fn to_bytes(&self) -> io::Result<Vec<u8>> {
        let mut bytes = Vec::new();
        self.write_to(&mut bytes)?;
        Ok(bytes)
    }

    pub fn write_file(&self, path: impl AsRef<Path>) -> io::Result<()> {
        let file = std::fs::File::create(path)?;
        self.write_to(io::BufWriter::new(file))
    }
}

fn put_zeros(out: &mut impl Write, mut n: u64) -> io::Result<()> {
    const ZEROS: [u8; 4096] = [0; 4096];
    while n > 0 {
        let chunk = n.min(ZEROS.len() as u64);
        out.write_all(&ZEROS[..chunk as usize])?;
        n -= chunk;
    }
    Ok(())
}

/// Only an absurd `general.alignment` (near 2^64) can overflow here.
fn padded(n: u64, alignment: u64) -> io::Result<u64> {
    n.checked_next_multiple_of(alignment).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("general.alignment {alignment} pushes tensor offsets past 2^64"),
        )
    })
}

fn depth(array: &Array) -> u32 {
    match array {
        Array::Array(inner) => 1 + inner.iter().map(depth).max().unwrap_or(0),
        _ => 1,
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::U8(v) => out.push(*v),
        Value::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::Bool(v) => out.push(u8::from(*v)),
        Value::String(v) => put_str(out, v),
        Value::Array(v) => put_array(out, v),
        Value::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
    }
}

fn put_array(out: &mut Vec<u8>, array: &Array) {
    out.extend_from_slice(&array.elem_type_id().to_le_bytes());
    out.extend_from_slice(&(array.len() as u64).to_le_bytes());
    macro_rules! each {
        ($v:expr) => {
            for x in $v {
                out.extend_from_slice(&x.to_le_bytes());
            }
        };
    }
    match array {
        Array::U8(v) => out.extend_from_slice(v),
        Array::I8(v) => each!(v),
        Array::U16(v) => each!(v),
        Array::I16(v) => each!(v),
        Array::U32(v) => each!(v),
        Array::I32(v) => each!(v),
        Array::F32(v) => each!(v),
        Array::Bool(v) => out.extend(v.iter().map(|&b| u8::from(b))),
        Array::String(v) => v.iter().for_each(|s| put_str(out, s)),
        Array::Array(v) => v.iter().for_each(|a| put_array(out, a)),
        Array::U64(v) => each!(v),
        Array::I64(v) => each!(v),
        Array::F64(v) => each!(v),
    }
}
