//! The key/value section, in file order, with typed getters whose errors name the key.
//!
//! Getters return `Err(MissingKey)` for an absent key; the `opt_*` twins return `Ok(None)` instead,
//! for keys a model may omit. Integer getters accept any integer type whose value fits, because
//! converters disagree on widths (`u32` vs `i32` vs `u64` for the same hyper-parameter).

use std::borrow::Cow;

use crate::error::GgufError;
use crate::value::{Array, Value};

/// Insertion-ordered metadata with an index sorted by key for lookups.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Metadata {
    entries: Vec<(String, Value)>,
    /// Indices into `entries`, sorted by key: binary search without a second copy of every key.
    by_key: Vec<usize>,
}

impl Metadata {
    /// Builds metadata from `(key, value)` pairs in order; a repeated key is an error.
    pub fn new(entries: Vec<(String, Value)>) -> Result<Metadata, GgufError> {
        let (metadata, duplicates) = Metadata::with_duplicates(entries);
        match duplicates.into_iter().next() {
            Some(error) => Err(error),
            None => Ok(metadata),
        }
    }

    /// Builds the index and reports every repeated key (the first occurrence wins lookups).
    pub(crate) fn with_duplicates(entries: Vec<(String, Value)>) -> (Metadata, Vec<GgufError>) {
        let mut by_key: Vec<usize> = (0..entries.len()).collect();
        // Stable: among equal keys the first occurrence stays first.
        by_key.sort_by(|&a, &b| entries[a].0.cmp(&entries[b].0));
        let mut duplicates = Vec::new();
        for pair in by_key.windows(2) {
            if entries[pair[0]].0 == entries[pair[1]].0 {
                duplicates.push(GgufError::DuplicateKey {
                    key: entries[pair[1]].0.clone(),
                    first: pair[0],
                    second: pair[1],
                });
            }
        }
        duplicates.sort_by_key(|e| match e {
            GgufError::DuplicateKey { second, .. } => *second,
            _ => 0,
        });
        by_key.dedup_by(|b, a| entries[*a].0 == entries[*b].0);
        (Metadata { entries, by_key }, duplicates)
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.by_key
            .binary_search_by(|&i| self.entries[i].0.as_str().cmp(key))
            .ok()
            .map(|found| &self.entries[self.by_key[found]].1)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Every pair in file order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The value, or `MissingKey`.
    pub fn require(&self, key: &str) -> Result<&Value, GgufError> {
        self.get(key).ok_or_else(|| GgufError::MissingKey {
            key: key.to_owned(),
        })
    }

    pub fn get_u32(&self, key: &str) -> Result<u32, GgufError> {
        integer(key, self.require(key)?, "u32")
    }
    pub fn get_i32(&self, key: &str) -> Result<i32, GgufError> {
        integer(key, self.require(key)?, "i32")
    }
    pub fn get_u64(&self, key: &str) -> Result<u64, GgufError> {
        integer(key, self.require(key)?, "u64")
    }
    pub fn get_i64(&self, key: &str) -> Result<i64, GgufError> {
        integer(key, self.require(key)?, "i64")
    }

    /// Accepts f32 and f64 (an f64 must stay finite as f32 when it was finite).
    pub fn get_f32(&self, key: &str) -> Result<f32, GgufError> {
        match *self.require(key)? {
            Value::F32(v) => Ok(v),
            Value::F64(v) => {
                let narrowed = v as f32;
                if v.is_finite() && !narrowed.is_finite() {
                    Err(GgufError::ValueOutOfRange {
                        key: key.to_owned(),
                        expected: "f32",
                        found: format!("{v:?}"),
                    })
                } else {
                    Ok(narrowed)
                }
            }
            ref other => Err(wrong_type(key, "f32", other)),
        }
    }

    /// Accepts f32 and f64.
    pub fn get_f64(&self, key: &str) -> Result<f64, GgufError> {
        match *self.require(key)? {
            Value::F32(v) => Ok(v.into()),
            Value::F64(v) => Ok(v),
            ref other => Err(wrong_type(key, "f64", other)),
        }
    }

    pub fn get_bool(&self, key: &str) -> Result<bool, GgufError> {
        match *self.require(key)? {
            Value::Bool(v) => Ok(v),
            ref other => Err(wrong_type(key, "bool", other)),
        }
    }

    pub fn get_str(&self, key: &str) -> Result<&str, GgufError> {
        match self.require(key)? {
            Value::String(v) => Ok(v),
            other => Err(wrong_type(key, "string", other)),
        }
    }

    /// Any array.
    pub fn get_array(&self, key: &str) -> Result<&Array, GgufError> {
        match self.require(key)? {
            Value::Array(v) => Ok(v),
            other => Err(wrong_type(key, "array", other)),
        }
    }

    pub fn get_str_array(&self, key: &str) -> Result<&[String], GgufError> {
        match self.get_array(key)? {
            Array::String(v) => Ok(v),
            other => Err(GgufError::WrongType {
                key: key.to_owned(),
                expected: "array<string>",
                found: other.type_name(),
            }),
        }
    }

    /// Borrowed for an `array<i32>`; converted from any other integer array whose values fit.
    pub fn get_i32_array(&self, key: &str) -> Result<Cow<'_, [i32]>, GgufError> {
        fn convert<T: Copy + TryInto<i32> + ToString>(
            key: &str,
            values: &[T],
        ) -> Result<Cow<'static, [i32]>, GgufError> {
            values
                .iter()
                .map(|&v| {
                    v.try_into().map_err(|_| GgufError::ValueOutOfRange {
                        key: key.to_owned(),
                        expected: "i32",
                        found: v.to_string(),
                    })
                })
                .collect::<Result<Vec<i32>, _>>()
                .map(Cow::Owned)
        }
        match self.get_array(key)? {
            Array::I32(v) => Ok(Cow::Borrowed(v)),
            Array::U8(v) => convert(key, v),
            Array::I8(v) => convert(key, v),
            Array::U16(v) => convert(key, v),
            Array::I16(v) => convert(key, v),
            Array::U32(v) => convert(key, v),
            Array::U64(v) => convert(key, v),
            Array::I64(v) => convert(key, v),
            other => Err(GgufError::WrongType {
                key: key.to_owned(),
                expected: "array<i32>",
                found: other.type_name(),
            }),
        }
    }

    /// Borrowed for an `array<f32>`; converted from `array<f64>`.
    pub fn get_f32_array(&self, key: &str) -> Result<Cow<'_, [f32]>, GgufError> {
        match self.get_array(key)? {
            Array::F32(v) => Ok(Cow::Borrowed(v)),
            Array::F64(v) => Ok(Cow::Owned(v.iter().map(|&x| x as f32).collect())),
            other => Err(GgufError::WrongType {
                key: key.to_owned(),
                expected: "array<f32>",
                found: other.type_name(),
            }),
        }
    }

    pub fn opt_u32(&self, key: &str) -> Result<Option<u32>, GgufError> {
        self.optional(key, Metadata::get_u32)
    }
    pub fn opt_i32(&self, key: &str) -> Result<Option<i32>, GgufError> {
        self.optional(key, Metadata::get_i32)
    }
    pub fn opt_u64(&self, key: &str) -> Result<Option<u64>, GgufError> {
        self.optional(key, Metadata::get_u64)
    }
    pub fn opt_i64(&self, key: &str) -> Result<Option<i64>, GgufError> {
        self.optional(key, Metadata::get_i64)
    }
    pub fn opt_f32(&self, key: &str) -> Result<Option<f32>, GgufError> {
        self.optional(key, Metadata::get_f32)
    }
    pub fn opt_f64(&self, key: &str) -> Result<Option<f64>, GgufError> {
        self.optional(key, Metadata::get_f64)
    }
    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>, GgufError> {
        self.optional(key, Metadata::get_bool)
    }
    pub fn opt_str(&self, key: &str) -> Result<Option<&str>, GgufError> {
        self.optional(key, Metadata::get_str)
    }
    pub fn opt_str_array(&self, key: &str) -> Result<Option<&[String]>, GgufError> {
        self.optional(key, Metadata::get_str_array)
    }
    pub fn opt_i32_array(&self, key: &str) -> Result<Option<Cow<'_, [i32]>>, GgufError> {
        self.optional(key, Metadata::get_i32_array)
    }
    pub fn opt_f32_array(&self, key: &str) -> Result<Option<Cow<'_, [f32]>>, GgufError> {
        self.optional(key, Metadata::get_f32_array)
    }

    fn optional<'a, T>(
        &'a self,
        key: &str,
        getter: impl FnOnce(&'a Metadata, &str) -> Result<T, GgufError>,
    ) -> Result<Option<T>, GgufError> {
        if self.contains_key(key) {
            getter(self, key).map(Some)
        } else {
            Ok(None)
        }
    }
}

