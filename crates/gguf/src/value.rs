//! Metadata values. Arrays are typed vectors: a 151,936-entry token list is one `Vec<String>`,
//! not 151,936 boxed values.

/// A metadata value; the variant order follows the GGUF value type ids 0..=12.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Array),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// An array value: one typed vector per element type. Nested arrays may mix element types.
#[derive(Clone, Debug, PartialEq)]
pub enum Array {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Vec<String>),
    Array(Vec<Array>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

/// GGUF value type ids.
pub mod type_id {
    pub const U8: u32 = 0;
    pub const I8: u32 = 1;
    pub const U16: u32 = 2;
    pub const I16: u32 = 3;
    pub const U32: u32 = 4;
    pub const I32: u32 = 5;
    pub const F32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const U64: u32 = 10;
    pub const I64: u32 = 11;
    pub const F64: u32 = 12;
}

/// The name of a value type id, as used in messages.
pub(crate) fn type_id_name(id: u32) -> &'static str {
    match id {
        type_id::U8 => "u8",
        type_id::I8 => "i8",
        type_id::U16 => "u16",
        type_id::I16 => "i16",
        type_id::U32 => "u32",
        type_id::I32 => "i32",
        type_id::F32 => "f32",
        type_id::BOOL => "bool",
        type_id::STRING => "string",
        type_id::ARRAY => "array",
        type_id::U64 => "u64",
        type_id::I64 => "i64",
        type_id::F64 => "f64",
        _ => "unknown",
    }
}

impl Value {
    /// The GGUF value type id of this value.
    pub fn type_id(&self) -> u32 {
        match self {
            Value::U8(_) => type_id::U8,
            Value::I8(_) => type_id::I8,
            Value::U16(_) => type_id::U16,
            Value::I16(_) => type_id::I16,
            Value::U32(_) => type_id::U32,
            Value::I32(_) => type_id::I32,
            Value::F32(_) => type_id::F32,
            Value::Bool(_) => type_id::BOOL,
            Value::String(_) => type_id::STRING,
            Value::Array(_) => type_id::ARRAY,
            Value::U64(_) => type_id::U64,
            Value::I64(_) => type_id::I64,
            Value::F64(_) => type_id::F64,
        }
    }

    /// `u32`, `string`, `array<string>`, … for messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Array(array) => array.type_name(),
            other => type_id_name(other.type_id()),
        }
    }

    /// The value as an integer, whatever its integer type; `None` for non-integers.
    pub fn as_integer(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            _ => return None,
        })
    }
}

impl Array {
    /// The GGUF value type id of the elements.
    pub fn elem_type_id(&self) -> u32 {
        match self {
            Array::U8(_) => type_id::U8,
            Array::I8(_) => type_id::I8,
            Array::U16(_) => type_id::U16,
            Array::I16(_) => type_id::I16,
            Array::U32(_) => type_id::U32,
            Array::I32(_) => type_id::I32,
            Array::F32(_) => type_id::F32,
            Array::Bool(_) => type_id::BOOL,
            Array::String(_) => type_id::STRING,
            Array::Array(_) => type_id::ARRAY,
            Array::U64(_) => type_id::U64,
            Array::I64(_) => type_id::I64,
            Array::F64(_) => type_id::F64,
        }
    }

    /// `array<u32>`, `array<string>`, … for messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Array::U8(_) => "array<u8>",
            Array::I8(_) => "array<i8>",
            Array::U16(_) => "array<u16>",
            Array::I16(_) => "array<i16>",
            Array::U32(_) => "array<u32>",
            Array::I32(_) => "array<i32>",
            Array::F32(_) => "array<f32>",
            Array::Bool(_) => "array<bool>",
            Array::String(_) => "array<string>",
            Array::Array(_) => "array<array>",
            Array::U64(_) => "array<u64>",
            Array::I64(_) => "array<i64>",
            Array::F64(_) => "array<f64>",
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::Array(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

macro_rules! from_scalar {
    ($($t:ty => $variant:ident),*) => {$(
        impl From<$t> for Value {
            fn from(v: $t) -> Value { Value::$variant(v) }
        }
        impl From<Vec<$t>> for Array {
            fn from(v: Vec<$t>) -> Array { Array::$variant(v) }
        }
        impl From<Vec<$t>> for Value {
            fn from(v: Vec<$t>) -> Value { Value::Array(Array::$variant(v)) }
        }
    )*};
}
from_scalar!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, f32 => F32,
             bool => Bool, String => String, u64 => U64, i64 => I64, f64 => F64);

impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::String(v.to_owned())
    }
}

impl From<Array> for Value {
    fn from(v: Array) -> Value {
        Value::Array(v)
    }
}
