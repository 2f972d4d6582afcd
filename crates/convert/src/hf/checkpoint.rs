//! The weights of a checkpoint folder: `model.safetensors`, or the shards that
//! `model.safetensors.index.json` lists. Files are memory-mapped; a tensor is decoded to f32 only
//! when it is converted.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::Path;

use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};

use super::error::ConvertError;
use super::read_json;

const SINGLE: &str = "model.safetensors";
const INDEX: &str = "model.safetensors.index.json";

struct Shard {
    file_name: String,
    mmap: Mmap,
    /// Where the data section starts (after the length prefix and the JSON header).
    data_start: usize,
}

struct Entry {
    shard: usize,
    dtype: Dtype,
    shape: Vec<usize>,
    /// Byte range in the shard's data section (validated against the file by `safetensors`).
    range: (usize, usize),
}

/// Every tensor of the checkpoint, by its Hugging Face name.
pub struct Checkpoint {
    shards: Vec<Shard>,
    tensors: BTreeMap<String, Entry>,
}

/// One tensor's raw bytes and layout.
pub struct RawTensor<'a> {
    pub dtype: Dtype,
    pub shape: &'a [usize],
    pub data: &'a [u8],
}

impl Checkpoint {
    pub fn open(dir: &Path) -> Result<Checkpoint, ConvertError> {
        let index_path = dir.join(INDEX);
        if index_path.is_file() {
            return Checkpoint::open_sharded(dir, &index_path);
        }
        let single = dir.join(SINGLE);
        if !single.is_file() {
            return Err(ConvertError::MissingFile {
                path: single,
                why: "expected model.safetensors or model.safetensors.index.json with its shards",
            });
        }
        let mut checkpoint = Checkpoint {
            shards: Vec::new(),
            tensors: BTreeMap::new(),
        };
        checkpoint.add_shard(dir, SINGLE)?;
        Ok(checkpoint)
    }

    fn open_sharded(dir: &Path, index_path: &Path) -> Result<Checkpoint, ConvertError> {
        let index = read_json(index_path)?;
        let Some(weight_map) = index.get("weight_map").and_then(|m| m.as_object()) else {
            return Err(ConvertError::MissingKey {
                file: INDEX,
                key: "weight_map".into(),
                why: "the map from tensor name to shard file",
            });
        };
        // Shards in order of first mention, so the tensor order does not depend on hashing.
        let mut wanted: Vec<(&str, &str)> = Vec::new();
        for (tensor, shard) in weight_map {
            let Some(shard) = shard.as_str() else {
                return Err(ConvertError::BadKey {
                    file: INDEX,
                    key: format!("weight_map.{tensor}"),
                    expected: "a shard file name",
                    found: shard.to_string(),
                });
            };
            wanted.push((tensor, shard));
        }
        let mut checkpoint = Checkpoint {
            shards: Vec::new(),
            tensors: BTreeMap::new(),
        };
        for &(tensor, shard) in &wanted {
            if checkpoint.shards.iter().any(|s| s.file_name == shard) {
                continue;
            }
            let plain = Path::new(shard)
                .file_name()
                .is_some_and(|name| name == shard);
            if !plain {
                return Err(ConvertError::BadShardName {
                    shard: shard.to_owned(),
                });
            }
            if !dir.join(shard).is_file() {
                return Err(ConvertError::MissingShard {
                    shard: shard.to_owned(),
                    tensor: tensor.to_owned(),
                });
            }
            checkpoint.add_shard(dir, shard)?;
        }
        for &(tensor, shard) in &wanted {
            let holder = checkpoint
                .tensors
                .get(tensor)
                .map(|e| checkpoint.shards[e.shard].file_name.as_str());
            if holder != Some(shard) {
                return Err(ConvertError::NotInShard {
                    tensor: tensor.to_owned(),
                    shard: shard.to_owned(),
                });
            }
        }
        if let Some((tensor, entry)) = checkpoint
            .tensors
            .iter()
            .find(|(name, _)| !weight_map.contains_key(name.as_str()))
        {
            return Err(ConvertError::NotInIndex {
                tensor: tensor.clone(),
                shard: checkpoint.shards[entry.shard].file_name.clone(),
            });
        }
        Ok(checkpoint)
    }

    fn add_shard(&mut self, dir: &Path, file_name: &str) -> Result<(), ConvertError> {
        let path = dir.join(file_name);
        let file = File::open(&path).map_err(|source| ConvertError::Io {
            path: path.clone(),
            source,
        })?;
        // SAFETY: the file is mapped read-only and only read; like every mmap-based loader we
        // rely on nobody truncating or rewriting the checkpoint while it is being converted.
        let mmap = unsafe { Mmap::map(&file) }.map_err(|source| ConvertError::Io {
            path: path.clone(),
            source,
        })?;
        // `read_metadata` checks the header, every tensor's extent and the file length.
        let (header_len, metadata) =
            SafeTensors::read_metadata(&mmap).map_err(|e| ConvertError::BadSafetensors {
                path: path.clone(),
                reason: e.to_string(),
            })?;
        let shard = self.shards.len();
        for (name, info) in metadata.tensors() {
            if let Some(previous) = self.tensors.get(&name) {
                return Err(ConvertError::DuplicateTensor {
                    tensor: name,
                    first: self.shards[previous.shard].file_name.clone(),
                    second: file_name.to_owned(),
                });
            }
            self.tensors.insert(
                name,
                Entry {
                    shard,
                    dtype: info.dtype,
                    shape: info.shape.clone(),
                    range: info.data_offsets,
                },
            );
        }
        self.shards.push(Shard {
            file_name: file_name.to_owned(),
            mmap,
            data_start: 8 + header_len,
        });
        Ok(())
    }

    /// Tensor names in sorted order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    pub fn get(&self, name: &str) -> Option<RawTensor<'_>> {
        let entry = self.tensors.get(name)?;
        let shard = &self.shards[entry.shard];
        let (start, end) = entry.range;
        let data = shard
            .mmap
            .get(shard.data_start + start..shard.data_start + end)?;
        Some(RawTensor {
            dtype: entry.dtype,
            shape: &entry.shape,
            data,
        })
    }
}

impl RawTensor<'_> {
    /// The values as little-endian f32 bytes, exactly (f16 and bf16 widen without rounding),
    /// ready for the row converter or to be written as they are.
    pub fn to_f32_bytes(&self, name: &str) -> Result<Vec<u8>, ConvertError> {
        let widen = |convert: fn([u8; 2]) -> f32| -> Vec<u8> {
            self.data
                .chunks_exact(2)
                .flat_map(|b| convert([b[0], b[1]]).to_le_bytes())
                .collect()
        };
        Ok(match self.dtype {
            Dtype::F32 => self.data.to_vec(),
            Dtype::F16 => widen(|b| half::f16::from_le_bytes(b).to_f32()),
            Dtype::BF16 => widen(|b| half::bf16::from_le_bytes(b).to_f32()),
            other => {
                return Err(ConvertError::UnsupportedDtype {
                    tensor: name.to_owned(),
                    dtype: format!("{other:?}"),
                })
            }
        })
    }
}