fn wrong_type(key: &str, expected: &'static str, found: &Value) -> GgufError {
    GgufError::WrongType {
        key: key.to_owned(),
        expected,
        found: found.type_name(),
    }
}

fn integer<T: TryFrom<i128>>(
    key: &str,
    value: &Value,
    expected: &'static str,
) -> Result<T, GgufError> {
    let wide = value
        .as_integer()
        .ok_or_else(|| wrong_type(key, expected, value))?;
    T::try_from(wide).map_err(|_| GgufError::ValueOutOfRange {
        key: key.to_owned(),
        expected,
        found: wide.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_follow_the_first_of_duplicates_and_report_each_repeat() {
        let (metadata, duplicates) = Metadata::with_duplicates(vec![
            ("b".into(), Value::U32(1)),
            ("a".into(), Value::U32(2)),
            ("b".into(), Value::U32(3)),
            ("b".into(), Value::U32(4)),
        ]);
        assert_eq!(metadata.get("b"), Some(&Value::U32(1)));
        assert_eq!(metadata.get("a"), Some(&Value::U32(2)));
        assert_eq!(metadata.get("c"), None);
        let pairs: Vec<(usize, usize)> = duplicates
            .iter()
            .map(|e| match e {
                GgufError::DuplicateKey { key, first, second } => {
                    assert_eq!(key, "b");
                    (*first, *second)
                }
                other => panic!("unexpected {other}"),
            })
            .collect();
        assert_eq!(pairs, vec![(0, 2), (2, 3)]);
        assert_eq!(metadata.len(), 4);
    }
}
